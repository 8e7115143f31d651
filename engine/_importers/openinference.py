"""OpenInference spans (Arize Phoenix and the OpenInference instrumentations): import and export.

**Import** (``quiver import openinference``; span envelopes as in
:mod:`quiver._importers`). One span, one node call:

* kind from ``openinference.span.kind``: LLM -> llm, RETRIEVER and RERANKER ->
  retrieval, TOOL -> tool, CHAIN, AGENT, EMBEDDING and the rest -> transform;
* ``input.value`` / ``output.value``: the call's input (hashed) and output, parsed
  as JSON unless ``*.mime_type`` is ``text/plain``;
* model: ``llm.model_name`` (or ``embedding.model_name``), params: the JSON object
  ``llm.invocation_parameters`` as it stands;
* prompt: ``llm.input_messages.N.message.*`` (role, content, ``contents.M``,
  ``tool_calls.M``, ``tool_call_id``) as assembled messages (see
  :mod:`quiver._importers`), else an LLM span's ``input.value`` when it holds chat
  messages (the OTel GenAI parts form included); ``llm.prompt_template.template``
  hashed as the template hash;
* response: ``llm.output_messages.N.message.*`` (the last message's text) and
  ``llm.token_count.{prompt,completion,total}``; without ``output.value`` the
  output messages are the output;
* retrieval: ``retrieval.documents.N.document.{id,content,score,metadata}`` (and
  ``reranker.output_documents``), each content hashed, ranked by position; without
  ``output.value`` the documents are the output, with one their texts and metadata
  stay in tags;
* tool: ``tool.name`` (else the span name), arguments from ``input.value`` when it
  is an object, else ``tool.parameters``; the response is the output.

Everything else (``llm.provider``, ``llm.system``, ``session.id``, ``metadata``,
tool descriptions, ...) is kept in ``tags["otel"]`` under its original key.

**Export** (:func:`export_openinference`, ``quiver export openinference``): a trace
becomes one CHAIN span named after the pipeline (the trace: ``input.value`` = its
inputs, ``output.value`` = its output), with one child span per node call (the
source call ``c0`` is carried by the trace span's input) nested as the call paths
nest. Each call span carries what OpenInference has attributes for (kind, output,
model name and invocation parameters, input and output messages, token counts,
retrieved document ids and scores, tool name and arguments as ``tool.parameters``)
and ``quiver.*`` attributes for the rest: ``quiver.call_id``, ``node``, ``kind``,
``occurrence``, ``call_path``, ``parents`` (JSON), ``iteration``, ``loop``,
``input_hash``, ``decision`` (JSON), ``tags`` (JSON), ``model.version``, ``prompt``
(template id, hash, fragments), ``response`` (finish reason, logprobs, attempts,
other usage), ``tool.response`` (when it is not the output), ``retrieval.count`` (for
an empty set); a document's content hash and rank ride in its ``document.metadata``.
The trace span carries ``quiver.trace_id``, ``run_id``, ``pipeline``, ``input_id``,
``repeat``, ``status``, ``error``, ``trace.tags`` and ``trace.outcome``. Importing an export gives the
traces back: every field of every call and trace is equal, except that the trace's
``tags["import"]`` records the import. Ids are derived from the trace ids (same
traces, same spans); times start at the run id's timestamp (``20261130T033355Z-...``)
or at 2024-01-01T00:00:00Z.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._outdir import make_folder, open_output
from quiver._trace import CallError, CallKind, LLMResponse, ModelInfo, NodeCall, PromptInfo, ToolStep, Trace

from .common import NOTHING, Attrs, MappedCall, Note, SourceSpan, unflatten
from .frameworks import arrange
from .otel import OtelFormat, response_usage
from .registry import import_format
from .reply import Pairs, Reply, compared_reply, reply_of, reply_output, unread_reply, without_volatile
from .values import (
    NestedTooDeep,
    documents,
    iso_from_ns,
    loads,
    messages_in,
    normalise_messages,
    parse_json,
    render_messages,
    to_ns,
)

__all__ = ["OpenInferenceFormat", "export_openinference", "write_openinference", "to_otlp"]

_IMPORT_KINDS: dict[str, CallKind] = {"LLM": "llm", "RETRIEVER": "retrieval", "RERANKER": "retrieval", "TOOL": "tool"}
_SOURCE_KINDS = {"LLM": "llm", "TOOL": "tool", "RETRIEVER": "retriever", "RERANKER": "retriever", "CHAIN": "chain",
                 "AGENT": "chain"}
_EXPORT_KINDS = {"llm": "LLM", "retrieval": "RETRIEVER", "tool": "TOOL"}
_DEFAULT_EPOCH_NS = 1_704_067_200 * 1_000_000_000  # 2024-01-01T00:00:00Z


@import_format("openinference")
class OpenInferenceFormat(OtelFormat):
    """OpenInference attributes on OTel span envelopes."""

    def default_name(self, attributes: Mapping[str, Any]) -> str:
        kind = self.kind_of(attributes)
        if kind.upper() == "TOOL" and attributes.get("tool.name"):
            return str(attributes["tool.name"])
        return kind.lower() or "span"

    def kind_of(self, attributes: Mapping[str, Any]) -> str:
        return str(attributes.get("openinference.span.kind") or "")

    def source_kind(self, span: SourceSpan) -> str:
        label = self.kind_of(span.attributes).upper()
        return _SOURCE_KINDS.get(label, "other")

    def arrange(self, spans: list[SourceSpan], hints: Mapping[str, Any],
                note: Callable[[SourceSpan, str], None]) -> list[SourceSpan]:
        return arrange(spans, hints, note)

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        label = str(attrs.get("openinference.span.kind") or "").upper()
        mc = MappedCall(kind=_IMPORT_KINDS.get(label, "transform"), error=span.error)
        mc.input = _value(attrs, "input", note)
        output = _value(attrs, "output", note)
        mc.model = _model(attrs, note)
        messages = _messages(attrs, "llm.input_messages", note) or _prompts(attrs) or (
            messages_in(mc.input) if mc.kind == "llm" and mc.input is not NOTHING else None)
        template = attrs.get("llm.prompt_template.template")
        if messages or template:
            mc.prompt = PromptInfo(assembled=render_messages(messages or []),
                                   template_hash=content_hash(template) if isinstance(template, str) else None)
        out_messages = _messages(attrs, "llm.output_messages", note)
        if mc.kind == "llm" or out_messages:
            output = _llm_reply(span, attrs, mc, out_messages, output)
        prefix = "reranker.output_documents" if label == "RERANKER" else "retrieval.documents"
        raw_docs = unflatten(attrs.prefix(prefix)) if any(k.startswith(prefix + ".") for k in attrs.data) else None
        if isinstance(raw_docs, list):
            mc.retrieval, listing = documents(raw_docs)
            if output is NOTHING:
                output = listing
            else:
                _keep_document_details(attrs, prefix)
        output = None if output is NOTHING else output
        mc.output = without_volatile(output)
        if mc.output is not output:  # the output as written stays in tags
            attrs.used.difference_update({"output.value", "output.mime_type"})
        if mc.kind == "tool" and span.tool is not None:  # a framework node that ran a tool
            name, args, response = span.tool
            response = to_jsonable(response)
            mc.tool = ToolStep(name=name, args=to_jsonable(args if isinstance(args, dict) else {"input": args}),
                               response=response, response_hash=content_hash(response))
        elif mc.kind == "tool":
            mc.tool = _tool(span, attrs, mc.input, mc.output)
        return mc


def _llm_reply(span: SourceSpan, attrs: Attrs, mc: MappedCall, out_messages: Pairs | None, output: Any) -> Any:
    """An LLM span's response, and its compared output (the reply: see :mod:`quiver._importers.reply`).

    A framework node that ran the LLM call (spans folded into it) and a span the engine
    exported keep their own output; the reply is the output of any other LLM span, whose
    ``output.value`` as written then stays in tags."""
    reply = Reply(out_messages) if out_messages else reply_of(output) if output is not NOTHING else None
    usage = response_usage(attrs)
    raw_reason = attrs.get("llm.finish_reason")
    reason = str(raw_reason) if raw_reason not in (None, "") else reply.finish_reason if reply else None
    if reply is None:
        mc.response = unread_reply(output, usage, reason)
        return output
    mc.response = LLMResponse(content=reply.text, usage={**reply.usage, **usage}, finish_reason=reason)
    if span.absorbed or "quiver.call_id" in attrs:
        return reply_output(reply) if output is NOTHING else output
    return compared_reply(reply, output, attrs, ("output.value", "output.mime_type"))


def _keep_document_details(attrs: Attrs, prefix: str) -> None:
    """With an ``output.value`` of its own, a retriever's document texts and metadata stay in tags
    (the retrieval set keeps only their hashes); the content hash and rank the exporter writes do not."""
    for key, value in attrs.data.items():
        if not key.startswith(prefix + "."):
            continue
        if key.endswith(".document.content"):
            attrs.used.discard(key)
        elif key.endswith(".document.metadata"):
            meta = parse_json(value)
            if not (isinstance(meta, Mapping) and set(meta) <= {"content_hash", "rank"}):
                attrs.used.discard(key)


def _value(attrs: Attrs, which: str, note: Note) -> Any:
    raw = attrs.get(f"{which}.value")
    if raw is None:
        return NOTHING
    mime = attrs.get(f"{which}.mime_type")
    if mime == "text/plain" or not isinstance(raw, str):
        return raw
    if mime == "application/json":
        try:
            return loads(raw)
        except NestedTooDeep as exc:
            note(f"{which}.value is {exc}; imported as text")
            return raw
        except ValueError:
            note(f"{which}.value is declared application/json but is not JSON; imported as text")
            return raw
    return parse_json(raw, on_deep=lambda why: note(f"{which}.value is {why}; imported as text"))


def _model(attrs: Attrs, note: Note) -> ModelInfo | None:
    params: dict[str, Any] = {}
    raw = attrs.peek("llm.invocation_parameters")
    if raw is not None:
        parsed = parse_json(raw)
        if isinstance(parsed, dict):
            params = parsed
            attrs.get("llm.invocation_parameters")
        else:
            note("llm.invocation_parameters is not a JSON object; kept in tags")
    name = attrs.first("llm.model_name", "embedding.model_name") or params.get("model")
    if name is None:
        attrs.used.discard("llm.invocation_parameters")
        return None
    return ModelInfo(name=str(name), params=to_jsonable(params))


def _messages(attrs: Attrs, prefix: str, note: Note) -> list[tuple[str, list[dict[str, Any]]]] | None:
    if not any(k.startswith(prefix + ".") for k in attrs.data):
        return None
    flat = attrs.prefix(prefix)
    pairs = normalise_messages(unflatten(flat))
    if pairs is None:
        attrs.used.difference_update(f"{prefix}.{k}" for k in flat)
        note(f"{prefix}.* could not be read as chat messages; kept in tags")
    return pairs


def _prompts(attrs: Attrs) -> Pairs | None:
    """A completion call's prompts (``llm.prompts``: a list of texts, or ``llm.prompts.N.prompt.text``), as user
    messages."""
    keys = [k for k in attrs.data if k == "llm.prompts" or k.startswith("llm.prompts.")]
    if not keys:
        return None
    raw = parse_json(attrs.peek("llm.prompts")) if "llm.prompts" in attrs else unflatten(
        {k[len("llm.prompts."):]: attrs.peek(k) for k in keys})
    texts = [_prompt_text(p) for p in raw] if isinstance(raw, list) else []
    if not texts or not all(isinstance(t, str) for t in texts):
        return None
    attrs.used.update(keys)
    return [("user", [{"type": "text", "content": t}]) for t in texts]


def _prompt_text(value: Any) -> Any:
    prompt = value.get("prompt") if isinstance(value, Mapping) else None
    return prompt.get("text") if isinstance(prompt, Mapping) else value


def _tool(span: SourceSpan, attrs: Attrs, given: Any, output: Any) -> ToolStep:
    name = attrs.first("tool.name") or span.name
    raw = attrs.peek("tool.parameters")
    if isinstance(given, dict):
        args = given
        if raw is not None and parse_json(raw) == given:
            attrs.get("tool.parameters")
    elif isinstance(parse_json(raw), dict):
        args = parse_json(attrs.get("tool.parameters"))
    else:
        args = {} if given is NOTHING or given is None else {"input": given}
    response = to_jsonable(output)
    return ToolStep(name=str(name), args=to_jsonable(args), response=response, response_hash=content_hash(response))




# --------------------------------------------------------------------------- export


def _hex(*parts: str, length: int) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:length]


def _epoch_ns(run_id: str) -> int:
    m = re.match(r"(\d{8}T\d{6}Z)", run_id)
    if m is None:
        return _DEFAULT_EPOCH_NS
    stamp = datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return int(stamp.timestamp()) * 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _put_value(attrs: dict[str, Any], which: str, value: Any) -> None:
    if isinstance(value, str):
        attrs[f"{which}.value"], attrs[f"{which}.mime_type"] = value, "text/plain"
    else:
        attrs[f"{which}.value"] = json.dumps(value, ensure_ascii=False)
        attrs[f"{which}.mime_type"] = "application/json"


def _enclosing(call: NodeCall, by_path: Mapping[str, NodeCall]) -> NodeCall | None:
    segments = call.call_path.split("/")[:-1]
    while segments and re.fullmatch(r"\[\d+\]", segments[-1]):
        segments.pop()
    return by_path.get("/".join(segments)) if segments else None


def _call_attributes(call: NodeCall) -> dict[str, Any]:
    a: dict[str, Any] = {
        "openinference.span.kind": _EXPORT_KINDS.get(call.kind, "CHAIN"),
        "quiver.call_id": call.call_id, "quiver.node": call.node, "quiver.kind": call.kind,
        "quiver.occurrence": call.occurrence, "quiver.call_path": call.call_path,
        "quiver.parents": json.dumps(call.parents),
    }
    optional = {"quiver.iteration": call.iteration, "quiver.loop": call.loop, "quiver.input_hash": call.input_hash,
                "quiver.decision": json.dumps(call.decision) if call.decision else None,
                "quiver.tags": json.dumps(call.tags, ensure_ascii=False) if call.tags else None}
    a.update({k: v for k, v in optional.items() if v is not None})
    if call.output is not None:
        _put_value(a, "output", call.output)
    _llm_attributes(call, a)
    if call.retrieval is not None:
        for doc in call.retrieval:
            p = f"retrieval.documents.{doc.rank}.document"
            a[f"{p}.id"] = doc.doc_id
            if doc.score is not None:
                a[f"{p}.score"] = doc.score
            a[f"{p}.metadata"] = json.dumps({"content_hash": doc.content_hash, "rank": doc.rank})
        if not call.retrieval:
            a["quiver.retrieval.count"] = 0
    if call.tool is not None:
        a["tool.name"] = call.tool.name
        a["tool.parameters"] = json.dumps(call.tool.args, ensure_ascii=False)
        if call.tool.response != call.output:
            a["quiver.tool.response"] = json.dumps(call.tool.response, ensure_ascii=False)
    return a


def _llm_attributes(call: NodeCall, a: dict[str, Any]) -> None:
    if call.model is not None:
        a["llm.model_name"] = call.model.name
        a["llm.invocation_parameters"] = json.dumps(call.model.params, ensure_ascii=False)
        if call.model.version is not None:
            a["quiver.model.version"] = call.model.version
    if call.prompt is not None:
        for i, msg in enumerate(call.prompt.assembled):
            a[f"llm.input_messages.{i}.message.role"] = msg.role
            a[f"llm.input_messages.{i}.message.content"] = msg.content
        a["quiver.prompt"] = json.dumps(call.prompt.model_dump(exclude={"assembled"}))
    if call.response is not None:
        usage = dict(call.response.usage)
        a["llm.output_messages.0.message.role"] = "assistant"
        a["llm.output_messages.0.message.content"] = call.response.content
        for name, key in (("prompt_tokens", "prompt"), ("completion_tokens", "completion"), ("total_tokens", "total")):
            if name in usage:
                a[f"llm.token_count.{key}"] = usage.pop(name)
        rest = call.response.model_dump(exclude={"content", "usage"})
        a["quiver.response"] = json.dumps({**rest, "usage": usage}, ensure_ascii=False)


def _error_fields(error: CallError | None, end_ns: int) -> dict[str, Any]:
    if error is None:
        return {"status": {"status_code": "OK"}, "events": []}
    event = {"name": "exception", "timestamp": iso_from_ns(end_ns),
             "attributes": {"exception.type": error.type, "exception.message": error.message}}
    return {"status": {"status_code": "ERROR", "description": error.message}, "events": [event]}


def _span(name: str, trace_hex: str, span_hex: str, parent_hex: str | None, start_ns: int, end_ns: int,
          attributes: dict[str, Any], error: CallError | None, resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "context": {"trace_id": "0x" + trace_hex, "span_id": "0x" + span_hex, "trace_state": "[]"},
        "kind": "SpanKind.INTERNAL",
        "parent_id": "0x" + parent_hex if parent_hex else None,
        "start_time": iso_from_ns(start_ns), "end_time": iso_from_ns(end_ns),
        **_error_fields(error, end_ns),
        "attributes": attributes, "links": [],
        "resource": {"attributes": resource, "schema_url": ""},
    }


def _trace_spans(trace: Trace, start_ns: int | None) -> list[dict[str, Any]]:
    base = start_ns if start_ns is not None else _epoch_ns(trace.run_id)
    trace_hex = _hex(trace.trace_id, length=32)
    root_hex = _hex(trace.trace_id, "trace", length=16)
    resource = {"service.name": trace.pipeline, "openinference.project.name": trace.pipeline}
    attributes: dict[str, Any] = {
        "openinference.span.kind": "CHAIN", "quiver.trace_id": trace.trace_id, "quiver.run_id": trace.run_id,
        "quiver.pipeline": trace.pipeline, "quiver.input_id": trace.input_id, "quiver.repeat": trace.repeat,
        "quiver.status": trace.status,
    }
    _put_value(attributes, "input", trace.inputs)
    if trace.output is not None:
        _put_value(attributes, "output", trace.output)
    if trace.tags:
        attributes["quiver.trace.tags"] = json.dumps(trace.tags, ensure_ascii=False)
    if trace.error is not None:
        attributes["quiver.error"] = trace.error.model_dump_json()
    if trace.outcome is not None:
        attributes["quiver.trace.outcome"] = trace.outcome.model_dump_json()
    end = max((c.ended_at for c in trace.calls), default=0.0)
    spans = [_span(trace.pipeline, trace_hex, root_hex, None, base, base + _ns(end), attributes, trace.error,
                   resource)]
    by_path = {c.call_path: c for c in trace.calls}
    for call in trace.calls:
        if call.call_id == "c0" and call.kind == "source":
            continue
        parent = _enclosing(call, by_path)
        parent_hex = _hex(trace.trace_id, parent.call_id, length=16) if parent is not None else root_hex
        spans.append(_span(call.node, trace_hex, _hex(trace.trace_id, call.call_id, length=16), parent_hex,
                           base + _ns(call.started_at), base + _ns(call.ended_at), _call_attributes(call),
                           call.error, resource))
    return spans


def export_openinference(traces: Iterable[Trace], *, start_ns: int | None = None) -> list[dict[str, Any]]:
    """The traces as OpenInference spans, in the shape of the OTel Python SDK's ``span.to_json()``.

    Args:
        traces: The traces.
        start_ns: Where each trace starts on the clock (Unix nanoseconds); by default
            the time in its run id, or 2024-01-01T00:00:00Z.

    Returns:
        One trace span and one span per node call for every trace (see the module
        docstring for the attributes); :func:`quiver.import_traces` with format
        ``openinference`` reads them back.
    """
    return [span for trace in traces for span in _trace_spans(trace, start_ns)]


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _kv(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value(v)} for k, v in attributes.items()]


def _otlp_span(span: Mapping[str, Any]) -> dict[str, Any]:
    error = span["status"]["status_code"] == "ERROR"
    out: dict[str, Any] = {
        "traceId": span["context"]["trace_id"][2:], "spanId": span["context"]["span_id"][2:],
        "name": span["name"], "kind": 1,
        "startTimeUnixNano": str(to_ns(span["start_time"])), "endTimeUnixNano": str(to_ns(span["end_time"])),
        "attributes": _kv(span["attributes"]),
        "events": [{"timeUnixNano": str(to_ns(e["timestamp"])), "name": e["name"], "attributes": _kv(e["attributes"])}
                   for e in span["events"]],
        "status": {"code": 2, "message": span["status"]["description"]} if error else {"code": 1},
    }
    if span["parent_id"]:
        out["parentSpanId"] = span["parent_id"][2:]
    return out


def to_otlp(spans: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Spans from :func:`export_openinference` as one OTLP/JSON export request (``/v1/traces`` body)."""
    by_resource: dict[str, tuple[Mapping[str, Any], list[dict[str, Any]]]] = {}
    for span in spans:
        resource = span["resource"]["attributes"]
        key = json.dumps(resource, sort_keys=True)
        by_resource.setdefault(key, (resource, []))[1].append(_otlp_span(span))
    return {"resourceSpans": [
        {"resource": {"attributes": _kv(resource)},
         "scopeSpans": [{"scope": {"name": "quiver.export"}, "spans": items}]}
        for resource, items in by_resource.values()
    ]}


def write_openinference(path: str | os.PathLike[str], traces: Iterable[Trace], *, otlp: bool = False) -> int:
    """Write the traces as OpenInference spans and return how many spans were written.

    Args:
        path: The file: JSON Lines, one span (``span.to_json()`` shape) a line; with
            ``otlp``, one OTLP/JSON export request that an OpenTelemetry collector or
            Phoenix's OTLP endpoint takes as it is.
        traces: The traces.
        otlp: Write OTLP/JSON instead of JSON Lines.
    """
    spans = export_openinference(traces)
    p = Path(path)
    make_folder(p.parent)
    with open_output(p) as fh:
        if otlp:
            fh.write(json.dumps(to_otlp(spans), ensure_ascii=False) + "\n")
        else:
            for span in spans:
                fh.write(json.dumps(span, ensure_ascii=False) + "\n")
    return len(spans)
