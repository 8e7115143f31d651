"""A pipeline whose LLM calls ask for structured outputs through the plain ``openai`` SDK.

Each node sends its request to ``OPENAI_BASE_URL`` with no integration, so the engine
captures it at the transport:

* ``triage`` (a transform) calls ``client.beta.chat.completions.parse`` with a pydantic
  model: the call is a child ``llm`` call of ``triage``;
* ``extract`` (a transform) calls ``client.chat.completions.create`` with a
  ``json_schema`` response format and parses the text itself;
* ``classify`` (an ``llm`` node) calls the async client's ``parse``: the call is
  ``classify`` itself;
* ``summarize`` (an ``llm`` node) asks the engine's own client for a pydantic model
  (``quiver.llm().chat(..., response_format=Summary)``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import openai
from pydantic import BaseModel

import quiver

MODEL = "sim-json"


class Ticket(BaseModel):
    urgent: bool
    category: Literal["billing", "bug", "account"]


class Summary(BaseModel):
    headline: str
    escalate: bool


EXTRACT_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "entities",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"product": {"type": "string"}, "severity": {"type": "integer"}},
            "required": ["product", "severity"],
            "additionalProperties": False,
        },
    },
}


def _messages(system: str, text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


@quiver.node("triage")
def triage(text: str) -> dict[str, Any]:
    reply = openai.OpenAI(max_retries=0).beta.chat.completions.parse(
        model=MODEL, messages=_messages("Triage the ticket.", text), response_format=Ticket,  # type: ignore[arg-type]
        temperature=1.0,
    )
    parsed = reply.choices[0].message.parsed
    assert parsed is not None
    return parsed.model_dump()


@quiver.node("extract")
def extract(text: str) -> dict[str, Any]:
    reply = openai.OpenAI(max_retries=0).chat.completions.create(
        model=MODEL, messages=_messages("Extract the entities.", text),  # type: ignore[arg-type]
        response_format=EXTRACT_FORMAT,  # type: ignore[arg-type]
    )
    return dict(json.loads(reply.choices[0].message.content or "null"))


@quiver.node("classify", kind="llm")
async def classify(text: str, ticket: dict[str, Any]) -> dict[str, Any]:
    reply = await openai.AsyncOpenAI(max_retries=0).beta.chat.completions.parse(
        model=MODEL, messages=_messages(f"Classify a {ticket['category']} ticket.", text),  # type: ignore[arg-type]
        response_format=Ticket,
    )
    parsed = reply.choices[0].message.parsed
    assert parsed is not None
    return parsed.model_dump()


@quiver.node("summarize", kind="llm")
def summarize(ticket: dict[str, Any], entities: dict[str, Any]) -> dict[str, Any]:
    text = f"{ticket['category']} ticket about {entities['product']} (severity {entities['severity']})"
    return dict(quiver.llm().chat(messages=_messages("Summarize.", text), response_format=Summary).data)


def pipeline(text: str) -> dict[str, Any]:
    ticket = triage(text)
    entities = extract(text)
    label = asyncio.run(classify(text, ticket))
    return {"ticket": ticket, "label": label, "summary": summarize(label, entities)}
