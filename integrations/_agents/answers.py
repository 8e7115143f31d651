"""What an agent's model turn decided, and the answer a perturbed turn is served with.

Every agent framework hands its model's answer over as text and function calls (the
Responses API's items, a pydantic-ai ``ModelResponse``'s parts, a LangChain
``AIMessage``); the integration reads them into :class:`Said` and :func:`turn_output`
makes the turn's output of them, the same for every framework. A perturbation of that
output is written back into the recorded answer in the neutral form every wire format
converts to (:func:`answer_edit`): the function calls in the chat completions' shape, so
that the framework reads the perturbed decision from the answer it is served, as it
would read a model's.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import to_jsonable
from quiver._wire import Answer

__all__ = ["Edit", "FunctionCall", "Names", "Said", "answer_edit", "arguments_value", "said", "turn_output"]


@dataclass(frozen=True)
class Names:
    """What a turn could call, by the names its model sees.

    Attributes:
        tools: The function tools' names.
        handoffs: Handoff tool name -> the agent it hands off to; None for a framework
            without handoffs (the turn's output then has no ``handoff``).
        outputs: The output tools' names (a structured answer given as a tool call); the
            turn's output has an ``output`` (the first one's arguments) when there are any.
    """

    tools: tuple[str, ...]
    handoffs: Mapping[str, str] | None = None
    outputs: tuple[str, ...] = ()

    def tool_name_of(self, agent: str) -> str | None:
        """The handoff tool that hands off to ``agent``."""
        return next((tool for tool, target in (self.handoffs or {}).items() if target == agent), None)

    def kind_of(self, name: str) -> str:
        """``handoff``, ``output`` or ``tool``: what a call of the function ``name`` is."""
        if name in (self.handoffs or {}):
            return "handoff"
        return "output" if name in self.outputs else "tool"


@dataclass(frozen=True)
class FunctionCall:
    """One function call of an answer: its name, its arguments (a JSON text or a value)
    and the id the framework links its result by."""

    name: str
    arguments: Any
    call_id: str | None = None


@dataclass
class Said:
    """What an answer says: its text parts and its function calls, in order."""

    texts: list[str] = field(default_factory=list)
    calls: list[FunctionCall] = field(default_factory=list)

    def call_ids(self) -> list[str]:
        return [c.call_id for c in self.calls if c.call_id]


def arguments_value(text: Any) -> Any:
    """A function call's arguments as their JSON value (the text when it is not JSON)."""
    if not isinstance(text, str):
        return to_jsonable(text)
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def turn_output(answer: Said, names: Names) -> dict[str, Any]:
    """A turn's output: ``text`` (None when it only called functions), ``tool_calls``
    (``{"name", "arguments"}`` of each function tool it called, in order), ``tool`` (the
    first one's name, None for none), ``handoff`` (the agent handed off to, None for none;
    only for a framework with handoffs) and ``output`` (the output tool's arguments; only
    for an agent with output tools)."""
    calls: list[dict[str, Any]] = []
    handoff: str | None = None
    output: Any = None
    for call in answer.calls:
        kind = names.kind_of(call.name)
        if kind == "handoff":
            handoff = handoff or (names.handoffs or {})[call.name]
        elif kind == "output":
            output = arguments_value(call.arguments) if output is None else output
        else:
            calls.append({"name": call.name, "arguments": arguments_value(call.arguments)})
    out: dict[str, Any] = {"text": "".join(answer.texts) if answer.texts else None, "tool_calls": calls,
                           "tool": calls[0]["name"] if calls else None}
    if names.handoffs is not None:
        out["handoff"] = handoff
    if names.outputs:
        out["output"] = output
    return out


