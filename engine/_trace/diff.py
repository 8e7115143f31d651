"""What a replay reports against its recording: divergences, field diffs, the target (QUIVER.md §12).

Calls are compared on everything the replay contract records except timings and call
ids: node, kind, occurrence, loop and iteration, input hash, output, decisions, model,
prompt, response, retrieval set, tool step, tags and error; parents as the identities
(``node#occurrence``) of the calls they name. A call matched to the recording by input
hash takes the recorded call's identity, so a scheduling-dependent order is no
divergence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from quiver._canonical import canonical_json, to_jsonable

from .model import NodeCall, Outcome, Trace

__all__ = [
    "FieldDiff", "Divergence", "TargetReport", "call_diff", "call_names", "trace_diff", "diff_values", "PERTURBED_TAG",
    "outcome_divergence", "outcome_view",
]

PERTURBED_TAG = "quiver.perturbed"
"""The tag a perturbed target call carries: the operator and its parameters."""
_MAX_DIFFS = 20
_MAX_VALUE_CHARS = 300


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs: its path in the call (``output.sufficient``) and both values."""

    path: str
    recorded: Any
    replayed: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "recorded": self.recorded, "replayed": self.replayed}


@dataclass(frozen=True)
class Divergence:
    """A call where the replay did not follow the recording.

    ``reason``: ``inputs`` (reached with other inputs), ``fields`` (same inputs, other
    output, decisions or contract fields), ``missing`` (recorded, never reached),
    ``unexpected`` (reached, never recorded) or ``trace`` (the trace's own output or
    status).
    """

    reason: Literal["inputs", "fields", "missing", "unexpected", "trace"]
    node: str
    occurrence: int | None
    call_path: str
    diff: tuple[FieldDiff, ...] = ()

    def message(self) -> str:
        """One line: where and what."""
        where = f"{self.node}#{self.occurrence}" if self.occurrence is not None else self.node
        what = {
            "inputs": "reached with inputs that differ from the recording",
            "fields": "produced fields that differ from the recording",
            "missing": "was recorded but not reached",
            "unexpected": "was reached but not recorded",
            "trace": "the trace's result differs from the recording",
        }[self.reason]
        fields = ", ".join(d.path for d in self.diff[:6])
        return f"{where} at {self.call_path or '(trace)'} {what}" + (f" ({fields})" if fields else "")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Divergence:
        """The inverse of :meth:`to_json`."""
        return cls(
            data["reason"], data["node"], data["occurrence"], data["call_path"],
            tuple(FieldDiff(d["path"], d["recorded"], d["replayed"]) for d in data.get("diff", [])),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason, "node": self.node, "occurrence": self.occurrence,
            "call_path": self.call_path, "message": self.message(),
            "diff": [d.to_json() for d in self.diff],
        }


_COMPARED = (
    "node", "kind", "occurrence", "iteration", "loop", "input_hash", "output", "decision", "model",
    "prompt", "response", "retrieval", "tool", "tags", "error",
)


def call_names(trace: Trace, alias: dict[str, NodeCall] | None = None) -> dict[str, str]:
    """Call id -> ``node#occurrence`` for every call of ``trace``; ``alias`` maps a
    replayed call's path to the recorded call it was matched to, whose identity it takes
    (a call matched by input hash keeps its recorded identity)."""
    alias = alias or {}
    names = {}
    for c in trace.calls:
        twin = alias.get(c.call_path, c)
        names[c.call_id] = f"{twin.node}#{twin.occurrence}"
    return names


def _call_view(call: NodeCall, names: dict[str, str], alias: dict[str, NodeCall] | None = None) -> dict[str, Any]:
    """The compared fields of a call, its parents named by ``names`` (:func:`call_names`)."""
    data = call.model_dump(mode="json", include=set(_COMPARED))
    data["occurrence"] = (alias or {}).get(call.call_path, call).occurrence
    data["parents"] = sorted(names[p] for p in call.parents if p in names)
    data["tags"] = {k: v for k, v in (data.get("tags") or {}).items() if k != PERTURBED_TAG}
    return data


