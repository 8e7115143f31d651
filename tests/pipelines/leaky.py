"""A pipeline that passes secrets everywhere a trace, a log or an output stream could carry
them: every kind of ``planted_secrets`` in prompts, tool arguments and responses, outputs
and error messages; printed, logged (with a traceback and a stack) and, in a Ray worker,
written to the process's file descriptors as native code would."""

from __future__ import annotations

import logging
import os
import sys

from planted_secrets import ALL_PLANTED, API_KEY, BEARER, EMAIL

import quiver

quiver.template("answer", system="Internal key: {key}. Escalate to {email}. Auth: {auth}. Vault: {vault}.",
                user="{question}")

log = logging.getLogger("quiver.pipeline.leaky")  # under "quiver": a run's record.log holds its records


@quiver.node("lookup", kind="tool")
def lookup(account: str, token: str) -> dict:
    return {"account": account, "owner": EMAIL, "echo_token": token, "vault": ALL_PLANTED}


@quiver.node("answer", kind="llm")
def answer(question: str, key: str) -> str:
    return quiver.llm().chat("answer", model="sim-echo", question=question, key=key, email=EMAIL, auth=BEARER,
                             vault=ALL_PLANTED).content


def _in_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    try:
        return ray is not None and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:  # not a Ray process after all
        return False


def _leak_to_streams(custom: str) -> None:
    """Print and log every secret, as a pipeline's own debugging would."""
    text = f"{ALL_PLANTED}\n{custom}"
    print(f"debug: {text}")
    print(f"debug: {text}", file=sys.stderr)
    try:
        raise ValueError(f"a caught error holding {text}")
    except ValueError:
        log.warning("leaky: %s", text, exc_info=True, stack_info=True)
    if _in_ray_worker():
        os.write(1, f"native: {text}\n".encode())
        os.write(2, f"native: {text}\n".encode())


def pipeline(question: str) -> dict:
    custom = os.environ["QUIVER_TEST_SECRET"]
    _leak_to_streams(custom)
    quiver.tool_step(
        "crm", {"api_key": API_KEY, "customer": EMAIL, "custom": custom, "vault": ALL_PLANTED},
        {"ok": True, "auth": BEARER, "owner": EMAIL, "custom": custom, "vault": ALL_PLANTED},
    )
    record = lookup(f"acct for {EMAIL}", API_KEY)
    reply = answer(f"{question} (contact {EMAIL}, key {API_KEY}, {custom})", API_KEY)
    if "fail" in question:
        raise RuntimeError(f"upstream rejected key {API_KEY} for {EMAIL} ({custom}): {ALL_PLANTED}")
    if str(record["owner"]).startswith("someone else") and "reset" in question:  # a perturbed replay
        raise RuntimeError(f"the owner changed; the vault still holds {ALL_PLANTED} ({custom})")
    return {"reply": reply, "record": record, "key": API_KEY, "vault": ALL_PLANTED}
