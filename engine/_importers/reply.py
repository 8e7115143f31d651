"""What an imported LLM call said: one rule for every format.

An LLM call's compared output is **the assistant's reply**: the text of its last
assistant message, or, when it holds more than text (tool calls), its parts in the OTel
GenAI form. The reply is read from whichever family of attributes holds it, first found
first (the formats pass their candidates in this order):

1. output messages: OpenInference ``llm.output_messages``, GenAI ``gen_ai.output.messages``,
   the deprecated ``gen_ai.completion.N.*``, ``gen_ai.completion`` (and its
   ``gen_ai.content.completion`` event), Vercel's ``ai.response.text`` /
   ``ai.response.toolCalls``;
2. the call's output parsed as a provider response (:func:`reply_of`): an OpenAI chat
   completion (``choices[].message``), a text completion (``choices[].text``), an
   OpenAI Responses object (``output[]``), an Anthropic message (``content`` blocks:
   ``text``, ``tool_use``), a Gemini response (``candidates[].content.parts``) or a bare
   ``{"parts": [...]}`` content, a LangChain ``LLMResult`` (``generations``) or
   ``AIMessage`` (serialized or dumped), an assistant message or a list of messages (in
   the OTel GenAI parts form too: ``{"role": "assistant", "parts": [...],
   "finish_reason": ...}``), a bare ``{"text": ..., "finish_reason": ...}`` reply (as
   OpenInference's GenAI conversion writes ``output.value`` and ``gen_ai.completion``),
   a list of texts (DSPy), a string.

Its finish reason and token usage are mapped onto the call's response whichever family
gave them. **Volatile values are never compared** (:func:`without_volatile`): ids made
afresh for every call (``chatcmpl-``, ``msg_``, ``toolu_``, ``call_``, ``run-``,
``lc_run--``, ``run_``, ``asst_``, ``resp_``, UUIDs ...), timestamps (``created``,
``created_at``, ``timestamp`` ...), token usage (``usage``, ``usage_metadata``,
``token_usage``, ``usageMetadata``) and system fingerprints are taken out of every
call's output, in every importer; the values as written stay in the call's tags.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import canonical_json, to_jsonable
from quiver._trace import LLMResponse

from .common import NOTHING, Attrs
from .values import messages_text, normalise_messages, parse_json, to_ns

__all__ = ["Reply", "reply_of", "reply_output", "compared_reply", "unread_reply", "without_volatile", "usage_of",
           "Pairs"]

Pairs = list[tuple[str, list[dict[str, Any]]]]

_ASSISTANT = {"assistant", "ai", "model"}
_USAGE_NAMES = {
    "prompt_tokens": "prompt_tokens", "input_tokens": "prompt_tokens", "promptTokenCount": "prompt_tokens",
    "promptTokens": "prompt_tokens", "inputTokens": "prompt_tokens", "input": "prompt_tokens",
    "completion_tokens": "completion_tokens", "output_tokens": "completion_tokens",
    "candidatesTokenCount": "completion_tokens", "completionTokens": "completion_tokens",
    "outputTokens": "completion_tokens", "output": "completion_tokens",
    "total_tokens": "total_tokens", "totalTokenCount": "total_tokens", "totalTokens": "total_tokens",
    "total": "total_tokens", "prompt_token_count": "prompt_tokens", "candidates_token_count": "completion_tokens",
    "total_token_count": "total_tokens",
}


@dataclass
class Reply:
    """An LLM call's reply: its assistant messages, finish reason and token usage."""

    messages: Pairs
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The response text: the last message, rendered (text, or the canonical JSON of its parts)."""
        return messages_text(self.messages)


def usage_of(raw: Any) -> dict[str, int]:
    """Token usage under the OpenAI names from any provider's usage object."""
    raw = parse_json(raw)
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, int] = {}
    for key, value in raw.items():
        name = _USAGE_NAMES.get(str(key))
        if name and name not in out and isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            out[name] = int(value)
    return out


def _text(value: Any) -> Reply | None:
    return Reply([("assistant", [{"type": "text", "content": value}])]) if isinstance(value, str) else None


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    """Anthropic content blocks / Gemini parts / OpenAI Responses output items as message parts."""
    if not isinstance(content, list):
        return None
    pairs = normalise_messages([{"role": "assistant", "content": content}])
    return pairs[0][1] if pairs else None


def _openai(value: Mapping[str, Any]) -> Reply | None:
    choices = value.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], Mapping)):
        return None
    choice = choices[0]
    if isinstance(choice.get("message"), Mapping):
        pairs = normalise_messages([{"role": "assistant", **choice["message"]}])
    elif isinstance(choice.get("text"), str):
        pairs = [("assistant", [{"type": "text", "content": choice["text"]}])]
    else:
        return None
    if not pairs:
        return None
    return Reply(pairs, _reason(choice.get("finish_reason")), usage_of(value.get("usage")))


