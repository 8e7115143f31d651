"""Support bot: the bundled demo pipeline in the shape of the paper's System P (§4).

A customer message to the support assistant of *Pebblestack* (a fictional project
planning and time-tracking SaaS) goes through three phases, written only with
``import quiver``::

    first wave, in parallel    gates                   planner loop, one subtask per iteration
    rewriter ─────────────┐              ┌ smalltalk   (short-circuit: nothing else runs)
    signal_analysis ──────┼── route ─────┤ web_search  (inserted on a web-search hint)
    context_sufficiency ──┘              └ discovery   (skipped when the context suffices)
                                               │
                planner ──┬─ COMPOSE: the material covers the subtask
                (k_max 5) ├─ EXECUTE: account_api (tool) fetches the customer's data
                          └─ RETRY:   discovery searches again for the subtask's gaps
                                               │
                                           composer ──> reply

* ``rewriter`` (llm) splits the message into subtasks, ``{label: search query}``;
  ``signal_analysis`` (llm) gives ``turn_type``, ``sentiment``, ``web_search_hint`` and
  ``is_small_talk``; ``context_sufficiency`` (llm) says whether the conversation so far
  already holds the material. They run through :class:`quiver.ThreadPoolExecutor`.
* ``route`` decides the gates ``small_talk``, ``web_search`` and ``discovery``.
* ``discovery`` (retrieval) chooses retrieval tools (help centre, known issues, release
  notes, the knowledge graph of related fragments), runs them over ``corpus.jsonl`` and
  merges their hits into a set of fragment ids.
* ``planner`` (llm) decides the gate ``action`` for each subtask; the loop ends when its
  ``remaining`` list is empty.
* ``composer`` (llm) writes the reply and lists the fragments it cites.

Outside ``quiver record`` every ``quiver.*`` call is a passthrough: configure a client
with ``quiver.configure_llm(...)`` and call :func:`run` like any function.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from functools import lru_cache
from pathlib import Path
from typing import Any

import quiver
from quiver.experiments.support_bot.textnorm import STOPWORDS, WORD, stem

__all__ = [
    "run", "first_wave", "initial_material", "plan_and_act", "rewriter", "signal_analysis",
    "context_sufficiency", "route", "smalltalk", "web_search", "discovery", "planner",
    "account_api", "composer",
]

HERE = Path(__file__).resolve().parent
CORPUS_PATH = HERE / "corpus.jsonl"
"""The help centre: one fragment a line (id, source, title, text, related ids)."""
WEB_PATH = HERE / "web.jsonl"
"""What ``web_search`` can find: status-page entries, third-party pages, forum posts."""
ACCOUNTS_PATH = HERE / "accounts.json"
"""What ``account_api`` answers, per account id and endpoint."""
PROMPTS = HERE / "prompts"

K_MAX = 5
"""The planner loop's bound: at most this many subtasks are planned."""
TOP_K = 3
"""Hits per query and retrieval tool."""
MIN_SCORE = 1.0
"""A BM25 score at or below this is not a hit."""

REWRITER_MODEL = "support-bot-rewriter"
SIGNAL_MODEL = "support-bot-signal"
SUFFICIENCY_MODEL = "support-bot-sufficiency"
PLANNER_MODEL = "support-bot-planner"
COMPOSER_MODEL = "support-bot-composer"
SMALLTALK_MODEL = "support-bot-smalltalk"

ENDPOINTS = {
    "billing.plan": "plan, seats, renewal",
    "billing.invoices": "invoices, charges",
    "usage.storage": "storage",
    "security.sso": "sso, single sign-on",
}
"""The account API the planner may EXECUTE, with what each endpoint answers."""

# --------------------------------------------------------------------------- prompts

for _name in ("rewriter", "signal_analysis", "context_sufficiency", "planner", "composer", "smalltalk"):
    quiver.template(f"support_bot.{_name}", path=PROMPTS / f"{_name}.txt")
REWRITER_VARIANTS = {
    name: PROMPTS / f"rewriter_{name}.txt" for name in ("terse", "verbose", "polite")
}
"""Prompt variants of ``support_bot.rewriter`` (same variables), for prompt-swap replays."""


def _json_format(name: str, properties: dict[str, Any], *, free_keys: bool = False) -> dict[str, Any]:
    """A ``json_schema`` response format for an object of ``properties``."""
    schema: dict[str, Any] = {"type": "object"}
    if free_keys:
        schema["additionalProperties"] = properties
    else:
        schema.update(properties=properties, required=list(properties), additionalProperties=False)
    strict = not free_keys
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


