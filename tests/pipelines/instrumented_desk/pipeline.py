"""An async support desk on openai-agents, instrumented in one line.

A triage agent hands off to a billing agent (function tool ``lookup_invoice``) or a
technical agent (``check_service_status``, ``open_ticket``); a chat completion then
summarises which team answered and whether the issue is resolved. Plain openai-agents
and ``openai`` code on the SDK's default client (the Responses API), but for
``instrument(TRIAGE)`` and the ``summary`` node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import quiver
from quiver.integrations.openai_agents import instrument

set_tracing_disabled(True)

INVOICES = {"1001": "paid", "1002": "overdue", "1003": "refunded"}
SERVICES = {"email": "operational", "login": "degraded", "api": "operational", "dashboard": "degraded",
            "storage": "operational"}


@function_tool
def lookup_invoice(invoice_id: str) -> str:
    """Look an invoice up by its four-digit number."""
    return json.dumps({"invoice": invoice_id, "status": INVOICES.get(invoice_id, "unknown")})


@function_tool
def check_service_status(service: str) -> str:
    """The current state of one of our services (email, login, api, dashboard, storage)."""
    return json.dumps({"service": service, "state": SERVICES.get(service, "unknown")})


@function_tool
def open_ticket(service: str, severity: str) -> str:
    """Open an incident ticket for a service."""
    return json.dumps({"ticket": f"T-{service[:3].upper()}-{severity[0].upper()}", "severity": severity})


TRIAGE_INSTRUCTIONS = "You are the front desk. Hand billing questions to billing and the rest to technical support."


def desk(model: Callable[[str], Any]) -> Agent[Any]:
    """The triage agent and the agents it hands off to, each on ``model(name)``."""
    settings = ModelSettings(temperature=0.7)
    billing = Agent(name="Billing agent", instructions="You handle invoices and payments. Look the invoice up first.",
                    tools=[lookup_invoice], model=model("idesk-billing"), model_settings=settings)
    technical = Agent(name="Technical agent", instructions="You handle outages and errors. Check the service first.",
                      tools=[check_service_status, open_ticket], model=model("idesk-tech"), model_settings=settings)
    return Agent(name="Triage agent", instructions=TRIAGE_INSTRUCTIONS, handoffs=[billing, technical],
                 model=model("idesk-triage"), model_settings=settings)


TRIAGE = instrument(desk(lambda name: name))
"""On the SDK's default model: the Responses API."""
_CHAT: list[Agent[Any]] = []


def triage_chat() -> Agent[Any]:
    """The desk on chat completions (its client made once the endpoint is set)."""
    if not _CHAT:
        client = AsyncOpenAI(max_retries=0)
        _CHAT.append(instrument(desk(lambda name: OpenAIChatCompletionsModel(name, client))))
    return _CHAT[0]


@quiver.node("summary", kind="llm")
async def summarise(agent: str, answer: str) -> dict[str, Any]:
    reply = await AsyncOpenAI(max_retries=0).chat.completions.create(
        model="idesk-summary", temperature=0.0, response_format={"type": "json_object"},
        messages=[{"role": "system", "content": "Say which team answered and whether it is resolved, as JSON."},
                  {"role": "user", "content": f"{agent}: {answer}"}])
    return dict(json.loads(reply.choices[0].message.content or "{}"))


async def _answered(agent: str, answer: str) -> dict[str, Any]:
    summary = await summarise(agent.split()[0].lower(), answer)
    return {"agent": agent, "answer": answer, **summary}


async def run(message: str) -> dict[str, Any]:
    """The desk on the Responses API."""
    result = await Runner.run(TRIAGE, message)
    return await _answered(result.last_agent.name, str(result.final_output))


async def run_streamed(message: str) -> dict[str, Any]:
    """The desk on the Responses API, streamed."""
    result = Runner.run_streamed(TRIAGE, message)
    async for _ in result.stream_events():
        pass
    return await _answered(result.last_agent.name, str(result.final_output))


async def run_chat(message: str) -> dict[str, Any]:
    """The desk on chat completions."""
    result = await Runner.run(triage_chat(), message)
    return await _answered(result.last_agent.name, str(result.final_output))
