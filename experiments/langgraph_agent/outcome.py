"""The LangGraph agent's outcome check: the question took the right route (the greeting
needs no knowledge base, every other question does) and got an answer."""

from __future__ import annotations

from quiver import Trace

FRIENDLY = ("greeting",)


def answered(trace: Trace) -> bool:
    """The route the question should take, and a non-empty answer."""
    output = trace.output or {}
    want = "compose" if trace.input_id in FRIENDLY else "retrieve"
    return bool(output.get("route") == want and str(output.get("answer") or "").strip())
