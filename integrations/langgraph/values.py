"""States, updates and messages as the trace records them, and back.

:func:`to_json` turns LangChain messages into role dicts without their volatile ids,
``Document``s into dicts and ``Send``/``Command`` into what they say; :func:`from_json`
rebuilds them for an output a replay serves. The readers find the messages, the tool
steps and the documents of a state or an update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["from_json", "to_json"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def to_json(value: Any) -> Any:
    """A state, update or input as the trace records it: LangChain messages as role
    dicts (without their volatile ids), ``Document``s as dicts, ``Send``s and
    ``Command``s spelled out, the rest JSON as :func:`quiver.to_jsonable` makes it."""
    from langchain_core.documents import Document
    from langchain_core.messages import BaseMessage
    from langgraph.types import Command, Send

    if isinstance(value, BaseMessage):
        return _message_json(value)
    if isinstance(value, Document):
        return {"page_content": value.page_content, "metadata": to_json(value.metadata), "type": "Document"}
    if isinstance(value, Send):
        return {"send": value.node, "arg": to_json(value.arg)}
    if isinstance(value, Command):
        return {"__command__": {"update": to_json(value.update), "goto": to_json(value.goto)}}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    from quiver import to_jsonable

    return to_jsonable(value)


def _message_json(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": _ROLES.get(message.type, message.type), "content": to_json(message.content)}
    if getattr(message, "name", None):
        out["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [{"name": c["name"], "args": to_json(c["args"]), "id": c.get("id")} for c in calls]
    if getattr(message, "tool_call_id", None):
        out["tool_call_id"] = message.tool_call_id
    return out


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json` for a served output: role dicts become messages,
    document dicts ``Document``s, a spelled-out ``Command`` a ``Command``."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__command__"} and isinstance(value["__command__"], dict):
        from langgraph.types import Command

        inner = value["__command__"]
        return Command(update=from_json(inner.get("update")), goto=inner.get("goto") or ())
    if _is_message(value):
        from langchain_core.messages import convert_to_messages

        data = dict(value)
        if "tool_calls" in data:
            data["tool_calls"] = [{**c, "type": "tool_call"} for c in data["tool_calls"]]
        return convert_to_messages([data])[0]
    if value.get("type") == "Document" and set(value) == {"page_content", "metadata", "type"}:
        from langchain_core.documents import Document

        return Document(page_content=value["page_content"], metadata=value["metadata"])
    return {k: from_json(v) for k, v in value.items()}


def _is_message(value: dict[str, Any]) -> bool:
    return (
        "role" in value and "content" in value and set(value) <= _MESSAGE_KEYS
        and value["role"] in ("user", "assistant", "system", "tool")
    )


def _messages_in(value: Any) -> list[Any]:
    """The messages of a state or update: its ``messages`` channel, or the value itself
    when it is a list (a ``ToolNode`` takes either)."""
    if isinstance(value, Mapping):
        value = value.get("messages")
    return list(value) if isinstance(value, (list, tuple)) else []


def _tool_steps(input: Any, update: Any) -> list[tuple[str, dict[str, Any], Any]]:
    """The tool steps a ``ToolNode`` ran: each ``ToolMessage`` of its update with the
    name and arguments of the tool call it answers (read from the input's messages)."""
    from langchain_core.messages import AIMessage, ToolMessage

    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in _messages_in(input):
        if isinstance(message, AIMessage):
            for c in message.tool_calls:
                asked[str(c.get("id"))] = (c["name"], dict(c["args"]))
    steps = []
    for message in _messages_in(update):
        if isinstance(message, ToolMessage):
            name, args = asked.get(str(message.tool_call_id), (message.name or "tool", {}))
            steps.append((name, args, to_json(message.content)))
    return steps


def _docs_in(update: Any) -> list[dict[str, Any]] | None:
    """The first list of documents in a retrieval node's update, as quiver records them."""
    from langchain_core.documents import Document

    if not isinstance(update, Mapping):
        return None
    for value in update.values():
        if not isinstance(value, list) or not value:
            continue
        if all(isinstance(d, Document) for d in value):
            return [
                {"doc_id": d.id or d.metadata.get("id") or d.metadata.get("doc_id") or str(i),
                 "content": d.page_content, "score": d.metadata.get("score")}
                for i, d in enumerate(value)
            ]
        if all(isinstance(d, Mapping) and ("doc_id" in d or "id" in d) and ("content" in d or "text" in d)
               for d in value):
            return list(value)
    return None

