"""A help desk whose router decides per input, for the gate's per-input tests.

::

    message ─ triage (LLM, temperature 1) ─ route (router) ─┬─ billing ─┐
                                                             ├─ tech ────┼─ reply
                                                             └─ general ─┘

* ``triage`` renders the template ``desk.triage`` (:data:`TEMPLATE`) and asks the
  simulated model ``desk-triage`` for a queue, sampled at temperature 1 from the logits
  :data:`MESSAGES` gives each message: most messages are clear (a logit of 5 over the
  other queues: a flip in about 1 of 75 calls); three sit near a tie between two queues
  and flip often: the current template's own noise.
* ``route`` decides the queue (``quiver.decide``); ``billing``, ``tech`` or ``general``
  runs and names its team; ``reply`` signs it. One LLM call a run, and no text output
  (no embedding is needed to compare two runs).
* A template holding :data:`REROUTE` ("Thank-you notes go to billing.") makes the model
  send the one thank-you message (``thanks``, of 16 messages) to billing, logit +20:
  a candidate that reroutes one input class in every replay and leaves the other 15
  as they were. The template text itself, copied to a file, is a candidate that changes
  nothing.
"""

from __future__ import annotations

from typing import Any

import quiver
from quiver.replay import Fields, SimRequest, sim_model

QUEUES = ("billing", "tech", "general")
TEMPLATE = {"system": "You route help-desk messages to one queue: billing, tech or general.",
            "user": "Message: {message}\nAnswer in JSON with the queue."}
REROUTE = "Thank-you notes go to billing."

MESSAGES: dict[str, tuple[str, dict[str, float]]] = {
    # input id: (message, logit per queue)
    "invoice": ("My invoice for March is wrong", {"billing": 5.0}),
    "refund": ("Please refund the double charge", {"billing": 5.0}),
    "card": ("Update the card on file for my account", {"billing": 5.0}),
    "vat": ("Add our VAT number to the receipts", {"billing": 5.0}),
    "crash": ("The app crashes when I open a project", {"tech": 5.0}),
    "login": ("I cannot log in since this morning", {"tech": 5.0}),
    "export": ("Export to CSV never finishes", {"tech": 5.0}),
    "sync": ("Files do not sync between my laptops", {"tech": 5.0}),
    "hours": ("What are your opening hours?", {"general": 5.0}),
    "office": ("Where is your Berlin office?", {"general": 5.0}),
    "jobs": ("Are you hiring engineers?", {"general": 5.0}),
    "press": ("Who handles press enquiries?", {"general": 5.0}),
    "thanks": ("Thank you, all sorted now!", {"general": 5.0}),
    "seats": ("Adding seats broke the billing page", {"billing": 0.3, "tech": 0.0}),
    "plan": ("Is the team plan worth it for us?", {"billing": 0.2, "general": 0.0}),
    "status": ("Is there an outage right now?", {"tech": 0.4, "general": 0.0}),
}
"""Sixteen messages: twelve clear, the thank-you note, three near a tie."""

quiver.template("desk.triage", system=TEMPLATE["system"], user=TEMPLATE["user"])


def template_file() -> str:
    """The registered template as a template file's text (``[system]`` / ``[user]``)."""
    return f"[system]\n{TEMPLATE['system']}\n[user]\n{TEMPLATE['user']}\n"


@sim_model("desk-triage")
def _triage_model(req: SimRequest) -> Fields:
    text = req.user_text.split("Message: ", 1)[1].split("\n", 1)[0]
    input_id, (_, logits) = next((k, v) for k, v in MESSAGES.items() if v[0] == text)
    queue = {q: logits.get(q, 0.0) for q in QUEUES}
    if REROUTE in req.system_text and input_id == "thanks":
        queue["billing"] = 20.0
    return Fields(queue=queue)


@quiver.node("triage", kind="llm")
def triage(message: str) -> dict[str, Any]:
    data = quiver.llm().chat("desk.triage", model="desk-triage", temperature=1.0, message=message,
                             response_format={"type": "json_object"}).data
    return {"queue": data["queue"]}


@quiver.node("route", kind="router")
def route(ticket: dict[str, Any]) -> str:
    return quiver.decide("route", ticket["queue"])


@quiver.node("billing")
def billing(ticket: dict[str, Any]) -> dict[str, str]:
    return {"team": "finance", "sla": "2d"}


@quiver.node("tech")
def tech(ticket: dict[str, Any]) -> dict[str, str]:
    return {"team": "engineering", "sla": "4h"}


@quiver.node("general")
def general(ticket: dict[str, Any]) -> dict[str, str]:
    return {"team": "front desk", "sla": "1w"}


@quiver.node("reply")
def reply(answer: dict[str, str]) -> dict[str, str]:
    return {**answer, "signed": "help desk"}


def pipeline(message: str) -> dict[str, str]:
    ticket = triage(message)
    queue = route(ticket)
    answer = {"billing": billing, "tech": tech, "general": general}[queue](ticket)
    return reply(answer)


def inputs() -> list[dict[str, Any]]:
    """The sixteen messages as inputs (``input_id`` and ``inputs``)."""
    return [{"input_id": k, "inputs": {"message": text}} for k, (text, _) in MESSAGES.items()]