def _responses(value: Mapping[str, Any]) -> Reply | None:
    items = value.get("output")
    if value.get("object") != "response" and not (isinstance(items, list) and items and isinstance(items[0], Mapping)
                                                  and items[0].get("type") in ("message", "function_call")):
        return None
    parts: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            parts += [{"type": "text", "content": c.get("text", "")} for c in item.get("content") or []
                      if isinstance(c, Mapping) and c.get("type") in ("output_text", "text")]
        elif item.get("type") == "function_call":
            parts.append({"type": "tool_call", "id": item.get("call_id"), "name": item.get("name"),
                          "arguments": parse_json(item.get("arguments"))})
    if not parts:
        return None
    return Reply([("assistant", parts)], _reason(value.get("status")), usage_of(value.get("usage")))


def _anthropic(value: Mapping[str, Any]) -> Reply | None:
    if value.get("type") != "message" and "stop_reason" not in value:
        return None
    parts = _blocks(value.get("content"))
    if parts is None:
        return _text(value.get("content"))
    return Reply([("assistant", parts)], _reason(value.get("stop_reason")), usage_of(value.get("usage")))


def _gemini(value: Mapping[str, Any]) -> Reply | None:
    candidates = value.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], Mapping):
        content = candidates[0].get("content")
        parts = _blocks(content.get("parts")) if isinstance(content, Mapping) else None
        if parts is None:
            return None
        reason = candidates[0].get("finishReason", candidates[0].get("finish_reason"))
        return Reply([("assistant", parts)], _reason(reason), usage_of(value.get("usageMetadata")))
    if isinstance(value.get("parts"), list) and value.get("role", "model") in _ASSISTANT:
        parts = _blocks(value["parts"])  # a Gemini content, or an OTel GenAI output message
        return Reply([("assistant", parts)], _reason(value.get("finish_reason"))) if parts is not None else None
    content = value.get("content")
    if isinstance(content, Mapping) and isinstance(content.get("parts"), list):  # Google ADK's LlmResponse
        parts = _blocks(content["parts"])
        if parts is None:
            return None
        return Reply([("assistant", parts)], _reason(value.get("finish_reason", value.get("finishReason"))),
                     usage_of(value.get("usage_metadata", value.get("usageMetadata"))))
    return None


_TEXT_REPLY_KEYS = {"text", "finish_reason", "role", "usage"}


def _text_reply(value: Mapping[str, Any]) -> Reply | None:
    """A bare ``{"text": ..., "finish_reason": ...}`` reply (OpenInference's conversion of the GenAI
    conventions writes ``output.value`` and ``gen_ai.completion`` so)."""
    if not isinstance(value.get("text"), str) or not set(value) <= _TEXT_REPLY_KEYS \
            or value.get("role", "assistant") not in _ASSISTANT:
        return None
    return Reply([("assistant", [{"type": "text", "content": value["text"]}])], _reason(value.get("finish_reason")),
                 usage_of(value.get("usage")))


def _langchain(value: Mapping[str, Any]) -> Reply | None:
    generations = value.get("generations")
    if isinstance(generations, list) and generations:
        last = generations[-1]
        gen = last[-1] if isinstance(last, list) and last else last
        if not isinstance(gen, Mapping):
            return None
        message = gen.get("message")
        reply = _message(message) if isinstance(message, Mapping) else _text(gen.get("text"))
        if reply is None:
            return None
        reply.finish_reason = reply.finish_reason or _reason(_mapping(gen, "generation_info").get("finish_reason"))
        reply.usage = reply.usage or usage_of(_mapping(value, "llm_output").get("token_usage"))
        return reply
    return None


