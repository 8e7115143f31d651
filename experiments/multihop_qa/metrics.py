"""Outcome checks of the multi-hop QA example: HotpotQA's exact match and token F1.

Both compare the pipeline's ``answer`` with the question's gold answer (looked up by
``question_id`` in the bundled HotpotQA slice), as HotpotQA's official evaluation script
computes them (:func:`quiver._outcome.answer_exact_match`, :func:`quiver._outcome.answer_f1`):
answers normalised (lower case, punctuation and the articles a, an, the removed,
whitespace collapsed); F1 over the normalised tokens, 0 when either answer is yes, no or
noanswer and they differ.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from quiver._outcome import answer_exact_match, answer_f1

__all__ = ["exact_match", "token_f1", "gold_answer"]

DATA = Path(__file__).resolve().parent / "data" / "hotpot_dev_distractor_v1_100.json"


@lru_cache(maxsize=1)
def _gold() -> dict[str, str]:
    return {q["_id"]: q["answer"] for q in json.loads(DATA.read_text(encoding="utf-8"))}


def gold_answer(question_id: str) -> str:
    """The gold answer of a question of the slice."""
    return _gold()[question_id]


def exact_match(output: dict[str, Any], inputs: dict[str, Any]) -> bool:
    """The answer equals the gold answer, both normalised."""
    return answer_exact_match(str(output.get("answer", "")), gold_answer(inputs["question_id"]))


def token_f1(output: dict[str, Any], inputs: dict[str, Any]) -> float:
    """Token F1 of the answer against the gold answer, in [0, 1]."""
    return answer_f1(str(output.get("answer", "")), gold_answer(inputs["question_id"]))
