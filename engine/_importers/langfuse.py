"""Langfuse trace exports: ``{trace, observations[]}`` (``quiver import langfuse``).

Read: a ``{"trace": {...}, "observations": [...]}`` export, a trace as the public
API returns it (observations inside the trace), ``{"data": [...]}`` pages, lists of
any of these, or bare observations (with their ``traceId``). When ``observations``
is given next to the trace, the trace's own ``observations`` (a reduced copy of the
same records) are not read again.

One observation, one node call:

* kind from ``type``: GENERATION -> llm, TOOL -> tool, RETRIEVER -> retrieval, SPAN,
  AGENT, CHAIN, EVENT, EMBEDDING, EVALUATOR, GUARDRAIL -> transform. A SPAN or EVENT
  whose OTel attributes (``metadata.attributes``, as Langfuse's OTLP ingestion keeps
  them) say otherwise is refined: by ``openinference.span.kind`` (LLM, TOOL,
  RETRIEVER) when there is one, else by ``gen_ai.operation.name``,
  ``gen_ai.tool.name``, ``tool.name`` or ``ai.operationId`` (``ai.toolCall``,
  ``*.doGenerate``);
* ids, parent (``parentObservationId``), ``name``, ``startTime`` and ``endTime`` give
  the call's place and times;
* ``input`` and ``output``, parsed from JSON where they are JSON (twice for JSON
  encoded in a JSON string, as Langfuse stores OTel values);
* ``model`` and ``modelParameters`` (each value parsed from JSON, nulls left out) as
  the model; for an observation with a model or an llm kind, the input's chat
  messages as the assembled prompt (any spelling of :mod:`quiver._importers`) and
  ``promptName`` as the template id; for llm calls, the response: the text of the
  output (its last message when it is chat messages), ``usageDetails``
  (``input``, ``output``, ``total`` as ``prompt_tokens``, ``completion_tokens``,
  ``total_tokens``);
* retrieval: an output that is a list of documents; tool: the name from
  ``gen_ai.tool.name`` / ``tool.name`` / ``ai.toolCall.name`` in the attributes (else
  the observation name), the arguments from the input when it is an object (else the
  attributes' ``tool.parameters``, ``gen_ai.tool.call.arguments``,
  ``tool_arguments``, ``ai.toolCall.args``), the response is the output;
* ``level`` ERROR: a call error with the ``statusMessage``.

The trace gives the trace id, the pipeline name (``name``), the inputs (``input``,
else the root observation's) and the output (``output``, else the root's); with
``group_by="session"`` its ``sessionId``, with ``metadata.KEY`` its metadata. Every
other field of an observation (``metadata`` whole, costs, latency, project and
environment, timestamps of ingestion, ...) is kept in the call's
``tags["langfuse"]`` under its own key, every other trace field in the trace's
``tags["langfuse"]``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._outcome import outcome_from_scores
from quiver._trace import CallError, CallKind, LLMResponse, ModelInfo, PromptInfo, ToolStep

from .common import NOTHING, Attrs, ImportProblem, MappedCall, Note, SourceSpan, SpanFormat
from .registry import import_format
from .reply import compared_reply, reply_of, unread_reply, without_volatile
from .values import documents, normalise_messages, parse_json, render_messages, to_ns

__all__ = ["LangfuseFormat"]

_TYPES: dict[str, CallKind] = {"GENERATION": "llm", "TOOL": "tool", "RETRIEVER": "retrieval"}
_OI_KINDS: dict[str, CallKind] = {"LLM": "llm", "TOOL": "tool", "RETRIEVER": "retrieval"}
_PLACE = ("id", "traceId", "parentObservationId", "type", "name", "startTime", "endTime")
_USAGE = {"input": "prompt_tokens", "output": "completion_tokens", "total": "total_tokens"}


def _attributes(span: SourceSpan) -> dict[str, Any]:
    """The OTel attributes Langfuse kept in an observation's metadata."""
    meta = parse_json(span.attributes.get("metadata"))
    attrs = meta.get("attributes") if isinstance(meta, Mapping) else None
    return dict(attrs) if isinstance(attrs, Mapping) else {}


