"""A support router whose declared branch ``escalate`` only an intervention takes.

* ``triage`` (an LLM call, ``sim-echo``: the reply is the rendered ticket) reads the
  ticket's ``topic`` (its first word: billing, bug or thanks) and ``urgent`` (the reply
  says URGENT, which no input and no recorded template does);
* ``route`` decides ``escalate`` for an urgent ticket that is not a thank-you, else
  ``answer``;
* ``escalate`` and ``answer`` are its two declared branches (``parents=["route"]``).

So no baseline trace runs ``escalate``; an override of ``triage`` setting
``urgent: true`` (or a ``triage`` template that writes URGENT) takes it on every
billing and bug ticket and not on thank-yous: there ``answer`` runs as recorded.
"""

from __future__ import annotations

import quiver

quiver.template("triage", user="Ticket: {text}")

TRIAGE_FIELDS = {
    "urgent": {"type": "bool", "role": "routing"},
    "topic": {"type": "categorical", "role": "context", "categories": ["billing", "bug", "thanks"]},
}


@quiver.node("triage", kind="llm", fields=TRIAGE_FIELDS)
def triage(text: str) -> dict:
    reply = quiver.llm().chat("triage", model="sim-echo", text=text).content
    return {"urgent": "URGENT" in reply, "topic": text.split()[0]}


@quiver.node("route", kind="router", parents=["triage"])
def route(ticket: dict) -> str:
    urgent = ticket["urgent"] and ticket["topic"] != "thanks"
    return quiver.decide("route", "escalate" if urgent else "answer")


@quiver.node("escalate", kind="tool", parents=["route"])
def escalate(text: str, ticket: dict) -> dict:
    return {"queue": "urgent", "topic": ticket["topic"]}


@quiver.node("answer", parents=["route"])
def answer(text: str, ticket: dict) -> dict:
    return {"reply": f"re: {ticket['topic']}"}


def pipeline(text: str) -> dict:
    ticket = triage(text)
    if route(ticket) == "escalate":
        return escalate(text, ticket)
    return answer(text, ticket)
