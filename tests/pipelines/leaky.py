"""A pipeline that passes secrets everywhere a trace or a log could carry them."""

from __future__ import annotations

import os

import quiver

API_KEY = "sk-test-51HfakeKEYabcdefghijklmnopqrstu"
EMAIL = "jane.doe@example.com"
BEARER = "Bearer tok_9f8e7d6c5b4a39281706zz"

quiver.template("answer", system="Internal key: {key}. Escalate to {email}. Auth: {auth}.", user="{question}")


@quiver.node("lookup", kind="tool")
def lookup(account: str, token: str) -> dict:
    return {"account": account, "owner": EMAIL, "echo_token": token}


@quiver.node("answer", kind="llm")
def answer(question: str, key: str) -> str:
    return quiver.llm().chat("answer", model="sim-echo", question=question, key=key, email=EMAIL, auth=BEARER).content


def pipeline(question: str) -> dict:
    custom = os.environ["QUIVER_TEST_SECRET"]
    quiver.tool_step(
        "crm", {"api_key": API_KEY, "customer": EMAIL, "custom": custom},
        {"ok": True, "auth": BEARER, "owner": EMAIL, "custom": custom},
    )
    record = lookup(f"acct for {EMAIL}", API_KEY)
    reply = answer(f"{question} (contact {EMAIL}, key {API_KEY}, {custom})", API_KEY)
    if "fail" in question:
        raise RuntimeError(f"upstream rejected key {API_KEY} for {EMAIL} ({custom})")
    return {"reply": reply, "record": record, "key": API_KEY}
