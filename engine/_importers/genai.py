"""The GenAI attribute families the ``otel-genai`` format reads, beside the current conventions.

* kinds: ``gen_ai.operation.name`` (``chat``, ``text_completion``, ``generate_content``,
  ``completion``, ``llm_call``, ``llm``, ``invoke_model`` ... -> llm; ``execute_tool`` ->
  tool), Vercel ``ai.operationId``, OpenLLMetry's ``llm.request.type`` and
  ``traceloop.span.kind``, the Langfuse SDK's ``langfuse.observation.type``;
* the deprecated message attributes: ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``
  (OpenLLMetry), and the ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
  events holding ``gen_ai.prompt`` / ``gen_ai.completion``;
* the messages of the ``gen_ai.client.inference.operation.details`` span events
  (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
  in the parts form), as Strands Agents writes them;
* Vercel's reply (``ai.response.text`` and ``ai.response.toolCalls``);
* span names without the model: the conventions name a span ``{operation} {model}``
  (``chat gpt-4o``); the node is the operation, and the model is the call's model, so
  that a model swap is a model change, not two different nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quiver._trace import CallKind

from .common import Attrs, Note, SourceSpan, unflatten
from .reply import Pairs, Reply
from .values import normalise_messages, parse_json

__all__ = ["DETAILS_EVENT", "OUTPUT_KEYS", "LLM_OPERATIONS", "genai_kind", "legacy_messages", "event_value",
           "vercel_reply", "without_model"]

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion", "llm_call", "llm", "invoke_model",
                  "generate", "responses", "create_response"}
"""``gen_ai.operation.name`` values (and OpenLLMetry ``llm.request.type`` values) that are an LLM call."""

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
"""The current GenAI conventions' event holding ``gen_ai.input.messages``, ``gen_ai.output.messages``
and ``gen_ai.system_instructions`` (Strands Agents adds it to its spans; the OTel instrumentations
emit it as a log record)."""

OUTPUT_KEYS = ("output.value", "output", "langfuse.observation.output", "ai.response.object", "ai.response.text",
               "ai.response.toolCalls", "gen_ai.tool.call.result", "ai.toolCall.result", "ai.toolCall.output",
               "ai.embedding", "ai.embeddings")
"""Where a span writes its output, first found first."""

_LANGFUSE_KINDS: dict[str, CallKind] = {"generation": "llm", "tool": "tool", "retriever": "retrieval"}
_TRACELOOP_KINDS: dict[str, CallKind] = {"tool": "tool"}


def genai_kind(attrs: Attrs) -> CallKind:
    """The call kind of a GenAI, Vercel, OpenLLMetry or Langfuse SDK span."""
    vercel = attrs.get("ai.operationId")
    if isinstance(vercel, str):
        if vercel.endswith((".doGenerate", ".doStream")):
            return "llm"
        return "tool" if vercel == "ai.toolCall" else "transform"
    op = attrs.get("gen_ai.operation.name")
    op = op.lower() if isinstance(op, str) else None
    if op in LLM_OPERATIONS or (op is None and "gen_ai.request.model" in attrs):
        return "llm"
    if op == "execute_tool" or (op is None and "gen_ai.tool.name" in attrs):
        return "tool"
    for key, kinds in (("langfuse.observation.type", _LANGFUSE_KINDS), ("traceloop.span.kind", _TRACELOOP_KINDS)):
        label = attrs.get(key)
        if isinstance(label, str) and label.lower() in kinds:
            return kinds[label.lower()]
    request = attrs.get("llm.request.type")
    if isinstance(request, str) and request.lower() in LLM_OPERATIONS:
        return "llm"
    return "transform"


def legacy_messages(attrs: Attrs, prefix: str, note: Note) -> Pairs | None:
    """The deprecated flat ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` messages (completions
    without a role are the assistant's)."""
    if not any(k.startswith(prefix + ".") for k in attrs.data):
        return None
    flat = attrs.prefix(prefix)
    legacy = unflatten(flat)
    if isinstance(legacy, list) and prefix.endswith("completion"):
        legacy = [{"role": "assistant", **m} if isinstance(m, Mapping) and "role" not in m else m for m in legacy]
    messages = normalise_messages(legacy) if isinstance(legacy, list) else None
    if messages is None:
        attrs.used.difference_update(f"{prefix}.{k}" for k in flat)
        note(f"{prefix}.* could not be read as chat messages; kept in tags")
    return messages


def event_value(span: SourceSpan, event: str, key: str) -> Any:
    """``key`` of the span's first ``event`` that has it (the GenAI content events), taken out of
    the events kept in tags (the event goes when nothing else is left in it); None when the span
    has no such event."""
    events = span.envelope.get("events")
    if not isinstance(events, list):
        return None
    for i, item in enumerate(events):
        if isinstance(item, Mapping) and item.get("name") == event:
            attributes = item.get("attributes")
            if not isinstance(attributes, Mapping) or attributes.get(key) is None:
                continue
            left = {k: v for k, v in attributes.items() if k != key}
            rest = events[:i] + ([{**item, "attributes": left}] if left else []) + events[i + 1:]
            if rest:
                span.envelope["events"] = rest
            else:
                del span.envelope["events"]
            return parse_json(attributes[key])
    return None


def vercel_reply(attrs: Attrs) -> Reply | None:
    """A Vercel ``doGenerate`` span's reply: ``ai.response.text`` and ``ai.response.toolCalls``."""
    text = attrs.peek("ai.response.text")
    calls = parse_json(attrs.peek("ai.response.toolCalls"))
    parts: list[dict[str, Any]] = []
    if isinstance(text, str) and text:
        parts.append({"type": "text", "content": text})
    if isinstance(calls, list):
        pairs = normalise_messages([{"role": "assistant", "content": [
            {"type": "tool-call", **c} for c in calls if isinstance(c, Mapping)]}])
        parts += pairs[0][1] if pairs else []
    if not parts:
        return None
    attrs.first("ai.response.text")
    attrs.first("ai.response.toolCalls")
    return Reply([("assistant", parts)])


def without_model(name: str, attributes: Mapping[str, Any]) -> str:
    """A span name without the model the conventions append (``chat gpt-4o`` -> ``chat``)."""
    for key in ("gen_ai.request.model", "gen_ai.response.model", "ai.model.id"):
        model = attributes.get(key)
        if isinstance(model, str) and model and name.endswith(" " + model) and len(name) > len(model) + 1:
            return name[: -len(model) - 1].rstrip()
    return name
