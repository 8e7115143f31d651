"""A function tool's invocation as a call of the ``tool`` node named by the tool.

:class:`ToolRun` is the protocol every agent integration runs around one invocation:
:meth:`ToolRun.open` opens the call (its inputs the call's arguments, its parent the
turn that asked for it, by call id); a replay that serves it gives :meth:`ToolRun.serve`
(the tool does not run), else the tool runs inside ``run.body.running()`` and
``run.body.done(value)`` closes the call with what it returned, with the replay
contract's tool step.

A tool that returns a JSON text (``json.dumps(...)``, as tools often do) is recorded as
that JSON value, so that an ``override`` can set one of its fields; the framework is
handed the text again, the recorded text itself when the value is the recorded one.
"""

from __future__ import annotations

import json
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._trace import ToolStep
from quiver.integrations._body import Body
from quiver.replay._instrument import OpenCall, Scope, current_builder, current_loop, current_scope

from .conversation import conversation

__all__ = ["ToolRun", "json_value"]

_TEXT_TAG = "json_text"
"""Tag of a tool call whose tool returned a JSON text: the text as returned."""


def json_value(text: Any) -> Any:
    """A JSON text's value; anything else as it is (made JSON)."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return to_jsonable(text)


class ToolRun:
    """One invocation of a function tool being recorded or replayed."""

    def __init__(self, call: OpenCall, inputs: dict[str, Any]) -> None:
        self.call = call
        self.inputs = inputs
        directive = call.directive
        self.served = directive is not None and bool(directive.skip_body)
        """The replay serves the call: :meth:`serve` gives what the tool returns."""
        self.body = Body(call.enter, self._close, directive)

    @classmethod
    def open(cls, name: str, call_id: str | None, arguments: Any, *, scope: Scope | None = None) -> ToolRun | None:
        """Open a call of the tool ``name`` asked for with ``call_id`` (None outside a
        recording or a replay); ``arguments`` as the model gave them (a JSON text or a value)."""
        builder = current_builder.get()
        if builder is None:
            return None
        chat = conversation(builder)
        asker = chat.asker(call_id)
        inputs = {"arguments": json_value(arguments)}
        record = builder.open_call(name, "tool", scope or current_scope.get() or builder.root, inputs=inputs,
                                   loop=current_loop.get(), parents=[asker] if asker is not None else None)
        chat.tool_ran(call_id, record)
        return cls(OpenCall(record), inputs)

    def serve(self) -> Any:
        """What the tool returns in a replay that serves the call: the recorded text for
        the recorded value, the JSON text of any other value a JSON-text tool is given."""
        assert self.call.record is not None
        output = self.call.serve()
        text = self.call.record.tags.get(_TEXT_TAG)
        if not isinstance(text, str):
            return output
        return text if json_value(text) == output else json.dumps(output)

    def _close(self, result: Any, error: BaseException | None) -> Any:
        record = self.call.record
        assert record is not None
        if error is not None:
            self.call.exit(None, error)
            return None
        output = json_value(result)
        if isinstance(result, str) and output != result:
            record.tags[_TEXT_TAG] = result
        arguments = self.inputs["arguments"]
        args = arguments if isinstance(arguments, dict) else {"input": arguments}
        record.tool = ToolStep(name=record.node, args=args, response=output, response_hash=content_hash(output))
        self.call.exit(output, None)
        return result
