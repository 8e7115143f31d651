"""A LangGraph support agent: a router, a retrieve-grade-rewrite cycle and a composer.

Plain LangGraph and LangChain: ``ChatOpenAI`` built from the environment
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: ``quiver record``, ``run``, ``replay`` and
``gate`` point them at the spec's endpoint), prompts as ``ChatPromptTemplate``s, state
with a reducer. The one line that is about quiver is the ``instrument(...)`` call at the
bottom of the graph's construction.

* ``router`` asks whether the question needs the knowledge base (``retrieve``) or only a
  friendly reply (``compose``);
* ``retrieve`` scores the articles of ``kb.jsonl`` against the current query (keyword
  overlap) and keeps the best three;
* ``grade`` asks whether they answer the question: ``yes`` goes to ``compose``, ``no`` to
  ``rewrite`` (at most three queries in all, then ``compose`` with what there is);
* ``rewrite`` asks for a better query and loops back to ``retrieve``;
* ``compose`` writes the answer from the articles, with the ``open_ticket`` tool bound
  to its model (``bind_tools``): when an article says a person has to act (an admin,
  billing, the workspace owner) the model calls the tool instead of answering;
* ``tools`` (a ``ToolNode``) runs that call and answers with a ``ToolMessage``;
* ``follow_up`` goes on with the conversation (the composer's prompt, its tool call and
  the tool's answer) and writes the answer with the ticket in it.
"""

from __future__ import annotations

import json
import operator
import re
import zlib
from functools import cache
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from quiver.integrations.langgraph import instrument

__all__ = ["run", "graph"]

MAX_QUERIES = 3
"""Queries tried before composing with whatever was found."""
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the i my me is do does to of in on for and or what how can why when where it this that "
                  "with your you get from by be at was will".split())


class AgentState(TypedDict, total=False):
    question: str
    route: str
    query: str
    queries: Annotated[list[str], operator.add]
    docs: list[dict[str, Any]]
    relevant: str
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str


ROUTER_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You route support questions. Answer 'retrieve' when the question needs the "
               "knowledge base, 'compose' when a friendly reply is enough. One word."),
    ("human", "Question:\n<<<\n{question}\n>>>"),
])
GRADER_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Do the articles answer the question? Answer 'yes' or 'no'."),
    ("human", "Question:\n<<<\n{question}\n>>>\n\nArticles:\n{context}"),
])
REWRITE_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Rewrite the search query so that it finds the help article. One line."),
    ("human", "Question:\n<<<\n{question}\n>>>\n\nQuery tried:\n<<<\n{query}\n>>>"),
])
COMPOSE_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You are a support agent. Answer from the articles and cite the article id in "
               "brackets. If none applies, say so and offer to open a ticket."),
    ("human", "Question:\n<<<\n{question}\n>>>\n\nArticles:\n{context}"),
])


@tool
def open_ticket(team: str, priority: str, summary: str) -> str:
    """Open a support ticket for the team that has to act; returns the ticket's number.

    Args:
        team: ``support`` or ``billing``.
        priority: ``normal`` or ``high``.
        summary: The customer's request in one line.
    """
    number = 1000 + zlib.crc32(f"{team}|{priority}|{summary}".encode()) % 9000
    return f"Ticket T-{number} opened for the {team} team (priority {priority})."


def _chat(model: str, temperature: float = 0.7) -> ChatOpenAI:
    return ChatOpenAI(model=model, temperature=temperature, max_retries=0)


def _ask(prompt: ChatPromptTemplate, model: str, **variables: Any) -> str:
    reply = _chat(model).invoke(prompt.format_messages(**variables))
    return str(reply.content).strip()


def _context(docs: list[dict[str, Any]]) -> str:
    return "\n".join(f"[{d['doc_id']}] {d['content']}" for d in docs) or "(none)"


@cache
def _kb() -> tuple[dict[str, Any], ...]:
    path = Path(__file__).with_name("kb.jsonl")
    return tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


# --------------------------------------------------------------------------- nodes


def router(state: AgentState) -> dict[str, Any]:
    label = _ask(ROUTER_PROMPT, "lg-router", question=state["question"]).lower()
    return {"route": "compose" if label.startswith("compose") else "retrieve"}


def retrieve(state: AgentState) -> dict[str, Any]:
    query = state.get("query") or state["question"]
    words = _words(query)
    scored = [(len(words & _words(d["content"])), i, d) for i, d in enumerate(_kb())]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:3]
    return {
        "docs": [{"doc_id": d["doc_id"], "content": d["content"], "score": float(score)} for score, _, d in best],
        "queries": [query],
    }


def grade(state: AgentState) -> dict[str, Any]:
    label = _ask(GRADER_PROMPT, "lg-grader", question=state["question"], context=_context(state.get("docs", [])))
    return {"relevant": "yes" if label.lower().startswith("yes") else "no"}


def rewrite(state: AgentState) -> dict[str, Any]:
    query = state.get("query") or state["question"]
    return {"query": _ask(REWRITE_PROMPT, "lg-rewriter", question=state["question"], query=query)}


def compose(state: AgentState) -> dict[str, Any]:
    prompt = COMPOSE_PROMPT.format_messages(question=state["question"], context=_context(state.get("docs", [])))
    reply = _chat("lg-composer").bind_tools([open_ticket]).invoke(prompt)
    if reply.tool_calls:
        return {"messages": [reply]}
    return {"messages": [reply], "answer": str(reply.content).strip()}


def follow_up(state: AgentState) -> dict[str, Any]:
    prompt = COMPOSE_PROMPT.format_messages(question=state["question"], context=_context(state.get("docs", [])))
    conversation = prompt + state["messages"]
    reply = _chat("lg-composer").bind_tools([open_ticket]).invoke(conversation)
    return {"answer": str(reply.content).strip()}


def route_question(state: AgentState) -> str:
    return state["route"]


def after_grade(state: AgentState) -> str:
    if state.get("relevant") == "yes" or len(state.get("queries", [])) >= MAX_QUERIES:
        return "compose"
    return "rewrite"


def build() -> Any:
    builder = StateGraph(AgentState)
    for step in (router, retrieve, grade, rewrite, compose, follow_up):
        builder.add_node(step.__name__, step)
    builder.add_node("tools", ToolNode([open_ticket]))
    builder.add_edge(START, "router")
    builder.add_conditional_edges("router", route_question, ["retrieve", "compose"])
    builder.add_edge("retrieve", "grade")
    builder.add_conditional_edges("grade", after_grade, ["compose", "rewrite"])
    builder.add_edge("rewrite", "retrieve")
    builder.add_conditional_edges("compose", tools_condition, ["tools", END])
    builder.add_edge("tools", "follow_up")
    builder.add_edge("follow_up", END)
    return instrument(builder.compile(), kinds={"retrieve": "retrieval"})


graph = build()


def run(question: str) -> dict[str, Any]:
    """Answer one question; the final state's answer, route, queries and the tools called."""
    state = graph.invoke({"question": question})
    tools = [m.name for m in state.get("messages", []) if m.type == "tool"]
    return {"answer": state.get("answer"), "route": state.get("route"), "queries": state.get("queries", []),
            "tools": tools}
