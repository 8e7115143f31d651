"""``instrument(agent, ...)``: the agents found, named and declared; their runs recorded.

Every run of an agent goes through ``Agent.iter`` (``run``, ``run_sync``, ``run_stream``
and ``run_stream_events`` call it), which takes per-run ``capabilities``.
:func:`instrument` replaces an agent's ``iter`` (on the agent object, once) with one that
adds a :class:`~.capability.Recorder` for the agent's node to the run's capabilities.
Nothing else of pydantic-ai is touched, and nothing records outside a recording or a
replay.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

from quiver._errors import InstrumentationError
from quiver.integrations._agents import AgentShape, declare

__all__ = ["instrument", "node_names"]

_SUPPORTED = "pydantic-ai 2.60 to 2.x"
_MARK = "__quiver_node__"
_DEFAULT_NAME = "agent"
_lock = threading.Lock()


def instrument(*agents: Any) -> Any:
    """Record and replay pydantic-ai agents with their turns and tools as nodes (see
    :mod:`quiver.integrations.pydantic_ai`).

    Args:
        agents: The app's agents. The agents their function tools run (agents a tool's
            function names, as a global or in its closure: delegation) are found from
            them and instrumented too.

    Returns:
        The first agent given, so that ``agent = instrument(Agent(...))`` reads well.

    Raises:
        InstrumentationError: No agent given, something that is not a pydantic-ai
            ``Agent``, two different agents with the same node name, or a pydantic-ai
            whose ``Agent.iter`` takes no per-run capabilities.
    """
    from pydantic_ai import Agent

    if not agents:
        raise InstrumentationError("instrument() needs the app's agent: instrument(agent)")
    for agent in agents:
        if not isinstance(agent, Agent):
            raise InstrumentationError(f"instrument() takes pydantic-ai Agent objects; got {type(agent).__name__}")
    found = _reachable(agents)
    _check_names(found)
    for agent in found:
        _wrap_iter(agent, node_name(agent))
    declare(_shape(agent) for agent in found)
    return agents[0]


def node_name(agent: Any) -> str:
    """The node an agent's turns are calls of: its ``name``, or ``agent`` without one."""
    return str(agent.name) if agent.name else _DEFAULT_NAME


def node_names(*agents: Any) -> list[str]:
    """The node names :func:`instrument` gives these agents and the agents they run:
    each agent's name, then its function tools' names, in the order found."""
    names: list[str] = []
    for agent in _reachable(agents):
        names += [node_name(agent), *_tool_names(agent)]
    return list(dict.fromkeys(names))


def _wrap_iter(agent: Any, node: str) -> None:
    """Give every run of ``agent`` a :class:`~.capability.Recorder` for ``node`` (once)."""
    from .capability import Recorder

    with _lock:
        if getattr(agent.iter, _MARK, None) is not None:
            return
        iterate = agent.iter
        if "capabilities" not in inspect.signature(iterate).parameters:
            import pydantic_ai

            raise InstrumentationError(
                f"pydantic-ai {getattr(pydantic_ai, '__version__', '?')}: Agent.iter takes no per-run capabilities, "
                f"which this integration adds its recorder with; it supports {_SUPPORTED}"
            )
        recorder = Recorder(node)

        @functools.wraps(iterate)
        def iter(*args: Any, capabilities: Any = None, **kwargs: Any) -> Any:
            return iterate(*args, capabilities=[*(capabilities or ()), recorder], **kwargs)

        setattr(iter, _MARK, node)
        agent.iter = iter


def _check_names(agents: list[Any]) -> None:
    """Two different agents of one app may not be one node."""
    seen: dict[str, Any] = {}
    for agent in agents:
        name = node_name(agent)
        if name in seen and seen[name] is not agent:
            raise InstrumentationError(
                f"two different agents of this app are both recorded as node {name!r}; give each its own name: "
                "Agent(..., name='...')"
            )
        seen[name] = agent


def _function_tools(agent: Any) -> dict[str, Any]:
    """An agent's function tools (of its function toolsets): name -> tool."""
    from pydantic_ai.toolsets import FunctionToolset

    tools: dict[str, Any] = {}
    for toolset in agent.toolsets:
        if isinstance(toolset, FunctionToolset):
            tools.update(toolset.tools)
    return tools


def _tool_names(agent: Any) -> tuple[str, ...]:
    return tuple(str(name) for name in _function_tools(agent))


def _named_agents(fn: Callable[..., Any]) -> Iterator[Any]:
    """The pydantic-ai agents a function names: globals it reads, its closure's cells."""
    from pydantic_ai import Agent

    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    globals_ = getattr(fn, "__globals__", {})
    values = [globals_[n] for n in code.co_names if n in globals_]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:
            continue
    yield from (v for v in values if isinstance(v, Agent))


def _delegates(agent: Any) -> list[tuple[str, Any]]:
    """(tool name, agent) for each agent a function tool of ``agent`` runs."""
    return [(name, inner) for name, tool in _function_tools(agent).items()
            for inner in _named_agents(tool.function) if inner is not agent]


def _reachable(agents: tuple[Any, ...]) -> list[Any]:
    """The agents given and every agent their tools run, in order."""
    found: dict[int, Any] = {}
    stack = list(reversed(agents))
    while stack:
        agent = stack.pop()
        if id(agent) not in found:
            found[id(agent)] = agent
            stack += reversed([inner for _, inner in _delegates(agent)])
    return list(found.values())


def _structured(agent: Any) -> bool:
    """Whether the agent answers through an output tool (pydantic-ai's default for an
    output type other than text, unless it asks for native or prompted output)."""
    from pydantic_ai.output import NativeOutput, PromptedOutput, TextOutput

    output = agent.output_type
    outputs = output if isinstance(output, (list, tuple)) else [output]
    return any(o is not str and not isinstance(o, (NativeOutput, PromptedOutput, TextOutput)) for o in outputs)


def _shape(agent: Any) -> AgentShape:
    return AgentShape(node_name(agent), _tool_names(agent), structured=_structured(agent),
                      delegates=tuple((tool, node_name(inner)) for tool, inner in _delegates(agent)))
