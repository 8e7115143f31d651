"""Two traces compared: the first divergent call, its cause, and the consequences (see
:mod:`quiver._diff`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from quiver._trace import NodeCall, Trace, printable

from .calls import (
    Evidence,
    Responses,
    call_name,
    cj,
    outcome,
    own_context,
    perturbation_evidence,
    text_diff,
)

__all__ = ["CAUSES", "Cause", "FirstDivergence", "PairDiff", "diff_traces"]

Cause = Literal["perturbation", "prompt", "model", "retrieval", "tool", "input", "sampling", "unexplained"]
CAUSES: tuple[Cause, ...] = ("perturbation", "prompt", "model", "retrieval", "tool", "input", "sampling",
                             "unexplained")
"""Every cause, in the order they are checked."""
_OWN_ORDER = ("perturbation", "prompt", "model", "retrieval", "tool")
_Key = tuple[str, int]


@dataclass(frozen=True)
class FirstDivergence:
    """The first divergent call of a pair and its cause.

    Attributes:
        node: The call's node.
        occurrence: Its occurrence.
        call_path: Its call path (in the first trace that has it).
        what: What differs there: output, decision, error, only in A, only in B.
        cause: One of :data:`CAUSES`.
        inherited: The call's own context is identical; the cause lies at ``origin``.
        origin: ``node#occurrence`` of the call where the cause lies.
        chain: ``node#occurrence`` from ``origin`` down to this call (one item when not inherited).
        evidence: The recorded differences that show the cause.
        text_diff: For prompt causes: a unified diff of the assembled messages.
    """

    node: str
    occurrence: int
    call_path: str
    what: tuple[str, ...]
    cause: Cause
    inherited: bool
    origin: str
    chain: tuple[str, ...]
    evidence: tuple[Evidence, ...] = ()
    text_diff: tuple[str, ...] = ()

    @property
    def origin_node(self) -> str:
        """The node of :attr:`origin`."""
        return self.origin.rsplit("#", 1)[0]

    def summary(self) -> str:
        """One line: where, what and why."""
        where = f"{self.node}#{self.occurrence}"
        why = f"{self.cause}" + (f", inherited from {' -> '.join(self.chain)}" if self.inherited else "")
        first = f": {self.evidence[0].detail}" if self.evidence else ""
        return f"{where} ({', '.join(self.what)}): {why}{first}"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "occurrence": self.occurrence, "call_path": self.call_path, "what": list(self.what),
            "cause": self.cause, "inherited": self.inherited, "origin": self.origin, "origin_node": self.origin_node,
            "chain": list(self.chain), "evidence": [e.to_json() for e in self.evidence],
            "text_diff": list(self.text_diff), "summary": self.summary(),
        }


@dataclass(frozen=True)
class PairDiff:
    """Two traces compared: the first divergence, what changed, the consequences.

    Attributes:
        a: The first trace's id.
        b: The second trace's id.
        input_id: The first trace's input id.
        same_input: Both traces have this input id.
        first: The first divergent call, None when the outcomes are identical.
        changes: Every own-context difference in the pair, in program order, but those
            of ``downstream``.
        downstream: Own-context differences at calls an earlier divergence reached (their
            recorded inputs differ): consequences of it, not changes of the pair.
        changed_nodes: Nodes whose outputs, decisions or call counts differ.
        decisions: The decisions that differ: ``{call, gate, a, b}``.
        only_a: Nodes that ran in the first trace only.
        only_b: Nodes that ran in the second trace only.
        d_iter: Sum over nodes of the difference in call counts.
        d_shape: The decision mappings differ.
        d_struct: The sets of nodes that ran differ.
        output_differs: The traces' final outputs (or status) differ.
    """

    a: str
    b: str
    input_id: str
    same_input: bool
    first: FirstDivergence | None
    changes: tuple[Evidence, ...]
    downstream: tuple[Evidence, ...]
    changed_nodes: tuple[str, ...]
    decisions: tuple[dict[str, Any], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    d_iter: int
    d_shape: bool
    d_struct: bool
    output_differs: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a, "b": self.b, "input_id": self.input_id, "same_input": self.same_input,
            "first_divergence": self.first.to_json() if self.first else None,
            "changes": [e.to_json() for e in self.changes],
            "downstream_changes": [e.to_json() for e in self.downstream], "changed_nodes": list(self.changed_nodes),
            "decisions": list(self.decisions), "only_a": list(self.only_a), "only_b": list(self.only_b),
            "D_iter": self.d_iter, "D_shape": self.d_shape, "D_struct": self.d_struct,
            "output_differs": self.output_differs,
        }

    def render(self) -> str:
        """The diff for people (the terminal)."""
        lines = [f"A: {self.a}", f"B: {self.b}",
                 f"input: {self.input_id}" + ("" if self.same_input else " (the traces have different input ids)")]
        f = self.first
        if f is None:
            lines.append("no divergence: every call has the same output, decisions and error")
        else:
            lines += [f"first divergence: {f.node}#{f.occurrence} at {f.call_path} ({', '.join(f.what)})",
                      f"cause: {f.cause}" + (f" (inherited: {' -> '.join(f.chain)})" if f.inherited else "")]
            lines += [f"  {e.dimension} at {e.call}: {e.detail}" for e in f.evidence]
            if f.text_diff:
                lines += ["  assembled messages:"] + [f"    {t}" for t in f.text_diff]
        others = [e for e in self.changes if f is None or e not in f.evidence]
        if others:
            lines.append("other context differences:")
            lines += [f"  {e.dimension} at {e.call}: {e.detail}" for e in others]
        reached = [e for e in self.downstream if f is None or e not in f.evidence]
        if reached:
            lines.append("context differences at calls the divergence reached (their inputs differ too; "
                         "consequences, not causes):")
            lines += [f"  {e.dimension} at {e.call}: {e.detail}" for e in reached]
        lines.append(f"D_iter {self.d_iter}, D_shape {int(self.d_shape)}, D_struct {int(self.d_struct)}; "
                     f"final output {'differs' if self.output_differs else 'identical'}")
        if self.changed_nodes:
            lines.append("nodes that changed: " + ", ".join(self.changed_nodes))
        for d in self.decisions:
            lines.append(f"decision {d['gate']} at {d['call']}: {printable(str(d['a']))} -> {printable(str(d['b']))}")
        if self.only_a or self.only_b:
            lines.append(f"ran in A only: {', '.join(self.only_a) or '-'}; in B only: {', '.join(self.only_b) or '-'}")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the pair


@dataclass
class _Aligned:
    a: Trace
    b: Trace
    calls_a: dict[_Key, NodeCall] = field(default_factory=dict)
    calls_b: dict[_Key, NodeCall] = field(default_factory=dict)
    order: list[_Key] = field(default_factory=list)
    responses: Responses = field(default_factory=Responses)
    _own: dict[_Key, tuple[list[Evidence], list[Evidence]]] = field(default_factory=dict)

    @classmethod
    def of(cls, a: Trace, b: Trace) -> _Aligned:
        out = cls(a, b, {(c.node, c.occurrence): c for c in a.calls}, {(c.node, c.occurrence): c for c in b.calls},
                  responses=Responses.of(a, b))
        rank: dict[_Key, tuple[float, int]] = {k: (float(i), 0) for i, k in enumerate(out.calls_a)}
        anchor, extra = -1.0, 0
        for k in out.calls_b:
            if k in rank:
                anchor, extra = rank[k][0], 0
            else:
                extra += 1
                rank[k] = (anchor + 0.5, extra)
        out.order = sorted(rank, key=lambda k: rank[k])
        return out

    def pair(self, key: _Key) -> tuple[NodeCall | None, NodeCall | None]:
        return self.calls_a.get(key), self.calls_b.get(key)

    def own(self, key: _Key) -> tuple[list[Evidence], list[Evidence]]:
        """(own-context differences, input differences) of the call at ``key`` (none
        when it ran in one trace only)."""
        if key not in self._own:
            a, b = self.pair(key)
            self._own[key] = own_context(a, b, self.responses) if a is not None and b is not None else ([], [])
        return self._own[key]

    def path(self, key: _Key) -> str:
        a, b = self.pair(key)
        return (a or b).call_path  # type: ignore[union-attr]


def _divergent(al: _Aligned) -> list[tuple[_Key, tuple[str, ...]]]:
    out = []
    for key in al.order:
        a, b = al.pair(key)
        what = ("only in A",) if b is None else ("only in B",) if a is None else outcome(a, b)
        if what:
            out.append((key, what))
    return out


def _first(divergent: list[tuple[_Key, tuple[str, ...]]], al: _Aligned) -> tuple[_Key, tuple[str, ...]]:
    """The first divergent call, descending into divergent calls nested under it."""
    key, what = divergent[0]
    for k, w in divergent[1:]:
        if _answered_first(al, key, what):
            break
        if al.path(k).startswith(al.path(key) + "/"):
            key, what = k, w
    return key, what


def _answered_first(al: _Aligned, key: _Key, what: tuple[str, ...]) -> bool:
    """Whether the call's own model answered with other tool calls from the same recorded
    inputs: its first LLM request came before the calls nested under it that it led to
    (a handoff's agent, a tool's run), and nothing before it changed what it was asked."""
    return any(w.startswith("tool calls") for w in what) and not al.own(key)[1]


def _ancestors(al: _Aligned, key: _Key) -> list[_Key]:
    """The keys of the recorded ancestors of a call (through either trace's parents), in program order."""
    ids = {"a": {c.call_id: (c.node, c.occurrence) for c in al.a.calls},
           "b": {c.call_id: (c.node, c.occurrence) for c in al.b.calls}}
    seen: set[_Key] = set()
    todo = [key]
    while todo:
        k = todo.pop()
        for side, calls in (("a", al.calls_a), ("b", al.calls_b)):
            call = calls.get(k)
            for p in call.parents if call else ():
                pk = ids[side].get(p)
                if pk is not None and pk not in seen and pk != key:
                    seen.add(pk)
                    todo.append(pk)
    position = {k: i for i, k in enumerate(al.order)}
    return sorted(seen, key=lambda k: position.get(k, len(position)))


def _chain(al: _Aligned, origin: _Key, key: _Key) -> tuple[str, ...]:
    """``origin -> ... -> key`` through recorded parents (shortest, by the first trace's parents)."""
    ids = {c.call_id: (c.node, c.occurrence) for c in [*al.b.calls, *al.a.calls]}
    back: dict[_Key, _Key] = {}
    frontier, seen = [key], {key}
    while frontier and origin not in seen:
        nxt = []
        for k in frontier:
            call = al.calls_a.get(k) or al.calls_b.get(k)
            for p in call.parents if call else ():
                pk = ids.get(p)
                if pk is not None and pk not in seen:
                    seen.add(pk)
                    back[pk] = k
                    nxt.append(pk)
        frontier = nxt
    path, k = [origin], origin
    while k in back:
        k = back[k]
        path.append(k)
    return tuple(f"{n}#{o}" for n, o in path)


def _explain(al: _Aligned, key: _Key, what: tuple[str, ...]) -> FirstDivergence:
    a, b = al.pair(key)
    present = a if a is not None else b
    assert present is not None
    here = _key_name(key)

    def found(cause: Cause, evidence: Sequence[Evidence], origin: str = here, chain: tuple[str, ...] = (),
              text: tuple[str, ...] = ()) -> FirstDivergence:
        return FirstDivergence(key[0], key[1], present.call_path, what, cause, origin != here, origin,
                               chain or (here,), tuple(evidence), text)

    own, inputs = al.own(key)
    target = _perturbed_around(al, key)
    if target == key:
        return found("perturbation", [*own, *inputs])
    if target is not None:  # a call the perturbed target encloses: it ran under the change
        around = _key_name(target)
        return found("perturbation", [*al.own(target)[0], *own, *inputs], around, (around, here))
    if inputs or a is None or b is None:
        for anc in _ancestors(al, key) if present.parents else _earlier(al, key):
            x, _ = al.pair(anc)
            anc_own = al.own(anc)[0]
            if x is not None and anc_own:
                chain = _chain(al, anc, key) if present.parents else (call_name(x), here)
                return found(_cause(anc_own[0]), anc_own + inputs, call_name(x), chain)
    if own:
        text = text_diff(a, b) if own[0].dimension == "prompt" and a is not None and b is not None else ()
        return found(_cause(own[0]), own, text=text)
    if cj(al.a.inputs) != cj(al.b.inputs):
        return found("input", [Evidence("input", here, "pipeline inputs", "the pipeline's inputs differ")])
    if a is not None and b is not None and not inputs and a.kind == "llm" and (a.model or a.prompt):
        answer = "its tool calls differ" if any(w.startswith("tool calls") for w in what) else "the output differs"
        return found("sampling", [Evidence("sampling", here, "sampling",
                                           f"every recorded input is identical and {answer}")])
    reason = ("called in one trace only, and no earlier recorded difference explains it" if a is None or b is None
              else "its inputs differ with no recorded reason" if inputs
              else f"a {a.kind} call with the same recorded inputs and another outcome (code or state not recorded)")
    return found("unexplained", [Evidence("unexplained", here, "unexplained", reason), *inputs])


def _key_name(key: _Key) -> str:
    return f"{key[0]}#{key[1]}"


def _perturbed_around(al: _Aligned, key: _Key) -> _Key | None:
    """The replay's perturbed target (it carries ``PERTURBED_TAG`` in one trace only)
    when it is this call or encloses it: the perturbation is then the cause."""
    path = al.path(key)
    for k in al.order:
        a, b = al.pair(k)
        if a is None or b is None or not perturbation_evidence(a, b):
            continue
        if path == al.path(k) or path.startswith(al.path(k) + "/"):
            return k
    return None


def _earlier(al: _Aligned, key: _Key) -> list[_Key]:
    """Every call before ``key`` in program order: the ancestors of a call without recorded parents."""
    return al.order[: al.order.index(key)]


def _cause(evidence: Evidence) -> Cause:
    dim = evidence.dimension
    return dim if dim in _OWN_ORDER else "unexplained"  # type: ignore[return-value]


def _decisions(al: _Aligned) -> list[dict[str, Any]]:
    out = []
    for key in al.order:
        a, b = al.pair(key)
        da, db = (a.decision if a else {}), (b.decision if b else {})
        for gate in sorted(set(da) | set(db)):
            if cj(da.get(gate)) != cj(db.get(gate)):
                out.append({"call": f"{key[0]}#{key[1]}", "gate": gate, "a": da.get(gate), "b": db.get(gate)})
    return out


def _changes(al: _Aligned, divergent: list[tuple[_Key, tuple[str, ...]]]) -> tuple[list[Evidence], list[Evidence]]:
    """(own-context differences, those at calls an earlier divergence reached): a call
    whose recorded inputs differ after another call diverged (not one enclosing it,
    unless its own answer came first, :func:`_answered_first`) runs in another context
    because of it (after another handoff, the call at the same place is another agent's,
    on its own model): a consequence, not a change of the pair."""
    changes: list[Evidence] = []
    reached: list[Evidence] = []
    diverged: list[tuple[str, bool]] = []
    what = dict(divergent)
    for key in al.order:
        own, inputs = al.own(key)
        path = al.path(key)
        after = any(first or not path.startswith(p + "/") for p, first in diverged)
        (reached if inputs and after else changes).extend(own)
        if key in what:
            diverged.append((path, _answered_first(al, key, what[key])))
    return changes, reached


def diff_traces(a: Trace, b: Trace) -> PairDiff:
    """Compare two traces of (normally) the same input: first divergence, cause, consequences."""
    al = _Aligned.of(a, b)
    divergent = _divergent(al)
    first = _explain(al, *_first(divergent, al)) if divergent else None
    counts_a, counts_b = Counter(c.node for c in a.calls), Counter(c.node for c in b.calls)
    decisions_a = {(c.node, c.occurrence, cj(c.decision)) for c in a.calls if c.decision}
    decisions_b = {(c.node, c.occurrence, cj(c.decision)) for c in b.calls if c.decision}
    changed = list(dict.fromkeys(k[0] for k, _ in divergent))
    view_a = (cj(a.output), a.status)
    view_b = (cj(b.output), b.status)
    changes, reached = _changes(al, divergent)
    return PairDiff(
        a=a.trace_id, b=b.trace_id, input_id=a.input_id, same_input=a.input_id == b.input_id, first=first,
        changes=tuple(changes), downstream=tuple(reached), changed_nodes=tuple(changed),
        decisions=tuple(_decisions(al)),
        only_a=tuple(n for n in counts_a if n not in counts_b), only_b=tuple(n for n in counts_b if n not in counts_a),
        d_iter=sum(abs(counts_a[n] - counts_b[n]) for n in counts_a.keys() | counts_b.keys()),
        d_shape=decisions_a != decisions_b, d_struct=counts_a.keys() != counts_b.keys(),
        output_differs=view_a != view_b,
    )
