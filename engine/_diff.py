"""Why did two runs of the same input diverge? The first divergent call and its cause.

Two traces are aligned by call identity, ``(node, occurrence)``, and walked in program
order. A call *diverges* when its outcome differs: its output, its branch decisions or
its error, or it ran in one trace only. The first divergent call is where an
investigation starts (a call nested under it that diverges too, by ``call_path``, is
preferred: an enclosing span's output differs because of what ran inside it).

It is explained from what the traces recorded, dimension by dimension, never from a
guess (DESIGN.md, "Attribution and deployments"):

1. **inherited**: its recorded inputs differ (input hash, filled-in prompt variables,
   assembled messages, tool arguments) and an ancestor through the recorded parents
   has an own-context difference: the cause is that ancestor's, the earliest one in
   program order, and the chain from it is named;
2. its **own context** differs, checked in the order *prompt* (template id or hash,
   or a filled-in fragment that differs while every recorded input is equal), *model*
   (name, served version, a sampling parameter), *retrieval* (a document changed
   under the same id = index drift; the same query ranked or scored differently =
   ranking change; another document set for the same query), *tool* (the same
   arguments and another response = live data);
3. *input*: the pipeline's own inputs differ and nothing above explains it;
4. **sampling**: an LLM call whose every recorded input is identical and whose output
   differs (model variability);
5. *unexplained*: anything else (a non-LLM call with the same recorded inputs and
   another output, inputs that differ with no recorded reason): no cause is named
   without a recorded difference to show for it.

Beside the first divergence, a :class:`PairDiff` lists every own-context difference
anywhere in the pair (what changed), the nodes whose outputs differ, the decisions that
changed, and D_iter, D_shape and D_struct of the pair (QUIVER.md §6).
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from quiver._canonical import canonical_json
from quiver._trace import NodeCall, Trace, printable

__all__ = ["CAUSES", "Cause", "Evidence", "FirstDivergence", "PairDiff", "diff_traces"]

Cause = Literal["prompt", "model", "retrieval", "tool", "input", "sampling", "unexplained"]
CAUSES: tuple[Cause, ...] = ("prompt", "model", "retrieval", "tool", "input", "sampling", "unexplained")
"""Every cause, in the order they are checked."""
_OWN_ORDER = ("prompt", "model", "retrieval", "tool")
_MAX_TEXT_DIFF = 40
_Key = tuple[str, int]


@dataclass(frozen=True)
class Evidence:
    """One recorded difference that explains (part of) a divergence.

    Attributes:
        dimension: prompt, model, retrieval, tool, input or inputs (the call's own inputs).
        call: ``node#occurrence`` of the call it was found at.
        kind: What kind of difference: template, fragment, messages, name, version, params,
            index drift, ranking change, document set, live data, pipeline inputs,
            input hash, arguments.
        detail: One line for people.
    """

    dimension: str
    call: str
    kind: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"dimension": self.dimension, "call": self.call, "kind": self.kind, "detail": self.detail}


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
        changes: Every own-context difference in the pair, in program order.
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
            "changes": [e.to_json() for e in self.changes], "changed_nodes": list(self.changed_nodes),
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
        lines.append(f"D_iter {self.d_iter}, D_shape {int(self.d_shape)}, D_struct {int(self.d_struct)}; "
                     f"final output {'differs' if self.output_differs else 'identical'}")
        if self.changed_nodes:
            lines.append("nodes that changed: " + ", ".join(self.changed_nodes))
        for d in self.decisions:
            lines.append(f"decision {d['gate']} at {d['call']}: {printable(str(d['a']))} -> {printable(str(d['b']))}")
        if self.only_a or self.only_b:
            lines.append(f"ran in A only: {', '.join(self.only_a) or '-'}; in B only: {', '.join(self.only_b) or '-'}")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- per call


def _cj(value: Any) -> str:
    return canonical_json(value)


def _name(call: NodeCall) -> str:
    return f"{call.node}#{call.occurrence}"


def _short(value: Any, limit: int = 60) -> str:
    return printable(value if isinstance(value, str) else _cj(value), limit)


def _outcome(a: NodeCall, b: NodeCall) -> tuple[str, ...]:
    what = []
    if _cj(a.output) != _cj(b.output):
        what.append("output")
    if _cj(a.decision) != _cj(b.decision):
        what.append("decision")
    if _cj(a.error.model_dump() if a.error else None) != _cj(b.error.model_dump() if b.error else None):
        what.append("error")
    return tuple(what)


def _variables(call: NodeCall) -> list[str]:
    return list(call.prompt.fragments[1:]) if call.prompt and call.prompt.fragments else []


def _input_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    """How the call's recorded inputs differ (empty: every recorded input is equal)."""
    name = _name(a)
    out = []
    if a.input_hash and b.input_hash and a.input_hash != b.input_hash:
        out.append(Evidence("inputs", name, "input hash", "its inputs hash differently"))
    va, vb = _variables(a), _variables(b)
    if va != vb:
        changed = [str(i) for i, (x, y) in enumerate(zip(va, vb, strict=False)) if x != y]
        out.append(Evidence("inputs", name, "variables",
                            f"filled-in prompt variable(s) {', '.join(changed) or 'count'} differ"))
    if a.prompt and b.prompt and _same_template(a, b) and _messages(a) != _messages(b) and not out:
        out.append(Evidence("inputs", name, "messages", "the assembled messages differ"))
    if a.tool and b.tool and _cj(a.tool.args) != _cj(b.tool.args):
        out.append(Evidence("inputs", name, "arguments", f"tool {a.tool.name} called with other arguments"))
    return out


def _same_template(a: NodeCall, b: NodeCall) -> bool:
    pa, pb = a.prompt, b.prompt
    if pa is None or pb is None:
        return False
    return (pa.template_id, pa.template_hash) == (pb.template_id, pb.template_hash)


def _messages(call: NodeCall) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in call.prompt.assembled] if call.prompt else []