_STRING = {"type": "string"}
_STRINGS = {"type": "array", "items": _STRING}
REWRITE_FORMAT = _json_format("rewrite", _STRING, free_keys=True)
SIGNAL_FORMAT = _json_format("signals", {
    "turn_type": {"type": "string", "enum": ["how_to", "problem", "billing", "follow_up", "small_talk"]},
    "sentiment": {"type": "string", "enum": ["negative", "neutral", "positive"]},
    "web_search_hint": {"type": "boolean"},
    "is_small_talk": {"type": "boolean"},
})
SUFFICIENCY_FORMAT = _json_format("sufficiency", {"sufficient": {"type": "boolean"}})
PLAN_FORMAT = _json_format("plan", {
    "action": {"type": "string", "enum": ["EXECUTE", "RETRY", "COMPOSE"]},
    "task": _STRING, "remaining": _STRINGS, "gaps": _STRINGS, "refs": _STRINGS,
    "tool": _STRING, "coverage": {"type": "number"}, "thought": _STRING,
})
REPLY_FORMAT = _json_format("reply", {"response": _STRING, "selected_refs": _STRINGS})

# --------------------------------------------------------------------------- text and corpus



def terms(text: str) -> list[str]:
    """Lower-cased, stemmed word tokens without stopwords."""
    return [stem(w) for w in WORD.findall(text.lower()) if w not in STOPWORDS]


def _read_jsonl(path: Path) -> tuple[dict[str, Any], ...]:
    with path.open(encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@lru_cache(maxsize=1)
def fragments() -> dict[str, dict[str, Any]]:
    """Every fragment a prompt can list, help centre and web, by id."""
    return {f["id"]: f for path in (CORPUS_PATH, WEB_PATH) for f in _read_jsonl(path)}


@lru_cache(maxsize=1)
def _accounts() -> dict[str, dict[str, str]]:
    accounts: dict[str, dict[str, str]] = json.loads(ACCOUNTS_PATH.read_text(encoding="utf-8"))
    return accounts


class _Index:
    """Okapi BM25 (k1 = 1.2, b = 0.75) over the title and text of some fragments."""

    def __init__(self, docs: Sequence[dict[str, Any]]) -> None:
        self.ids = [d["id"] for d in docs]
        self.counts = [Counter(terms(f"{d['title']} {d['text']}")) for d in docs]
        n = len(docs)
        df = Counter(t for c in self.counts for t in c)
        self.idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
        self.avg_len = sum(sum(c.values()) for c in self.counts) / max(n, 1)

    def search(self, query: str, k: int = TOP_K) -> list[tuple[str, float]]:
        """The ``k`` best ids scoring above :data:`MIN_SCORE`, best first."""
        words = set(terms(query))
        scored = [(self._score(words, c), i) for i, c in zip(self.ids, self.counts, strict=True)]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [(i, round(s, 3)) for s, i in scored[:k] if s > MIN_SCORE]

    def _score(self, words: set[str], doc: Counter[str]) -> float:
        k1, b = 1.2, 0.75
        length = sum(doc.values())
        score = 0.0
        for word in words:
            tf = doc.get(word, 0)
            if tf:
                score += self.idf[word] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / self.avg_len))
        return score


@lru_cache(maxsize=1)
def _indexes() -> dict[str, _Index]:
    """One index per retrieval tool: the help centre, known issues, release notes, the web."""
    corpus = _read_jsonl(CORPUS_PATH)
    by_source = {
        "help_center": "help", "known_issues": "known_issue", "release_notes": "release",
    }
    indexes = {tool: _Index([f for f in corpus if f["source"] == src]) for tool, src in by_source.items()}
    indexes["web"] = _Index(_read_jsonl(WEB_PATH))
    return indexes


def _content(fragment_id: str) -> str:
    """A fragment as prompts and retrieval sets show it: ``Title: text``."""
    fragment = fragments()[fragment_id]
    return f"{fragment['title']}: {fragment['text']}"


def material_lines(ids: Sequence[str], account_data: dict[str, str]) -> str:
    """The prompt's material: ``[HC-140] Title: text`` lines, then the account data."""
    lines = [f"[{i}] {_content(i)}" for i in ids]
    lines += [f"[account:{endpoint}] {facts}" for endpoint, facts in account_data.items()]
    return "\n".join(lines) if lines else "(none)"


def history_text(history: Sequence[dict[str, Any]]) -> str:
    """The conversation so far as prompts show it: ``role: content (refs: ...)`` lines."""
    lines = []
    for turn in history:
        refs = f" (refs: {', '.join(turn['refs'])})" if turn.get("refs") else ""
        lines.append(f"{turn['role']}: {turn['content']}{refs}")
    return "\n".join(lines) if lines else "(none)"


# --------------------------------------------------------------------------- first wave


@quiver.node("rewriter", kind="llm")
def rewriter(message: str, history: list[dict[str, Any]]) -> dict[str, str]:
    """The message's subtasks as ``{label: search query}``, in the order asked."""
    result = quiver.llm().chat(
        "support_bot.rewriter", model=REWRITER_MODEL, response_format=REWRITE_FORMAT,
        message=message, history=history_text(history),
    )
    return {str(label): str(query) for label, query in result.data.items()}


