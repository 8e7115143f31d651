"""What an agent's model turn decided, read from the SDK's items; the answer a perturbed
turn is served with; and the conversation's links from one call to the next.

A turn's output (:func:`turn_output`) is read from its response's output items, whatever
the wire format carried them (the SDK hands every model's answer over as Responses API
items). A perturbation of that output is written back into the recorded answer in the
neutral form every wire format converts to (:func:`answer_edit`): the function calls in
the chat completions' shape, so the SDK reads the perturbed decision from the answer it
is served, as it would read a model's.

Parents (:class:`Conversation`) are read from the call ids the items carry: the turn that
asked for a function call, the tool call that answered it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import to_jsonable
from quiver._wire import Answer
from quiver.replay._instrument import CallRecord, TraceBuilder

__all__ = ["Conversation", "Names", "answer_edit", "conversation", "turn_output"]


@dataclass(frozen=True)
class Names:
    """What a turn could call: its handoffs' tool names -> target agents, its tools' names."""

    handoffs: Mapping[str, str]
    """Handoff tool name -> the agent it hands off to."""
    tools: tuple[str, ...]

    @classmethod
    def of(cls, handoffs: Iterable[Any], tools: Iterable[Any]) -> Names:
        """From the ``handoffs`` and ``tools`` a model turn was given."""
        return cls({str(h.tool_name): str(h.agent_name) for h in handoffs},
                   tuple(str(t.name) for t in tools if hasattr(t, "name")))

    def tool_name_of(self, agent: str) -> str | None:
        """The handoff tool that hands off to ``agent``."""
        return next((tool for tool, target in self.handoffs.items() if target == agent), None)


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)


def _text(item: Any) -> str:
    parts = _get(item, "content") or []
    return "".join(str(_get(p, "text") or "") for p in parts if _get(p, "type") == "output_text")


def turn_output(items: Sequence[Any], names: Names) -> dict[str, Any]:
    """A turn's output: ``text``, ``tool_calls``, ``tool`` and ``handoff`` (see the package)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    handoff: str | None = None
    for item in items:
        kind = _get(item, "type")
        if kind == "message":
            texts.append(_text(item))
        elif kind == "function_call":
            name = str(_get(item, "name"))
            if name in names.handoffs:
                handoff = handoff or names.handoffs[name]
            else:
                calls.append({"name": name, "arguments": _arguments(_get(item, "arguments"))})
    return {"text": "".join(texts) if texts else None, "tool_calls": calls,
            "tool": calls[0]["name"] if calls else None, "handoff": handoff}


def _arguments(text: Any) -> Any:
    """A function call's arguments as their JSON value (the text when it is not JSON)."""
    if not isinstance(text, str):
        return to_jsonable(text)
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def _argument_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _call_id(basis: Any) -> str:
    """A call id for a function call a perturbation adds (fixed by what it calls)."""
    return "call_quiver_" + hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:20]


def answer_edit(recorded: Mapping[str, Any], perturbed: Mapping[str, Any], names: Names
                ) -> tuple[Callable[[Answer], Answer], str | None]:
    """How to serve the recorded answer so that it says ``perturbed`` instead of
    ``recorded`` (two turn outputs), and why it cannot (None when it can).

    A changed ``handoff`` replaces the handoff call (keeping its call id) or adds or drops
    one; changed ``tool_calls`` replace the function calls (call ids kept by position); a
    changed ``tool`` renames the first function call, its arguments kept; a changed
    ``text`` replaces the answer's text.
    """
    handoff = perturbed.get("handoff")
    target = names.tool_name_of(str(handoff)) if handoff is not None else None
    if handoff is not None and target is None:
        return (lambda a: a), (f"this agent cannot hand off to {handoff!r}; its handoffs are "
                               f"{', '.join(map(repr, names.handoffs.values())) or 'none'}")
    calls = list(perturbed.get("tool_calls") or [])
    if perturbed.get("tool") != recorded.get("tool") and perturbed.get("tool_calls") == recorded.get("tool_calls"):
        tool = perturbed.get("tool")
        if tool is not None and tool not in names.tools:
            return (lambda a: a), f"this agent has no tool {tool!r}; its tools are {', '.join(names.tools) or 'none'}"
        calls = ([{**calls[0], "name": tool}, *calls[1:]] if calls and tool is not None else
                 calls[1:] if tool is None else [{"name": tool, "arguments": {}}])

    def edit(answer: Answer) -> Answer:
        out = copy.deepcopy(answer)
        own = [c for c in out.tool_calls if _fn(c).get("name") not in names.handoffs]
        handed = [c for c in out.tool_calls if _fn(c).get("name") in names.handoffs]
        new_calls = []
        for k, call in enumerate(calls):
            call_id = own[k].get("id") if k < len(own) else _call_id([answer.id, k, call])
            new_calls.append({"id": call_id, "type": "function",
                              "function": {"name": call["name"], "arguments": _argument_text(call["arguments"])}})
        if target is not None:
            call_id = handed[0].get("id") if handed else _call_id([answer.id, "handoff", target])
            new_calls.append({"id": call_id, "type": "function", "function": {"name": target, "arguments": "{}"}})
        out.tool_calls = new_calls
        if perturbed.get("text") != recorded.get("text"):
            out.text = str(perturbed.get("text") or "")
        return out

    return edit, None


def _fn(call: Mapping[str, Any]) -> Mapping[str, Any]:
    function = call.get("function")
    return function if isinstance(function, Mapping) else {}


@dataclass
class Conversation:
    """One trace's links between agent calls, by the call ids the items carry."""

    asked: dict[str, CallRecord] = field(default_factory=dict)
    """Function call id -> the turn whose answer made the call."""
    answered: dict[str, CallRecord] = field(default_factory=dict)
    """Function call id -> the tool call that answered it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def turn_made(self, record: CallRecord, items: Iterable[Any]) -> None:
        """Remember the function calls a turn's answer made."""
        with self.lock:
            for item in items:
                call_id = _get(item, "call_id")
                if _get(item, "type") == "function_call" and call_id:
                    self.asked[str(call_id)] = record

    def tool_ran(self, call_id: str | None, record: CallRecord) -> None:
        if call_id:
            with self.lock:
                self.answered[call_id] = record

    def asker(self, call_id: str | None) -> CallRecord | None:
        with self.lock:
            return self.asked.get(call_id) if call_id else None

    def parents(self, input: Any) -> list[CallRecord]:
        """The calls a turn with these input items consumes: the latest turn whose calls
        the items carry (the agent's previous turn, or the turn that handed off), and the
        tool calls that answered the calls it made."""
        items = input if isinstance(input, list) else []
        latest: CallRecord | None = None
        with self.lock:
            for item in items:
                if _get(item, "type") == "function_call" and _get(item, "call_id") in self.asked:
                    turn = self.asked[str(_get(item, "call_id"))]
                    if latest is None or turn.key > latest.key:
                        latest = turn
            if latest is None:
                return []
            tools = [self.answered[cid] for cid, turn in self.asked.items() if turn is latest and cid in self.answered]
        return sorted({id(r): r for r in [latest, *tools]}.values(), key=lambda r: r.key)


_conversations: weakref.WeakKeyDictionary[TraceBuilder, Conversation] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def conversation(builder: TraceBuilder) -> Conversation:
    """The conversation links of the trace ``builder`` records."""
    with _lock:
        found = _conversations.get(builder)
        if found is None:
            found = _conversations[builder] = Conversation()
        return found
