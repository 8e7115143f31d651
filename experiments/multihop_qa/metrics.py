"""Outcome checks of the multi-hop QA example: HotpotQA's exact match and token F1.

Both compare the pipeline's ``answer`` with the question's gold answer (looked up by
``question_id`` in the bundled HotpotQA slice), as HotpotQA's official evaluation script
computes them (``hotpot_evaluate_v1.py``, after SQuAD's): answers normalised (lower
case, punctuation and the articles a, an, the removed, whitespace collapsed); F1 over
the normalised tokens, 0 when either answer is yes, no or noanswer and they differ.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["exact_match", "token_f1", "gold_answer", "normalize_answer", "em_score", "f1_score"]

DATA = Path(__file__).resolve().parent / "data" / "hotpot_dev_distractor_v1_100.json"


@lru_cache(maxsize=1)
def _gold() -> dict[str, str]:
    return {q["_id"]: q["answer"] for q in json.loads(DATA.read_text(encoding="utf-8"))}


def gold_answer(question_id: str) -> str:
    """The gold answer of a question of the slice."""
    return _gold()[question_id]


def normalize_answer(s: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed (SQuAD, HotpotQA)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em_score(prediction: str, gold: str) -> bool:
    """Exact match of two answers, normalised."""
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str) -> float:
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    if pred in ("yes", "no", "noanswer") or truth in ("yes", "no", "noanswer"):
        return float(pred == truth)
    common = Counter(pred.split()) & Counter(truth.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(truth.split())
    return 2 * precision * recall / (precision + recall)


def exact_match(output: dict[str, Any], inputs: dict[str, Any]) -> bool:
    """The answer equals the gold answer, both normalised."""
    return em_score(str(output.get("answer", "")), gold_answer(inputs["question_id"]))


def token_f1(output: dict[str, Any], inputs: dict[str, Any]) -> float:
    """Token F1 of the answer against the gold answer, in [0, 1]."""
    return f1_score(str(output.get("answer", "")), gold_answer(inputs["question_id"]))
