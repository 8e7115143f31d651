"""The soak benchmark's pipeline: one LLM call triages a ticket, a router sends it to one
of two branches; every output categorical or boolean, so a replay costs little."""

from __future__ import annotations

import quiver

quiver.template("triage", user="Ticket: {text}")

TRIAGE_FIELDS = {
    "urgent": {"type": "bool", "role": "routing"},
    "topic": {"type": "categorical", "role": "context"},
}


@quiver.node("triage", kind="llm", fields=TRIAGE_FIELDS)
def triage(text: str) -> dict:
    reply = quiver.llm().chat("triage", model="sim-echo", text=text).content
    return {"urgent": "URGENT" in reply, "topic": text.split()[0]}


@quiver.node("route", kind="router", parents=["triage"])
def route(ticket: dict) -> str:
    return quiver.decide("route", "escalate" if ticket["urgent"] and ticket["topic"] != "thanks" else "answer")


@quiver.node("escalate", kind="tool", parents=["route"], fields={"queue": {"type": "categorical"}})
def escalate(ticket: dict) -> dict:
    return {"queue": f"urgent-{ticket['topic']}"}


@quiver.node("answer", parents=["route"], fields={"queue": {"type": "categorical"}})
def answer(ticket: dict) -> dict:
    return {"queue": f"normal-{ticket['topic']}"}


def pipeline(text: str) -> dict:
    ticket = triage(text)
    if route(ticket) == "escalate":
        return escalate(ticket)
    return answer(ticket)
