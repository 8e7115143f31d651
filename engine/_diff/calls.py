"""One call of two traces compared: what it produced, and how its recorded context differs.

* :func:`tool_calls`: the tool calls a call's model answered with, whatever wire format
  carried them (a handoff of an agent SDK is one); :func:`answer_view`: what a call
  produced, to compare (its output, decisions and tool calls); :func:`outcome`: how two
  calls' outcomes differ, a change of tool calls named (``tool calls: A -> B``);
* :func:`own_context`: the call's own-context differences (perturbation, prompt, model,
  retrieval, tool: :class:`Evidence`) and the differences of its recorded inputs. The
  model is its name, served version and sampling parameters; the request fields that
  are part of what it is asked (:data:`REQUEST_FIELDS`: the tools offered, a pointer to
  an earlier response...) are inputs, a pointer compared by the call it points at
  (:class:`Responses`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import canonical_json, content_hash
from quiver._trace import PERTURBED_TAG, NodeCall, Trace, printable

__all__ = ["REQUEST_FIELDS", "Evidence", "Responses", "answer_view", "call_name", "cj", "messages_of", "outcome",
           "own_context", "perturbation_evidence", "short", "text_diff", "tool_calls"]

REQUEST_FIELDS = frozenset({
    "tools", "tool_choice", "parallel_tool_calls", "max_tool_calls", "functions", "function_call", "include",
    "metadata", "store", "user", "previous_response_id", "conversation", "truncation", "prompt_cache_key",
    "safety_identifier", "background",
})
"""Fields of a recorded request (``ModelInfo.params``: the body but the model, the prompt
and the streaming switches) that are part of what the model is asked, not of how it
samples: the tools offered and how, what to include, storage and user metadata, and a
pointer to an earlier response or conversation. A difference there is an input
difference; every other field is a sampling parameter (the model dimension)."""
_POINTERS = ("previous_response_id",)
"""Request fields that name an earlier response by its id: compared as the call whose
recorded response it is (``tags.wire.id``), since every response has an id of its own."""
_MAX_TEXT_DIFF = 40


@dataclass(frozen=True)
class Evidence:
    """One recorded difference that explains (part of) a divergence.

    Attributes:
        dimension: perturbation, prompt, model, retrieval, tool, input, sampling,
            unexplained, or inputs (the call's own inputs).
        call: ``node#occurrence`` of the call it was found at.
        kind: What kind of difference: the operator's name (a perturbation), template,
            fragment, messages, name, version, params, index drift, ranking change,
            document set, live data, pipeline inputs, input hash, variables, message
            body, tools, request, arguments.
        detail: One line for people.
    """

    dimension: str
    call: str
    kind: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"dimension": self.dimension, "call": self.call, "kind": self.kind, "detail": self.detail}


def cj(value: Any) -> str:
    return canonical_json(value)


def call_name(call: NodeCall) -> str:
    return f"{call.node}#{call.occurrence}"


def short(value: Any, limit: int = 60) -> str:
    return printable(value if isinstance(value, str) else cj(value), limit)


def tool_calls(call: NodeCall) -> list[tuple[str, Any]]:
    """The tool calls a call's model answered with, ``(name, arguments)`` in order.

    The capture records them in ``tags.tool_calls`` in the chat completions' shape
    whatever format carried them (Responses API ``function_call`` items, chat
    ``tool_calls``, Anthropic ``tool_use`` blocks: :mod:`quiver._wire`); a handoff of an
    agent SDK is one (``transfer_to_billing_agent``). ``{name, args}`` and ``{name,
    input}`` entries are read too. Arguments sent as JSON text are parsed; ids are left
    out (every response gives its calls ids of its own).
    """
    raw = call.tags.get("tool_calls")
    out: list[tuple[str, Any]] = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, Mapping):
            continue
        fn = item["function"] if isinstance(item.get("function"), Mapping) else item
        args = fn.get("arguments", fn.get("args", fn.get("input")))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append((str(fn.get("name") or ""), args))
    return out


def answer_view(call: NodeCall) -> str:
    """What a call produced, to compare: its output, decisions and the tool calls its
    model answered with (canonical JSON)."""
    return cj([call.output, call.decision, tool_calls(call)])


def _names(calls: list[tuple[str, Any]]) -> str:
    return ", ".join(printable(n, 60) for n, _ in calls) or "none"


def _arguments_change(x: Any, y: Any) -> str:
    if isinstance(x, Mapping) and isinstance(y, Mapping):
        keys = [k for k in sorted(set(x) | set(y), key=str) if cj(x.get(k)) != cj(y.get(k))]
        shown = [f"{printable(str(k), 30)} {short(x.get(k), 30)} -> {short(y.get(k), 30)}" for k in keys[:3]]
        return "; ".join(shown) + ("; ..." if len(keys) > 3 else "")
    return f"{short(x, 40)} -> {short(y, 40)}"


def _tool_call_change(a: NodeCall, b: NodeCall) -> str | None:
    """``tool calls: A -> B`` (other tools called: a handoff to another agent) or
    ``tool calls: NAME arguments FIELD x -> y``; None when they are the same."""
    ta, tb = tool_calls(a), tool_calls(b)
    if cj(ta) == cj(tb):
        return None
    if [n for n, _ in ta] != [n for n, _ in tb]:
        return f"tool calls: {_names(ta)} -> {_names(tb)}"
    name, x, y = next((n, x, y) for (n, x), (_, y) in zip(ta, tb, strict=True) if cj(x) != cj(y))
    return f"tool calls: {printable(name, 60)} arguments {_arguments_change(x, y)}"


def outcome(a: NodeCall, b: NodeCall) -> tuple[str, ...]:
    what = []
    if cj(a.output) != cj(b.output):
        what.append("output")
    if cj(a.decision) != cj(b.decision):
        what.append("decision")
    if cj(a.error.model_dump() if a.error else None) != cj(b.error.model_dump() if b.error else None):
        what.append("error")
    change = _tool_call_change(a, b)
    if change is not None:
        what.append(change)
    return tuple(what)


def _templated(call: NodeCall) -> bool:
    return call.prompt is not None and (call.prompt.template_id, call.prompt.template_hash) != (None, None)


def _variables(call: NodeCall) -> list[str]:
    """The hashes of a template's filled-in variables (its fragments after the template's own)."""
    return list(call.prompt.fragments[1:]) if call.prompt and _templated(call) and call.prompt.fragments else []


_ANSWER_ROLES = frozenset({"assistant", "tool"})
"""Roles of the messages that carry earlier answers and tool results back: their bodies
hold the ids each response gave its items and tool calls (``call_...``, ``fc_...``),
another in every repeat, so only their text is compared."""


def _body_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    """A call without a template records one fragment per message, the hash of the
    piece of the request body behind it: where the text is equal and that hash is not,
    a part that is not text differs (an image, a file, a name). Messages that carry
    answers back are left out (:data:`_ANSWER_ROLES`)."""
    pa, pb = a.prompt, b.prompt
    if pa is None or pb is None or _templated(a) or _templated(b) or len(pa.fragments) != len(pb.fragments):
        return []
    differ = [i for i, (m, n, x, y) in enumerate(zip(pa.assembled, pb.assembled, pa.fragments, pb.fragments,
                                                     strict=False))
              if (m.role, m.content) == (n.role, n.content) and x != y and m.role not in _ANSWER_ROLES]
    if not differ:
        return []
    where = ", ".join(f"{i} ({printable(pa.assembled[i].role, 20)})" for i in differ[:5])
    return [Evidence("inputs", call_name(a), "message body", f"the body behind message(s) {where} differs while its "
                     "text is equal: a part that is not text (an image, a file) or a name")]


def _input_evidence(a: NodeCall, b: NodeCall, responses: Responses) -> list[Evidence]:
    """How the call's recorded inputs differ (empty: every recorded input is equal)."""
    name = call_name(a)
    out = []
    if a.input_hash and b.input_hash and a.input_hash != b.input_hash and not responses.same_request(a, b):
        out.append(Evidence("inputs", name, "input hash", "its inputs hash differently"))
    va, vb = _variables(a), _variables(b)
    if va != vb:
        changed = [str(i) for i, (x, y) in enumerate(zip(va, vb, strict=False)) if x != y]
        out.append(Evidence("inputs", name, "variables",
                            f"filled-in prompt variable(s) {', '.join(changed) or 'count'} differ"))
    if a.prompt and b.prompt and _same_template(a, b) and messages_of(a) != messages_of(b) and not out:
        out.append(Evidence("inputs", name, "messages", "the assembled messages differ"))
    out += _body_evidence(a, b) + _request_evidence(a, b, responses)
    if a.tool and b.tool and cj(a.tool.args) != cj(b.tool.args):
        out.append(Evidence("inputs", name, "arguments", f"tool {a.tool.name} called with other arguments"))
    return out


