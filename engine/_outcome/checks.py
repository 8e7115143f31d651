"""Evaluating a spec's outcome checks on one trace.

The built-in checks are evaluated here; the two that run user code or call a model
(``python``, ``judge``) and the embedding of ``similar`` are handed to the callables the
caller gives (:class:`Evaluators`): the core runs no user code and makes no request.

A group is three-valued: ``all`` fails when a check fails, else is an error when a check
could not be evaluated, else passes; ``any`` passes when a check passes, else is an error
when a check could not be evaluated, else fails. A trace whose pipeline raised fails
every check (its output is not an answer). Scores: a check that passes or fails outright
scores 1 or 0, a scored check its score; an ``all`` group (and the trace, over its
top-level checks) the mean of its checks' scores, an ``any`` group the best (of those
that have one).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from quiver._canonical import canonical_json
from quiver._trace import CheckResult, Outcome, Trace

from .spec import CheckSpec, InputRef

__all__ = ["Evaluators", "MissingField", "evaluate", "field_value", "input_value", "normalize_answer"]


class MissingField(LookupError):
    """A path that names nothing in the value it is read from."""


@dataclass(frozen=True)
class Evaluators:
    """What the core does not do itself.

    Attributes:
        similarity: Cosine similarity of two texts (the analysis embedder).
        python: Runs a ``python`` check on a trace; returns its bool or score.
        judge: Runs a ``judge`` check on a trace; returns its result.
    """

    similarity: Callable[[str, str], float] | None = None
    python: Callable[[CheckSpec, Trace], Any] | None = None
    judge: Callable[[CheckSpec, str, Trace], CheckResult] | None = None


_PATH_PART = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def _steps(path: str) -> list[str | int]:
    """A dotted or JSON path as its steps (keys and list indices)."""
    if not path.startswith("$"):
        return [int(p) if p.isdigit() else p for p in path.split(".")]
    steps: list[str | int] = []
    rest, pos = path[1:], 0
    while pos < len(rest):
        found = _PATH_PART.match(rest, pos)
        if found is None:
            raise MissingField(f"{path!r} is not a JSON path this reads ($.key, [index], ['key'])")
        key, index, quoted, dquoted = found.groups()
        steps.append(int(index) if index is not None else key if key is not None else quoted or dquoted or "")
        pos = found.end()
    return steps


def field_value(value: Any, path: str | None) -> Any:
    """The part of ``value`` at ``path`` (None: the whole value).

    Raises:
        MissingField: Nothing is there.
    """
    if path is None:
        return value
    for step in _steps(path):
        if isinstance(value, Mapping) and str(step) in value:
            value = value[str(step)]
        elif isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value):
            value = value[step]
        else:
            raise MissingField(f"the output has no {path!r}")
    return value


def input_value(inputs: Mapping[str, Any], name: str) -> Any:
    """The input field ``name`` (a dotted path).

    Raises:
        MissingField: The inputs have no such field.
    """
    try:
        return field_value(inputs, name)
    except MissingField:
        raise MissingField(f"the inputs have no field {name!r}; they have {', '.join(inputs) or 'none'}") from None


def normalize_answer(text: str) -> str:
    """The QA literature's answer normalisation (SQuAD's ``normalize_answer``, used by
    HotpotQA): lower case, punctuation removed, the articles a, an, the removed,
    whitespace collapsed."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _norm(value: Any, how: str) -> Any:
    if not isinstance(value, str) or how == "none":
        return value
    return normalize_answer(value) if how == "answer" else " ".join(value.casefold().split())


def _same(a: Any, b: Any) -> bool:
    return bool(a == b) if isinstance(a, str) and isinstance(b, str) else canonical_json(a) == canonical_json(b)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _resolve(value: Any, inputs: Mapping[str, Any]) -> Any:
    return input_value(inputs, value.input) if isinstance(value, InputRef) else value


def _result(name: str, passed: bool, detail: str | None = None, score: float | None = None) -> CheckResult:
    return CheckResult(name=name, status="pass" if passed else "fail",
                       score=score if score is not None else float(passed), detail=None if passed else detail)


def _scored(name: str, score: float, threshold: float, what: str) -> CheckResult:
    score = min(max(float(score), 0.0), 1.0)
    return _result(name, score >= threshold, f"{what} {score:.3f} is below {threshold:g}", score)


