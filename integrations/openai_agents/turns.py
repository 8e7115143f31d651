"""An agent's model turns as calls of the node named by the agent.

:class:`AgentModel` stands in for the model the SDK resolved for an agent's turn and
delegates everything to it; inside a recording or a replay, ``get_response`` and
``stream_response`` run the model's request as a shared
:class:`~quiver.integrations._agents.Turn` of the agent's node (which the transport
capture records the request on), its output read from the answer's items
(:func:`~.items.said_of`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from quiver._canonical import to_jsonable
from quiver.integrations._agents import Said, Turn

from .items import carried_ids, first_user_text, names_of, said_of

__all__ = ["AgentModel"]


class AgentModel:
    """The model of one agent's turns (see the module docstring)."""

    def __init__(self, inner: Any, agent: Any, wrap_tools: Callable[[Any], None]) -> None:
        self._inner = inner
        self._agent = agent
        self._wrap_tools = wrap_tools

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> Any:
        turn = _open(self._agent, system_instructions, input, handoffs, tools)
        if turn is None:
            return await self._inner.get_response(system_instructions, input, model_settings, tools, output_schema,
                                                  handoffs, tracing, **kwargs)
        self._wrap_tools(tools)
        with turn.body.running():
            response = await self._inner.get_response(system_instructions, input, model_settings, tools,
                                                      output_schema, handoffs, tracing, **kwargs)
        return turn.body.done((response, response.output))

    async def stream_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                              output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any
                              ) -> AsyncIterator[Any]:
        turn = _open(self._agent, system_instructions, input, handoffs, tools)
        stream = self._inner.stream_response(system_instructions, input, model_settings, tools, output_schema,
                                             handoffs, tracing, **kwargs)
        if turn is None:
            async for event in stream:
                yield event
            return
        self._wrap_tools(tools)
        items: list[Any] = []
        with turn.body.running():
            async for event in stream:
                if getattr(event, "type", None) == "response.output_item.done":
                    items.append(event.item)
                elif getattr(event, "type", None) == "response.completed" and event.response.output:
                    items = list(event.response.output)
                yield event
        turn.body.done((None, items))


def _read(result: tuple[Any, Any]) -> tuple[Said, Any]:
    response, items = result
    return said_of(items), response


def _open(agent: Any, instructions: Any, input: Any, handoffs: Any, tools: Any) -> Turn | None:
    inputs = {"instructions": instructions, "input": to_jsonable(input)}
    return Turn.open(str(agent.name), inputs, names_of(handoffs or (), tools or ()), _read,
                     carried=carried_ids(inputs["input"]), first_input=first_user_text(inputs["input"]))