def _tool_names(tools: Any) -> str:
    """The names of the tools a request offered (chat ``{function: {name}}``, Responses
    and Anthropic ``{name}``)."""
    names = []
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping):
            spec = tool["function"] if isinstance(tool.get("function"), Mapping) else tool
            names.append(str(spec.get("name") or "?"))
    return printable(", ".join(names), 80) or "none"


def _request_evidence(a: NodeCall, b: NodeCall, responses: Responses) -> list[Evidence]:
    """The request fields that are inputs (:data:`REQUEST_FIELDS`) and differ."""
    fa, fb = responses.fields(a, "a"), responses.fields(b, "b")
    changed = [k for k in sorted(fa.keys() | fb.keys()) if cj(fa.get(k)) != cj(fb.get(k))]
    out = []
    if "tools" in changed:
        out.append(Evidence("inputs", call_name(a), "tools", "the tools offered differ: "
                            f"{_tool_names(fa.get('tools'))} -> {_tool_names(fb.get('tools'))}"))
        changed.remove("tools")
    if changed:
        out.append(Evidence("inputs", call_name(a), "request", f"request field(s) {', '.join(changed)} differ"))
    return out


@dataclass
class Responses:
    """Each trace's recorded response ids (``tags.wire.id``) -> the call that answered
    them, to compare a request that continues an earlier response by the call it
    continues."""

    a: dict[str, str] = field(default_factory=dict)
    b: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, a: Trace, b: Trace) -> Responses:
        return cls(_response_ids(a), _response_ids(b))

    def fields(self, call: NodeCall, side: str) -> dict[str, Any]:
        """The call's request fields that are inputs, a pointer to an earlier response
        given as the call that made it (``node#occurrence``) when the trace has it."""
        ids = self.a if side == "a" else self.b
        params = call.model.params if call.model is not None else {}
        out = {k: v for k, v in params.items() if k in REQUEST_FIELDS}
        for key in _POINTERS:
            if isinstance(out.get(key), str) and out[key] in ids:
                out[key] = {"response of": ids[out[key]]}
        return out

    def same_request(self, a: NodeCall, b: NodeCall) -> bool:
        """Whether two LLM calls whose recorded inputs are their requests (messages and
        parameters, as the capture opens them) asked the same, pointers compared by the
        call they point at: their input hashes then differ by response ids alone."""
        if a.model is None or b.model is None or a.prompt is None or b.prompt is None:
            return False
        if not all(c.input_hash == content_hash({"messages": [m.content for m in c.prompt.assembled],  # type: ignore[union-attr]
                                                 "params": c.model.params}) for c in (a, b)):  # type: ignore[union-attr]
            return False
        rest = [{k: v for k, v in c.model.params.items() if k not in _POINTERS} for c in (a, b)]  # type: ignore[union-attr]
        return (messages_of(a) == messages_of(b) and cj(rest[0]) == cj(rest[1])
                and cj(self.fields(a, "a")) == cj(self.fields(b, "b")))


