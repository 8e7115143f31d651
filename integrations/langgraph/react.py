"""LangGraph's prebuilt ReAct agent (``create_react_agent``) with its agent and tools as nodes.

A graph ``create_react_agent`` built has an ``agent`` node (the model's turn) and a
``tools`` node (a ``ToolNode``) in a cycle; :func:`react_agent` recognises it, and
:meth:`ReactAgent.wrap` records it with the model every agent integration shares
(:mod:`quiver.integrations._agents`) instead of as two graph nodes:

* each run of the ``agent`` node is a :class:`~quiver.integrations._agents.Turn` of the
  node named by the agent (the graph's ``name``, or ``agent`` when it has none), its
  inputs the state's messages, its output read from the ``AIMessage`` it returned
  (``text``, ``tool_calls``, ``tool``) and its decision ``tools``;
* each tool call the ``ToolNode`` runs is a :class:`~quiver.integrations._agents.ToolRun`
  of the ``tool`` node named by the tool, through the ``ToolNode``'s own interceptor
  (``wrap_tool_call``/``awrap_tool_call``, composed with one the app gave);
* parents follow the conversation by tool call ids; the routing edges out of ``agent``
  and ``tools`` are not decisions of their own (the turn's ``tools`` says it);
* both write the state's channels as graph nodes do, for the graph's other nodes
  (a pre- or post-model hook, the structured response) to find their parents.

Each call takes its identity from its LangGraph task (a tool call also from its place
among the turn's tool calls), so parallel tool calls get the same identities whatever
order they run in.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quiver import InstrumentationError
from quiver.integrations._agents import AgentShape, FunctionCall, Names, Said, ToolRun, Turn, declare
from quiver.replay._instrument import Scope, current_builder

from .graph import _MARK, _GraphRun, _run, _task_meta
from .values import _messages_in, from_json, to_json

__all__ = ["ReactAgent", "react_agent"]

_AGENT, _TOOLS = "agent", "tools"
_DEFAULT_NAMES = (None, "", "LangGraph")
_SUPPORTED = "langgraph-prebuilt 1.x (ToolNode with wrap_tool_call)"


@dataclass(frozen=True)
class ReactAgent:
    """A graph ``create_react_agent`` built: the agent's node name and its ``ToolNode``."""

    name: str
    tool_node: Any | None

    graph_nodes = (_AGENT, _TOOLS)
    """The graph nodes the agent model records in their place (not as graph nodes)."""

    @property
    def names(self) -> Names:
        return Names(tools=tuple(self.tool_node.tools_by_name) if self.tool_node is not None else ())

    def wrap(self, builder: Any) -> None:
        """Record the agent's turns and its tool calls (once); declare their nodes."""
        runnable = builder.nodes[_AGENT].runnable
        for attr in ("func", "afunc"):
            fn = getattr(runnable, attr, None)
            if fn is not None and not getattr(fn, _MARK, False):
                setattr(runnable, attr, _turns(self.name, self.names, fn, asynchronous=attr == "afunc"))
        if self.tool_node is not None:
            _wrap_tool_node(self.tool_node)
        declare([AgentShape(self.name, self.names.tools)])


def react_agent(compiled: Any) -> ReactAgent | None:
    """The ReAct agent a compiled graph is, or None when ``create_react_agent`` did not build it."""
    from langgraph.prebuilt import ToolNode

    spec = compiled.builder.nodes.get(_AGENT)
    fn = getattr(getattr(spec, "runnable", None), "func", None)
    if fn is None or not getattr(inspect.unwrap(fn), "__qualname__", "").startswith("create_react_agent.<locals>."):
        return None
    tools = compiled.builder.nodes.get(_TOOLS)
    tool_node = tools.runnable if tools is not None and isinstance(tools.runnable, ToolNode) else None
    return ReactAgent(_AGENT if compiled.name in _DEFAULT_NAMES else str(compiled.name), tool_node)


# --------------------------------------------------------------------------- turns


def _running() -> tuple[_GraphRun, int, tuple[Any, ...]] | None:
    """The graph run being recorded and the current task's step and path."""
    run = _run.get()
    meta = _task_meta()
    if run is None or meta is None or current_builder.get() is not run.builder:
        return None
    return run, *meta


