"""``instrument(agent, ...)``: the agents found, their nodes declared, the SDK hooked once.

The SDK resolves the model of every turn through one function of its run loop
(``agents.run_internal.run_loop.get_model``); :func:`instrument` replaces it, once per
process, with one that hands back the resolved model wrapped in an
:class:`~.turns.AgentModel` for the agent whose turn it is. Function tools are wrapped
when a turn is given them (and, for the agents found here, at once). Nothing is wrapped
twice, and nothing records outside a recording or a replay.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

from quiver._errors import InstrumentationError
from quiver.integrations._agents import AgentShape, declare

from .tools import wrap_tool, wrap_tools
from .turns import AgentModel

__all__ = ["instrument", "node_names"]

_SUPPORTED = "openai-agents 0.24"
_lock = threading.Lock()
_installed = False
_instrumented: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""The agents :func:`instrument` found (by identity): only their turns are recorded as
calls of their nodes; another agent's requests are captured at the transport as before,
as ``llm`` calls of the node that runs it."""


def instrument(*agents: Any) -> Any:
    """Record and replay an openai-agents app with its agents, tools and handoffs as
    nodes (see :mod:`quiver.integrations.openai_agents`).

    Args:
        agents: The app's entry agents. The agents they hand off to and the agents
            they use as tools (``Agent.as_tool``) are found from them. Only these agents
            (these objects: a clone made later is another agent) are recorded as nodes;
            any other agent's requests are captured at the transport as before.

    Returns:
        The first agent given, so that ``triage = instrument(Agent(...))`` reads well.

    Raises:
        InstrumentationError: No agent given, something that is not an ``Agent``, or an
            SDK whose run loop this integration does not know.
    """
    from agents import Agent

    if not agents:
        raise InstrumentationError("instrument() needs the app's entry agent: instrument(triage_agent)")
    for agent in agents:
        if not isinstance(agent, Agent):
            raise InstrumentationError(f"instrument() takes openai-agents Agent objects; got {type(agent).__name__}")
    _install()
    found = _reachable(agents)
    for agent in found:
        _instrumented[id(agent)] = agent
    _declare(found)
    for agent in found:
        for tool in _function_tools(agent):
            wrap_tool(tool)
    return agents[0]


def node_names(*agents: Any) -> list[str]:
    """The node names :func:`instrument` gives these agents and what they reach: each
    agent's name, then its function tools' names, in the order found."""
    names: list[str] = []
    for agent in _reachable(agents):
        names.append(str(agent.name))
        names += _own_tools(agent)
    return list(dict.fromkeys(names))


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        try:
            from agents.run_internal import run_loop
        except ImportError:
            resolve = None
        else:
            resolve = getattr(run_loop, "get_model", None)
        if not callable(resolve):
            import agents

            raise InstrumentationError(
                f"openai-agents {getattr(agents, '__version__', '?')}: its run loop resolves models where this "
                f"integration does not look (agents.run_internal.run_loop.get_model); it supports {_SUPPORTED}"
            )

        resolved = resolve

        def get_model(agent: Any, run_config: Any) -> Any:
            model = resolved(agent, run_config)
            return AgentModel(model, agent, wrap_tools) if _instrumented.get(id(agent)) is agent else model

        run_loop.get_model = get_model
        _installed = True


def _handoff_agents(agent: Any) -> Iterator[Any]:
    from agents import Agent

    for h in agent.handoffs or ():
        if isinstance(h, Agent):
            yield h
            continue
        ref = getattr(h, "_agent_ref", None)
        target = ref() if callable(ref) else None
        if isinstance(target, Agent):
            yield target


def _function_tools(agent: Any) -> list[Any]:
    from agents import FunctionTool

    return [t for t in agent.tools or () if isinstance(t, FunctionTool)]


def _reachable(agents: tuple[Any, ...]) -> list[Any]:
    """The agents given and every agent they reach by handoff or as a tool, in order."""
    found: dict[int, Any] = {}
    stack = list(reversed(agents))
    while stack:
        agent = stack.pop()
        if id(agent) in found:
            continue
        found[id(agent)] = agent
        inner = [t._agent_instance for t in _function_tools(agent) if getattr(t, "_agent_instance", None) is not None]
        stack += reversed([*_handoff_agents(agent), *inner])
    return list(found.values())


def _declare(agents: list[Any]) -> None:
    """Declare each agent's node (its turns' fields) and its tools' nodes, with the edges
    agent -> its tools -> the agent, and agent -> the agents it hands off to."""
    declare(AgentShape(str(a.name), _own_tools(a), tuple(str(h.name) for h in _handoff_agents(a))) for a in agents)


def _own_tools(agent: Any) -> tuple[str, ...]:
    """The names of an agent's function tools (not the agents it uses as tools)."""
    return tuple(str(t.name) for t in _function_tools(agent) if not getattr(t, "_is_agent_tool", False))
