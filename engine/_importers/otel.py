"""Importing OpenTelemetry spans: the span envelopes, and the GenAI conventions (``otel-genai``).

**Envelopes.** A span file is JSON or JSON Lines holding any of: OTLP/JSON export
requests (``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans"}]}]}``),
spans as the OTel Python SDK writes them (``span.to_json()``: ``context.trace_id``,
``parent_id``, ISO times), as the JS SDK holds them (``spanContext``, ``parentSpanId``,
``[seconds, nanos]`` times; or without ids, as the Vercel AI SDK's test tracer writes
them: ``name``, ``attributes``, ``events``), as Arize Phoenix exports them
(``context.span_id``, ``span_kind``, ``attributes.*``), lists of these,
``{"data": [...]}`` or ``{"spans": [...]}`` wrappers, objects of named span lists
(``{"ai.generateText": [spans...], ...}``: their spans, list by list; an object of
named lists whose items are not spans is refused), or a bare attribute mapping (a span
without ids: a single-call trace). Nested attribute mappings are flattened to dotted keys. A span
with status ERROR becomes a call error (type and message from its ``exception``
event); other events, links and a non-internal span kind are kept in the call's
``tags["otel.span"]``; resource attributes and the instrumentation scope go to the
trace's ``tags["import"]``.

**GenAI mapping** (OTel GenAI semantic conventions, and the Vercel AI SDK's ``ai.*``
spans, which import through this format):

* kind: ``gen_ai.operation.name`` ``chat`` / ``text_completion`` /
  ``generate_content`` -> llm, ``execute_tool`` -> tool, anything else -> transform
  (a span with ``gen_ai.request.model`` and no operation -> llm); Vercel
  ``ai.operationId`` ``*.doGenerate`` / ``*.doStream`` -> llm, ``ai.toolCall`` -> tool,
  the wrapping ``ai.generateText`` / ``ai.streamText`` / ``ai.embed`` ... -> transform
  (as OpenInference's own Vercel mapping does);
* model: ``gen_ai.request.model`` or ``ai.model.id`` (name), ``gen_ai.response.model``
  or ``ai.response.model`` (version), ``gen_ai.request.*`` and ``ai.settings.*``
  (params; ``maxRetries`` is not a sampling parameter and stays in tags);
* prompt: ``gen_ai.system_instructions`` + ``gen_ai.input.messages`` (as attributes or
  in ``gen_ai.client.inference.operation.details`` span events), the older
  ``gen_ai.prompt`` / ``gen_ai.prompt.N.*``, Vercel ``ai.prompt.messages`` or
  ``ai.prompt``, else an LLM span's ``input.value`` / ``input`` when it holds chat
  messages; every spelling of a message is read, the GenAI parts form
  (``{"role", "parts": [{"type": "text" | "tool_call" | "tool_call_response", ...}]}``)
  included;
* output: ``output.value`` / ``output`` when the instrumentation gives one, else
  ``ai.response.object``, ``ai.response.text``, ``ai.response.toolCalls``, the tool
  result, or the output messages (their text when they are text, parsed from JSON
  where it is JSON);
* response: text of ``gen_ai.output.messages`` (or ``gen_ai.completion`` as messages or
  a ``{"text", "finish_reason"}`` reply, ``gen_ai.completion.N.*``, the span events'
  ``gen_ai.output.messages``, ``ai.response.text``), else of the reply the output holds;
  finish reason, token usage as ``prompt_tokens``, ``completion_tokens``,
  ``total_tokens``;
* tool: ``gen_ai.tool.name`` / ``ai.toolCall.name``, arguments from
  ``gen_ai.tool.call.arguments`` / ``ai.toolCall.args`` / the input, response from
  ``gen_ai.tool.call.result`` / ``ai.toolCall.result`` / the output.

Everything else (provider, response ids, timestamps, telemetry metadata, ...) is
kept in ``tags["otel"]`` with its original key.

Grouping (``group_by``) reads the root span: ``session`` is ``session.id`` or
``gen_ai.conversation.id``; ``metadata.KEY`` is KEY of the JSON ``metadata``
attribute, or the attribute ``metadata.KEY`` or ``ai.telemetry.metadata.KEY``;
``attribute.NAME`` is the attribute NAME.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._trace import CallError, LLMResponse, ModelInfo, PromptInfo, ToolStep

from .common import NOTHING, Attrs, ImportProblem, MappedCall, Note, SourceSpan, SpanFormat
from .genai import DETAILS_EVENT, OUTPUT_KEYS, event_value, genai_kind, legacy_messages, vercel_reply, without_model
from .registry import import_format
from .reply import Pairs, Reply, compared_reply, reply_of, unread_reply, usage_of, without_volatile
from .values import messages_in, normalise_messages, parse_json, render_messages, to_ns

__all__ = ["OtelFormat", "flatten", "is_envelope", "response_usage", "span_lists"]

_OTLP_KINDS = {2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_JS_KINDS = {1: "SERVER", 2: "CLIENT", 3: "PRODUCER", 4: "CONSUMER"}
_LLM_OPS = {"chat", "text_completion", "generate_content"}


def flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dotted keys for nested mappings (and lists holding mappings); lists of scalars stay lists."""
    out = {} if out is None else out
    if isinstance(value, Mapping) and (value or not prefix):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        for i, item in enumerate(value):
            flatten(item, f"{prefix}.{i}", out)
    else:
        out[prefix] = value
    return out


