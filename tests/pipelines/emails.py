"""A support pipeline that reads its customers' e-mail addresses: the domain decides the
queue. Recorded with the default redaction, the stored input is ``[REDACTED:email]``
and a replay, which reads the stored input, routes every message elsewhere. A second
entry point draws a random ticket number: code that is not deterministic."""

from __future__ import annotations

import random

import quiver


@quiver.node("route", kind="router")
def route(customer: str) -> dict[str, str]:
    domain = customer.rpartition("@")[2] if "@" in customer else ""
    return {"queue": "enterprise" if domain.endswith("bigcorp.com") else "self-serve"}


@quiver.node("answer", kind="llm")
def answer(question: str, queue: dict[str, str]) -> str:
    return quiver.llm().chat(messages=[{"role": "user", "content": f"[{queue['queue']}] {question}"}],
                             model="sim-echo").content


@quiver.node("ticket", kind="transform")
def ticket(question: str) -> dict[str, int]:
    return {"number": random.randrange(10**6)}


def pipeline(customer: str, question: str) -> str:
    return answer(question, route(customer))


def pipeline_with_ticket(customer: str, question: str) -> str:
    ticket(question)
    return answer(question, route(customer))
