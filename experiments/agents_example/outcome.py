"""The order desk's outcome check: the message reached the desk that handles it. Broken,
damaged or unwanted goods (input ids ``refund-``, ``return-``, ``damaged-``) are the
refunds desk's; questions about an order's whereabouts the order desk's."""

from __future__ import annotations

from quiver import Trace

REFUNDS = ("refund-", "return-", "damaged-")


def right_desk(trace: Trace) -> bool:
    """The desk that answered is the one the message is for."""
    want = "Refunds desk" if trace.input_id.startswith(REFUNDS) else "Order desk"
    return bool((trace.output or {}).get("desk") == want)
