"""The capability that records an agent's turns and tools, on pydantic-ai's own hooks.

:class:`Recorder` is a pydantic-ai capability (``pydantic_ai.capabilities``, the
framework's extension point for cross-cutting agent behaviour) that
:func:`~.wiring.instrument` adds to every run of an instrumented agent. Inside a
recording or a replay:

* ``get_wrapper_model`` wraps the model that serves each model request in a
  :class:`TurnModel` (a ``pydantic_ai.models.wrapper.WrapperModel``): its ``request``
  and ``request_stream`` run the request as a shared
  :class:`~quiver.integrations._agents.Turn` of the agent's node, in the task that sends
  it (pydantic-ai opens a streamed request in the task that consumes the stream). Its
  inputs are the request's messages and instructions (:func:`~.messages.messages_json`),
  its output read from the ``ModelResponse`` (:func:`~.messages.said_of`); the request
  itself is recorded on it by the transport capture, and served from the recording (or
  edited, for a perturbed turn) there.
* ``wrap_tool_execute`` runs each function tool's execution as a shared
  :class:`~quiver.integrations._agents.ToolRun` named by the tool (output tools are
  pydantic-ai's own and do not reach this hook: they are the turn's ``output``).

Outside a trace both call pydantic-ai's own code and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models.wrapper import WrapperModel

from quiver.integrations._agents import Said, ToolRun, Turn
from quiver.replay._instrument import current_call

from .messages import carried_ids, instructions_of, last_prompt, messages_json, names_of, said_of

__all__ = ["Recorder", "TurnModel"]


def _read(response: Any) -> tuple[Said, Any]:
    return said_of(response), response


def _open(node: str, messages: Any, parameters: Any) -> Turn | None:
    inputs = {"instructions": instructions_of(parameters), "messages": messages_json(messages)}
    enclosing = current_call.get()
    return Turn.open(node, inputs, names_of(parameters), _read, carried=carried_ids(messages),
                     first_input=last_prompt(messages),
                     under=enclosing if enclosing is not None and enclosing.kind == "tool" else None)


class TurnModel(WrapperModel):
    """A model whose requests are turns of the agent ``node`` (see the module)."""

    def __init__(self, wrapped: Any, node: str) -> None:
        super().__init__(wrapped)
        self.node = node

    async def request(self, messages: Any, model_settings: Any, model_request_parameters: Any) -> Any:
        turn = _open(self.node, messages, model_request_parameters)
        if turn is None:
            return await super().request(messages, model_settings, model_request_parameters)
        with turn.body.running():
            response = await super().request(messages, model_settings, model_request_parameters)
        return turn.body.done(response)

    @asynccontextmanager
    async def request_stream(self, messages: Any, model_settings: Any, model_request_parameters: Any,
                             run_context: Any = None) -> AsyncIterator[Any]:
        turn = _open(self.node, messages, model_request_parameters)
        inner = super().request_stream(messages, model_settings, model_request_parameters, run_context)
        if turn is None:
            async with inner as stream:
                yield stream
            return
        with turn.body.running():
            async with inner as stream:
                yield stream
        turn.body.done(stream.get())


@dataclass
class Recorder(AbstractCapability[Any]):
    """Records the turns of the agent ``node`` and the tools it runs (see the module)."""

    node: str
    """The agent's node name."""
    _: KW_ONLY
    id: str | None = None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_wrapper_model(self, model: Any) -> Any:
        return TurnModel(model, self.node)

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        run = ToolRun.open(str(tool_def.name), call.tool_call_id, args)
        if run is None:
            return await handler(args)
        if run.served:
            return run.serve()
        with run.body.running():
            result = await handler(args)
        return run.body.done(result)
