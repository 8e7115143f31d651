"""An order desk on openai-agents: a triage agent hands off to an order desk or a refunds
desk, each with a function tool, on the Responses API.

Plain ``openai`` and ``openai-agents`` code; quiver adds one line, ``instrument(TRIAGE)``,
and the ``intake`` and ``reply`` nodes. The clients are built from the environment
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: ``quiver record``, ``run``, ``replay`` and
``gate`` point them at the spec's endpoint); the agents use the SDK's default client (one
``AsyncOpenAI`` for the whole process) and its default API, the Responses API.

* ``intake`` asks a chat completion (JSON) for the message's topic;
* the ``Triage`` agent hands the message off to the ``Order desk`` (questions about an
  order's whereabouts) or to the ``Refunds desk`` (broken or unwanted goods);
* the ``Order desk`` looks the order up with ``lookup_order``, the ``Refunds desk`` opens
  a refund with ``open_refund``; each answers JSON with the order's status and its tone
  (their instructions are written inline: a ``prompt_swap`` selects them as the
  request's system message);
* ``reply`` puts them together and decides whether a person takes over (``escalate``).

With ``instrument`` each agent is a node named by the agent (one call per model turn),
each tool a ``tool`` node named by the tool, and each handoff a decision of the triage
turn: a campaign flips it (the other desk runs), overrides what a tool returned, or
swaps an agent's instructions (see ``experiments/specs/agents_example.yaml``).

The pipeline is ``async def``: every trace's coroutine runs in the event loop quiver
shares over a recording's or a campaign's threads, where the SDK's shared client works.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import quiver
from quiver.integrations.openai_agents import instrument

set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI

TRIAGE_INSTRUCTIONS = ("You are the front desk of a web shop. Hand questions about where an order is to the order "
                       "desk, and broken or unwanted goods to the refunds desk.")
ORDER_INSTRUCTIONS = ("You are the order desk of a web shop. Look the order up with lookup_order before you answer. "
                      "Answer in one or two sentences.")
REFUND_INSTRUCTIONS = ("You are the refunds desk of a web shop. Open a refund with open_refund, then confirm it in "
                       "one sentence.")
ORDERS: dict[str, dict[str, Any]] = {
    "1042": {"status": "delayed", "eta_days": 3},
    "2077": {"status": "shipped", "eta_days": 1},
    "3150": {"status": "delivered", "eta_days": 0},
}


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its four-digit number: its status and the days until it arrives."""
    return json.dumps(ORDERS.get(order_id, {"status": "unknown", "eta_days": -1}))


@function_tool
def open_refund(order_id: str, reason: str) -> str:
    """Open a refund for an order, with the customer's reason."""
    known = order_id in ORDERS
    return json.dumps({"refund": f"R-{order_id}" if known else None, "status": "refund_opened" if known else "unknown"})


SETTINGS = ModelSettings(temperature=0.7)
ORDER_DESK = Agent(name="Order desk", instructions=ORDER_INSTRUCTIONS, tools=[lookup_order],
                   model=os.environ.get("DESK_MODEL", "desk-agent"), model_settings=SETTINGS)
REFUNDS_DESK = Agent(name="Refunds desk", instructions=REFUND_INSTRUCTIONS, tools=[open_refund],
                     model="shop-refunds", model_settings=SETTINGS)
TRIAGE = instrument(Agent(name="Triage", instructions=TRIAGE_INSTRUCTIONS, handoffs=[ORDER_DESK, REFUNDS_DESK],
                          model="shop-triage", model_settings=SETTINGS))


@quiver.node("intake", kind="llm")
async def intake(message: str) -> dict[str, Any]:
    client = AsyncOpenAI(max_retries=0)
    answer = await client.chat.completions.create(
        model="desk-intake", temperature=0.0, response_format={"type": "json_object"},
        messages=[{"role": "system", "content": "Give the topic of the customer's message as JSON."},
                  {"role": "user", "content": message}])
    return dict(json.loads(answer.choices[0].message.content or "{}"))


@quiver.node("reply")
def reply(intake: dict[str, Any], desk: str, answer: dict[str, Any]) -> dict[str, Any]:
    escalate = intake.get("topic") == "refund" and desk != "Refunds desk" or answer.get("status") == "unknown"
    return {"topic": intake.get("topic"), "desk": desk, "status": answer.get("status"), "tone": answer.get("tone"),
            "escalate": escalate}


async def run(message: str) -> dict[str, Any]:
    topic = await intake(message)
    result = await Runner.run(TRIAGE, message)
    return reply(topic, result.last_agent.name, dict(json.loads(str(result.final_output))))
