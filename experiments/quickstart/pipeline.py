"""Helpdesk triage: the bundled example pipeline, written only with ``import quiver``.

A support ticket goes through::

    normalize ─┬─ classify (llm) ───┬─ route ─┬─ escalate:  ticket (tool)
               └─ retrieve (BM25) ──┘         ├─ smalltalk: chitchat (llm)
                                              └─ answer:    loop "refine" of draft (llm),
                                                            then review (llm)

``classify`` and ``retrieve`` run in parallel through :class:`quiver.ThreadPoolExecutor`.
``route`` decides the gate ``route``; ``review`` decides the gate ``verdict``, and an
``accept`` ends the ``refine`` loop (at most :data:`MAX_DRAFTS` drafts).

Outside ``quiver record`` every ``quiver.*`` call is a passthrough: configure a client
with ``quiver.configure_llm(...)`` and call :func:`run` like any function.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import quiver

__all__ = [
    "run", "normalize", "classify", "retrieve", "route", "open_ticket", "chitchat", "draft", "review",
]

KB_PATH = Path(__file__).resolve().parent / "kb.jsonl"
"""The bundled knowledge base: one help article per line (doc_id, title, content)."""

TOP_K = 3
"""How many articles ``retrieve`` returns."""
SMALLTALK_MAX_SCORE = 3.0
"""A ticket of category ``other`` is small talk unless an article scores above this."""
MAX_DRAFTS = 3
"""The ``refine`` loop's bound: the last draft is sent even when the reviewer wants more."""

CLASSIFY_MODEL = "quickstart-classify"
CHAT_MODEL = "quickstart-chat"
DRAFT_MODEL = "quickstart-draft"
REVIEW_MODEL = "quickstart-review"

Route = Literal["escalate", "smalltalk", "answer"]
Verdict = Literal["accept", "revise"]

# --------------------------------------------------------------------------- prompts

quiver.template(
    "classify",
    system=(
        "You triage customer support tickets for Acme Cloud. Read the ticket and answer "
        "in JSON with its category (billing, bug, account or other), whether it is "
        "urgent, and the customer's sentiment (negative, neutral or positive)."
    ),
    user="Ticket:\n<<<\n{ticket}\n>>>",
)
quiver.template(
    "chitchat",
    system=(
        "You are the friendly Acme Cloud support assistant. The message below needs no "
        "troubleshooting: reply in one or two warm sentences and offer help."
    ),
    user="Customer message:\n<<<\n{ticket}\n>>>",
)
quiver.template(
    "draft",
    system=(
        "You write replies to Acme Cloud support tickets. Use only the help articles "
        "given as context, and cite every article you rely on by its id in square brackets."
    ),
    user=(
        "Attempt {attempt} of {max_attempts}.\n"
        "Ticket (category: {category}):\n<<<\n{ticket}\n>>>\n\n"
        "Context:\n{context}\n\n"
        "Reviewer feedback: {feedback}"
    ),
)
quiver.template(
    "review",
    system=(
        "You review draft support replies before they are sent. Accept a draft that "
        "answers the ticket and cites the context articles it relies on; otherwise ask "
        "for a revision. Answer in JSON."
    ),
    user=(
        "Attempt {attempt} of {max_attempts}.\n"
        "Ticket:\n<<<\n{ticket}\n>>>\n\n"
        "Context:\n{context}\n\n"
        "Draft reply:\n<<<\n{draft}\n>>>"
    ),
)


