"""Answer metrics of the QA literature: exact match and token F1 of a predicted answer
against a gold one, as HotpotQA's official evaluation computes them (``hotpot_evaluate_v1.py``,
after SQuAD's ``evaluate-v1.1.py``)."""

from __future__ import annotations

from collections import Counter

from .checks import normalize_answer

__all__ = ["answer_exact_match", "answer_f1"]

_SPECIAL = ("yes", "no", "noanswer")


def answer_exact_match(prediction: str, gold: str) -> bool:
    """The two answers are equal once normalised (:func:`normalize_answer`)."""
    return normalize_answer(prediction) == normalize_answer(gold)


def answer_f1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised answers; 0 when either is yes, no or noanswer and they
    differ (HotpotQA's rule)."""
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    if pred in _SPECIAL or truth in _SPECIAL:
        return float(pred == truth)
    common = Counter(pred.split()) & Counter(truth.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred.split()), same / len(truth.split())
    return 2 * precision * recall / (precision + recall)
