"""A support desk on pydantic-ai, instrumented in one line.

The ``support`` agent answers a customer with one of three function tools, all taking
a ``query``: ``lookup_invoice``, ``check_service``, or ``escalate``, which delegates to
the ``escalation`` agent (its structured answer, a ``Ticket``, given through
pydantic-ai's output tool). Plain pydantic-ai code on the chat completions API, but for
``instrument(SUPPORT)`` (which finds ``escalation`` in ``escalate``). The agents are
built on first use, once the endpoint is set (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import json
from typing import Any

from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, ModelSettings, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from quiver.integrations.pydantic_ai import instrument

INVOICES = {"1001": "paid", "1002": "overdue", "1003": "refunded"}
SERVICES = {"email": "operational", "login": "degraded", "api": "down", "dashboard": "degraded"}


class Ticket(BaseModel):
    team: str
    severity: str


_provider: list[OpenAIProvider] = []


def _model(name: str) -> OpenAIChatModel:
    if not _provider:
        _provider.append(OpenAIProvider(openai_client=AsyncOpenAI(max_retries=0)))
    return OpenAIChatModel(name, provider=_provider[0])


ESCALATION = Agent(name="escalation", output_type=Ticket, instructions="Open a ticket for the team that must act.",
                   model_settings=ModelSettings(temperature=0.7))
SUPPORT = Agent(name="support", instructions="You are the support desk. Use one tool, then answer in one sentence.",
                model_settings=ModelSettings(temperature=0.7))


@SUPPORT.tool_plain
def lookup_invoice(query: str = "") -> str:
    """Look an invoice up by its four-digit number."""
    return json.dumps({"invoice": query, "status": INVOICES.get(query, "unknown")})


@SUPPORT.tool_plain
def check_service(query: str = "") -> str:
    """The state of one of our services (email, login, api, dashboard)."""
    return json.dumps({"service": query, "state": SERVICES.get(query, "unknown")})


@SUPPORT.tool
async def escalate(ctx: RunContext[None], query: str = "") -> str:
    """Hand the case to the escalation team, who open a ticket."""
    result = await ESCALATION.run(query, model=_model("pa-escalation"), usage=ctx.usage)
    return result.output.model_dump_json()


instrument(SUPPORT)


async def run(message: str) -> dict[str, Any]:
    """Answer one customer message: the answer and the tools the support agent used."""
    result = await SUPPORT.run(message, model=_model("pa-support"))
    return {"answer": str(result.output), "tools": _tools_called(result.new_messages())}


def _tools_called(messages: list[Any]) -> list[str]:
    return [p.tool_name for m in messages if m.kind == "response" for p in m.parts if p.part_kind == "tool-call"]


async def run_streamed(message: str) -> dict[str, Any]:
    """The desk, the support agent's answer streamed."""
    async with SUPPORT.run_stream(message, model=_model("pa-support")) as result:
        answer = await result.get_output()
    return {"answer": str(answer), "tools": _tools_called(result.new_messages())}

