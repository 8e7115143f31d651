"""An order desk: an openai-agents agent with a function tool, on the Responses API.

Plain ``openai`` and ``openai-agents`` code, nothing about quiver but the node
decorators: the clients are built from the environment (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``: ``quiver record``, ``run``, ``replay`` and ``gate`` point them at the
spec's endpoint), the agent uses the SDK's default client (one ``AsyncOpenAI`` for the
whole process) and its default API, the Responses API.

* ``intake`` asks a chat completion (JSON) for the message's topic;
* ``desk`` runs the agent: its instructions are written inline (a ``prompt_swap``
  selects them as the request's system message), it calls the ``lookup_order`` tool,
  whose body is the ``lookup_order`` node (``kind="tool"``: a campaign can override what
  the tool returned), and answers JSON with the order's status and its tone;
* ``reply`` puts them together and decides whether a person takes over (``escalate``).

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

set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI

INSTRUCTIONS = ("You are the order desk of a web shop. Look the order up with lookup_order before you answer. "
                "Answer in one or two sentences.")
ORDERS: dict[str, dict[str, Any]] = {
    "1042": {"status": "delayed", "eta_days": 3},
    "2077": {"status": "shipped", "eta_days": 1},
    "3150": {"status": "delivered", "eta_days": 0},
}


@quiver.node("lookup_order", kind="tool")
def find_order(order_id: str) -> dict[str, Any]:
    """The order book (a service call in a real shop)."""
    return ORDERS.get(order_id, {"status": "unknown", "eta_days": -1})


@function_tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its four-digit number: its status and the days until it arrives."""
    return json.dumps(find_order(order_id))


AGENT = Agent(name="order desk", instructions=INSTRUCTIONS, tools=[lookup_order],
              model=os.environ.get("DESK_MODEL", "desk-agent"), model_settings=ModelSettings(temperature=0.7))


@quiver.node("intake", kind="llm")
async def intake(message: str) -> dict[str, Any]:
    client = AsyncOpenAI(max_retries=0)
    answer = await client.chat.completions.create(
        model="desk-intake", temperature=0.0, response_format={"type": "json_object"},
        messages=[{"role": "system", "content": "Give the topic of the customer's message as JSON."},
                  {"role": "user", "content": message}])
    return dict(json.loads(answer.choices[0].message.content or "{}"))


@quiver.node("desk", kind="llm")
async def desk(message: str) -> dict[str, Any]:
    result = await Runner.run(AGENT, message)
    return dict(json.loads(str(result.final_output)))


@quiver.node("reply")
def reply(intake: dict[str, Any], desk: dict[str, Any]) -> dict[str, Any]:
    escalate = intake.get("topic") == "refund" or desk.get("status") == "unknown"
    return {"topic": intake.get("topic"), "status": desk.get("status"), "tone": desk.get("tone"),
            "escalate": escalate}


async def run(message: str) -> dict[str, Any]:
    return reply(await intake(message), await desk(message))
