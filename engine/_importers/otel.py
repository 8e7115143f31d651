"""Importing OpenTelemetry spans: the span envelopes, and the GenAI conventions (``otel-genai``).

**Envelopes.** A span file is JSON or JSON Lines holding any of: OTLP/JSON export
requests (``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans"}]}]}``),
spans as the OTel Python SDK writes them (``span.to_json()``: ``context.trace_id``,
``parent_id``, ISO times), as the JS SDK holds them (``spanContext``, ``parentSpanId``,
``[seconds, nanos]`` times), as Arize Phoenix exports them (``context.span_id``,
``span_kind``, ``attributes.*``), lists of these, ``{"data": [...]}`` or
``{"spans": [...]}`` wrappers, or a bare attribute mapping (a span without ids: a
single-call trace). Nested attribute mappings are flattened to dotted keys. A span
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
* prompt: ``gen_ai.system_instructions`` + ``gen_ai.input.messages``, the older
  ``gen_ai.prompt.N.*``, Vercel ``ai.prompt.messages`` or ``ai.prompt``;
* output: ``output.value`` / ``output`` when the instrumentation gives one, else
  ``ai.response.object``, ``ai.response.text``, ``ai.response.toolCalls``, the tool
  result, or the output messages (their text when they are text, parsed from JSON
  where it is JSON);
* response: text of ``gen_ai.output.messages`` (or ``gen_ai.completion.N.*``,
  ``ai.response.text``), finish reason, token usage as ``prompt_tokens``,
  ``completion_tokens``, ``total_tokens``;
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

from quiver._canonical import canonical_json, content_hash, to_jsonable
from quiver._trace import CallError, CallKind, LLMResponse, ModelInfo, PromptInfo, ToolStep

from .common import NOTHING, Attrs, ImportProblem, MappedCall, Note, SourceSpan, SpanFormat, unflatten
from .registry import import_format
from .values import messages_text, normalise_messages, parse_json, render_messages, to_ns

__all__ = ["OtelFormat", "flatten", "response_usage"]

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


def _is_envelope(rec: Mapping[str, Any]) -> bool:
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
            if isinstance(value.get(key), list) and not _is_envelope(value):
                return self.spans(value[key], f"{where}: {key}", problems)
        if _is_envelope(value):
            return [self._span(value, where)]
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
        attributes.update({k[len("attributes."):]: v for k, v in rec.items() if k.startswith("attributes.")})
        if rec.get("span_kind") and "openinference.span.kind" not in attributes:
            attributes["openinference.span.kind"] = rec["span_kind"]
        envelope, error = self._envelope(rec, otlp)
        resource = rec.get("resource") if isinstance(rec.get("resource"), Mapping) else {}
        scope = rec.get("instrumentationScope") or rec.get("instrumentationLibrary") or {}
        return SourceSpan(
            span_id=_hex(ctx.get("spanId") or ctx.get("span_id") or rec.get("spanId") or rec.get("span_id")
                         or rec.get("context.span_id")),
            trace_id=_hex(ctx.get("traceId") or ctx.get("trace_id") or rec.get("traceId") or rec.get("trace_id")
                          or rec.get("context.trace_id")),
            parent_id=_hex(rec.get("parentSpanId") or rec.get("parent_id") or rec.get("parentId")
                           or rec.get("parent_span_id") or parent_ctx.get("spanId")),
            name=str(rec.get("name") or self.default_name(attributes)),
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

    def session(self, span: SourceSpan) -> Any:
        return span.attributes.get("session.id") or span.attributes.get("gen_ai.conversation.id")

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
        """A span name for a span that has none: the semantic conventions' ``{operation} {target}``."""
        op = attributes.get("gen_ai.operation.name") or attributes.get("ai.operationId") or "span"
        target = attributes.get("gen_ai.request.model") or attributes.get("gen_ai.tool.name") or ""
        return f"{op} {target}".strip()

    def kind_of(self, attributes: Mapping[str, Any]) -> str:
        """The format's own kind label of a span."""
        return str(attributes.get("ai.operationId") or attributes.get("gen_ai.operation.name") or "")

    # ----------------------------------------------------------------- the GenAI mapping

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        mc = MappedCall(kind=self._kind(attrs), error=span.error)
        mc.model = self._model(attrs)
        messages = self._input_messages(attrs, note)
        if messages:
            mc.prompt = PromptInfo(assembled=render_messages(messages))
        mc.input = self._input(attrs, messages)
        out_messages = self._output_messages(attrs, note)
        mc.output = self._output(attrs, out_messages)
        if mc.kind == "llm" or out_messages:
            mc.response = self._response(attrs, out_messages, mc.output)
        if mc.kind == "tool":
            mc.tool = self._tool(span, attrs, mc.output)
        return mc

    def _kind(self, attrs: Attrs) -> CallKind:
        vercel = attrs.get("ai.operationId")
        if isinstance(vercel, str):
            if vercel.endswith((".doGenerate", ".doStream")):
                return "llm"
            return "tool" if vercel == "ai.toolCall" else "transform"
        op = attrs.get("gen_ai.operation.name")
        op = op if isinstance(op, str) else None
        if op in _LLM_OPS or (op is None and "gen_ai.request.model" in attrs):
            return "llm"
        if op == "execute_tool" or (op is None and "gen_ai.tool.name" in attrs):
            return "tool"
        return "transform"

    def _model(self, attrs: Attrs) -> ModelInfo | None:
        name = attrs.first("gen_ai.request.model", "ai.model.id")
        version = attrs.first("gen_ai.response.model", "ai.response.model")
        params: dict[str, Any] = {}
        for key in list(attrs.data):
            for prefix in ("gen_ai.request.", "ai.settings."):
                short = key[len(prefix):]
                if key.startswith(prefix) and short not in ("model", "maxRetries") and not short.startswith("headers"):
                    params[short] = attrs.get(key)
        name = name or version
        if name is None:
            return None
        return ModelInfo(name=str(name), version=str(version) if version else None, params=to_jsonable(params))

    def _input_messages(self, attrs: Attrs, note: Note) -> list[tuple[str, list[dict[str, Any]]]] | None:
        for key in ("gen_ai.input.messages", "ai.prompt.messages", "ai.prompt"):
            if attrs.peek(key) is not None:
                messages = normalise_messages(attrs.peek(key))
                if messages is None:
                    note(f"{key} holds no chat messages this importer understands; kept in tags")
                    return None
                attrs.get(key)
                return self._system(attrs) + messages
        if not any(k.startswith("gen_ai.prompt.") for k in attrs.data):
            return None
        flat = attrs.prefix("gen_ai.prompt")
        legacy = unflatten(flat)
        messages = normalise_messages(legacy) if isinstance(legacy, list) else None
        if messages is None:
            attrs.used.difference_update(f"gen_ai.prompt.{k}" for k in flat)
            note("gen_ai.prompt.* could not be read as chat messages; kept in tags")
        return messages

    def _system(self, attrs: Attrs) -> list[tuple[str, list[dict[str, Any]]]]:
        raw = attrs.get("gen_ai.system_instructions")
        if raw is None:
            return []
        parsed = parse_json(raw)
        parts = parsed if isinstance(parsed, list) else [parsed]
        return [("system", [dict(p) if isinstance(p, Mapping) else {"type": "text", "content": str(p)} for p in parts])]

    def _input(self, attrs: Attrs, messages: Any) -> Any:
        raw = attrs.first("input.value", "input", "gen_ai.input.messages", "ai.prompt.messages", "ai.prompt",
                          "gen_ai.tool.call.arguments", "ai.toolCall.args", "ai.toolCall.input", "ai.values",
                          "ai.value")
        if raw is not None:
            return parse_json(raw)
        if messages:
            return [{"role": role, "parts": parts} for role, parts in messages]
        return NOTHING

    def _output_messages(self, attrs: Attrs, note: Note) -> list[tuple[str, list[dict[str, Any]]]] | None:
        raw = attrs.peek("gen_ai.output.messages")
        if raw is not None:
            messages = normalise_messages(raw)
            if messages is None:
                note("gen_ai.output.messages holds no chat messages this importer understands; kept in tags")
                return None
            attrs.get("gen_ai.output.messages")
            return messages
        if not any(k.startswith("gen_ai.completion.") for k in attrs.data):
            return None
        flat = attrs.prefix("gen_ai.completion")
        legacy = unflatten(flat)
        messages = normalise_messages([{"role": "assistant", **m} if isinstance(m, Mapping) and "role" not in m else m
                                       for m in legacy]) if isinstance(legacy, list) else None
        if messages is None:
            attrs.used.difference_update(f"gen_ai.completion.{k}" for k in flat)
            note("gen_ai.completion.* could not be read as chat messages; kept in tags")
        return messages

    def _output(self, attrs: Attrs, messages: list[tuple[str, list[dict[str, Any]]]] | None) -> Any:
        raw = attrs.first("output.value", "output", "ai.response.object", "ai.response.text", "ai.response.toolCalls",
                          "gen_ai.tool.call.result", "ai.toolCall.result", "ai.toolCall.output",
                          "ai.embedding", "ai.embeddings")
        if raw is not None:
            return parse_json(raw)
        if messages:
            if all(p.get("type") == "text" for p in messages[-1][1]):
                return parse_json(messages_text(messages))
            return [{"role": role, "parts": parts} for role, parts in messages]
        return None

    def _response(self, attrs: Attrs, messages: Any, output: Any) -> LLMResponse | None:
        if messages:
            content = messages_text(messages)
        else:
            text = attrs.first("ai.response.text", "ai.response.object")
            if text is None:
                return None
            content = text if isinstance(text, str) else canonical_json(text)
        reasons = attrs.get("gen_ai.response.finish_reasons")
        reason = reasons[0] if isinstance(reasons, list) and reasons else None
        if reason is None or attrs.peek("ai.response.finishReason") == reason:
            key = "ai.response.finishReason"
            reason = attrs.first(key) if reason is None else attrs.get(key)
        return LLMResponse(content=content, finish_reason=str(reason) if reason is not None else None,
                           usage=response_usage(attrs))

    def _tool(self, span: SourceSpan, attrs: Attrs, output: Any) -> ToolStep:
        name = attrs.first("gen_ai.tool.name", "ai.toolCall.name") or span.name
        raw = attrs.first("gen_ai.tool.call.arguments", "ai.toolCall.args", "ai.toolCall.input", "input.value", "input")
        args = parse_json(raw)
        args = {} if args is None else args if isinstance(args, dict) else {"input": args}
        response = to_jsonable(output)
        return ToolStep(name=str(name), args=to_jsonable(args), response=response, response_hash=content_hash(response))


def response_usage(attrs: Attrs) -> dict[str, int]:
    """Token usage under the OpenAI names, from the GenAI, Vercel and OpenInference spellings."""
    names = {
        "prompt_tokens": ("gen_ai.usage.input_tokens", "ai.usage.promptTokens", "ai.usage.inputTokens",
                          "llm.token_count.prompt", "gen_ai.usage.prompt_tokens"),
        "completion_tokens": ("gen_ai.usage.output_tokens", "ai.usage.completionTokens", "ai.usage.outputTokens",
                              "llm.token_count.completion", "gen_ai.usage.completion_tokens"),
        "total_tokens": ("ai.usage.totalTokens", "llm.token_count.total", "gen_ai.usage.total_tokens"),
    }
    usage = {}
    for name, keys in names.items():
        value = attrs.first(*keys)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            usage[name] = int(value)
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


