"""A pipeline on which each kind of perturbation lands on some traces and not on others.

* ``classify`` (a transform) gives the fields ``urgency``, ``flagged``, ``score``,
  ``tags`` and ``note`` only to inputs marked urgent: an output operator on one of them
  cannot be applied to the others.
* ``draft`` renders the registered template ``landing_draft`` (an id of its own:
  templates are registered process-wide) for inputs marked templated, and sends raw
  messages through the ``openai`` SDK for the others: a ``prompt_swap`` of the template
  reaches only the first.
* ``lookup`` asks the model through the ``openai`` SDK, or, for inputs marked hidden,
  posts the same chat completion with ``urllib`` (a client the capture does not record):
  a ``param_change`` reaches only the first.
* ``reply`` closes the trace with a live call, so every replay has a downstream node.

Every model is ``sim-echo`` (it answers the last user message, word for word): replays
are deterministic, so what differs between strata is only where the perturbation landed.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import openai

import quiver

quiver.template("landing_draft", system="Write a short draft.", user="{question}")


def _base_url() -> str:
    return os.environ["OPENAI_BASE_URL"].rstrip("/")


@quiver.node("classify", kind="transform")
def classify(question: str, urgent: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"topic": "billing" if "bill" in question else "other"}
    if urgent:
        out.update(urgency="high", flagged=True, score=0.8, tags=["refund", "late"],
                   note="the customer was charged twice")
    return out


@quiver.node("draft", kind="llm")
def draft(question: str, templated: bool) -> str:
    if templated:
        return quiver.llm().chat("landing_draft", model="sim-echo", question=question).content
    client = openai.OpenAI(base_url=_base_url(), api_key=os.environ.get("OPENAI_API_KEY", "x"), max_retries=0)
    answer = client.chat.completions.create(
        model="sim-echo", messages=[{"role": "system", "content": "Write a short draft."},
                                    {"role": "user", "content": question}])
    return answer.choices[0].message.content or ""


@quiver.node("lookup", kind="llm")
def lookup(text: str, hidden: bool) -> str:
    messages = [{"role": "user", "content": f"look up: {text}"}]
    if not hidden:
        client = openai.OpenAI(base_url=_base_url(), api_key=os.environ.get("OPENAI_API_KEY", "x"), max_retries=0)
        answer = client.chat.completions.create(model="sim-echo", messages=messages)  # type: ignore[arg-type]
        return answer.choices[0].message.content or ""
    request = urllib.request.Request(
        f"{_base_url()}/chat/completions", data=json.dumps({"model": "sim-echo", "messages": messages}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer x"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (the loopback simulator)
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


@quiver.node("reply", kind="llm")
def reply(topic: dict[str, Any], text: str, found: str) -> str:
    return quiver.llm().chat(messages=[{"role": "user", "content": f"{topic} | {text} | {found}"}],
                             model="sim-echo").content


def pipeline(question: str, urgent: bool, templated: bool, hidden: bool) -> str:
    topic = classify(question, urgent)
    text = draft(question, templated)
    found = lookup(text, hidden)
    return reply(topic, text, found)
