"""Two LLM nodes on two clients (the engine's own and a plain ``openai`` SDK client, both
against the endpoint of the spec), and a variant whose transform node also fetches the
endpoint's model list with ``urllib``: a request the replay contract does not account
for (the node's output is not served on replay, so the request goes out every time)."""

from __future__ import annotations

import os
import urllib.request

import httpx
import openai

import quiver

quiver.template("wire_plan", system="Plan the answer in one line.", user="{question}")


@quiver.node("plan", kind="llm")
def plan(question: str) -> str:
    return quiver.llm().chat("wire_plan", question=question).content


@quiver.node("write", kind="llm")
def write(question: str, outline: str) -> str:
    client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY: the spec's endpoint
    answer = client.chat.completions.create(
        model=os.environ.get("WIRE_MIX_MODEL", "sim-echo"), temperature=0.7,
        messages=[{"role": "system", "content": f"Follow: {outline}"}, {"role": "user", "content": question}])
    return answer.choices[0].message.content or ""


@quiver.node("peek", kind="transform")
def peek(question: str) -> str:
    url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/models/sim-echo"
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (the spec's endpoint)
        response.read()
    return question.strip()


@quiver.node("fetch", kind="transform")
def fetch(question: str) -> str:
    """The same request as ``peek`` over ``httpx``: a spec's ``tools: {http: [...]}`` records it."""
    url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/models/sim-echo"
    httpx.get(url, timeout=30).raise_for_status()
    return question.strip()


def pipeline(question: str) -> str:
    return write(question, plan(question))


def pipeline_peeking(question: str) -> str:
    return write(peek(question), plan(question))


def pipeline_fetching(question: str) -> str:
    return write(fetch(question), plan(question))