def call_diff(
    recorded: NodeCall, baseline: Trace, replayed: NodeCall, trace: Trace, alias: dict[str, NodeCall] | None = None,
    *, names: tuple[dict[str, str], dict[str, str]] | None = None,
) -> tuple[FieldDiff, ...]:
    """The field differences of a replayed call from its recorded one. ``names``: the
    :func:`call_names` of ``baseline`` and of ``trace`` (with ``alias``), when the
    caller compares many calls of the same two traces."""
    recorded_names, replayed_names = names or (call_names(baseline), call_names(trace, alias))
    out: list[FieldDiff] = []
    diff_values(_call_view(recorded, recorded_names), _call_view(replayed, replayed_names, alias), "", out)
    return tuple(out)


def trace_diff(baseline: Trace, trace: Trace) -> tuple[FieldDiff, ...]:
    out: list[FieldDiff] = []

    def view(t: Trace) -> dict[str, Any]:
        return {
            "output": to_jsonable(t.output), "status": t.status,
            "error": t.error.model_dump() if t.error else None,
            "loops": t.tags.get("loops"),
        }

    diff_values(view(baseline), view(trace), "", out)
    return tuple(out)


def outcome_view(outcome: Outcome | None) -> dict[str, Any] | None:
    """What a replay must reproduce of an outcome: the verdicts and scores, each check's
    with its detail (a judge's recorded request and answer left out: the verdict read
    from it is compared)."""
    if outcome is None:
        return None

    def check(c: Any) -> dict[str, Any]:
        return {"name": c.name, "status": c.status, "score": c.score, "detail": c.detail,
                "checks": [check(m) for m in c.checks or []]}

    return {"status": outcome.status, "score": outcome.score, "checks": [check(c) for c in outcome.checks]}


def outcome_divergence(recorded: Outcome | None, replayed: Outcome | None) -> Divergence | None:
    """The divergence of a frozen replay whose outcome is not the recording's (None when
    it is)."""
    out: list[FieldDiff] = []
    diff_values(outcome_view(recorded), outcome_view(replayed), "outcome", out)
    return Divergence("trace", "(outcome)", None, "", tuple(out)) if out else None


def _short(value: Any) -> Any:
    text = canonical_json(value)
    return value if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


def diff_values(a: Any, b: Any, path: str, out: list[FieldDiff]) -> None:
    if len(out) >= _MAX_DIFFS or canonical_json(a) == canonical_json(b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(FieldDiff(sub, _short(a.get(key)), _short(b.get(key))))
            else:
                diff_values(a[key], b[key], sub, out)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff_values(x, y, f"{path}[{i}]", out)
        return
    out.append(FieldDiff(path, _short(a), _short(b)))


@dataclass
class TargetReport:
    """What happened at the target."""

    node: str
    occurrence: int
    call_path: str
    operator: dict[str, Any] | None
    original: Any
    perturbed: Any = None
    noop: bool | None = None
    """For binary operators: the baseline already had the value (QUIVER.md §13)."""
    reached: bool = False
    landed: bool | None = None
    """Whether the perturbation reached what it changes (the output it sets, the requests
    it rewrites); None without an operator, or when the target was not reached."""
    not_landed: str | None = None
    """Why it did not land, in one phrase."""

    def to_json(self) -> dict[str, Any]:
        out = {
            "node": self.node, "occurrence": self.occurrence, "call_path": self.call_path,
            "operator": self.operator, "original": self.original, "perturbed": self.perturbed,
            "noop": self.noop, "reached": self.reached,
        }
        if self.landed is not None:
            out["landed"] = self.landed
        if self.not_landed is not None:
            out["not_landed"] = self.not_landed
        return out