def _refined_kind(kind: CallKind, type_: Any, attributes: Mapping[str, Any]) -> CallKind:
    if type_ not in ("SPAN", "EVENT", None):
        return kind
    oi = str(attributes.get("openinference.span.kind") or "").upper()
    if oi:
        return _OI_KINDS.get(oi, kind)
    op = attributes.get("gen_ai.operation.name") or attributes.get("ai.operationId")
    if op == "execute_tool" or op == "ai.toolCall" or "gen_ai.tool.name" in attributes or "tool.name" in attributes:
        return "tool"
    if op in ("chat", "text_completion", "generate_content") or str(op).endswith((".doGenerate", ".doStream")):
        return "llm"
    return kind


@import_format("langfuse")
class LangfuseFormat(SpanFormat):
    """Langfuse trace exports."""

    tag_key = "langfuse"
    unit = "a Langfuse record"

    def record(self, value: Mapping[str, Any], where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
        if isinstance(value.get("data"), list) and "observations" not in value:
            return self.spans(value["data"], f"{where}: data", problems)
        trace: Mapping[str, Any] | None
        if isinstance(value.get("observations"), list):
            trace = value.get("trace") if isinstance(value.get("trace"), Mapping) else {
                k: v for k, v in value.items() if k != "observations"}
            observations, label = value["observations"], "observations"
        elif isinstance(value.get("trace"), Mapping) and isinstance(value["trace"].get("observations"), list):
            trace, observations, label = value["trace"], value["trace"]["observations"], "trace.observations"
        elif "type" in value and "id" in value:
            trace, observations, label = None, [value], ""
        else:
            problems.append(ImportProblem(where, _str(value.get("id")), "not a Langfuse trace export "
                                          "({trace, observations[]}) nor an observation; skipped"))
            return []
        info = dict(trace) if trace else None
        out = []
        for i, obs in enumerate(observations):
            place = f"{where}: {label}[{i}]" if label else where
            if not isinstance(obs, Mapping):
                problems.append(ImportProblem(place, None, "an observation must be a JSON object; skipped"))
                continue
            out.append(SourceSpan(
                span_id=_str(obs.get("id")), trace_id=_str(obs.get("traceId") or (info or {}).get("id")),
                parent_id=_str(obs.get("parentObservationId")),
                name=str(obs.get("name") or obs.get("type") or "observation"),
                kind_label=str(obs.get("type") or ""), start_ns=to_ns(obs.get("startTime")),
                end_ns=to_ns(obs.get("endTime")), attributes=dict(obs), where=place, trace_info=info,
            ))
        return out

    def source_kind(self, span: SourceSpan) -> str:
        type_ = span.attributes.get("type")
        kind = _refined_kind(_TYPES.get(str(type_), "transform"), type_, _attributes(span))
        if kind != "transform":
            return "retriever" if kind == "retrieval" else kind
        return "chain" if type_ in ("SPAN", "AGENT", "CHAIN") else "other"

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        for key in _PLACE:
            attrs.get(key)
        type_ = span.attributes.get("type")
        meta = _attributes(span)
        mc = MappedCall(kind=_refined_kind(_TYPES.get(str(type_), "transform"), type_, meta))
        given = attrs.get("input")
        mc.input = NOTHING if given is None else parse_json(
            given, on_deep=lambda why: note(f"input is {why}; imported as text"))
        output = parse_json(attrs.get("output"), on_deep=lambda why: note(f"output is {why}; imported as text"))
        mc.error = self._error(attrs)
        mc.model = self._model(attrs)
        if mc.model is not None or mc.kind == "llm":
            messages = normalise_messages(mc.input) if mc.input is not NOTHING else None
            template = attrs.get("promptName")
            if messages or template:
                mc.prompt = PromptInfo(assembled=render_messages(messages or []),
                                       template_id=str(template) if template else None)
        if mc.kind == "llm":
            output = self._reply(attrs, mc, output)
        mc.output = without_volatile(output)
        if mc.output is not output:  # the output as written stays in tags
            attrs.used.discard("output")
        if mc.kind == "retrieval" and isinstance(mc.output, list):
            mc.retrieval = documents(mc.output)[0]
        if mc.kind == "tool":
            mc.tool = self._tool(span, meta, mc.input, mc.output)
        return mc

    def _error(self, attrs: Attrs) -> CallError | None:
        level = attrs.peek("level")
        if level == "DEFAULT":
            attrs.get("level")
        if level != "ERROR":
            return None
        attrs.get("level")
        return CallError(type="ERROR", message=str(attrs.get("statusMessage") or ""))

    def _model(self, attrs: Attrs) -> ModelInfo | None:
        name = attrs.get("model")
        if not name:
            return None
        raw = attrs.get("modelParameters")
        raw = parse_json(raw)
        params = {k: parse_json(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        return ModelInfo(name=str(name), params=to_jsonable({k: v for k, v in params.items() if v is not None}))

    def _reply(self, attrs: Attrs, mc: MappedCall, output: Any) -> Any:
        """A generation's response, and its compared output: the reply (see :mod:`quiver._importers.reply`)."""
        details = parse_json(attrs.get("usageDetails"))
        usage = {_USAGE.get(str(k), str(k)): int(v) for k, v in (details or {}).items()
                 if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)} \
            if isinstance(details, Mapping) else {}
        reply = reply_of(output) if output is not None else None
        if reply is None:
            mc.response = unread_reply(output, usage, None)
            return output
        mc.response = LLMResponse(content=reply.text, usage={**reply.usage, **usage}, finish_reason=reply.finish_reason)
        return compared_reply(reply, output, attrs, ("output",))

    def _tool(self, span: SourceSpan, meta: Mapping[str, Any], given: Any, output: Any) -> ToolStep:
        name = next((meta[k] for k in ("gen_ai.tool.name", "tool.name", "ai.toolCall.name") if meta.get(k)), span.name)
        if isinstance(given, dict):
            args = given
        else:
            raw = next((meta[k] for k in ("tool.parameters", "gen_ai.tool.call.arguments", "tool_arguments",
                                          "ai.toolCall.args") if meta.get(k) is not None), None)
            parsed = parse_json(raw)
            fallback = {} if given is NOTHING or given is None else {"input": given}
            args = parsed if isinstance(parsed, dict) else fallback
        response = to_jsonable(output)
        return ToolStep(name=str(name), args=to_jsonable(args), response=response, response_hash=content_hash(response))

    # ----------------------------------------------------------------- trace level

    def trace_fields(self, root: SourceSpan) -> tuple[dict[str, Any], Counter[str], Counter[str]]:
        if not root.trace_info:
            return {}, Counter(), Counter()
        attrs = Attrs(root.trace_info)
        extra: dict[str, Any] = {}
        for key, field in (("id", "trace_id"), ("name", "pipeline")):
            if attrs.get(key):
                extra[field] = str(attrs.data[key])
        for key, field in (("input", "inputs"), ("output", "output")):
            if attrs.get(key) is not None:
                extra[field] = parse_json(attrs.data[key])
        attrs.get("observations")
        outcome = outcome_from_scores(attrs.get("scores"))
        if outcome is not None:
            extra["outcome"] = outcome
        rest = attrs.rest()
        extra["tags"] = {"langfuse": rest} if rest else {}
        return extra, Counter(f"trace.{k}" for k in attrs.used), Counter(f"trace.{k}" for k in rest)

    def attribute(self, span: SourceSpan, name: str) -> Any:
        for source in (span.attributes, _attributes(span), span.trace_info or {}):
            if source.get(name) not in (None, ""):
                return source[name]
        return None

    def session(self, span: SourceSpan) -> Any:
        return (span.trace_info or {}).get("sessionId") or _attributes(span).get("session.id")

    def metadata(self, span: SourceSpan, key: str) -> Any:
        for raw in ((span.trace_info or {}).get("metadata"), span.attributes.get("metadata")):
            meta = parse_json(raw)
            if isinstance(meta, Mapping) and meta.get(key) is not None:
                return meta[key]
        return None


def _str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


