"""A small pipeline with one switch per replay-contract dimension, for divergence tests.

``DEPLOYMENT`` selects, per dimension, version 1 or 2 of what the pipeline runs with
(set it before recording; the recorder runs the pipeline in this process):

* ``prompt``: the ``plan`` template (v2 adds a sentence);
* ``model``: the model ``answer`` calls (``deploy-answer`` or ``deploy-answer-v2``,
  whose answer leans the other way);
* ``retrieval``: the documents ``search`` reads (v2 rewrites ``doc-b`` under the same id);
* ``tool``: the account data ``lookup`` returns (v2 changes the accounts whose id ends
  in 7).

Nodes, in program order: ``classify`` (llm, sampled topic) -> ``search`` (retrieval of
the topic's documents) -> ``lookup`` (tool, the account) -> ``plan`` (llm over the
material; decides ``action``) -> ``answer`` (llm). The simulated models sample at
temperature 0.5, so repeats of one input differ by sampling alone.
"""

from __future__ import annotations

from typing import Any

import quiver
from quiver.replay import Fields, SimRequest, sim_model

DEPLOYMENT: dict[str, int] = {"prompt": 1, "model": 1, "retrieval": 1, "tool": 1}
"""Which version of each dimension the pipeline runs with."""

TEMPERATURE = 0.5

DOCS = {
    1: {"doc-a": "Invoices are sent monthly.", "doc-b": "Exports run nightly.", "doc-c": "Seats renew yearly."},
    2: {"doc-a": "Invoices are sent monthly.", "doc-b": "Exports run hourly, with a retry.",
        "doc-c": "Seats renew yearly."},
}
TOPIC_DOCS = {"billing": ["doc-a", "doc-c"], "export": ["doc-b", "doc-a"], "other": ["doc-c"]}
PLAN_TEMPLATES = {
    1: "Task: {question}\nMaterial:\n{material}\nAccount: {account}",
    2: "Task: {question}\nMaterial:\n{material}\nAccount: {account}\nPrefer acting over answering.",
}
INPUTS = [
    {"question": "Why was my invoice charged twice?", "account": "acct-17"},
    {"question": "The export did not finish", "account": "acct-20"},
    {"question": "How many seats are left?", "account": "acct-31"},
    {"question": "Export is slow and billing is wrong", "account": "acct-47"},
    {"question": "Hello there", "account": "acct-52"},
    {"question": "Export to CSV fails", "account": "acct-67"},
    {"question": "Can I get a copy of last month's invoice?", "account": "acct-70"},
    {"question": "The nightly export is missing rows", "account": "acct-87"},
    {"question": "Add two seats to our plan", "account": "acct-91"},
    {"question": "Thanks for the help", "account": "acct-97"},
    {"question": "Billing address change", "account": "acct-12"},
    {"question": "Export button greyed out", "account": "acct-23"},
]
"""Inputs: the sampled topic chooses the documents; accounts ending in 7 change with tool v2."""


@sim_model("deploy-classify")
def _classify_model(req: SimRequest) -> Fields:
    text = req.user_text.lower()
    billing = 3.0 if any(w in text for w in ("invoice", "billing", "seat")) else 0.0
    export = 3.0 if "export" in text else 0.0
    return Fields(topic={"billing": billing, "export": export, "other": 1.5})


@sim_model("deploy-plan")
def _plan_model(req: SimRequest) -> Fields:
    text = req.user_text
    act = sum(3.0 for cue in ("hourly", "Prefer acting", "pro plan") if cue in text)
    return Fields(action={"ANSWER": 1.5, "ACT": act})


@sim_model("deploy-answer")
def _answer_model(req: SimRequest) -> Fields:
    return Fields(tone={"short": 1.5, "long": 0.0})


@sim_model("deploy-answer-v2")
def _answer_model_v2(req: SimRequest) -> Fields:
    return Fields(tone={"short": 0.0, "long": 1.5})


quiver.template("deploy.classify", user="Classify: {question}")


def _account(account: str) -> dict[str, str]:
    if DEPLOYMENT["tool"] == 2 and account.endswith("7"):
        return {"plan": "pro plan", "seats": "9 of 10"}
    return {"plan": "team plan", "seats": "3 of 10"}


@quiver.node("classify", kind="llm")
def classify(question: str) -> dict[str, Any]:
    out = quiver.llm().chat("deploy.classify", model="deploy-classify", temperature=TEMPERATURE, question=question,
                            response_format={"type": "json_object"})
    data: dict[str, Any] = out.data
    return data


@quiver.node("search", kind="retrieval")
def search(topic: dict[str, Any]) -> list[str]:
    docs = DOCS[DEPLOYMENT["retrieval"]]
    ids = TOPIC_DOCS[topic["topic"]]
    quiver.retrieved([{"doc_id": i, "content": docs[i], "score": 1.0 / (r + 1)} for r, i in enumerate(ids)])
    return ids


@quiver.node("lookup", kind="tool")
def lookup(account: str) -> dict[str, str]:
    data = _account(account)
    quiver.tool_step("account", {"account": account}, data)
    return data


@quiver.node("plan", kind="llm")
def plan(question: str, ids: list[str], account: dict[str, str]) -> str:
    docs = DOCS[DEPLOYMENT["retrieval"]]
    template = quiver.template("deploy.plan", user=PLAN_TEMPLATES[DEPLOYMENT["prompt"]])
    out = quiver.llm().chat(template, model="deploy-plan", temperature=TEMPERATURE, question=question,
                            material="\n".join(docs[i] for i in ids), account=f"{account['plan']}, {account['seats']}",
                            response_format={"type": "json_object"})
    action: str = out.data["action"]
    return quiver.decide("action", action)


@quiver.node("answer", kind="llm")
def answer(question: str, action: str) -> str:
    model = "deploy-answer-v2" if DEPLOYMENT["model"] == 2 else "deploy-answer"
    out = quiver.llm().chat(messages=[{"role": "user", "content": f"{action}: {question}"}], model=model,
                            temperature=TEMPERATURE, response_format={"type": "json_object"})
    tone: str = out.data["tone"]
    return tone


def pipeline(question: str, account: str) -> dict[str, Any]:
    topic = classify(question)
    ids = search(topic)
    data = lookup(account)
    action = plan(question, ids, data)
    return {"action": action, "tone": answer(question, action)}
