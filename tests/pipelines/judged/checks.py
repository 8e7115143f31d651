"""Python outcome checks of the quiz: one that raises on one input, one that scores."""

from __future__ import annotations

from typing import Any


def fragile(output: dict[str, Any], inputs: dict[str, Any]) -> bool:
    """Raises on Peru (a check with a bug), else compares."""
    if inputs["capital"] == "Lima":
        raise KeyError("lookup table has no Peru")
    return bool(output["answer"] == inputs["capital"])


def length_score(output: dict[str, Any], inputs: dict[str, Any]) -> float:
    return min(len(output["answer"]) / 8, 1.0)
