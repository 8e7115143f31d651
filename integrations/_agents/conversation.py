"""The links of a trace's agent calls, by the ids their function calls carry.

A model turn's answer asks for function calls, each with an id; the framework runs each
tool with that id and hands the next turn the calls and their results, under the same
ids. :class:`Conversation` remembers which turn asked for an id and which tool call
answered it, so that a tool call's parent is the turn that asked for it and a turn's
parents are the turn before it and the tool calls that answered that turn.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

from quiver.replay._instrument import CallRecord, TraceBuilder

__all__ = ["Conversation", "conversation"]


@dataclass
class Conversation:
    """One trace's links between agent calls, by call id."""

    asked: dict[str, CallRecord] = field(default_factory=dict)
    """Function call id -> the turn whose answer made the call."""
    answered: dict[str, CallRecord] = field(default_factory=dict)
    """Function call id -> the tool call that answered it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def turn_made(self, record: CallRecord, call_ids: Iterable[str]) -> None:
        """Remember the function calls a turn's answer made."""
        with self.lock:
            for call_id in call_ids:
                self.asked[call_id] = record

    def tool_ran(self, call_id: str | None, record: CallRecord) -> None:
        if call_id:
            with self.lock:
                self.answered[call_id] = record

    def asker(self, call_id: str | None) -> CallRecord | None:
        with self.lock:
            return self.asked.get(call_id) if call_id else None

    def parents(self, call_ids: Iterable[str]) -> list[CallRecord]:
        """The calls a turn consumes whose input carries these function call ids: the
        latest turn that made one of them (the agent's previous turn, or the turn that
        handed off), and the tool calls that answered the calls it made."""
        latest: CallRecord | None = None
        with self.lock:
            for call_id in call_ids:
                turn = self.asked.get(call_id)
                if turn is not None and (latest is None or turn.key > latest.key):
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
