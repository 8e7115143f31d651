"""Values shared by the trace importers: JSON strings, chat messages, documents, times.

Every observability tool spells a chat message its own way. The importers bring them
all to one form before they become :class:`~quiver.Message` records:

* a message is a role and a list of *parts* in the OTel GenAI form:
  ``{"type": "text", "content": ...}``, ``{"type": "tool_call", "id", "name",
  "arguments"}``, ``{"type": "tool_call_response", "id", "response"}``; other parts
  (images, files) are kept as they come;
* understood spellings: OpenAI chat (``content`` as a string or a list of ``{"type":
  "text", "text"}`` parts, ``tool_calls``, ``tool_call_id``), OTel GenAI (``parts``),
  OpenInference flat attributes (``message.content``, ``message.contents.N``,
  ``message.tool_calls.N``), Vercel AI SDK (``tool-call`` / ``tool-result`` parts),
  LangChain (``type: human | ai | system | tool`` and ``additional_kwargs.tool_calls``),
  Gemini (``contents`` with ``text``, ``function_call``, ``function_response``);
* a message made of text parts only becomes ``Message(role, content=the texts
  joined)``; any other message becomes ``Message(role, content=canonical JSON of its
  parts)``, tool-call arguments parsed from JSON strings first, so that the same
  conversation gives the same assembled messages whichever convention carried it;
* a bare string is one user message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from quiver._canonical import canonical_json, content_hash, to_jsonable
from quiver._trace import Message, RetrievalDoc

__all__ = [
    "MAX_DEPTH",
    "NestedTooDeep",
    "loads",
    "too_deep",
    "parse_json",
    "parse_json_strict",
    "normalise_messages",
    "messages_in",
    "render_messages",
    "messages_text",
    "documents",
    "to_ns",
    "iso_from_ns",
]

_ROLES = {"human": "user", "ai": "assistant", "model": "assistant", "developer": "system"}


MAX_DEPTH = 100
"""The deepest nesting of objects and arrays an imported value may have: deeper ones
(which Python's json module cannot always read, nor the engine hash) are not read as
JSON: a record is skipped, a JSON string attribute is kept as text, with a problem."""


class NestedTooDeep(ValueError):
    """JSON nested more than :data:`MAX_DEPTH` levels."""

    def __init__(self) -> None:
        super().__init__(f"nested more than {MAX_DEPTH} levels deep")


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``value`` has mappings or lists nested more than ``limit`` levels (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, (list, tuple)) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (Mapping, list, tuple)))
    return False


def loads(text: str | bytes) -> Any:
    """``json.loads``, raising :class:`NestedTooDeep` (a ``ValueError``) for data nested
    more than :data:`MAX_DEPTH` levels, where json itself may raise ``RecursionError``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise NestedTooDeep() from None
    if isinstance(value, (dict, list)) and too_deep(value):
        raise NestedTooDeep()
    return value


def parse_json(value: Any, on_deep: Callable[[str], None] | None = None) -> Any:
    """A value parsed from JSON where it is JSON (strings only; twice for a JSON-encoded
    JSON string). JSON nested more than :data:`MAX_DEPTH` levels stays a string, and
    ``on_deep`` (when given) is told why."""
    for attempt in range(2):
        if not isinstance(value, str) or not value.strip():
            return value
        if attempt and value.lstrip()[:1] not in ("{", "["):
            return value
        try:
            value = loads(value)
        except NestedTooDeep as exc:
            if on_deep is not None:
                on_deep(str(exc))
            return value
        except ValueError:
            return value
    return value


def parse_json_strict(value: Any) -> Any:
    """Parse a string as JSON exactly once; raises ``ValueError`` when it is not JSON
    (:class:`NestedTooDeep` when it is nested too deeply)."""
    return loads(value) if isinstance(value, str) else value


def _text_part(text: Any) -> dict[str, Any]:
    return {"type": "text", "content": text if isinstance(text, str) else canonical_json(text)}


def _tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call"}
    if call_id is not None:
        part["id"] = call_id
    part["name"] = name
    part["arguments"] = parse_json(arguments) if arguments is not None else {}
    return part


def _tool_response(call_id: Any, response: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool_call_response"}
    if call_id is not None:
        part["id"] = call_id
    part["response"] = response
    return part


def _part(raw: Any) -> dict[str, Any]:
    """One content part in the OTel GenAI form."""
    if not isinstance(raw, Mapping):
        return _text_part(raw)
    kind = raw.get("type")
    if kind in ("text", "output_text") or (kind is None and "text" in raw and (len(raw) == 1 or _gemini_text(raw))):
        return _text_part(raw.get("content", raw.get("text", "")))
    if kind in ("tool_call", "tool-call", "function_call", "tool_use"):
        return _tool_call(raw.get("id", raw.get("toolCallId", raw.get("call_id"))),
                          raw.get("name", raw.get("toolName")),
                          raw.get("arguments", raw.get("input", raw.get("args"))))
    if kind in ("tool_call_response", "tool-result", "function_call_output", "tool_result"):
        return _tool_response(raw.get("id", raw.get("toolCallId", raw.get("tool_use_id", raw.get("call_id")))),
                              raw.get("response", raw.get("output", raw.get("result", raw.get("content")))))
    for key in ("function_call", "functionCall"):  # Gemini
        if key in raw:
            call = raw[key] if isinstance(raw[key], Mapping) else {}
            return _tool_call(call.get("id"), call.get("name"), call.get("args"))
    for key in ("function_response", "functionResponse"):
        if key in raw:
            resp = raw[key] if isinstance(raw[key], Mapping) else {}
            return _tool_response(resp.get("id", resp.get("name")), resp.get("response"))
    if "message_content" in raw:  # OpenInference message.contents.N
        inner = raw["message_content"]
        return _part({"type": inner.get("type", "text"), **inner}) if isinstance(inner, Mapping) else _text_part(inner)
    return dict(raw)


def _gemini_text(raw: Mapping[str, Any]) -> bool:
    """A Gemini text part: ``text`` with only Gemini's part metadata beside it."""
    return set(raw) <= {"text", "thought", "thoughtSignature", "thought_signature"}


def _openai_tool_calls(calls: Any) -> list[dict[str, Any]]:
    out = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, Mapping):
            continue
        call = call.get("tool_call", call)  # OpenInference message.tool_calls.N.tool_call
        fn = call.get("function") or {}
        out.append(_tool_call(call.get("id"), fn.get("name", call.get("name")),
                              fn.get("arguments", call.get("arguments", call.get("args")))))
    return out


def _message_parts(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if isinstance(msg.get("parts"), list):
        parts += [_part(p) for p in msg["parts"]]
    content = msg.get("content")
    if isinstance(content, list):
        parts += [_part(p) for p in content]
    elif content is not None and content != "":
        parts.append(_text_part(content))
    contents = msg.get("contents")
    if isinstance(contents, list):
        parts += [_part(p) for p in contents]
    calls = msg.get("tool_calls") or (msg.get("additional_kwargs") or {}).get("tool_calls")
    parts += _openai_tool_calls(calls)
    call_id = msg.get("tool_call_id")
    if call_id is not None and parts and all(p.get("type") == "text" for p in parts):
        text = "".join(p["content"] for p in parts)
        parts = [_tool_response(call_id, text)]
    return parts


def _message(raw: Any) -> tuple[str, list[dict[str, Any]]] | None:
    if isinstance(raw, str):
        return "user", [_text_part(raw)]
    if not isinstance(raw, Mapping):
        return None
    msg = raw.get("message", raw) if isinstance(raw.get("message"), Mapping) else raw
    role = msg.get("role", msg.get("type"))
    if not isinstance(role, str):
        return None
    return _ROLES.get(role, role), _message_parts(msg)


def normalise_messages(value: Any) -> list[tuple[str, list[dict[str, Any]]]] | None:
    """(role, parts) pairs from any understood spelling, or None when ``value`` holds no messages."""
    value = parse_json(value)
    if isinstance(value, str):
        return [("user", [_text_part(value)])]
    if isinstance(value, Mapping):
        return _messages_of_request(value)
    if not isinstance(value, list) or not value:
        return None
    out = [m for m in (_message(v) for v in value) if m is not None]
    return out if len(out) == len(value) else None


def messages_in(value: Any) -> list[tuple[str, list[dict[str, Any]]]] | None:
    """The chat messages a call's input holds, when it holds nothing else: a list of messages
    (any understood spelling, the OTel GenAI parts form included) or a request holding them
    (``messages``, ``contents``); None for any other input (a plain text is not taken for a
    prompt)."""
    value = parse_json(value)
    if not isinstance(value, (list, Mapping)) or not value:
        return None
    if isinstance(value, list) and not all(isinstance(v, Mapping) for v in value):
        return None
    if isinstance(value, Mapping) and not any(isinstance(value.get(k), list) for k in ("messages", "contents")):
        return None  # a template's variables ({"prompt": ..., "context_str": ...}) are not messages
    return normalise_messages(value)


def _messages_of_request(req: Mapping[str, Any]) -> list[tuple[str, list[dict[str, Any]]]] | None:
    out: list[tuple[str, list[dict[str, Any]]]] = []
    config = req.get("config")
    system = req.get("system")
    if system is None and isinstance(config, Mapping):
        system = config.get("system_instruction")
    if isinstance(system, str) and system:
        out.append(("system", [_text_part(system)]))
    for key in ("messages", "contents"):
        if isinstance(req.get(key), list):
            inner = normalise_messages(req[key])
            if inner is None:
                return None
            return out + inner
    if isinstance(req.get("prompt"), str):
        return out + [("user", [_text_part(req["prompt"])])]
    return None


def render_messages(pairs: list[tuple[str, list[dict[str, Any]]]]) -> list[Message]:
    """Messages as the trace format holds them: text, or the canonical JSON of the parts."""
    out = []
    for role, parts in pairs:
        if all(p.get("type") == "text" for p in parts):
            content = "".join(p["content"] for p in parts)
        else:
            content = canonical_json(parts)
        out.append(Message(role=role, content=content))
    return out


def messages_text(pairs: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """The response text of output messages: the last message, rendered."""
    return render_messages(pairs[-1:])[0].content if pairs else ""


def documents(raw: list[Any]) -> tuple[list[RetrievalDoc], list[dict[str, Any]]]:
    """Retrieved documents: the content-hashed records and a plain listing as the call's output.

    A document is a mapping with ``id`` (or ``doc_id``, ``document_id``), ``content``
    (or ``page_content``, ``text``), ``score`` and ``metadata``; a bare string is its
    content. Without an id the content hash is the id. Without content, a
    ``content_hash`` in its metadata (written by :func:`quiver.export_openinference`) is
    taken. ``rank`` is the position in the list unless the metadata says otherwise.
    """
    docs: list[RetrievalDoc] = []
    listing: list[dict[str, Any]] = []
    for rank, item in enumerate(raw):
        item = item.get("document", item) if isinstance(item, Mapping) else {"content": item}
        meta = parse_json(item.get("metadata")) or {}
        meta = meta if isinstance(meta, Mapping) else {}
        content = next((item[k] for k in ("content", "page_content", "text") if item.get(k) is not None), None)
        chash = content_hash(to_jsonable(content)) if content is not None else meta.get("content_hash")
        if chash is None:
            chash = content_hash(to_jsonable(item))
        doc_id = next((item[k] for k in ("id", "doc_id", "document_id") if item.get(k) is not None), chash)
        docs.append(RetrievalDoc(doc_id=str(doc_id), content_hash=chash, score=_score(item.get("score")),
                                 rank=int(meta.get("rank", rank))))
        listing.append({k: v for k, v in item.items() if v is not None})
    return docs, listing


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:?\d{2})?$")


def to_ns(value: Any) -> int | None:
    """Nanoseconds since the Unix epoch from a span time in any common spelling.

    Integers and numeric strings are read by magnitude (nanoseconds, microseconds,
    milliseconds or seconds), ``[seconds, nanoseconds]`` pairs as the OTel JS SDK
    writes them, and ISO 8601 strings with any number of fractional digits (UTC when
    no offset is given).
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]) * 1_000_000_000 + int(value[1])
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value.strip()):
        value = float(value) if "." in value else int(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (int, float)):
        for limit, scale in ((1e17, 1), (1e14, 1_000), (1e11, 1_000_000)):
            if abs(value) >= limit:
                return int(round(value * scale))
        return int(round(value * 1_000_000_000))
    if isinstance(value, str):
        m = _ISO.match(value.strip())
        if m is None:
            return None
        try:
            base = datetime.fromisoformat(m.group(1).replace(" ", "T") + _offset(m.group(3)))
        except ValueError:  # shaped like a time, but no time (month 13, hour 25)
            return None
        frac = (m.group(2) or "")[:9].ljust(9, "0")
        return int(base.timestamp()) * 1_000_000_000 + int(frac)
    return None


def _offset(raw: str | None) -> str:
    if raw is None or raw == "Z":
        return "+00:00"
    return raw if ":" in raw else f"{raw[:3]}:{raw[3:]}"


def iso_from_ns(ns: int) -> str:
    """An ISO 8601 UTC time with the precision the nanoseconds need (micro or nano)."""
    seconds, frac = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}"
    return f"{stamp}.{digits[:6] if digits.endswith('000') else digits}Z"