def _message(value: Mapping[str, Any]) -> Reply | None:
    """An assistant message, LangChain's included (``type: ai``, ``lc`` serialized ``AIMessage``)."""
    if value.get("lc") == 1 and isinstance(value.get("kwargs"), Mapping):
        ids = value.get("id")
        name = ids[-1] if isinstance(ids, list) and ids else ""
        if not str(name).startswith("AIMessage"):
            return None
        value = {"type": "ai", **value["kwargs"]}
    role = value.get("role", value.get("type"))
    if role not in _ASSISTANT and role not in ("AIMessage", "AIMessageChunk"):
        return None
    message = {k: v for k, v in value.items() if k in ("content", "parts", "tool_calls", "additional_kwargs")}
    if not value.get("tool_calls") and isinstance(value.get("additional_kwargs"), Mapping) \
            and value["additional_kwargs"].get("tool_calls"):
        message["tool_calls"] = value["additional_kwargs"]["tool_calls"]
    calls = message.get("tool_calls")
    if isinstance(calls, list):  # LangChain's own {name, args, id} tool calls
        message["tool_calls"] = [{"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
                                 if isinstance(c, Mapping) and "args" in c and "function" not in c else c
                                 for c in calls]
    pairs = normalise_messages([{"role": "assistant", **message}])
    if not pairs:
        return None
    meta = _mapping(value, "response_metadata")
    reason = value.get("finish_reason", value.get("stop_reason", meta.get("finish_reason", meta.get("stop_reason"))))
    usage = usage_of(value.get("usage_metadata")) or usage_of(value.get("usage")) or usage_of(meta.get("token_usage"))
    return Reply(pairs, _reason(reason), usage)


def _mapping(value: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``value[key]`` when it is a mapping, else an empty one."""
    item = value.get(key)
    return item if isinstance(item, Mapping) else {}


def _reason(value: Any) -> str | None:
    return str(value) if isinstance(value, str | int) and value != "" else None


def reply_of(value: Any) -> Reply | None:
    """The reply in an LLM call's output, in any provider's or framework's spelling (see the
    module docstring); None when ``value`` holds none."""
    value = parse_json(value)
    if isinstance(value, str):
        return _text(value) if value else None
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):  # DSPy: the LM's texts
            return _text(value[-1])
        pairs = normalise_messages(value) if value else None
        if pairs:
            assistant = [p for p in pairs if p[0] in _ASSISTANT]
            last = value[-1] if isinstance(value[-1], Mapping) else {}
            return Reply(assistant[-1:], _reason(last.get("finish_reason"))) if assistant else None
        return None
    if not isinstance(value, Mapping):
        return None
    for reader in (_openai, _responses, _anthropic, _gemini, _langchain, _message, _text_reply):
        reply = reader(value)
        if reply is not None:
            return reply
    for key in ("output", "response", "result", "message", "completion"):  # a wrapper around one
        if isinstance(value.get(key), Mapping | list) and len(value) <= 3:
            return reply_of(value[key])
    return None


def reply_output(reply: Reply) -> Any:
    """The compared output of an LLM call: its reply's text (parsed where it is JSON), or the
    parts of its last message (tool calls, without their volatile ids)."""
    role, parts = reply.messages[-1]
    if all(p.get("type") == "text" for p in parts):
        return without_volatile(parse_json(reply.text))
    return [{"role": role, "parts": [without_volatile(p) for p in parts]}]


def unread_reply(output: Any, usage: dict[str, int], reason: str | None) -> LLMResponse | None:
    """The response of an LLM call whose output holds no reply this module reads: the output itself as
    text (a structured object a model was asked for), with the usage and finish reason; None when the
    call has none of these."""
    if output is NOTHING or output is None:
        return LLMResponse(content="", usage=usage, finish_reason=reason) if usage or reason else None
    clean = without_volatile(output)
    return LLMResponse(content=clean if isinstance(clean, str) else canonical_json(clean), usage=usage,
                       finish_reason=reason)


def compared_reply(reply: Reply, written: Any, attrs: Attrs, keys: Iterable[str]) -> Any:
    """The compared output of an LLM call whose span wrote ``written`` as its output (under one of
    ``keys``): the reply; ``written`` itself when it is the reply's text, else ``written`` stays in
    the call's tags."""
    if isinstance(written, str) and written == reply.text:
        return written
    output = reply_output(reply)
    if written is not NOTHING and to_jsonable(written) != output:
        attrs.used.difference_update(keys)
    return output


# --------------------------------------------------------------------------- volatile values

_VOLATILE_ID = re.compile(
    r"^(lc_run--|run-|run_|chatcmpl-|cmpl-|msg_|msg-|toolu_|call_|resp_|asst_|thread_|step_|req_|gen-|fc_)"
    r"|^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
"""Ids a provider, client or framework makes afresh for every call."""

_ID_KEYS = {"id", "run_id", "parent_run_id", "message_id", "response_id", "call_id", "tool_call_id", "toolCallId",
            "thread_id", "assistant_id", "trace_id", "span_id", "request_id"}
_USAGE_KEYS = {"usage", "usage_metadata", "usageMetadata", "token_usage", "tokenUsage", "system_fingerprint",
               "prompt_tokens_details", "completion_tokens_details"}
_TIME_KEYS = {"created", "created_at", "createdAt", "timestamp", "updated_at", "updatedAt", "completed_at",
              "completedAt", "started_at", "start_time", "end_time", "startTime", "endTime"}


def _volatile(key: str, value: Any) -> bool:
    if key in _USAGE_KEYS:
        return True
    if key in _ID_KEYS:
        return isinstance(value, str) and bool(_VOLATILE_ID.match(value))
    if key in _TIME_KEYS:
        return isinstance(value, str | int | float) and not isinstance(value, bool) and to_ns(value) is not None
    return False


def without_volatile(value: Any) -> Any:
    """``value`` without the ids, timestamps and usage a call makes afresh (see the module
    docstring); the same object when it has none."""
    if isinstance(value, list):
        items = [without_volatile(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    changed = False
    for key, item in value.items():
        if _volatile(str(key), item):
            changed = True
            continue
        clean = without_volatile(item)
        changed = changed or clean is not item
        out[key] = clean
    return out if changed else value
