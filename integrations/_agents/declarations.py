"""The nodes of an agent app, declared for the analysis from the agents themselves.

Each agent's node (kind ``llm``) has the fields of its turns' output: ``text`` (text),
``tool_calls`` (a list), ``tool`` categorical over its function tools and ``handoff``
categorical over the agents it hands off to (both routing fields), ``output`` (a
mapping) when it answers through an output tool. Each tool's node (kind ``tool``) has
the edges agent -> tool -> agent, and an agent handed off to (or run by a tool) has an
edge from the agent (or tool) that reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quiver.replay import node

if TYPE_CHECKING:
    from quiver import CallKind

__all__ = ["AgentShape", "declare"]


@dataclass(frozen=True)
class AgentShape:
    """One agent as the declarations see it."""

    name: str
    tools: tuple[str, ...] = ()
    handoffs: tuple[str, ...] = ()
    """The agents it hands off to."""
    structured: bool = False
    """It answers through an output tool (its turns have an ``output``)."""
    delegates: tuple[tuple[str, str], ...] = ()
    """(tool, agent): a tool of it that runs another agent."""


def declare(agents: Iterable[AgentShape]) -> None:
    """Declare each agent's node and its tools' nodes, with their edges."""
    parents: dict[str, list[str]] = {}
    fields: dict[str, dict[str, Any] | None] = {}
    for agent in agents:
        own: dict[str, Any] = {"text": {"type": "text"}, "tool_calls": {"type": "list"}}
        if agent.handoffs:
            own["handoff"] = {"type": "categorical", "role": "routing", "categories": list(agent.handoffs)}
        if agent.tools:
            own["tool"] = {"type": "categorical", "role": "routing", "categories": list(agent.tools)}
        if agent.structured:
            own["output"] = {"type": "mapping"}
        fields[agent.name] = own
        for tool in agent.tools:
            fields.setdefault(tool, None)
            parents.setdefault(tool, []).append(agent.name)
            parents.setdefault(agent.name, []).append(tool)
        for target in agent.handoffs:
            parents.setdefault(target, []).append(agent.name)
        for tool, inner in agent.delegates:
            parents.setdefault(inner, []).append(tool)
    for name, declared in fields.items():
        kind: CallKind = "llm" if declared is not None else "tool"
        node(name, kind=kind, fields=declared, parents=list(dict.fromkeys(parents.get(name, []))))
