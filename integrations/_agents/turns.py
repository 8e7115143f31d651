"""An agent's model turn as a call of the node named by the agent.

:class:`Turn` is the protocol every agent integration runs around the model request of
one turn: :meth:`Turn.open` opens the call (its parents along the conversation), the
integration runs the framework's request inside ``turn.body.running()`` and closes it
with ``turn.body.done(result)``; the turn's output, decisions and the function calls it
made are read from the result by the integration's ``read``.

In a replay the body always runs: a frozen turn's request is answered from the
recording by the transport capture (the framework parses that answer as it parsed the
model's, whatever the model class), and the target of an output perturbation is served
the recorded answer edited to say the perturbed output (:func:`~.answers.answer_edit`),
so that the framework acts on it (runs the agent handed off to, the tool called). A turn
whose answer then does not say the perturbed output is reported not applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from quiver.integrations._body import Body
from quiver.replay._instrument import CallRecord, OpenCall, Scope, current_builder, current_loop, current_scope

from .answers import Names, Said, answer_edit, said, turn_output
from .conversation import conversation

__all__ = ["HANDOFF_GATE", "TOOLS_GATE", "Read", "Turn"]

HANDOFF_GATE = "handoff"
"""The decision of a turn that can hand off: the agent it handed off to (None for none)."""
TOOLS_GATE = "tools"
"""The decision of a turn that has tools: the names of the tools it called, in order."""

Read = Callable[[Any], tuple[Said, Any]]
"""What the body returned -> what its answer says, and what the wrapper returns."""


class Turn:
    """One model turn of an agent being recorded or replayed (see the module docstring)."""

    def __init__(self, call: OpenCall, names: Names, read: Read) -> None:
        self.call = call
        self.names = names
        self.read = read
        self.record: CallRecord = call.record  # type: ignore[assignment]
        directive = call.directive
        self.says: dict[str, Any] | None = None
        """What the served answer must say, for the target of an output perturbation."""
        if directive is not None and directive.action == "perturb" and directive.skip_body:
            self._serve_perturbed(directive)
        elif directive is not None and directive.skip_body:  # frozen: its request is served, the framework reads it
            directive.action, directive.skip_body = "run", False
        self.body = Body(call.enter, self._close, directive)

    @classmethod
    def open(cls, node: str, inputs: dict[str, Any], names: Names, read: Read, *, carried: Iterable[str],
             first_input: Any, scope: Scope | None = None, under: CallRecord | None = None) -> Turn | None:
        """Open a turn of the agent ``node`` (None outside a recording or a replay).

        Args:
            node: The agent's node name.
            inputs: The turn's inputs as recorded.
            names: What the turn can call.
            read: Reads the body's result.
            carried: The function call ids its input carries (its parents along the
                conversation).
            first_input: For the first turn of a run (no call id it carries is known):
                the run's input, whose producer is its parent (found by content).
            scope: Where the call takes its identity (default: the current scope).
            under: The tool call the run is made in (a tool that runs another agent):
                the first turn's parent, the producer of its input.
        """
        builder = current_builder.get()
        if builder is None:
            return None
        parents = conversation(builder).parents(carried)
        if not parents:  # the run's first turn: the tool that runs it, else the call whose output is its input
            parents = [under] if under is not None else builder._infer_parents({"input": first_input}, ())
        record = builder.open_call(node, "llm", scope or current_scope.get() or builder.root, inputs=inputs,
                                   loop=current_loop.get(), parents=parents)
        return cls(OpenCall(record), names, read)

    def _serve_perturbed(self, directive: Any) -> None:
        """The target of an output perturbation: the recorded answer, edited."""
        builder = current_builder.get()
        perturbed = builder.perturbed_output(self.record)  # type: ignore[union-attr]
        edit = answer_edit(directive.recorded.output or {}, perturbed or {}, self.names)
        if edit.refused is not None:
            builder.not_landed(edit.refused)  # type: ignore[union-attr]
        else:
            self.says = edit.says
        directive.action, directive.skip_body, directive.llm = "run", False, "serve"
        directive.answer_edit = edit.apply

    def _close(self, result: Any, error: BaseException | None) -> Any:
        if error is not None:
            self.call.exit(None, error)
            return None
        answer, returned = self.read(result)
        output = turn_output(answer, self.names)
        builder = current_builder.get()
        if builder is not None:
            conversation(builder).turn_made(self.record, answer.call_ids())
            if self.says is not None and said(output) != self.says:
                builder.not_landed(f"the served answer says {said(output)}, not the perturbed "  # type: ignore[attr-defined]
                                   f"{self.says}")
        if self.names.handoffs:
            self.record.decision[HANDOFF_GATE] = output["handoff"]
        if self.names.tools:
            self.record.decision[TOOLS_GATE] = [c["name"] for c in output["tool_calls"]]
        self.call.exit(output, None)
        return returned
