"""Simulated models of the order desk (see ``pipeline.py``).

* ``desk-intake`` (chat completions, JSON): the message's ``topic`` from its words
  (``refund``, ``broken`` -> refund; ``where``, ``order`` -> delivery);
* ``shop-triage`` (the Responses API, with the two handoffs): hands off to the refunds
  desk for broken or unwanted goods, to the order desk for the rest (a sampled choice:
  the other desk now and then). With instructions that send late orders to refunds
  ("late orders to the refunds desk"), a message about a late order goes there too;
* ``desk-agent`` (the order desk, with the ``lookup_order`` tool): first calls the tool
  with the order number of the message; once the tool's answer is in the conversation,
  answers JSON: the ``status`` the tool gave (likely; another one at a high temperature)
  and a ``tone``, ``apology`` the likelier when its instructions ask it to apologise;
* ``shop-refunds`` (the refunds desk, with ``open_refund``): opens the refund, then
  answers JSON with the status the tool gave and a tone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from quiver.replay import Fields, SimRequest, ToolCall, sim_model

__all__ = ["intake", "triage", "agent", "refunds"]

STATUSES = ("delayed", "shipped", "delivered", "unknown", "refund_opened")
_ORDER = re.compile(r"\b(\d{4})\b")
_REFUND_WORDS = ("refund", "broken", "return", "damaged")
_LATE_WORDS = ("late", "due last week", "still not")


@sim_model("desk-intake")
def intake(req: SimRequest) -> Fields:
    text = req.last_user.lower()
    refund = 2.5 if any(w in text for w in ("refund", "broken")) else -1.0
    delivery = 1.5 if ("where" in text or "order" in text) else 0.0
    return Fields(topic={"delivery": delivery, "refund": refund, "other": -0.5})


@sim_model("shop-triage")
def triage(req: SimRequest) -> ToolCall:
    text = req.last_user.lower()
    late_to_refunds = "late orders to the refunds desk" in req.system_text.lower()
    refunds = any(w in text for w in _REFUND_WORDS) or (late_to_refunds and any(w in text for w in _LATE_WORDS))
    logits = {"transfer_to_refunds_desk": 3.0, "transfer_to_order_desk": -1.0} if refunds else \
        {"transfer_to_refunds_desk": -1.5, "transfer_to_order_desk": 2.0}
    return ToolCall(logits)


def _results(req: SimRequest, key: str) -> list[dict[str, Any]]:
    """This desk's own tool results (the handoff's output is a tool result too)."""
    out = []
    for text in req.tool_results:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and key in value:
            out.append(value)
    return out


def _answer(req: SimRequest, status: str | None) -> Fields:
    apologetic = "apologise" in req.system_text.lower()
    return Fields(
        status={s: (3.0 if s == status else 0.0) for s in STATUSES},
        tone={"apology": 2.0 if apologetic else -1.0, "plain": 0.0 if apologetic else 1.5},
    )


@sim_model("desk-agent")
def agent(req: SimRequest) -> Fields | ToolCall:
    results = _results(req, "status")
    if not results and "lookup_order" in req.tool_names:
        found = _ORDER.search(req.user_text)
        return ToolCall("lookup_order", {"order_id": found.group(1) if found else ""})
    return _answer(req, results[-1].get("status") if results else None)


@sim_model("shop-refunds")
def refunds(req: SimRequest) -> Fields | ToolCall:
    results = _results(req, "refund")
    if not results and "open_refund" in req.tool_names:
        found = _ORDER.search(req.user_text)
        reason = "broken" if "broken" in req.user_text.lower() else "unwanted"
        return ToolCall("open_refund", {"order_id": found.group(1) if found else "", "reason": reason})
    return _answer(req, results[-1].get("status") if results else None)
