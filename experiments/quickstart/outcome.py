"""The helpdesk's outcome check: the ticket took the route it should, and an answer cites
the knowledge base. Which route each ticket of ``inputs.jsonl`` should take is stated
here (an outage escalates, a thank-you or a greeting is small talk, the rest is
answered)."""

from __future__ import annotations

from quiver import Trace

ROUTES = {"urgent-outage": "escalate", "thanks-note": "smalltalk", "hello-anyone": "smalltalk"}


def right_route(trace: Trace) -> bool:
    """The route the ticket should take; an answered ticket cites at least one article."""
    output = trace.output or {}
    want = ROUTES.get(trace.input_id, "answer")
    return bool(output.get("route") == want and (want != "answer" or output.get("refs")))