def _simple(check: CheckSpec, name: str, trace: Trace, ev: Evaluators) -> CheckResult:
    """One check that is not a group."""
    kind = check.kind
    if kind == "python":
        if ev.python is None:
            raise RuntimeError("no Python check runner")
        got = ev.python(check, trace)
        if isinstance(got, bool):
            return _result(name, got, "it returned False")
        if isinstance(got, (int, float)) and 0.0 <= float(got) <= 1.0:
            return _scored(name, float(got), check.pass_threshold(), "its score")
        raise TypeError(f"{check.python} returned {got!r:.60}; a check returns a bool or a score in [0, 1]")
    try:
        value = field_value(trace.output, check.field)
    except MissingField as exc:
        return _result(name, False, str(exc))
    if kind == "judge":
        if ev.judge is None:
            raise RuntimeError("no judge")
        return ev.judge(check, name, trace)
    if kind == "regex":
        assert check.regex is not None
        return _result(name, re.search(check.regex, _text(value)) is not None,
                       f"{_text(value)[:60]!r} does not match {check.regex!r}")
    want = _resolve(getattr(check, kind), trace.inputs)
    how = check.normalize
    if kind == "equals":
        return _result(name, _same(_norm(value, how), _norm(want, how)),
                       f"{_text(value)[:60]!r} is not {_text(want)[:60]!r}")
    if kind == "contains":
        held = (any(_same(_norm(v, how), _norm(want, how)) for v in value) if isinstance(value, list)
                else _text(_norm(want, how)) in _text(_norm(value, how)))
        return _result(name, held, f"{_text(value)[:60]!r} does not hold {_text(want)[:60]!r}")
    if kind == "one_of":
        if not isinstance(want, list):
            raise TypeError(f"one_of needs a list of values; the input gives {type(want).__name__}")
        return _result(name, any(_same(_norm(value, how), _norm(w, how)) for w in want),
                       f"{_text(value)[:60]!r} is none of {len(want)} values")
    if kind == "number":
        return _number(name, value, want, check.tolerance)
    if kind == "similar":
        if ev.similarity is None:
            raise RuntimeError("no embedder")
        return _scored(name, ev.similarity(_text(value), _text(want)), check.pass_threshold(), "similarity")
    raise AssertionError(kind)


def _number(name: str, value: Any, want: Any, tolerance: float) -> CheckResult:
    try:
        got, target = float(value), float(want)
    except (TypeError, ValueError):
        return _result(name, False, f"{_text(value)[:40]!r} is not a number")
    return _result(name, abs(got - target) <= tolerance, f"{got:g} is not within {tolerance:g} of {target:g}")


def _check(check: CheckSpec, name: str, trace: Trace, ev: Evaluators) -> CheckResult:
    if check.kind in ("all", "any"):
        return _group(check, name, trace, ev)
    try:
        return _simple(check, name, trace, ev)
    except Exception as exc:  # a check that raises is an error, never a pass
        return CheckResult(name=name, status="error", detail=f"{type(exc).__name__}: {exc}"[:500])


def _labels(checks: list[CheckSpec], prefix: str = "") -> list[str]:
    """Each check's name: its own, else its kind, numbered when siblings share it."""
    kinds = [c.kind for c in checks]
    return [prefix + (c.name or (c.kind if kinds.count(c.kind) == 1 else f"{c.kind}#{i}"))
            for i, c in enumerate(checks)]


def _group(check: CheckSpec, name: str, trace: Trace, ev: Evaluators) -> CheckResult:
    members = [_check(m, label, trace, ev) for m, label in zip(check.members, _labels(check.members, f"{name}/"),
                                                                  strict=True)]
    status = _combine(check.kind, [m.status for m in members])
    return CheckResult(name=name, status=status, score=_score(check.kind, [m.score for m in members]), checks=members,
                       detail=None if status == "pass" else "; ".join(f"{m.name}: {m.status}" for m in members
                                                                      if m.status != "pass")[:500])


def _combine(kind: str, statuses: list[str]) -> Any:
    if kind == "all":
        return "fail" if "fail" in statuses else "error" if "error" in statuses else "pass"
    return "pass" if "pass" in statuses else "error" if "error" in statuses else "fail"


def _score(kind: str, scores: list[float | None]) -> float | None:
    """A group's score: the mean of its checks' (``all``), the best (``any``)."""
    given = [s for s in scores if s is not None]
    if not given:
        return None
    return max(given) if kind == "any" else sum(given) / len(given)


def evaluate(check: CheckSpec, trace: Trace, evaluators: Evaluators | None = None) -> Outcome:
    """The outcome of ``trace`` by ``check`` (a spec's ``outcome:``, a group for a list)."""
    ev = evaluators or Evaluators()
    if trace.status != "ok":
        why = f"the pipeline raised {trace.error.type}" if trace.error is not None else "the pipeline failed"
        return Outcome(status="fail", score=0.0, checks=[CheckResult(name="pipeline", status="fail", score=0.0,
                                                                     detail=why)])
    top = check.members if check.kind in ("all", "any") and check.name is None else [check]
    results = [_check(c, label, trace, ev) for c, label in zip(top, _labels(top), strict=True)]
    kind = check.kind if check.kind in ("all", "any") and check.name is None else "all"
    return Outcome(status=_combine(kind, [r.status for r in results]),
                   score=_score(kind, [r.score for r in results]), checks=results)
