"""pydantic-ai's messages read into what the shared agent model records.

A turn's inputs are its request's messages in a neutral form (:func:`messages_json`:
each message's kind and its parts' kind, content, tool name, arguments and call id,
without the timestamps and run ids pydantic-ai stamps on them, so that a replay's
inputs hash to the recording's). What a turn's answer says is read from its
``ModelResponse``'s parts (:func:`said_of`): text parts and tool call parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quiver._canonical import to_jsonable
from quiver.integrations._agents import FunctionCall, Names, Said

__all__ = ["carried_ids", "instructions_of", "last_prompt", "messages_json", "names_of", "said_of"]

_PART_FIELDS = ("content", "tool_name", "args", "tool_call_id")


def _part_json(part: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": getattr(part, "part_kind", type(part).__name__)}
    for name in _PART_FIELDS:
        value = getattr(part, name, None)
        if value is not None:
            out[name] = to_jsonable(value)
    return out


def messages_json(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The messages of a request as a turn's inputs record them."""
    return [{"kind": getattr(m, "kind", type(m).__name__), "parts": [_part_json(p) for p in m.parts]}
            for m in messages]


def instructions_of(parameters: Any) -> str | None:
    """The instructions a request sends (its instruction parts' text)."""
    parts = getattr(parameters, "instruction_parts", None) or []
    texts = [str(p.content) for p in parts if getattr(p, "content", None)]
    return "\n\n".join(texts) if texts else None


def said_of(response: Any) -> Said:
    """What a ``ModelResponse`` says: its text parts and its tool calls."""
    answer = Said()
    for part in response.parts:
        kind = getattr(part, "part_kind", None)
        if kind == "text":
            answer.texts.append(str(part.content))
        elif kind == "tool-call":
            answer.calls.append(FunctionCall(str(part.tool_name), part.args, str(part.tool_call_id or "") or None))
    return answer


def carried_ids(messages: Sequence[Any]) -> list[str]:
    """The ids of the tool calls the responses among ``messages`` made."""
    return [str(p.tool_call_id) for m in messages if getattr(m, "kind", None) == "response"
            for p in m.parts if getattr(p, "part_kind", None) == "tool-call" and p.tool_call_id]


def last_prompt(messages: Sequence[Any]) -> Any:
    """The run's input: the content of the last user prompt among ``messages``."""
    for message in reversed(messages):
        for part in reversed(message.parts):
            if getattr(part, "part_kind", None) == "user-prompt":
                return to_jsonable(part.content)
    return None


def names_of(parameters: Any) -> Names:
    """What a request lets the model call: its function tools and its output tools."""
    return Names(tools=tuple(t.name for t in parameters.function_tools),
                 outputs=tuple(t.name for t in parameters.output_tools))