def _prompt_evidence(a: NodeCall, b: NodeCall, hash_equal: bool) -> list[Evidence]:
    pa, pb, name = a.prompt, b.prompt, _name(a)
    if pa is None or pb is None:
        return [Evidence("prompt", name, "template", "a prompt was recorded in one trace only")] if pa != pb else []
    if pa.template_id != pb.template_id:
        return [Evidence("prompt", name, "template", f"template {pa.template_id} -> {pb.template_id}")]
    if pa.template_hash != pb.template_hash:
        return [Evidence("prompt", name, "template", f"template {pa.template_id} changed: "
                         f"{_short(pa.template_hash, 19)} -> {_short(pb.template_hash, 19)}")]
    if not hash_equal:
        return []
    va, vb = _variables(a), _variables(b)
    if va != vb:
        changed = [str(i) for i, (x, y) in enumerate(zip(va, vb, strict=False)) if x != y] or ["count"]
        return [Evidence("prompt", name, "fragment", f"fragment(s) {', '.join(changed)} of template "
                         f"{pa.template_id} differ while its input hash is equal")]
    if _messages(a) != _messages(b):
        return [Evidence("prompt", name, "messages", "the assembled messages differ while its input hash is equal")]
    return []


def _model_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    ma, mb, name = a.model, b.model, _name(a)
    if ma is None or mb is None:
        return [Evidence("model", name, "name", "a model was recorded in one trace only")] if ma != mb else []
    out = []
    if ma.name != mb.name:
        out.append(Evidence("model", name, "name", f"model {ma.name} -> {mb.name}"))
    if ma.version != mb.version:
        out.append(Evidence("model", name, "version", f"served version {ma.version} -> {mb.version}"))
    for key in sorted(set(ma.params) | set(mb.params)):
        if _cj(ma.params.get(key)) != _cj(mb.params.get(key)):
            out.append(Evidence("model", name, "params", f"params.{key} {_short(ma.params.get(key), 40)} -> "
                                f"{_short(mb.params.get(key), 40)}"))
    return out