def _said(update: Any) -> tuple[Said, Any]:
    """What the ``AIMessage`` of the agent node's update says."""
    from langchain_core.messages import AIMessage

    answer = Said()
    for message in _messages_in(update):
        if not isinstance(message, AIMessage):
            continue
        content = message.content
        text = content if isinstance(content, str) else "".join(
            str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        if text:
            answer.texts.append(text)
        answer.calls += [FunctionCall(str(c["name"]), c["args"], c.get("id")) for c in message.tool_calls]
    return answer, update


def _open_turn(node: str, names: Names, state: Any) -> tuple[Turn, _GraphRun, int] | None:
    from langchain_core.messages import AIMessage

    running = _running()
    if running is None:
        return None
    run, step, path = running
    scope, _ = run.task_scope(step, path, _AGENT)
    messages = _messages_in(state)
    carried = [str(c["id"]) for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c.get("id")]
    first = next((to_json(m.content) for m in messages if getattr(m, "type", None) == "human"), None)
    under = run.parent if run.parent is not None and run.parent.kind == "tool" else None
    turn = Turn.open(node, {"messages": to_json(messages)}, names, _said, carried=carried, first_input=first,
                     scope=scope, under=under)
    return (turn, run, step) if turn is not None else None


def _turns(node: str, names: Names, fn: Callable[..., Any], *, asynchronous: bool) -> Callable[..., Any]:
    """The agent node's function, each run of it a turn of ``node``."""

    def closed(opened: tuple[Turn, _GraphRun, int], update: Any) -> Any:
        turn, run, step = opened
        update = turn.body.done(update)
        run.wrote(turn.record, step, update, _AGENT)
        return update

    if asynchronous:
        @functools.wraps(fn)
        async def aturn(*args: Any, **kwargs: Any) -> Any:
            opened = _open_turn(node, names, args[0] if args else None)
            if opened is None:
                return await fn(*args, **kwargs)
            with opened[0].body.running():
                update = await fn(*args, **kwargs)
            return closed(opened, update)

        setattr(aturn, _MARK, True)
        return aturn

    @functools.wraps(fn)
    def turn(*args: Any, **kwargs: Any) -> Any:
        opened = _open_turn(node, names, args[0] if args else None)
        if opened is None:
            return fn(*args, **kwargs)
        with opened[0].body.running():
            update = fn(*args, **kwargs)
        return closed(opened, update)

    setattr(turn, _MARK, True)
    return turn


# --------------------------------------------------------------------------- tools


def _wrap_tool_node(tool_node: Any) -> None:
    """Make every tool call the ``ToolNode`` runs a call of the tool's node (once),
    through its interceptors, composed with the app's own."""
    if getattr(tool_node, _MARK, False):
        return
    if not hasattr(tool_node, "_wrap_tool_call") or not hasattr(tool_node, "_awrap_tool_call"):
        raise InstrumentationError(
            f"this ToolNode keeps no tool-call interceptor (wrap_tool_call) where this integration adds its own; "
            f"it supports {_SUPPORTED}"
        )
    own_sync, own_async = tool_node._wrap_tool_call, tool_node._awrap_tool_call
    tool_node._wrap_tool_call = _sync_tools(own_sync)
    if own_async is not None or own_sync is None:  # else the async path falls back to the sync interceptor
        tool_node._awrap_tool_call = _async_tools(own_async)
    setattr(tool_node, _MARK, True)


def _open_tool(request: Any) -> tuple[ToolRun, _GraphRun, int] | None:
    running = _running()
    if running is None:
        return None
    run, step, path = running
    task, _ = run.task_scope(step, path, _TOOLS)
    call = request.tool_call
    index = _place(request.state, call.get("id"))
    scope = Scope((*task.key, index), f"{task.path}/[{index}]")
    opened = ToolRun.open(str(call["name"]), call.get("id"), call.get("args") or {}, scope=scope)
    return (opened, run, step) if opened is not None else None


def _place(state: Any, call_id: Any) -> int:
    """The place of a tool call among the tool calls of the turn that made it."""
    from langchain_core.messages import AIMessage

    for message in reversed(_messages_in(state)):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = [c.get("id") for c in message.tool_calls]
            return ids.index(call_id) if call_id in ids else 0
    return 0


def _served(value: Any, call: Any) -> Any:
    """What the ``ToolNode`` is handed for a served tool call: its recorded message."""
    from langchain_core.messages import ToolMessage

    if isinstance(value, dict) and "__command__" in value:
        return from_json(value)
    content = value if isinstance(value, (str, list)) else json.dumps(value)
    return ToolMessage(content=content, name=call["name"], tool_call_id=call.get("id"))


def _content(result: Any) -> Any:
    """What a tool call returned, as its node's output reads it: the message's content."""
    content = getattr(result, "content", None)
    return content if content is not None else to_json(result)


def _done(opened: tuple[ToolRun, _GraphRun, int], result: Any) -> Any:
    tool, run, step = opened
    if not tool.served:
        tool.body.done(_content(result))
    if tool.call.record is not None:
        run.wrote(tool.call.record, step, {"messages": [result]}, _TOOLS)
    return result


def _sync_tools(own: Callable[..., Any] | None) -> Callable[..., Any]:
    def wrapper(request: Any, execute: Callable[[Any], Any]) -> Any:
        def proceed(r: Any) -> Any:
            return own(r, execute) if own is not None else execute(r)

        opened = _open_tool(request)
        if opened is None:
            return proceed(request)
        if opened[0].served:
            return _done(opened, _served(opened[0].serve(), request.tool_call))
        with opened[0].body.running():
            result = proceed(request)
        return _done(opened, result)

    return wrapper


def _async_tools(own: Callable[..., Any] | None) -> Callable[..., Any]:
    async def wrapper(request: Any, execute: Callable[[Any], Any]) -> Any:
        opened = _open_tool(request)
        if opened is None:
            return await (own(request, execute) if own is not None else execute(request))
        if opened[0].served:
            return _done(opened, _served(opened[0].serve(), request.tool_call))
        with opened[0].body.running():
            result = await (own(request, execute) if own is not None else execute(request))
        return _done(opened, result)

    return wrapper