def said(output: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a turn's output its answer says (what a perturbation must change)."""
    return {k: output.get(k) for k in ("text", "tool_calls", "handoff", "output") if k in output}


def _argument_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _call_id(basis: Any) -> str:
    """A call id for a function call a perturbation adds (fixed by what it calls)."""
    return "call_quiver_" + hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Edit:
    """How a perturbed turn's recorded answer is served."""

    apply: Callable[[Answer], Answer]
    """The recorded answer -> the answer served."""
    says: dict[str, Any]
    """What the served answer must say (:func:`said`) for the perturbation to have landed."""
    refused: str | None = None
    """Why the perturbed output cannot be said by this agent's answer (None: it can)."""


def _refused(reason: str) -> Edit:
    return Edit(lambda a: a, {}, reason)


def _perturbed_calls(recorded: Mapping[str, Any], perturbed: Mapping[str, Any], names: Names
                     ) -> tuple[list[dict[str, Any]], str | None]:
    """The function tool calls the perturbed output says, and why it cannot (None when it can)."""
    calls = list(perturbed.get("tool_calls") or [])
    if perturbed.get("tool") == recorded.get("tool") or perturbed.get("tool_calls") != recorded.get("tool_calls"):
        return calls, None
    tool = perturbed.get("tool")
    if tool is not None and tool not in names.tools:
        return calls, f"this agent has no tool {tool!r}; its tools are {', '.join(names.tools) or 'none'}"
    if tool is None:
        return calls[1:], None
    return ([{**calls[0], "name": tool}, *calls[1:]] if calls else [{"name": tool, "arguments": {}}]), None


def answer_edit(recorded: Mapping[str, Any], perturbed: Mapping[str, Any], names: Names) -> Edit:
    """How to serve the recorded answer so that it says ``perturbed`` instead of
    ``recorded`` (two turn outputs), or why it cannot.

    A changed ``handoff`` replaces the handoff call (keeping its call id) or adds or drops
    one; changed ``tool_calls`` replace the function calls (call ids kept by position); a
    changed ``tool`` renames the first function call, its arguments kept; a changed
    ``output`` gives the output tool call those arguments; a changed ``text`` replaces
    the answer's text.
    """
    handoff = perturbed.get("handoff")
    target = names.tool_name_of(str(handoff)) if handoff is not None else None
    if handoff is not None and target is None:
        return _refused(f"this agent cannot hand off to {handoff!r}; its handoffs are "
                        f"{', '.join(map(repr, (names.handoffs or {}).values())) or 'none'}")
    calls, impossible = _perturbed_calls(recorded, perturbed, names)
    if impossible is not None:
        return _refused(impossible)
    output_changed = perturbed.get("output") != recorded.get("output")
    if output_changed and not names.outputs:
        return _refused("this agent answers without an output tool")

    def edit(answer: Answer) -> Answer:
        out = copy.deepcopy(answer)
        by_kind: dict[str, list[dict[str, Any]]] = {"tool": [], "handoff": [], "output": []}
        for call in out.tool_calls:
            by_kind[names.kind_of(str(_fn(call).get("name")))].append(call)
        own = by_kind["tool"]
        new_calls = [_chat_call(own[k].get("id") if k < len(own) else _call_id([answer.id, k, call]), call["name"],
                                call["arguments"]) for k, call in enumerate(calls)]
        new_calls += _output_calls(by_kind["output"], perturbed.get("output") if output_changed else None,
                                   names, answer.id)
        if target is not None:
            handed = by_kind["handoff"]
            call_id = handed[0].get("id") if handed else _call_id([answer.id, "handoff", target])
            new_calls.append(_chat_call(call_id, target, "{}"))
        out.tool_calls = new_calls
        if perturbed.get("text") != recorded.get("text"):
            out.text = str(perturbed.get("text") or "")
        return out

    return Edit(edit, said({**perturbed, "tool_calls": calls}))


def _chat_call(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": _argument_text(arguments)}}


def _output_calls(recorded: list[dict[str, Any]], value: Any, names: Names, answer_id: str | None
                  ) -> list[dict[str, Any]]:
    """The answer's output tool calls, the first given ``value`` as its arguments (None:
    as they were)."""
    if value is None:
        return recorded
    if recorded:
        first = recorded[0]
        return [_chat_call(first.get("id"), str(_fn(first).get("name")), value), *recorded[1:]]
    return [_chat_call(_call_id([answer_id, "output", value]), names.outputs[0], value)]


def _fn(call: Mapping[str, Any]) -> Mapping[str, Any]:
    function = call.get("function")
    return function if isinstance(function, Mapping) else {}