def _retrieval_evidence(a: NodeCall, b: NodeCall, hash_equal: bool) -> list[Evidence]:
    ra, rb, name = a.retrieval, b.retrieval, _name(a)
    if ra is None and rb is None:
        return []
    ra, rb = ra or [], rb or []
    hashes_a, hashes_b = {d.doc_id: d.content_hash for d in ra}, {d.doc_id: d.content_hash for d in rb}
    drift = sorted(i for i in hashes_a.keys() & hashes_b.keys() if hashes_a[i] != hashes_b[i])
    out = []
    if drift:
        out.append(Evidence("retrieval", name, "index drift",
                            f"document(s) {', '.join(drift[:5])}{' ...' if len(drift) > 5 else ''} changed under the "
                            "same id"))
    if not hash_equal:
        return out
    ids_a, ids_b = [d.doc_id for d in ra], [d.doc_id for d in rb]
    if set(ids_a) != set(ids_b):
        gone, new = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
        out.append(Evidence("retrieval", name, "document set", f"the same query retrieved other documents: "
                            f"-{','.join(gone[:5]) or '0'} +{','.join(new[:5]) or '0'}"))
    elif [(d.doc_id, d.rank, d.score) for d in ra] != [(d.doc_id, d.rank, d.score) for d in rb]:
        out.append(Evidence("retrieval", name, "ranking change", "the same query ranked or scored the documents "
                            "differently"))
    return out


def _tool_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    ta, tb, name = a.tool, b.tool, _name(a)
    if ta is None or tb is None or ta.name != tb.name or _cj(ta.args) != _cj(tb.args):
        return []
    if ta.response_hash != tb.response_hash:
        return [Evidence("tool", name, "live data", f"tool {ta.name}: the same arguments got another response")]
    return []


def _own_context(a: NodeCall, b: NodeCall) -> tuple[list[Evidence], list[Evidence]]:
    """(own-context differences in the order prompt, model, retrieval, tool; input differences)."""
    inputs = _input_evidence(a, b)
    equal = a.input_hash is not None and a.input_hash == b.input_hash
    own = _prompt_evidence(a, b, equal) + _model_evidence(a, b) + _retrieval_evidence(a, b, equal)
    own += _tool_evidence(a, b)
    return own, inputs


def _text_diff(a: NodeCall, b: NodeCall) -> tuple[str, ...]:
    def lines(call: NodeCall) -> list[str]:
        return [f"[{role}] {line}" for role, content in _messages(call) for line in content.splitlines()]

    out = list(difflib.unified_diff(lines(a), lines(b), "A", "B", n=1, lineterm=""))
    return tuple(printable(x, 160) for x in out[:_MAX_TEXT_DIFF]) + (("...",) if len(out) > _MAX_TEXT_DIFF else ())


# --------------------------------------------------------------------------- the pair


@dataclass
class _Aligned:
    a: Trace
    b: Trace
    calls_a: dict[_Key, NodeCall] = field(default_factory=dict)
    calls_b: dict[_Key, NodeCall] = field(default_factory=dict)
    order: list[_Key] = field(default_factory=list)

    @classmethod
    def of(cls, a: Trace, b: Trace) -> _Aligned:
        out = cls(a, b, {(c.node, c.occurrence): c for c in a.calls}, {(c.node, c.occurrence): c for c in b.calls})
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


def _divergent(al: _Aligned) -> list[tuple[_Key, tuple[str, ...]]]:
    out = []
    for key in al.order:
        a, b = al.pair(key)
        what = ("only in A",) if b is None else ("only in B",) if a is None else _outcome(a, b)
        if what:
            out.append((key, what))
    return out


