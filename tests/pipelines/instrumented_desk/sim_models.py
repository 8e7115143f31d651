"""Simulated models of the agent support desk (``pipeline.py``).

* ``idesk-triage`` hands off (a sampled function call): billing words (invoice, charge,
  refund, bill, paid) -> the billing agent; technical words (error, down, crash, login,
  outage, slow) -> the technical agent; anything else (a thank-you, a greeting) -> the
  technical agent, the billing agent now and then. With instructions that say "thanks
  go to billing", a message of thanks goes to the billing agent.
* ``idesk-billing`` looks the invoice up (``lookup_invoice``, the message's invoice
  number), then answers in one of a few wordings.
* ``idesk-tech`` checks the service's status (``check_service_status``); when it is
  degraded it opens a ticket (``open_ticket``, a sampled severity), then answers.
* ``idesk-summary`` (chat completions, JSON): which team answered and whether the issue
  is resolved, from the agent's answer.
"""

from __future__ import annotations

import json
import re

from quiver.replay import Fields, SimRequest, Text, ToolCall, sim_model

BILLING = ("invoice", "charge", "refund", "bill", "paid")
TECH = ("error", "down", "crash", "login", "outage", "slow")
_NUMBER = re.compile(r"\b(\d{4})\b")
_SERVICE = re.compile(r"\b(email|login|api|dashboard|storage)\b")


def _own_results(req: SimRequest, key: str) -> list[dict]:
    """The tool results of this agent's own tools (a handoff's output is a result too)."""
    out = []
    for text in req.tool_results:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and key in value:
            out.append(value)
    return out


@sim_model("idesk-triage")
def triage(req: SimRequest) -> ToolCall:
    text = req.last_user.lower()
    thanks_to_billing = "thanks go to billing" in req.system_text.lower()
    if any(w in text for w in BILLING):
        logits = {"billing": 3.0, "tech": -1.0}
    elif any(w in text for w in TECH):
        logits = {"billing": -1.0, "tech": 3.0}
    elif "thank" in text and thanks_to_billing:
        logits = {"billing": 3.0, "tech": -1.0}
    else:
        logits = {"billing": -0.6, "tech": 1.0}
    names = {"billing": "transfer_to_billing_agent", "tech": "transfer_to_technical_agent"}
    return ToolCall({names[k]: v for k, v in logits.items()})


@sim_model("idesk-billing")
def billing(req: SimRequest) -> ToolCall | Text:
    found = _own_results(req, "invoice")
    if not found and "lookup_invoice" in req.tool_names:
        number = _NUMBER.search(req.user_text)
        return ToolCall("lookup_invoice", {"invoice_id": number.group(1) if number else "none"})
    status = found[-1].get("status", "unknown") if found else "unknown"
    return Text({f"Your invoice is {status}.": 1.0, f"I checked: the invoice is {status}.": 0.4,
                 f"Invoice status: {status}. Anything else?": 0.2})


@sim_model("idesk-tech")
def tech(req: SimRequest) -> ToolCall | Text:
    status = _own_results(req, "service")
    tickets = _own_results(req, "ticket")
    if not status and "check_service_status" in req.tool_names:
        service = _SERVICE.search(req.user_text.lower())
        return ToolCall("check_service_status", {"service": service.group(1) if service else "api"})
    state = status[-1].get("state", "unknown") if status else "unknown"
    if state == "degraded" and not tickets and "open_ticket" in req.tool_names:
        return ToolCall("open_ticket", Fields(service=status[-1].get("service", "api"),
                                              severity={"high": 1.0, "low": 0.2}))
    if tickets:
        return Text({f"We opened ticket {tickets[-1]['ticket']} for you.": 1.0,
                     f"Ticket {tickets[-1]['ticket']} is open; we are on it.": 0.5})
    return Text({f"The service is {state}; try again now.": 1.0, f"Status: {state}. Please retry.": 0.3})


@sim_model("idesk-summary")
def summary(req: SimRequest) -> Fields:
    text = req.last_user.lower()
    team = "billing" if text.startswith("billing") else "technical"
    resolved = 1.5 if ("invoice is paid" in text or "operational" in text) else -0.5
    return Fields(team=team, resolved={True: resolved, False: 0.0})
