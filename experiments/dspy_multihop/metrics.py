"""Outcome checks of the DSPy multi-hop example: HotpotQA's exact match and token F1 of
the answer against the question's gold answer (``data/questions.jsonl``), computed as
HotpotQA's evaluation computes them (:func:`quiver._outcome.answer_f1`)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from quiver._outcome import answer_exact_match, answer_f1

__all__ = ["exact_match", "token_f1"]

QUESTIONS = Path(__file__).resolve().parent / "data" / "questions.jsonl"


@lru_cache(maxsize=1)
def _gold() -> dict[str, str]:
    rows = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["question"]: r["answer"] for r in rows}


def exact_match(output: dict[str, Any], inputs: dict[str, Any]) -> bool:
    """The answer equals the gold answer, both normalised."""
    return answer_exact_match(str(output.get("answer", "")), _gold()[inputs["question"]])


def token_f1(output: dict[str, Any], inputs: dict[str, Any]) -> float:
    """Token F1 of the answer against the gold answer."""
    return answer_f1(str(output.get("answer", "")), _gold()[inputs["question"]])
