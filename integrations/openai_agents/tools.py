"""Function tools as ``tool`` nodes named by the tool.

:func:`wrap_tool` replaces a ``FunctionTool``'s ``on_invoke_tool`` in place (once) with
one that, inside a recording or a replay, opens a ``tool`` call named by the tool around
it: its inputs the call's arguments, its parent the turn that asked for it, its output
what the tool returned, with the replay contract's tool step. A tool that returns a JSON
text (``json.dumps(...)``, as tools often do) is recorded as that JSON value, so that an
``override`` can set one of its fields; the SDK is handed the text again, the
recorded text itself when the value is the recorded one. Outside a trace the wrapper
calls the tool and nothing else.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._trace import ToolStep
from quiver.integrations._body import Body
from quiver.replay._instrument import OpenCall, current_builder, current_loop, current_scope

from .items import conversation

__all__ = ["wrap_tool", "wrap_tools"]

_MARK = "__quiver_tool__"
_TEXT_TAG = "json_text"
"""Tag of a tool call whose tool returned a JSON text: the text as returned."""


def wrap_tools(tools: Any) -> None:
    """Wrap every function tool of a turn's ``tools`` (see :func:`wrap_tool`)."""
    from agents import FunctionTool

    for tool in tools or ():
        if isinstance(tool, FunctionTool):
            wrap_tool(tool)


def wrap_tool(tool: Any) -> None:
    """Make ``tool``'s invocations calls of the ``tool`` node named by it."""
    invoke = tool.on_invoke_tool
    if getattr(invoke, _MARK, False):
        return
    name = str(tool.name)

    @functools.wraps(invoke)
    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        builder = current_builder.get()
        if builder is None:
            return await invoke(ctx, arguments)
        call_id = getattr(ctx, "tool_call_id", None)
        chat = conversation(builder)
        asker = chat.asker(call_id)
        inputs = {"arguments": _value(arguments)}
        record = builder.open_call(name, "tool", current_scope.get() or builder.root, inputs=inputs,
                                   loop=current_loop.get(), parents=[asker] if asker is not None else None)
        chat.tool_ran(call_id, record)
        call = OpenCall(record)
        directive = call.directive
        if directive is not None and directive.skip_body:
            return _returned(call.serve(), record.tags)
        body = Body(call.enter, lambda result, error: _close(call, inputs, result, error), directive)
        with body.running():
            result = await invoke(ctx, arguments)
        return body.done(result)

    setattr(on_invoke_tool, _MARK, True)
    tool.on_invoke_tool = on_invoke_tool


def _value(text: Any) -> Any:
    """A JSON text's value; anything else as it is."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return to_jsonable(text)


def _close(call: OpenCall, inputs: dict[str, Any], result: Any, error: BaseException | None) -> Any:
    record = call.record
    assert record is not None
    if error is not None:
        call.exit(None, error)
        return None
    output = _value(result) if isinstance(result, str) else to_jsonable(result)
    if isinstance(result, str) and output != result:
        record.tags[_TEXT_TAG] = result
    record.tool = ToolStep(name=record.node, args=inputs["arguments"] if isinstance(inputs["arguments"], dict)
                           else {"input": inputs["arguments"]}, response=output, response_hash=content_hash(output))
    call.exit(output, None)
    return result


def _returned(output: Any, tags: dict[str, Any]) -> Any:
    """What the SDK is handed for a served tool call: the recorded text for the recorded
    value, the JSON text of any other value a JSON-text tool is given."""
    text = tags.get(_TEXT_TAG)
    if not isinstance(text, str):
        return output
    return text if _value(text) == output else json.dumps(output)
