"""What an agent's model turn says, read from the SDK's items; the names it can call.

The SDK hands every model's answer over as Responses API output items, whatever the
wire format carried them: ``message`` items (the answer's text) and ``function_call``
items (a function tool, or a handoff, with its call id). :func:`said_of` reads them into
the shared :class:`~quiver.integrations._agents.Said`; :func:`carried_ids` reads the
function call ids a turn's input items carry (its parents along the conversation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from quiver.integrations._agents import FunctionCall, Names, Said

__all__ = ["carried_ids", "first_user_text", "names_of", "said_of"]


def names_of(handoffs: Iterable[Any], tools: Iterable[Any]) -> Names:
    """What a turn can call, from the ``handoffs`` and ``tools`` it was given."""
    return Names(tools=tuple(str(t.name) for t in tools if hasattr(t, "name")),
                 handoffs={str(h.tool_name): str(h.agent_name) for h in handoffs})


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def _text(item: Any) -> str:
    parts = _get(item, "content") or []
    return "".join(str(_get(p, "text") or "") for p in parts if _get(p, "type") == "output_text")


def said_of(items: Sequence[Any]) -> Said:
    """What a turn's output items say: the messages' text and the function calls."""
    answer = Said()
    for item in items:
        kind = _get(item, "type")
        if kind == "message":
            answer.texts.append(_text(item))
        elif kind == "function_call":
            call_id = _get(item, "call_id")
            answer.calls.append(FunctionCall(str(_get(item, "name")), _get(item, "arguments"),
                                             str(call_id) if call_id else None))
    return answer


def carried_ids(input: Any) -> list[str]:
    """The ids of the function calls a turn's input items carry."""
    items = input if isinstance(input, list) else []
    return [str(_get(i, "call_id")) for i in items if _get(i, "type") == "function_call" and _get(i, "call_id")]


def first_user_text(items: Any) -> Any:
    """The text of a run's input: a string as it is, else its first user message's."""
    if not isinstance(items, list):
        return items
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return items
