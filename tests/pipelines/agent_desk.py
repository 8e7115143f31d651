"""A support desk on openai-agents, and its simulated models: handoffs, function tools, a summary.

Plain ``openai-agents`` code with one quiver node around the agents' run (no
integration): a triage agent hands a customer's message off to a billing agent (tool
``lookup_invoice``) or a technical agent (tools ``check_service_status`` and
``open_ticket``); a chat completion then summarises. Each agent runs on a model of its
own, on the Responses API, so the calls after a handoff go to another model name than
the same calls after the other handoff.

The triage model hands off by sampling: a message that names neither billing nor a fault
goes to either agent (the choice a pure function of the request and the sample key, as
every simulated answer is), so repeats of one message hand off differently while every
recorded input of the triage call is the same. The technical agent samples the severity
of a ticket it opens (a tool call's arguments that differ with equal inputs).

Two smaller apps call a model with tools on the other wire formats, the same way: a
chat completion (``tool_calls``) and an Anthropic message (``tool_use`` blocks) choose a
tool by sampling, the tool runs, and a second call answers from its result.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from typing import Any

import anthropic
import openai

import quiver
from quiver.replay import Fields, SimRequest, ToolCall, sim_model

MODELS = {"triage": "desk-triage", "billing": "desk-billing", "tech": "desk-tech", "summary": "desk-summary",
          "chat": "desk-chat-router", "anthropic": "desk-claude-router"}
"""The model each part runs on (a test may point one at an alias: ``DESK_<PART>_MODEL``)."""

_INVOICE = re.compile(r"\b(INV-\d+)\b")


def model(part: str) -> str:
    """The model ``part`` runs on: ``DESK_<PART>_MODEL`` when set, else its own."""
    return os.environ.get(f"DESK_{part.upper()}_MODEL", MODELS[part])


def _coin(req: SimRequest, *choices: str) -> str:
    """One of ``choices``, drawn from the request and its sample key (a pure function of
    both, as every simulated answer is): another sample key may draw another."""
    digest = hashlib.sha256(f"{req.sample_key}\x00{req.model}\x00{req.text}".encode()).digest()
    return random.Random(digest).choice(choices)


# --------------------------------------------------------------------------- simulated models


@sim_model("desk-triage")
def triage_model(req: SimRequest) -> ToolCall | Fields:
    text = req.last_user.lower()
    handoffs = [n for n in req.tool_names if n.startswith("transfer_to_")]
    if not handoffs:
        return Fields(answer="I cannot route this message.")
    if "invoice" in text or "charged" in text:
        return ToolCall("transfer_to_billing_agent")
    if "down" in text or "error" in text:
        return ToolCall("transfer_to_tech_agent")
    return ToolCall(_coin(req, *sorted(handoffs)))


@sim_model("desk-billing")
def billing_model(req: SimRequest) -> ToolCall | Fields:
    if not any("invoice_id" in r for r in req.tool_results) and "lookup_invoice" in req.tool_names:
        found = _INVOICE.search(req.user_text)
        return ToolCall("lookup_invoice", {"invoice_id": found.group(1) if found else "unknown"})
    return Fields(team="billing", answer={"refund": 0.5, "explain": 1.0})


@sim_model("desk-tech")
def tech_model(req: SimRequest) -> ToolCall | Fields:
    if not any("ticket" in r for r in req.tool_results) and "open_ticket" in req.tool_names:
        return ToolCall("open_ticket", Fields(severity={"low": 0.0, "high": 0.0}, service="mail"))
    return Fields(team="tech", answer={"workaround": 1.0, "escalate": 0.5})


@sim_model("desk-summary")
def summary_model(req: SimRequest) -> Fields:
    team = "billing" if "billing" in req.user_text else "tech" if "tech" in req.user_text else "none"
    return Fields(summary=f"handled by {team}", follow_up={True: 0.0, False: 0.5})


@sim_model("desk-router")
def router_model(req: SimRequest) -> ToolCall | str:
    """The chat and Anthropic routers: pick ``refund`` or ``escalate`` by sampling, then
    answer the same whichever ran (the tool chosen is the only difference)."""
    if req.tool_results:
        return "handled"
    return ToolCall(_coin(req, *sorted(req.tool_names)), {"reason": "customer asked"})


@sim_model("desk-chain")
def chain_model(req: SimRequest) -> Fields:
    """The Responses API chain: notes the message, then (continuing the first response)
    samples what to do next."""
    if any(m["role"] == "assistant" for m in req.messages):
        return Fields(next={"wait": 0.0, "call back": 0.0})
    return Fields(noted=True)


ALIASES = {MODELS["chat"]: "desk-router", MODELS["anthropic"]: "desk-router"}
"""The simulator aliases the router apps need."""


# --------------------------------------------------------------------------- the agents app


def _agents() -> Any:
    from agents import Agent, ModelSettings, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def lookup_invoice(invoice_id: str) -> str:
        """Look an invoice up by its id."""
        return json.dumps({"invoice_id": invoice_id, "amount": 42.0, "paid": False})

    @function_tool
    def check_service_status(service: str) -> str:
        """Whether a service is up."""
        return json.dumps({"service": service, "up": True})

    @function_tool
    def open_ticket(service: str, severity: str) -> str:
        """Open a ticket with the technical team."""
        return json.dumps({"ticket": f"T-{service}-{severity}"})

    settings = ModelSettings(temperature=0.8)
    billing = Agent(name="billing agent", instructions="You handle invoices and payments.",
                    tools=[lookup_invoice], model=model("billing"), model_settings=settings)
    tech = Agent(name="tech agent", instructions="You handle faults and outages.",
                 tools=[check_service_status, open_ticket], model=model("tech"), model_settings=settings)
    return Agent(name="triage", instructions="Hand the customer to the right agent.", handoffs=[billing, tech],
                 model=model("triage"), model_settings=settings)


@quiver.node("desk", kind="llm")  # the triage agent's first request is this call's own
async def desk(message: str) -> dict[str, Any]:
    from agents import Runner

    result = await Runner.run(_agents(), message)
    return {"agent": result.last_agent.name, "answer": json.loads(str(result.final_output))}


@quiver.node("summary", kind="llm")
async def summary(message: str, handled: dict[str, Any]) -> dict[str, Any]:
    answer = await openai.AsyncOpenAI(max_retries=0).chat.completions.create(
        model=model("summary"), temperature=0.5, response_format={"type": "json_object"},
        messages=[{"role": "system", "content": "Summarise the exchange as JSON."},
                  {"role": "user", "content": f"{message}\nhandled by: {handled['agent']}"}])
    return dict(json.loads(answer.choices[0].message.content or "{}"))


async def support_desk(message: str) -> dict[str, Any]:
    handled = await desk(message)
    return {"agent": handled["agent"], "summary": await summary(message, handled)}


# --------------------------------------------------------------------------- the router apps

_ROUTER_TOOLS = ("refund", "escalate")


def _chat_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "description": f"{n} the order",
                                              "parameters": {"type": "object",
                                                             "properties": {"reason": {"type": "string"}}}}}
            for n in _ROUTER_TOOLS]


@quiver.node("chat_router", kind="transform")
def chat_router(message: str) -> str:
    client = openai.OpenAI(max_retries=0)
    messages: list[Any] = [{"role": "system", "content": "Route the order."}, {"role": "user", "content": message}]
    first = client.chat.completions.create(model=model("chat"), messages=messages, tools=_chat_tools(),  # type: ignore[arg-type]
                                           temperature=1.0)
    calls = first.choices[0].message.tool_calls or []
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": f"{c.function.name} done"}  # type: ignore[union-attr]
                 for c in calls]
    second = client.chat.completions.create(model=model("chat"), messages=messages, tools=_chat_tools(),  # type: ignore[arg-type]
                                            temperature=1.0)
    return second.choices[0].message.content or ""


def anthropic_client(root: str) -> anthropic.Anthropic:
    """The client of the Anthropic router (``root``: the endpoint without ``/v1``)."""
    return anthropic.Anthropic(base_url=root, api_key="sk-ant-test", max_retries=0)


@quiver.node("claude_router", kind="transform")
def claude_router(message: str) -> str:
    client = anthropic_client(os.environ["OPENAI_BASE_URL"].removesuffix("/v1"))
    tools = [{"name": n, "description": f"{n} the order",
              "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}}} for n in _ROUTER_TOOLS]
    messages: list[Any] = [{"role": "user", "content": message}]
    first = client.messages.create(model=model("anthropic"), max_tokens=64, system="Route the order.",
                                   messages=messages, tools=tools)  # type: ignore[arg-type]
    uses = [b for b in first.content if b.type == "tool_use"]
    messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id,
                                                  "content": f"{b.name} done"} for b in uses]})
    second = client.messages.create(model=model("anthropic"), max_tokens=64, system="Route the order.",
                                    messages=messages, tools=tools)  # type: ignore[arg-type]
    return "".join(b.text for b in second.content if b.type == "text")


@quiver.node("chain", kind="transform")
def chain(message: str) -> str:
    """Two Responses API calls, the second continuing the first by ``previous_response_id``."""
    client = openai.OpenAI(max_retries=0)
    first = client.responses.create(model="desk-chain", instructions="Note the message.", input=message)
    return client.responses.create(model="desk-chain", input="What next?", previous_response_id=first.id).output_text