def _first(divergent: list[tuple[_Key, tuple[str, ...]]], al: _Aligned) -> tuple[_Key, tuple[str, ...]]:
    """The first divergent call, descending into divergent calls nested under it."""
    key, what = divergent[0]
    for k, w in divergent[1:]:
        a, b = al.pair(key)
        path = (a or b).call_path  # type: ignore[union-attr]
        c, d = al.pair(k)
        if (c or d).call_path.startswith(path + "/"):  # type: ignore[union-attr]
            key, what = k, w
    return key, what


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
    here = f"{key[0]}#{key[1]}"

    def found(cause: Cause, evidence: Sequence[Evidence], origin: str = here, chain: tuple[str, ...] = (),
              text: tuple[str, ...] = ()) -> FirstDivergence:
        return FirstDivergence(key[0], key[1], present.call_path, what, cause, origin != here, origin,
                               chain or (here,), tuple(evidence), text)

    own, inputs = _own_context(a, b) if a is not None and b is not None else ([], [])
    if inputs or a is None or b is None:
        for anc in _ancestors(al, key) if present.parents else _earlier(al, key):
            x, y = al.pair(anc)
            anc_own = _own_context(x, y)[0] if x is not None and y is not None else []
            if x is not None and anc_own:
                chain = _chain(al, anc, key) if present.parents else (_name(x), here)
                return found(_cause(anc_own[0]), anc_own + inputs, _name(x), chain)
    if own:
        text = _text_diff(a, b) if own[0].dimension == "prompt" and a is not None and b is not None else ()
        return found(_cause(own[0]), own, text=text)
    if _cj(al.a.inputs) != _cj(al.b.inputs):
        return found("input", [Evidence("input", here, "pipeline inputs", "the pipeline's inputs differ")])
    if a is not None and b is not None and not inputs and a.kind == "llm" and (a.model or a.prompt):
        return found("sampling", [Evidence("sampling", here, "sampling",
                                           "every recorded input is identical and the output differs")])
    reason = ("called in one trace only, and no earlier recorded difference explains it" if a is None or b is None
              else "its inputs differ with no recorded reason" if inputs
              else f"a {a.kind} call with the same recorded inputs and another outcome (code or state not recorded)")
    return found("unexplained", [Evidence("unexplained", here, "unexplained", reason), *inputs])


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
            if _cj(da.get(gate)) != _cj(db.get(gate)):
                out.append({"call": f"{key[0]}#{key[1]}", "gate": gate, "a": da.get(gate), "b": db.get(gate)})
    return out


def _changes(al: _Aligned) -> list[Evidence]:
    out: list[Evidence] = []
    for key in al.order:
        a, b = al.pair(key)
        if a is not None and b is not None:
            out += _own_context(a, b)[0]
    return out


def diff_traces(a: Trace, b: Trace) -> PairDiff:
    """Compare two traces of (normally) the same input: first divergence, cause, consequences."""
    al = _Aligned.of(a, b)
    divergent = _divergent(al)
    first = _explain(al, *_first(divergent, al)) if divergent else None
    counts_a, counts_b = Counter(c.node for c in a.calls), Counter(c.node for c in b.calls)
    decisions_a = {(c.node, c.occurrence, _cj(c.decision)) for c in a.calls if c.decision}
    decisions_b = {(c.node, c.occurrence, _cj(c.decision)) for c in b.calls if c.decision}
    changed = list(dict.fromkeys(k[0] for k, _ in divergent))
    view_a = (_cj(a.output), a.status)
    view_b = (_cj(b.output), b.status)
    return PairDiff(
        a=a.trace_id, b=b.trace_id, input_id=a.input_id, same_input=a.input_id == b.input_id, first=first,
        changes=tuple(_changes(al)), changed_nodes=tuple(changed), decisions=tuple(_decisions(al)),
        only_a=tuple(n for n in counts_a if n not in counts_b), only_b=tuple(n for n in counts_b if n not in counts_a),
        d_iter=sum(abs(counts_a[n] - counts_b[n]) for n in counts_a.keys() | counts_b.keys()),
        d_shape=decisions_a != decisions_b, d_struct=counts_a.keys() != counts_b.keys(),
        output_differs=view_a != view_b,
    )
