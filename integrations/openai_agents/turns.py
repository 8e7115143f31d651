"""An agent's model turns as calls of the node named by the agent.

:class:`AgentModel` stands in for the model the SDK resolved for an agent's turn and
delegates everything to it; inside a recording or a replay, ``get_response`` and
``stream_response`` open a call of the agent's node around the model's request (which the
transport capture records on that call), then record the turn's output and decisions
(:func:`~.items.turn_output`) and the function calls it made (for its tool calls'
parents).

In a replay the body always runs: a frozen turn's request is answered from the
recording by the transport capture (the SDK parses that answer as it parsed the
model's, whatever the model class), and the target of an output perturbation is served
the recorded answer edited to say the perturbed output (:func:`~.items.answer_edit`), so
that the SDK acts on it (runs the agent handed off to, the tool called). A turn whose
answer then does not say the perturbed output is reported not applied.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from quiver._canonical import to_jsonable
from quiver.integrations._body import Body
from quiver.replay._instrument import CallRecord, OpenCall, current_builder, current_loop, current_scope

from .items import Names, answer_edit, conversation, turn_output

__all__ = ["AgentModel", "HANDOFF_GATE", "TOOLS_GATE"]

HANDOFF_GATE = "handoff"
TOOLS_GATE = "tools"


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
        turn = _Turn.open(self._agent, system_instructions, input, handoffs, tools)
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
        turn = _Turn.open(self._agent, system_instructions, input, handoffs, tools)
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


class _Turn:
    """One model turn of an agent being recorded or replayed."""

    def __init__(self, call: OpenCall, agent: Any, names: Names) -> None:
        self.call = call
        self.agent = agent
        self.names = names
        self.record: CallRecord = call.record  # type: ignore[assignment]
        directive = call.directive
        self.perturbed: dict[str, Any] | None = None
        if directive is not None and directive.action == "perturb" and directive.skip_body:
            self._serve_perturbed(directive)
        elif directive is not None and directive.skip_body:  # frozen: its request is served, the SDK reads it
            directive.action, directive.skip_body = "run", False
        self.body = Body(call.enter, self._close, directive)

    @classmethod
    def open(cls, agent: Any, instructions: Any, input: Any, handoffs: Any, tools: Any) -> _Turn | None:
        builder = current_builder.get()
        if builder is None:
            return None
        name = str(agent.name)
        inputs = {"instructions": instructions, "input": to_jsonable(input)}
        parents = conversation(builder).parents(inputs["input"])
        if not parents:  # the run's first turn: the call whose output is its input
            parents = builder._infer_parents({"input": _first_user_text(inputs["input"])}, ())
        record = builder.open_call(name, "llm", current_scope.get() or builder.root, inputs=inputs,
                                   loop=current_loop.get(), parents=parents)
        return cls(OpenCall(record), agent, Names.of(handoffs or (), tools or ()))

    def _serve_perturbed(self, directive: Any) -> None:
        """The target of an output perturbation: the recorded answer, edited."""
        builder = current_builder.get()
        recorded = directive.recorded
        self.perturbed = builder.perturbed_output(self.record)  # type: ignore[union-attr]
        edit, impossible = answer_edit(recorded.output or {}, self.perturbed or {}, self.names)
        if impossible is not None:
            builder.not_landed(impossible)  # type: ignore[union-attr]
            self.perturbed = None
        directive.action, directive.skip_body, directive.llm = "run", False, "serve"
        directive.answer_edit = edit

    def _close(self, result: Any, error: BaseException | None) -> Any:
        if error is not None:
            self.call.exit(None, error)
            return None
        response, items = result
        output = turn_output(items, self.names)
        builder = current_builder.get()
        if builder is not None:
            conversation(builder).turn_made(self.record, items)
            if self.perturbed is not None and _said(output) != _said(self.perturbed):
                builder.not_landed(f"the served answer says {_said(output)}, not the perturbed "  # type: ignore[attr-defined]
                                   f"{_said(self.perturbed)}")
        if self.names.handoffs:
            self.record.decision[HANDOFF_GATE] = output["handoff"]
        if self.names.tools:
            self.record.decision[TOOLS_GATE] = [c["name"] for c in output["tool_calls"]]
        self.call.exit(output, None)
        return response


def _said(output: dict[str, Any]) -> dict[str, Any]:
    """The parts of a turn's output its answer says (what a perturbation must change)."""
    return {k: output.get(k) for k in ("text", "tool_calls", "handoff")}


def _first_user_text(items: Any) -> Any:
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