def _json_format(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A strict ``json_schema`` response format for an object of ``properties``."""
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


CLASSIFY_FORMAT = _json_format(
    "triage",
    {
        "category": {"type": "string", "enum": ["billing", "bug", "account", "other"]},
        "urgent": {"type": "boolean"},
        "sentiment": {"type": "string", "enum": ["negative", "neutral", "positive"]},
    },
)
REVIEW_FORMAT = _json_format(
    "review", {"verdict": {"type": "string", "enum": ["accept", "revise"]}}
)

# --------------------------------------------------------------------------- intake


_SIGNATURE = re.compile(r"^--\s*$")
"""The conventional e-mail signature delimiter line (``-- ``)."""


@quiver.node(kind="transform")
def normalize(ticket: str) -> str:
    """The ticket's own words: no signature, no quoted reply lines, whitespace collapsed."""
    kept: list[str] = []
    for line in ticket.splitlines():
        if _SIGNATURE.match(line):
            break
        if not line.lstrip().startswith(">"):
            kept.append(line)
    return " ".join(" ".join(kept).split())


@quiver.node("classify", kind="llm")
def classify(text: str) -> dict[str, Any]:
    """Category, urgency and sentiment of the ticket, as JSON."""
    result = quiver.llm().chat(
        "classify", model=CLASSIFY_MODEL, response_format=CLASSIFY_FORMAT, ticket=text
    )
    return dict(result.data)


_STOPWORDS = frozenset(
    "a an and are as at be been but by can could do does for from get got has have how i i'm if in "
    "is it its just me my no not now of on or our please so that the their them then there this "
    "to up us was we were what when which who why will with you your".split()
)


def _tokens(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords."""
    return [w for w in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower()) if w not in _STOPWORDS]


@lru_cache(maxsize=1)
def _knowledge_base() -> tuple[dict[str, str], ...]:
    """The articles of :data:`KB_PATH`, read once."""
    with KB_PATH.open(encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@lru_cache(maxsize=1)
def _index() -> tuple[list[Counter[str]], dict[str, float], float]:
    """Term counts per article, BM25 idf per term and the mean article length."""
    counts = [Counter(_tokens(f"{a['title']} {a['content']}")) for a in _knowledge_base()]
    n = len(counts)
    df = Counter(term for c in counts for term in c)
    idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    avg_len = sum(sum(c.values()) for c in counts) / n
    return counts, idf, avg_len


def _bm25(query: list[str], doc: Counter[str], idf: dict[str, float], avg_len: float) -> float:
    """Okapi BM25 (k1 = 1.2, b = 0.75) of one article for the query terms."""
    k1, b = 1.2, 0.75
    length = sum(doc.values())
    score = 0.0
    for term in set(query):
        tf = doc.get(term, 0)
        if tf:
            score += idf[term] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg_len))
    return score


@quiver.node(kind="retrieval")
def retrieve(text: str) -> list[dict[str, Any]]:
    """The :data:`TOP_K` best matching articles by BM25, as ``{doc_id, content, score}``."""
    counts, idf, avg_len = _index()
    query = _tokens(text)
    scored = [
        (_bm25(query, doc, idf, avg_len), article)
        for doc, article in zip(counts, _knowledge_base(), strict=True)
    ]
    scored.sort(key=lambda pair: -pair[0])
    docs = [
        {"doc_id": a["doc_id"], "content": f"{a['title']}: {a['content']}", "score": round(s, 3)}
        for s, a in scored[:TOP_K]
        if s > 0
    ]
    quiver.retrieved(docs)
    return docs


# --------------------------------------------------------------------------- routing


def _best_score(docs: list[dict[str, Any]]) -> float:
    """The highest retrieval score (0 when nothing matched)."""
    return max((d["score"] for d in docs), default=0.0)


@quiver.node(kind="router")
def route(intake: dict[str, Any], docs: list[dict[str, Any]]) -> Route:
    """Escalate angry urgent tickets, chat back on small talk, answer the rest."""
    arm: Route
    if intake["urgent"] and intake["sentiment"] == "negative":
        arm = "escalate"
    elif intake["category"] == "other" and _best_score(docs) <= SMALLTALK_MAX_SCORE:
        arm = "smalltalk"
    else:
        arm = "answer"
    return quiver.decide("route", arm)


@quiver.node("ticket", kind="tool", parents=["classify"])
def open_ticket(text: str, category: str) -> dict[str, str]:
    """Open a priority ticket; its id is derived from the ticket text (idempotent)."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    ticket_id = f"HD-{int(digest[:10], 16) % 1_000_000:06d}"
    return {"ticket_id": ticket_id, "queue": f"{category}-priority"}


@quiver.node("chitchat", kind="llm")
def chitchat(text: str) -> str:
    """A short friendly reply to a message that needs no troubleshooting."""
    return quiver.llm().chat("chitchat", model=CHAT_MODEL, ticket=text).content


# --------------------------------------------------------------------------- answering


def _context(docs: list[dict[str, Any]]) -> str:
    """The retrieved articles as prompt lines: ``[KB-101] Title: content``."""
    return "\n".join(f"[{d['doc_id']}] {d['content']}" for d in docs)


@quiver.node("draft", kind="llm", parents=["classify", "retrieve", "review"])
def draft(text: str, category: str, context: str, attempt: int, feedback: str) -> str:
    """A reply to the ticket that cites the context articles it uses."""
    return quiver.llm().chat(
        "draft", model=DRAFT_MODEL, ticket=text, category=category, context=context,
        attempt=attempt, max_attempts=MAX_DRAFTS, feedback=feedback,
    ).content


@quiver.node("review", kind="llm", parents=["retrieve", "draft"])
def review(text: str, context: str, reply: str, attempt: int) -> Verdict:
    """Accept the draft or ask for a revision (the gate ``verdict``)."""
    result = quiver.llm().chat(
        "review", model=REVIEW_MODEL, response_format=REVIEW_FORMAT, ticket=text, context=context,
        draft=reply, attempt=attempt, max_attempts=MAX_DRAFTS,
    )
    verdict: Verdict = "accept" if result.data["verdict"] == "accept" else "revise"
    return quiver.decide("verdict", verdict)


def _cited(reply: str, docs: list[dict[str, Any]]) -> list[str]:
    """The retrieved doc ids the reply cites, in retrieval order."""
    return [d["doc_id"] for d in docs if f"[{d['doc_id']}]" in reply]


def _answer(text: str, intake: dict[str, Any], docs: list[dict[str, Any]]) -> str:
    """Draft and review until the reviewer accepts, or :data:`MAX_DRAFTS` drafts."""
    context = _context(docs)
    reply, feedback = "", "none, this is the first draft."
    for it in quiver.loop("refine", k_max=MAX_DRAFTS):
        reply = draft(text, intake["category"], context, it + 1, feedback)
        if review(text, context, reply, it + 1) == "accept":
            break
        feedback = f"revise this draft, which did not pass review: {reply}"
    return reply


# --------------------------------------------------------------------------- pipeline


def _intake(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Classify the ticket and retrieve its articles, in parallel."""
    with quiver.ThreadPoolExecutor(max_workers=2) as pool:
        intake_job = pool.submit(classify, text)
        docs_job = pool.submit(retrieve, text)
    return intake_job.result(), docs_job.result()


def _escalate(text: str, category: str) -> str:
    """Open a priority ticket and tell the customer its id."""
    opened = open_ticket(text, category)
    return (
        f"We're sorry about this. Your ticket {opened['ticket_id']} is with our priority "
        "team and an engineer will contact you within the hour."
    )


def run(ticket: str) -> dict[str, Any]:
    """Triage one ticket; returns the reply (``answer``), the ``route`` and the cited ``refs``."""
    text = normalize(ticket)
    intake, docs = _intake(text)
    arm = route(intake, docs)
    if arm == "escalate":
        reply = _escalate(text, intake["category"])
    elif arm == "smalltalk":
        reply = chitchat(text)
    else:
        reply = _answer(text, intake, docs)
    return {"answer": reply, "route": arm, "refs": _cited(reply, docs)}
