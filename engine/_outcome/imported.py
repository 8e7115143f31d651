"""Outcomes a trace's source gives: Langfuse scores, evaluation annotations on spans
(Phoenix's ``eval.NAME.label`` / ``eval.NAME.score`` / ``eval.NAME.explanation``), and a
benchmark's reward (tau-bench's ``reward``).

**[engine]** How a verdict is read from each:

* a boolean score (Langfuse ``BOOLEAN``, a JSON bool): true passes;
* a numeric score in [0, 1]: it is the check's score, passing at 0.5; a number outside
  [0, 1] says nothing of right or wrong here and is left out;
* a label (Langfuse ``CATEGORICAL``, an evaluation's ``label``): pass, passed, correct,
  true, yes, good, right pass; fail, failed, incorrect, false, no, bad, wrong fail; any
  other label is left out;
* a reward (tau-bench): its score, passing only at 1 (tau-bench counts a task solved
  when its reward is 1; pass^k is built on that).

The trace's outcome passes when every verdict read passes; a source with none gives none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from quiver._trace import CheckResult, Outcome

__all__ = ["outcome_from_attributes", "outcome_from_scores"]

_PASS = {"pass", "passed", "correct", "true", "yes", "good", "right"}
_FAIL = {"fail", "failed", "incorrect", "false", "no", "bad", "wrong"}
_REWARD_KEYS = ("reward", "tau_bench.reward", "tau2.reward", "eval.reward")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _check(name: str, *, label: Any = None, score: Any = None, detail: Any = None,
           boolean: bool = False, reward: bool = False) -> CheckResult | None:
    """One verdict of a source, or None when it says nothing of right or wrong."""
    why = str(detail)[:500] if detail not in (None, "") else None
    if isinstance(score, bool) or (boolean and _number(score) in (0.0, 1.0)):
        ok = bool(score) if isinstance(score, bool) else _number(score) == 1.0
        return CheckResult(name=name, status="pass" if ok else "fail", score=float(ok), detail=None if ok else why)
    if isinstance(label, str) and label.strip().lower() in _PASS | _FAIL:
        ok = label.strip().lower() in _PASS
        value = _number(score)
        return CheckResult(name=name, status="pass" if ok else "fail",
                           score=value if value is not None and 0 <= value <= 1 else float(ok),
                           detail=None if ok else why or f"labelled {label!r}")
    value = _number(score)
    if value is None or not 0 <= value <= 1:
        return None
    ok = value >= 1.0 if reward else value >= 0.5
    return CheckResult(name=name, status="pass" if ok else "fail", score=value,
                       detail=None if ok else why or f"{'reward' if reward else 'score'} {value:g}")


def _outcome(checks: Iterable[CheckResult | None], source: str) -> Outcome | None:
    given = [c for c in checks if c is not None]
    if not given:
        return None
    scores = [c.score for c in given if c.score is not None]
    return Outcome(status="pass" if all(c.status == "pass" for c in given) else "fail",
                   score=sum(scores) / len(scores) if scores else None, checks=given, source=source)


def outcome_from_scores(scores: Any) -> Outcome | None:
    """The outcome Langfuse scores give (a trace export's ``scores``)."""
    if not isinstance(scores, list):
        return None
    checks = []
    for score in scores:
        if not isinstance(score, Mapping) or not score.get("name"):
            continue
        kind = str(score.get("dataType") or "").upper()
        label = score.get("stringValue") if kind == "CATEGORICAL" or isinstance(score.get("value"), str) else None
        if label is None and isinstance(score.get("value"), str):
            label = score["value"]
        value = None if kind == "CATEGORICAL" else score.get("value")  # a category's index is no score
        checks.append(_check(str(score["name"]), label=label, score=value, detail=score.get("comment"),
                             boolean=kind == "BOOLEAN"))
    return _outcome(checks, "langfuse scores")


def outcome_from_attributes(attributes: Mapping[str, Any]) -> Outcome | None:
    """The outcome a root span's attributes give: ``eval.NAME.{label,score,explanation}``
    annotations and a benchmark's ``reward``."""
    names = sorted({k.split(".")[1] for k in attributes if k.startswith("eval.") and k.count(".") >= 2
                    and k.rsplit(".", 1)[1] in ("label", "score")})
    checks = [_check(name, label=attributes.get(f"eval.{name}.label"), score=attributes.get(f"eval.{name}.score"),
                     detail=attributes.get(f"eval.{name}.explanation")) for name in names]
    source = "evaluation annotations" if any(checks) else None
    for key in _REWARD_KEYS:
        if key in attributes:
            checks.append(_check(key, score=attributes[key], reward=True))
            source = "reward" if source is None else f"{source} and reward"
            break
    return _outcome(checks, source or "span attributes")