def _response_ids(trace: Trace) -> dict[str, str]:
    out = {}
    for call in trace.calls:
        wire = call.tags.get("wire")
        if isinstance(wire, Mapping) and isinstance(wire.get("id"), str):
            out[wire["id"]] = call_name(call)
    return out


def _same_template(a: NodeCall, b: NodeCall) -> bool:
    pa, pb = a.prompt, b.prompt
    if pa is None or pb is None:
        return False
    return (pa.template_id, pa.template_hash) == (pb.template_id, pb.template_hash)


def messages_of(call: NodeCall) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in call.prompt.assembled] if call.prompt else []


def _prompt_evidence(a: NodeCall, b: NodeCall, hash_equal: bool) -> list[Evidence]:
    pa, pb, name = a.prompt, b.prompt, call_name(a)
    if pa is None or pb is None:
        return [Evidence("prompt", name, "template", "a prompt was recorded in one trace only")] if pa != pb else []
    if pa.template_id != pb.template_id:
        return [Evidence("prompt", name, "template", f"template {pa.template_id} -> {pb.template_id}")]
    if pa.template_hash != pb.template_hash:
        return [Evidence("prompt", name, "template", f"template {pa.template_id} changed: "
                         f"{short(pa.template_hash, 19)} -> {short(pb.template_hash, 19)}")]
    if not hash_equal:
        return []
    va, vb = _variables(a), _variables(b)
    if va != vb:
        changed = [str(i) for i, (x, y) in enumerate(zip(va, vb, strict=False)) if x != y] or ["count"]
        return [Evidence("prompt", name, "fragment", f"fragment(s) {', '.join(changed)} of template "
                         f"{pa.template_id} differ while its input hash is equal")]
    if messages_of(a) != messages_of(b):
        return [Evidence("prompt", name, "messages", "the assembled messages differ while its input hash is equal")]
    return []