@quiver.node("signal_analysis", kind="llm")
def signal_analysis(message: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """Turn type, sentiment, and the two gate signals: web-search hint and small talk."""
    result = quiver.llm().chat(
        "support_bot.signal_analysis", model=SIGNAL_MODEL, response_format=SIGNAL_FORMAT,
        message=message, history=history_text(history),
    )
    return dict(result.data)


@quiver.node("context_sufficiency", kind="llm")
def context_sufficiency(message: str, history: list[dict[str, Any]]) -> dict[str, bool]:
    """Whether the conversation so far already holds the material (``sufficient``)."""
    result = quiver.llm().chat(
        "support_bot.context_sufficiency", model=SUFFICIENCY_MODEL,
        response_format=SUFFICIENCY_FORMAT, message=message, history=history_text(history),
    )
    return {"sufficient": bool(result.data["sufficient"])}


def first_wave(
    message: str, history: list[dict[str, Any]]
) -> tuple[dict[str, str], dict[str, Any], dict[str, bool]]:
    """Rewriter, signal analysis and context sufficiency, in parallel."""
    with quiver.ThreadPoolExecutor(max_workers=3) as pool:
        jobs: list[Future[Any]] = [
            pool.submit(step, message, history)
            for step in (rewriter, signal_analysis, context_sufficiency)
        ]
    rewrite, signals, sufficiency = (job.result() for job in jobs)
    return rewrite, signals, sufficiency


@quiver.node("route", kind="router")
def route(signals: dict[str, Any], sufficiency: dict[str, bool]) -> dict[str, str]:
    """The gates: ``small_talk`` short-circuits, ``web_search`` inserts, ``discovery`` skips."""
    small_talk = "short_circuit" if signals["is_small_talk"] else "continue"
    if quiver.decide("small_talk", small_talk) == "short_circuit":
        return {"small_talk": small_talk}
    return {
        "small_talk": "continue",
        "web_search": quiver.decide("web_search", "insert" if signals["web_search_hint"] else "skip"),
        "discovery": quiver.decide("discovery", "skip" if sufficiency["sufficient"] else "run"),
    }


@quiver.node("smalltalk", kind="llm")
def smalltalk(message: str) -> str:
    """A short friendly reply to a message that asks nothing about the product."""
    return quiver.llm().chat("support_bot.smalltalk", model=SMALLTALK_MODEL, message=message).content


# --------------------------------------------------------------------------- retrieval


def _record_hits(hits: dict[str, float]) -> list[str]:
    """Record the merged hits as the call's retrieval set; return their ids, best first."""
    ranked = sorted(hits, key=lambda i: (-hits[i], i))
    quiver.retrieved([{"doc_id": i, "content": _content(i), "score": hits[i]} for i in ranked])
    return ranked


@quiver.node("web_search", kind="retrieval")
def web_search(message: str) -> list[str]:
    """Web pages (status page, third-party docs, forums) matching the message."""
    return _record_hits(dict(_indexes()["web"].search(message)))


_PROBLEM_TYPES = ("problem",)
_RELEASE_WORDS = frozenset({"new", "release", "latest", "launch", "ipad", "update", "changed"})


def choose_tools(queries: Sequence[str], turn_type: str, expand_from: Sequence[str]) -> list[str]:
    """Discovery's retrieval tools: the help centre always; known issues for problems;
    release notes when a query asks what is new; the knowledge graph (related fragments)
    when there are fragments to expand from (a retry)."""
    words = {w for q in queries for w in terms(q)}
    tools = ["help_center"]
    if turn_type in _PROBLEM_TYPES:
        tools.append("known_issues")
    if words & _RELEASE_WORDS:
        tools.append("release_notes")
    if expand_from:
        tools.append("knowledge_graph")
    return tools


@quiver.node("discovery", kind="retrieval", parents=["signal_analysis"])
def discovery(queries: list[str], turn_type: str, expand_from: list[str]) -> list[str]:
    """Choose retrieval tools, run each query through them and merge the hits.

    Returns the ids of the fragments found (a set, recorded best first). The knowledge
    graph adds the related fragments of ``expand_from`` with a fixed score of 1.5.
    """
    hits: dict[str, float] = {}
    for tool in choose_tools(queries, turn_type, expand_from):
        if tool == "knowledge_graph":
            for related in (r for i in expand_from for r in fragments()[i].get("related", [])):
                hits.setdefault(related, 1.5)
            continue
        for query in queries:
            for doc_id, score in _indexes()[tool].search(query):
                hits[doc_id] = max(score, hits.get(doc_id, 0.0))
    return _record_hits(hits)


# --------------------------------------------------------------------------- planner loop


@quiver.node("planner", kind="llm", parents=["signal_analysis", "web_search", "discovery", "account_api"])
def planner(
    message: str, turn_type: str, subtasks: list[str], position: int, query: str,
    material: str,
) -> dict[str, Any]:
    """Plan one subtask: COMPOSE, EXECUTE or RETRY (the gate ``action``)."""
    result = quiver.llm().chat(
        "support_bot.planner", model=PLANNER_MODEL, response_format=PLAN_FORMAT,
        message=message, turn_type=turn_type, position=position + 1, total=len(subtasks),
        subtask=subtasks[position], query=query,
        remaining=", ".join(subtasks[position + 1:]) or "none",
        endpoints="; ".join(f"{e} ({what})" for e, what in ENDPOINTS.items()),
        material=material,
    )
    plan = dict(result.data)
    quiver.decide("action", plan["action"])
    return plan


@quiver.node("account_api", kind="tool")
def account_api(account_id: str, endpoint: str) -> dict[str, str]:
    """The customer's account data from one endpoint of the account API."""
    account = _accounts().get(account_id, {})
    return {"endpoint": endpoint, "facts": account.get(endpoint, "No data for this account.")}


def plan_and_act(
    message: str, rewrite: dict[str, str], signals: dict[str, Any], material: list[str],
    account_id: str,
) -> tuple[list[str], dict[str, str]]:
    """The planner loop: one subtask per iteration, until the planner's ``remaining`` is
    empty (or the subtasks run out).

    Returns the material (fragment ids, in the order found) and the account data.
    """
    subtasks = list(rewrite)[:K_MAX]
    material, account_data = list(material), dict[str, str]()
    if not subtasks:
        return material, account_data
    for it in quiver.loop("planner", k_max=K_MAX):
        label = subtasks[it]
        plan = planner(
            message, signals["turn_type"], subtasks, it, rewrite[label],
            material_lines(material, account_data),
        )
        if plan["action"] == "EXECUTE" and plan["tool"] in ENDPOINTS:
            account_data[plan["tool"]] = account_api(account_id, plan["tool"])["facts"]
        elif plan["action"] == "RETRY":
            found = discovery([" ".join([*plan["gaps"], label])], signals["turn_type"], plan["refs"])
            material += [i for i in found if i not in material]
        if not plan["remaining"] or it == len(subtasks) - 1:
            break
    return material, account_data


# --------------------------------------------------------------------------- composer


@quiver.node(
    "composer", kind="llm",
    parents=["rewriter", "signal_analysis", "web_search", "discovery", "planner", "account_api"],
)
def composer(message: str, sentiment: str, subtasks: list[str], material: str) -> dict[str, Any]:
    """The reply, citing the fragments it uses (``selected_refs``)."""
    result = quiver.llm().chat(
        "support_bot.composer", model=COMPOSER_MODEL, response_format=REPLY_FORMAT,
        message=message, sentiment=sentiment, subtasks="; ".join(subtasks), material=material,
    )
    return {"response": result.data["response"], "selected_refs": list(result.data["selected_refs"])}


# --------------------------------------------------------------------------- pipeline


def initial_material(
    gates: dict[str, str], message: str, rewrite: dict[str, str], signals: dict[str, Any],
    history: list[dict[str, Any]],
) -> list[str]:
    """The fragments the planner starts from: the conversation's (when it suffices),
    the web's (when inserted) and discovery's (unless skipped)."""
    material = []
    if gates["discovery"] == "skip":  # the conversation suffices: start from what it cited
        material = [ref for turn in history for ref in turn.get("refs", [])]
    if gates["web_search"] == "insert":
        material += web_search(message)
    if gates["discovery"] == "run":
        found = discovery(list(rewrite.values()), signals["turn_type"], [])
        material += [i for i in found if i not in material]
    return material


def run(message: str, account_id: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Answer one customer message.

    Args:
        message: The customer's new message.
        account_id: The customer's account (what ``account_api`` looks up).
        history: Earlier turns, ``{"role", "content", "refs"}``; the assistant's
            ``refs`` are the fragments its answer cited.

    Returns:
        ``reply`` (the text sent), ``refs`` (the fragments cited) and ``path``
        (``smalltalk`` or ``answer``).
    """
    history = list(history or [])
    rewrite, signals, sufficiency = first_wave(message, history)
    gates = route(signals, sufficiency)
    if gates["small_talk"] == "short_circuit":
        return {"reply": smalltalk(message), "refs": [], "path": "smalltalk"}
    material = initial_material(gates, message, rewrite, signals, history)
    material, account_data = plan_and_act(message, rewrite, signals, material, account_id)
    reply = composer(message, signals["sentiment"], list(rewrite), material_lines(material, account_data))
    return {"reply": reply["response"], "refs": reply["selected_refs"], "path": "answer"}