def _any_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue``."""
    if not isinstance(value, Mapping):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: _any_value(kv.get("value")) for kv in (value["kvlistValue"] or {}).get("values", [])}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _kv(items: Any) -> dict[str, Any]:
    if isinstance(items, Mapping):
        return flatten(items)
    if not isinstance(items, list):
        return {}
    return {str(kv["key"]): _any_value(kv.get("value")) for kv in items if isinstance(kv, Mapping) and "key" in kv}


def _list(value: Any) -> list[Any]:
    """``value`` when it is a list, else nothing (a span field of the wrong type)."""
    return value if isinstance(value, list) else []


def _hex(value: Any) -> str | None:
    if value is None or value == "":
        return None
    text = str(value)
    text = text[2:] if text.startswith("0x") else text
    return None if set(text) <= {"0"} else text


def _zero(value: Any) -> bool:
    """An id that is given but invalid: all zeros (OTel's invalid span id)."""
    return value not in (None, "") and _hex(value) is None


_WRAPPERS = {"resourceSpans", "scopeSpans", "data", "spans", "observations"}
"""Keys of the exports' own wrappers, which hold lists that are not named span lists."""


def span_lists(value: Mapping[str, Any]) -> bool | None:
    """Whether ``value`` is an object of named span lists (``{"ai.generateText": [spans...], ...}``,
    as a test harness groups spans by operation): True when every value is a list and every item a
    span envelope; False when every value is a list of objects that are not all spans; None when
    ``value`` is not an object of lists at all."""
    if not value or is_envelope(value) or _WRAPPERS & set(value) \
            or not all(isinstance(v, list) for v in value.values()):
        return None
    items = [item for v in value.values() for item in v]
    if not items or not all(isinstance(item, Mapping) for item in items):
        return None
    return all(is_envelope(item) for item in items)


def is_envelope(rec: Mapping[str, Any]) -> bool:
    """Whether ``rec`` is a span envelope (ids, a context, or a name with attributes), not a bare
    attribute mapping."""
    keys = ("spanContext", "context", "spanId", "span_id", "context.span_id", "traceId", "trace_id")
    return any(k in rec for k in keys) or ("name" in rec and "attributes" in rec)


@import_format("otel-genai")
class OtelFormat(SpanFormat):
    """OTel span envelopes, with the GenAI mapping (``otel-genai``)."""

    tag_key = "otel"

    def record(self, value: Mapping[str, Any], where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
        if "resourceSpans" in value:
            return self._otlp(value, where)
        for key in ("data", "spans"):
            if isinstance(value.get(key), list) and not is_envelope(value):
                return self.spans(value[key], f"{where}: {key}", problems)
        if is_envelope(value):
            return [self._span(value, where)]
        if span_lists(value):  # {"ai.generateText": [spans...], ...}: the spans, list by list
            return [s for key, items in value.items() for s in self.spans(items, f"{where}: {key}", problems)]
        attributes = flatten(value)
        return [SourceSpan(None, None, None, self.default_name(attributes), self.kind_of(attributes),
                           None, None, attributes, where)]

    def _otlp(self, doc: Mapping[str, Any], where: str) -> list[SourceSpan]:
        out = []
        for r, rs in enumerate(doc.get("resourceSpans") or []):
            resource = _kv((rs.get("resource") or {}).get("attributes"))
            scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []
            for s, ss in enumerate(scopes):
                scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
                label = " ".join(str(scope[k]) for k in ("name", "version") if scope.get(k)) or None
                for i, rec in enumerate(ss.get("spans") or []):
                    span = self._span(rec, f"{where}: resourceSpans[{r}].scopeSpans[{s}].spans[{i}]", otlp=True)
                    span.resource, span.scope = resource, label
                    out.append(span)
        return out

    def _span(self, rec: Mapping[str, Any], where: str, *, otlp: bool = False) -> SourceSpan:
        ctx = rec.get("spanContext") or rec.get("context") or {}
        ctx = ctx if isinstance(ctx, Mapping) else {}
        parent_ctx = rec.get("parentSpanContext") or {}
        attributes = _kv(rec.get("attributes"))
        # Phoenix's span dataframe: one column per attribute, lists of messages and documents unflattened
        attributes.update(flatten({k[len("attributes."):]: v for k, v in rec.items() if k.startswith("attributes.")}))
        if rec.get("span_kind") and "openinference.span.kind" not in attributes:
            attributes["openinference.span.kind"] = rec["span_kind"]
        envelope, error = self._envelope(rec, otlp)
        resource = rec.get("resource") if isinstance(rec.get("resource"), Mapping) else {}
        scope = rec.get("instrumentationScope") or rec.get("instrumentationLibrary") or {}
        own = (ctx.get("spanId") or ctx.get("span_id") or rec.get("spanId") or rec.get("span_id")
               or rec.get("context.span_id"))
        parent = (rec.get("parentSpanId") or rec.get("parent_id") or rec.get("parentId") or rec.get("parent_span_id")
                  or parent_ctx.get("spanId"))
        trace = (ctx.get("traceId") or ctx.get("trace_id") or rec.get("traceId") or rec.get("trace_id")
                 or rec.get("context.trace_id"))
        return SourceSpan(
            span_id=_hex(own), trace_id=_hex(trace), no_ids=own is None and trace is None and parent is None,
            parent_id=_hex(parent), zero_id=_zero(own), zero_parent=_zero(parent),
            name=without_model(str(rec.get("name") or self.default_name(attributes)), attributes),
            kind_label=self.kind_of(attributes),
            start_ns=to_ns(rec.get("startTimeUnixNano", rec.get("startTime", rec.get("start_time")))),
            end_ns=to_ns(rec.get("endTimeUnixNano", rec.get("endTime", rec.get("end_time")))),
            attributes=attributes, where=where, envelope=envelope, error=error,
            resource=_kv(resource.get("attributes")) if resource else {},
            scope=" ".join(str(scope[k]) for k in ("name", "version") if scope.get(k)) or None,
        )

    def _envelope(self, rec: Mapping[str, Any], otlp: bool) -> tuple[dict[str, Any], CallError | None]:
        envelope: dict[str, Any] = {}
        kind = rec.get("kind")
        if isinstance(kind, int):
            kind = (_OTLP_KINDS if otlp or "spanId" in rec else _JS_KINDS).get(kind)
        elif isinstance(kind, str):
            kind = kind.rsplit(".", 1)[-1].replace("SPAN_KIND_", "").upper()
            kind = None if kind in ("INTERNAL", "UNSPECIFIED") else kind
        if kind:
            envelope["kind"] = kind
        raw_status = rec.get("status")
        status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
        code = status.get("code", status.get("status_code", rec.get("status_code")))
        message = status.get("message", status.get("description", rec.get("status_message")))
        events = [e for e in _list(rec.get("events")) if isinstance(e, Mapping)]
        error = None
        if code in (2, "ERROR", "STATUS_CODE_ERROR"):
            error, events = _error(events, message)
        elif message:
            envelope["status"] = {"code": code, "message": message}
        if events:
            envelope["events"] = [{**e, "attributes": _kv(e.get("attributes"))} for e in events]
        links = [link for link in _list(rec.get("links")) if link]
        if links:
            envelope["links"] = links
        return envelope, error

    def source_kind(self, span: SourceSpan) -> str:
        kind = genai_kind(Attrs(span.attributes))
        if kind != "transform":
            return "retriever" if kind == "retrieval" else kind
        label = str(self.kind_of(span.attributes)).lower()
        if label and any(w in label for w in ("agent", "chain", "workflow", "task", "span", "generatetext",
                                                 "streamtext", "generateobject", "streamobject")):
            return "chain"
        return "other"

    def session(self, span: SourceSpan) -> Any:
        return next((span.attributes[k] for k in ("session.id", "gen_ai.conversation.id", "langfuse.session.id",
                                                  "langfuse.trace.session_id") if span.attributes.get(k)), None)

    def metadata(self, span: SourceSpan, key: str) -> Any:
        meta = parse_json(span.attributes.get("metadata"))
        if isinstance(meta, Mapping) and meta.get(key) is not None:
            return meta[key]
        for name in (f"metadata.{key}", f"ai.telemetry.metadata.{key}"):
            if span.attributes.get(name) is not None:
                return span.attributes[name]
        return None

    # ----------------------------------------------------------------- naming and kinds

    def default_name(self, attributes: Mapping[str, Any]) -> str:
        """A span name for a span that has none: the operation, and the tool's name for a tool call
        (never the model: the model is the call's ``model``)."""
        op = (attributes.get("gen_ai.operation.name") or attributes.get("ai.operationId")
              or attributes.get("langfuse.observation.type") or "span")
        return f"{op} {attributes.get('gen_ai.tool.name') or ''}".strip()

    def kind_of(self, attributes: Mapping[str, Any]) -> str:
        """The format's own kind label of a span."""
        return str(attributes.get("ai.operationId") or attributes.get("gen_ai.operation.name")
                   or attributes.get("langfuse.observation.type") or attributes.get("traceloop.span.kind")
                   or attributes.get("llm.request.type") or "")

    # ----------------------------------------------------------------- the GenAI mapping

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        mc = MappedCall(kind=genai_kind(attrs), error=span.error)
        mc.model = self._model(attrs)
        messages = self._input_messages(span, attrs, note)
        if messages:
            mc.prompt = PromptInfo(assembled=render_messages(messages))
        mc.input = self._input(attrs, messages)
        out_messages = self._output_messages(span, attrs, note)
        output = self._output(attrs)
        if mc.kind == "llm" or out_messages:
            output = self._reply(attrs, mc, out_messages, output)
        output = None if output is NOTHING else output
        mc.output = without_volatile(output)
        if mc.output is not output:  # the output as written stays in tags
            attrs.used.difference_update(OUTPUT_KEYS)
        if mc.kind == "tool":
            mc.tool = self._tool(span, attrs, mc.output)
        return mc

    def _model(self, attrs: Attrs) -> ModelInfo | None:
        name = attrs.first("gen_ai.request.model", "ai.model.id", "langfuse.observation.model.name",
                           "llm.request.model")
        version = attrs.first("gen_ai.response.model", "ai.response.model", "llm.response.model")
        params: dict[str, Any] = {}
        for key in list(attrs.data):
            for prefix in ("gen_ai.request.", "ai.settings.", "llm.request."):
                short = key[len(prefix):]
                if key.startswith(prefix) and short not in ("model", "maxRetries", "type") \
                        and not short.startswith("headers"):
                    params[short] = attrs.get(key)
        raw = parse_json(attrs.peek("langfuse.observation.model.parameters"))
        if isinstance(raw, Mapping):
            attrs.get("langfuse.observation.model.parameters")
            params.update({str(k): parse_json(v) for k, v in raw.items() if v is not None})
        name = name or version
        if name is None:
            return None
        return ModelInfo(name=str(name), version=str(version) if version else None, params=to_jsonable(params))

    def _input_messages(self, span: SourceSpan, attrs: Attrs, note: Note) -> Pairs | None:
        for key in ("gen_ai.input.messages", "ai.prompt.messages", "gen_ai.prompt", "ai.prompt"):
            if attrs.peek(key) is not None and not isinstance(attrs.peek(key), Mapping):
                messages = normalise_messages(attrs.peek(key))
                if messages is None:
                    note(f"{key} holds no chat messages this importer understands; kept in tags")
                    return None
                attrs.get(key)
                return self._system(attrs) + messages
        legacy = legacy_messages(attrs, "gen_ai.prompt", note)
        if legacy is not None:
            return legacy
        event = event_value(span, "gen_ai.content.prompt", "gen_ai.prompt")
        if event is not None:
            return normalise_messages(event)
        event = event_value(span, DETAILS_EVENT, "gen_ai.input.messages")
        if event is not None:
            system = event_value(span, DETAILS_EVENT, "gen_ai.system_instructions")
            messages = normalise_messages(event)
            return None if messages is None else _system_pairs(system) + messages
        if genai_kind(attrs) == "llm" and attrs.peek("langfuse.observation.input") is not None:
            return normalise_messages(parse_json(attrs.peek("langfuse.observation.input")))
        if genai_kind(attrs) == "llm":  # messages as an LLM span's input (OpenInference's input.value)
            return messages_in(attrs.peek("input.value", attrs.peek("input")))
        return None

    def _system(self, attrs: Attrs) -> Pairs:
        return _system_pairs(attrs.get("gen_ai.system_instructions"))

    def _input(self, attrs: Attrs, messages: Any) -> Any:
        raw = attrs.first("input.value", "input", "langfuse.observation.input", "gen_ai.input.messages",
                          "ai.prompt.messages", "gen_ai.prompt", "ai.prompt", "gen_ai.tool.call.arguments",
                          "ai.toolCall.args", "ai.toolCall.input", "ai.values", "ai.value")
        if raw is not None:
            return parse_json(raw)
        if messages:
            return [{"role": role, "parts": parts} for role, parts in messages]
        return NOTHING

    def _output_messages(self, span: SourceSpan, attrs: Attrs, note: Note) -> Reply | None:
        """The reply the span's output messages hold: ``gen_ai.output.messages``, ``gen_ai.completion``
        (messages, or a reply as :func:`~quiver._importers.reply.reply_of` reads one), the flat
        ``gen_ai.completion.N.*``, or the same in the span's events."""
        for key in ("gen_ai.output.messages", "gen_ai.completion"):
            raw = attrs.peek(key)
            if raw is not None and not isinstance(raw, Mapping):
                reply = _output_reply(parse_json(raw))
                if reply is None:
                    note(f"{key} holds no chat messages this importer understands; kept in tags")
                    return None
                attrs.get(key)
                return reply
        legacy = legacy_messages(attrs, "gen_ai.completion", note)
        if legacy is not None:
            return Reply(legacy) if legacy else None
        for event, key in (("gen_ai.content.completion", "gen_ai.completion"),
                           (DETAILS_EVENT, "gen_ai.output.messages")):
            value = event_value(span, event, key)
            if value is not None:
                return _output_reply(value)
        return None

    def _output(self, attrs: Attrs) -> Any:
        raw = attrs.first(*OUTPUT_KEYS)
        return NOTHING if raw is None else parse_json(raw)

    def _reply(self, attrs: Attrs, mc: MappedCall, written: Reply | None, output: Any) -> Any:
        """The response of an LLM span, and its compared output (see :mod:`quiver._importers.reply`)."""
        reply = written or vercel_reply(attrs)
        if reply is None and output is not NOTHING:
            reply = reply_of(output)
        usage = response_usage(attrs)
        reasons = attrs.first("gen_ai.response.finish_reasons", "ai.response.finishReason",
                              "gen_ai.completion.0.finish_reason", "llm.response.finish_reason")
        reason = reasons[0] if isinstance(reasons, list) and reasons else reasons
        reason = str(reason) if reason not in (None, "", []) else reply.finish_reason if reply else None
        if reply is None:
            mc.response = unread_reply(output, usage, reason)
            return output
        mc.response = LLMResponse(content=reply.text, finish_reason=reason, usage={**reply.usage, **usage})
        return compared_reply(reply, output, attrs, OUTPUT_KEYS)

    def _tool(self, span: SourceSpan, attrs: Attrs, output: Any) -> ToolStep:
        name = attrs.first("gen_ai.tool.name", "ai.toolCall.name") or span.name
        raw = attrs.first("gen_ai.tool.call.arguments", "ai.toolCall.args", "ai.toolCall.input", "input.value", "input",
                          "langfuse.observation.input")
        args = parse_json(raw)
        args = {} if args is None else args if isinstance(args, dict) else {"input": args}
        response = to_jsonable(output)
        return ToolStep(name=str(name), args=to_jsonable(args), response=response, response_hash=content_hash(response))


def _assistant(value: Any) -> Any:
    """Output messages without a role are the assistant's."""
    if isinstance(value, list):
        return [{"role": "assistant", **m} if isinstance(m, Mapping) and "role" not in m else m for m in value]
    return value


def _output_reply(value: Any) -> Reply | None:
    """The reply in output messages (any spelling :func:`~quiver._importers.values.normalise_messages`
    reads, the OTel GenAI parts form included, with the last message's ``finish_reason``), or in a
    reply object :func:`~quiver._importers.reply.reply_of` reads (``{"text", "finish_reason"}``)."""
    messages = normalise_messages(_assistant(value))
    if messages:
        last = value[-1] if isinstance(value, list) and value and isinstance(value[-1], Mapping) else {}
        reason = last.get("finish_reason")
        return Reply(messages, str(reason) if isinstance(reason, str) and reason else None)
    return reply_of(value) if isinstance(value, Mapping) else None


def _system_pairs(raw: Any) -> Pairs:
    """``gen_ai.system_instructions`` (a text, or a list of parts) as a system message."""
    if raw is None:
        return []
    parsed = parse_json(raw)
    parts = parsed if isinstance(parsed, list) else [parsed]
    return [("system", [dict(p) if isinstance(p, Mapping) else {"type": "text", "content": str(p)} for p in parts])]


def response_usage(attrs: Attrs) -> dict[str, int]:
    """Token usage under the OpenAI names, from the GenAI, Vercel, OpenInference, OpenLLMetry and
    Langfuse spellings."""
    names = {
        "prompt_tokens": ("gen_ai.usage.input_tokens", "ai.usage.promptTokens", "ai.usage.inputTokens",
                          "llm.token_count.prompt", "gen_ai.usage.prompt_tokens", "llm.usage.prompt_tokens"),
        "completion_tokens": ("gen_ai.usage.output_tokens", "ai.usage.completionTokens", "ai.usage.outputTokens",
                              "llm.token_count.completion", "gen_ai.usage.completion_tokens",
                              "llm.usage.completion_tokens"),
        "total_tokens": ("ai.usage.totalTokens", "llm.token_count.total", "gen_ai.usage.total_tokens",
                         "llm.usage.total_tokens"),
    }
    usage = {}
    for name, keys in names.items():
        value = attrs.first(*keys)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            usage[name] = int(value)
    details = attrs.peek("langfuse.observation.usage_details")
    if details is not None and usage_of(details):
        attrs.get("langfuse.observation.usage_details")
        usage = {**usage_of(details), **usage}
    return usage


def _error(events: list[Mapping[str, Any]], message: Any) -> tuple[CallError, list[Mapping[str, Any]]]:
    for i, event in enumerate(events):
        if event.get("name") == "exception":
            attributes = _kv(event.get("attributes"))
            error = CallError(type=str(attributes.get("exception.type") or "Error"),
                              message=str(attributes.get("exception.message") or message or ""))
            rest = {k: v for k, v in attributes.items() if k not in ("exception.type", "exception.message")}
            if rest:
                kept = [*events[:i], {**event, "attributes": rest}, *events[i + 1:]]
            else:
                kept = events[:i] + events[i + 1:]
            return error, kept
    return CallError(type="Error", message=str(message or "")), events


