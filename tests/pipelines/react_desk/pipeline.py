"""A support desk on LangGraph's prebuilt ReAct agent, instrumented in one line.

``create_react_agent`` named ``desk``, with two tools, ``lookup_invoice`` and
``check_service`` (both take a ``query``); a ``summary`` node then says which team
should follow up, from the desk's answer (a chat completion of its own). Plain LangGraph
and LangChain code, but for ``instrument(...)``. The agent's ``ChatOpenAI`` is made for
each turn (a dynamic model, its tools bound), from the endpoint the environment names
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from langgraph.warnings import LangGraphDeprecatedSinceV10

import quiver
from quiver.integrations.langgraph import instrument

INVOICES = {"1001": "paid", "1002": "overdue", "1003": "refunded"}
SERVICES = {"email": "operational", "login": "degraded", "api": "down", "dashboard": "degraded"}


@tool
def lookup_invoice(query: str = "") -> str:
    """Look an invoice up by its four-digit number."""
    return json.dumps({"invoice": query, "status": INVOICES.get(query, "unknown")})


@tool
def check_service(query: str = "") -> str:
    """The state of one of our services (email, login, api, dashboard)."""
    return json.dumps({"service": query, "state": SERVICES.get(query, "unknown")})


TOOLS = [lookup_invoice, check_service]


def _model(state: Any, runtime: Any) -> Any:
    return ChatOpenAI(model="lg-react", temperature=0.7, max_retries=0).bind_tools(TOOLS)


with warnings.catch_warnings():  # moved to langchain.agents.create_agent; this desk is the prebuilt one
    warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
    DESK = instrument(create_react_agent(_model, TOOLS, name="desk",
                                         prompt="You are the support desk. Use one tool, then answer."))


@quiver.node("summary", kind="llm")
def summarise(answer: str) -> dict[str, Any]:
    reply = ChatOpenAI(model="lg-summary", temperature=0.0, max_retries=0).invoke(
        [("system", "Say which team follows up, as JSON."), ("user", answer)])
    return dict(json.loads(str(reply.content)))


def run(message: str) -> dict[str, Any]:
    """Answer one customer message: the desk's answer, the tools it used and the summary."""
    state = DESK.invoke({"messages": [("user", message)]})
    answer = str(state["messages"][-1].content)
    tools = [m.name for m in state["messages"] if m.type == "tool"]
    return {"answer": answer, "tools": tools, **summarise(answer)}


async def run_async(message: str) -> dict[str, Any]:
    """The desk run with ``ainvoke`` (the agent's async turns and tool calls)."""
    state = await DESK.ainvoke({"messages": [("user", message)]})
    answer = str(state["messages"][-1].content)
    tools = [m.name for m in state["messages"] if m.type == "tool"]
    return {"answer": answer, "tools": tools, **summarise(answer)}
