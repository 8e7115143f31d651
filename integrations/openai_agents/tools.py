"""Function tools as ``tool`` nodes named by the tool.

:func:`wrap_tool` replaces a ``FunctionTool``'s ``on_invoke_tool`` in place (once) with
one that, inside a recording or a replay, runs the invocation as a shared
:class:`~quiver.integrations._agents.ToolRun` (its parent the turn that asked for it, by
the context's ``tool_call_id``). Outside a trace the wrapper calls the tool and nothing
else.
"""

from __future__ import annotations

import functools
from typing import Any

from quiver.integrations._agents import ToolRun

__all__ = ["wrap_tool", "wrap_tools"]

_MARK = "__quiver_tool__"


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
        run = ToolRun.open(name, getattr(ctx, "tool_call_id", None), arguments)
        if run is None:
            return await invoke(ctx, arguments)
        if run.served:
            return run.serve()
        with run.body.running():
            result = await invoke(ctx, arguments)
        return run.body.done(result)

    setattr(on_invoke_tool, _MARK, True)
    tool.on_invoke_tool = on_invoke_tool