def perturbation_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    """The perturbation a replay applied here (its target carries :data:`PERTURBED_TAG`)."""
    ta, tb = a.tags.get(PERTURBED_TAG), b.tags.get(PERTURBED_TAG)
    if cj(ta) == cj(tb):
        return []
    return [Evidence("perturbation", call_name(a), _operator(tb or ta), f"the replay's target: {_applied(tb or ta)}")]


def _operator(tag: Any) -> str:
    return printable(str(tag.get("op") if isinstance(tag, Mapping) else tag), 40)


def _applied(tag: Any) -> str:
    params = tag.get("params") if isinstance(tag, Mapping) else None
    return _operator(tag) + (f" {short(params, 100)}" if params else "")


def _model_evidence(a: NodeCall, b: NodeCall) -> list[Evidence]:
    """The model's name, served version and sampling parameters (not the request
    fields that are inputs, :data:`REQUEST_FIELDS`)."""
    ma, mb, name = a.model, b.model, call_name(a)
    if ma is None or mb is None:
        return [Evidence("model", name, "name", "a model was recorded in one trace only")] if ma != mb else []
    out = []
    if ma.name != mb.name:
        out.append(Evidence("model", name, "name", f"model {ma.name} -> {mb.name}"))
    if ma.version != mb.version:
        out.append(Evidence("model", name, "version", f"served version {ma.version} -> {mb.version}"))
    for key in sorted((set(ma.params) | set(mb.params)) - REQUEST_FIELDS):
        if cj(ma.params.get(key)) != cj(mb.params.get(key)):
            out.append(Evidence("model", name, "params", f"params.{key} {short(ma.params.get(key), 40)} -> "
                                f"{short(mb.params.get(key), 40)}"))
    return out


def _retrieval_evidence(a: NodeCall, b: NodeCall, hash_equal: bool) -> list[Evidence]:
    ra, rb, name = a.retrieval, b.retrieval, call_name(a)
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
    ta, tb, name = a.tool, b.tool, call_name(a)
    if ta is None or tb is None or ta.name != tb.name or cj(ta.args) != cj(tb.args):
        return []
    if ta.response_hash != tb.response_hash:
        return [Evidence("tool", name, "live data", f"tool {ta.name}: the same arguments got another response")]
    return []


def own_context(a: NodeCall, b: NodeCall, responses: Responses) -> tuple[list[Evidence], list[Evidence]]:
    """(own-context differences in the order perturbation, prompt, model, retrieval,
    tool; input differences)."""
    inputs = _input_evidence(a, b, responses)
    equal = a.input_hash is not None and (a.input_hash == b.input_hash or responses.same_request(a, b))
    own = perturbation_evidence(a, b) + _prompt_evidence(a, b, equal) + _model_evidence(a, b)
    own += _retrieval_evidence(a, b, equal) + _tool_evidence(a, b)
    return own, inputs


def text_diff(a: NodeCall, b: NodeCall) -> tuple[str, ...]:
    def lines(call: NodeCall) -> list[str]:
        return [f"[{role}] {line}" for role, content in messages_of(call) for line in content.splitlines()]

    out = list(difflib.unified_diff(lines(a), lines(b), "A", "B", n=1, lineterm=""))
    return tuple(printable(x, 160) for x in out[:_MAX_TEXT_DIFF]) + (("...",) if len(out) > _MAX_TEXT_DIFF else ())
