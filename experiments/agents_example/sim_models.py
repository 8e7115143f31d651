"""Simulated models of the order desk (see ``pipeline.py``).

* ``desk-intake`` (chat completions, JSON): the message's ``topic`` from its words
  (``refund``, ``broken`` -> refund; ``where``, ``order`` -> delivery);
* ``desk-agent`` (the Responses API, with the ``lookup_order`` tool): first calls the tool
  with the order number of the message; once the tool's answer is in the conversation,
  answers JSON: the ``status`` the tool gave (likely; another one at a high temperature)
  and a ``tone``, ``apology`` the likelier when its instructions ask it to apologise.
"""

from __future__ import annotations

import json
import re

from quiver.replay import Fields, SimRequest, ToolCall, sim_model

__all__ = ["intake", "agent"]

STATUSES = ("delayed", "shipped", "delivered", "unknown")
_ORDER = re.compile(r"\b(\d{4})\b")


@sim_model("desk-intake")
def intake(req: SimRequest) -> Fields:
    text = req.last_user.lower()
    refund = 2.5 if ("refund" in text or "broken" in text) else -1.0
    delivery = 1.5 if ("where" in text or "order" in text) else 0.0
    return Fields(topic={"delivery": delivery, "refund": refund, "other": -0.5})


@sim_model("desk-agent")
def agent(req: SimRequest) -> Fields | ToolCall:
    results = req.tool_results
    if not results and "lookup_order" in req.tool_names:
        found = _ORDER.search(req.user_text)
        return ToolCall("lookup_order", {"order_id": found.group(1) if found else ""})
    try:
        status = json.loads(results[-1]).get("status") if results else None
    except (ValueError, AttributeError):
        status = None
    apologetic = "apologise" in req.system_text.lower()
    return Fields(
        status={s: (3.0 if s == status else 0.0) for s in STATUSES},
        tone={"apology": 2.0 if apologetic else -1.0, "plain": 0.0 if apologetic else 1.5},
    )
