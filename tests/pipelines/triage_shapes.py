"""A nine-node triage pipeline with the shapes graph inference must get right.

::

    input ─ clean ─┬─ classify (noisy LLM) ─┬─ route (router) ─┬─ escalate: lookup (tool) → escalate ─┐
                   │                        │                  └─ answer:   answer (LLM) ─────────────┤
                   └─ retrieve(text, topic) ┘                                                        reply

* ``classify`` samples ``{topic, urgent}`` at temperature 1 (the simulated model
  ``shapes-classify``): the only noise in the pipeline. Near-tie tickets flip their
  topic, their urgency, or both, between repeats.
* ``retrieve(text, topic)`` is deterministic and takes the topic as a short string
  (``"billing"``): only unique provenance links it to ``classify``.
* ``route`` (kind ``router``) decides the gate ``route`` from ``urgent`` alone.
* ``lookup(customer)`` is a deterministic tool that runs only on the escalate arm; the
  customer id is a short string of the trace's inputs. ``escalate`` takes the plan
  (``"gold"``, a short string) from it.
* ``answer`` is an LLM at temperature 0 (``shapes-answer``, deterministic in the test
  simulator) that reads the text, the documents and the topic.
* ``reply`` signs whichever message the arm produced.
"""

from __future__ import annotations

from typing import Any

import quiver
from quiver.replay import Fields, SimRequest, Text, sim_model

TICKETS: dict[str, tuple[str, str, float, float]] = {
    # input id: (ticket, customer, logit of topic "billing" over "bug", logit of urgent)
    "refund": ("I was charged twice for the March invoice, please refund me", "c-101", 6.0, -6.0),
    "crash": ("The editor crashes every time I export a large project file", "c-102", -6.0, -6.0),
    "outage": ("Everything is down for our whole team right now, we are losing money", "c-103", -6.0, 6.0),
    "mixed": ("The invoice page crashes when I try to pay my bill", "c-104", 0.0, -6.0),
    "edgy": ("Billing export fails again and we need it before the board meeting", "c-105", 6.0, 0.0),
    "murky": ("Something about my account is wrong and maybe it is urgent", "c-106", 0.0, 0.0),
}
"""Six tickets: two clear, one always urgent, one whose topic flips, one whose urgency
flips, one where both flip."""

DOCS = {"billing": ["kb-billing-refunds", "kb-billing-invoices"], "bug": ["kb-bug-export", "kb-bug-editor"]}
PLANS = {"c-101": "silver", "c-102": "silver", "c-103": "gold", "c-104": "bronze", "c-105": "gold",
         "c-106": "bronze"}

quiver.template("shapes.classify", user="Ticket: {text}")
quiver.template("shapes.answer", user="Topic: {topic}\nDocuments: {docs}\nTicket: {text}")


def _ticket(req: SimRequest) -> tuple[str, str, float, float]:
    text = req.user_text.split("Ticket: ", 1)[1].strip()
    return next(t for t in TICKETS.values() if t[0] == text)


@sim_model("shapes-classify")
def _classify_model(req: SimRequest) -> Fields:
    _, _, topic, urgent = _ticket(req)
    return Fields(topic={"billing": topic, "bug": 0.0}, urgent={True: urgent, False: 0.0})


@sim_model("shapes-answer")
def _answer_model(req: SimRequest) -> Text:
    topic = req.user_text.split("Topic: ", 1)[1].split("\n", 1)[0]
    return Text(f"Thanks for writing in about this {topic} issue; the linked articles walk you through the fix.")


@quiver.node("clean")
def clean(ticket: str) -> str:
    return " ".join(ticket.split()).rstrip(".")


@quiver.node("classify", kind="llm")
def classify(text: str) -> dict[str, Any]:
    data = quiver.llm().chat("shapes.classify", model="shapes-classify", temperature=1.0, text=text,
                             response_format={"type": "json_object"}).data
    return {"topic": data["topic"], "urgent": data["urgent"]}


@quiver.node("retrieve", kind="retrieval")
def retrieve(text: str, topic: str) -> list[str]:
    return list(DOCS[topic])


@quiver.node("route", kind="router")
def route(ticket: dict[str, Any]) -> str:
    return quiver.decide("route", "escalate" if ticket["urgent"] else "answer")


@quiver.node("lookup", kind="tool")
def lookup(customer: str) -> dict[str, str]:
    return {"plan": PLANS[customer], "region": "eu-west"}


@quiver.node("escalate")
def escalate(text: str, plan: str) -> dict[str, str]:
    return {"queue": f"{plan}-priority", "note": f"Escalated for a {plan} customer: {text}"}


@quiver.node("answer", kind="llm")
def answer(text: str, docs: list[str], topic: str) -> str:
    return quiver.llm().chat("shapes.answer", model="shapes-answer", temperature=0.0, text=text,
                             docs=", ".join(docs), topic=topic).content


@quiver.node("reply")
def reply(message: Any) -> str:
    body = message["note"] if isinstance(message, dict) else message
    return f"{body}\n\nAcme support"


def pipeline(ticket: str, customer: str) -> str:
    text = clean(ticket)
    triage = classify(text)
    docs = retrieve(text, triage["topic"])
    if route(triage) == "escalate":
        account = lookup(customer)
        message: Any = escalate(text, account["plan"])
    else:
        message = answer(text, docs, triage["topic"])
    return reply(message)
