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

import contextvars
import functools
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import quiver
from quiver.experiments.support_bot.textnorm import STOPWORDS, WORD, stem
from quiver.replay import Template, load_template_file, template_overrides

__all__ = [
    "run", "first_wave", "initial_material", "plan_and_act", "rewriter", "signal_analysis",
    "context_sufficiency", "route", "smalltalk", "web_search", "discovery", "planner",
    "account_api", "composer", "DEPLOYMENT_DIMENSIONS", "deployment", "deployed", "deployment_pipeline",
]

HERE = Path(__file__).resolve().parent
CORPUS_PATH = HERE / "corpus.jsonl"
"""The help centre: one fragment a line (id, source, title, text, related ids)."""
WEB_PATH = HERE / "web.jsonl"
"""What ``web_search`` can find: status-page entries, third-party pages, forum posts."""
ACCOUNTS_PATH = HERE / "accounts.json"
"""What ``account_api`` answers, per account id and endpoint."""
PROMPTS = HERE / "prompts"
DEPLOYMENTS = HERE / "deployments"
"""What the v2 deployment of each dimension changes (see :func:`deployed`)."""

K_MAX = 5
"""The planner loop's bound: at most this many subtasks are planned."""
TOP_K = 3
"""Hits per query and retrieval tool."""
MIN_SCORE = 1.0
"""A BM25 score at or below this is not a hit."""
KEYWORD_BOOST = 2.0
"""What a query word among a fragment's search keywords adds to its score (only the
``retrieval: v2`` index has keywords)."""

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

# --------------------------------------------------------------------------- deployments

DEPLOYMENT_DIMENSIONS = ("retrieval", "tools", "prompt", "model")
"""The dimensions of the replay contract that have a second deployment, ``v2``:

* ``retrieval``: ``deployments/corpus_v2.jsonl`` replaces a few help-centre fragments
  under the same ids (index drift): the index gave them search keywords, so they match
  other queries and their recorded content hash changes. What prompts show of a
  fragment (title and text) is the same in both versions, so a trace recorded at v1
  still replays exactly with the retrieval dimension frozen;
* ``tools``: ``deployments/accounts_v2.json`` replaces some of the account API's data
  (the customer's plan and invoices changed since);
* ``prompt``: the composer's template is ``deployments/composer_v2.txt``, which asks the
  reply to close by offering a call back (template id unchanged, its hash differs);
* ``model``: the planner asks for ``support-bot-planner-v2``, a new version that
  composes more readily (its coverage threshold sits 15 points below what the prompt
  states).
"""
VERSIONS = ("v1", "v2")
PLANNER_V2_MODEL = "support-bot-planner-v2"

_deployment: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "support_bot_deployment", default=None
)


def deployment() -> dict[str, str]:
    """The deployment in force: ``{dimension: version}`` for every dimension."""
    current = _deployment.get() or {}
    return {dim: current.get(dim, "v1") for dim in DEPLOYMENT_DIMENSIONS}


def _checked(changes: Mapping[str, str]) -> dict[str, str]:
    for dim, version in changes.items():
        if dim not in DEPLOYMENT_DIMENSIONS:
            raise ValueError(
                f"deployment: unknown dimension {dim!r}; the dimensions are {', '.join(DEPLOYMENT_DIMENSIONS)}"
            )
        if version not in VERSIONS:
            raise ValueError(f"deployment: {dim} {version!r} is not a version; give one of {', '.join(VERSIONS)}")
    return dict(changes)


@contextmanager
def deployed(changes: Mapping[str, str] | None) -> Iterator[dict[str, str]]:
    """Run the block with ``changes`` (``{"retrieval": "v2", ...}``) deployed; the other
    dimensions stay at ``v1``. Threads started through ``quiver.ThreadPoolExecutor``
    inherit it.

    Raises:
        ValueError: A dimension or version that does not exist.
    """
    token = _deployment.set(_checked(changes or {}))
    try:
        current = deployment()
        with template_overrides(_templates(current["prompt"])):
            yield current
    finally:
        _deployment.reset(token)


@lru_cache(maxsize=2)
def _templates(version: str) -> dict[str, Template]:
    if version == "v1":
        return {}
    composer = load_template_file(DEPLOYMENTS / "composer_v2.txt")
    return {"support_bot.composer": Template("support_bot.composer", composer)}


def deployment_pipeline(name: str) -> Callable[..., dict[str, Any]]:
    """:func:`run` with the dimensions that ``name`` lists at ``v2``.

    ``name`` is ``run_v2`` (all four) or ``run_v2_`` followed by dimensions joined by
    ``_`` (``run_v2_retrieval``, ``run_v2_retrieval_prompt``). A recording spec selects
    a deployment by its pipeline: ``pipeline: pipeline.py:run_v2_tools``.

    Raises:
        AttributeError: ``name`` is not of that form.
    """
    rest = name.removeprefix("run_v2")
    dims = list(DEPLOYMENT_DIMENSIONS) if rest == "" else rest[1:].split("_") if rest.startswith("_") else []
    if not dims or any(d not in DEPLOYMENT_DIMENSIONS for d in dims) or len(set(dims)) != len(dims):
        raise AttributeError(
            f"{__name__} has no attribute {name!r}: a deployment is run_v2 or run_v2_ followed by some of "
            f"{', '.join(DEPLOYMENT_DIMENSIONS)} joined by '_'"
        )
    changes = dict.fromkeys(dims, "v2")

    @functools.wraps(run)
    def run_deployed(message: str, account_id: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return run(message, account_id, history, deployment=changes)

    run_deployed.__name__ = run_deployed.__qualname__ = name
    return run_deployed


def __getattr__(name: str) -> Any:
    """``run_v2``, ``run_v2_retrieval``, ...: see :func:`deployment_pipeline`."""
    if name.startswith("run_v2"):
        return deployment_pipeline(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def fragments() -> dict[str, dict[str, Any]]:
    """Every fragment a prompt can list, help centre and web, by id (the deployed index)."""
    return _fragments(deployment()["retrieval"])


@lru_cache(maxsize=2)
def _corpus(version: str) -> tuple[dict[str, Any], ...]:
    """The help centre; ``v2`` with the fragments of ``deployments/corpus_v2.jsonl`` edited."""
    corpus = _read_jsonl(CORPUS_PATH)
    if version == "v1":
        return corpus
    edited = {f["id"]: f for f in _read_jsonl(DEPLOYMENTS / "corpus_v2.jsonl")}
    return tuple(edited.get(f["id"], f) for f in corpus)


@lru_cache(maxsize=2)
def _fragments(version: str) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in (*_corpus(version), *_read_jsonl(WEB_PATH))}


def _accounts() -> dict[str, dict[str, str]]:
    return _accounts_of(deployment()["tools"])


@lru_cache(maxsize=2)
def _accounts_of(version: str) -> dict[str, dict[str, str]]:
    accounts: dict[str, dict[str, str]] = json.loads(ACCOUNTS_PATH.read_text(encoding="utf-8"))
    if version == "v2":
        changed = json.loads((DEPLOYMENTS / "accounts_v2.json").read_text(encoding="utf-8"))
        accounts = {a: {**data, **changed.get(a, {})} for a, data in accounts.items()}
    return accounts


class _Index:
    """Okapi BM25 (k1 = 1.2, b = 0.75) over the title and text of some fragments, plus
    :data:`KEYWORD_BOOST` per query word among a fragment's search keywords."""

    def __init__(self, docs: Sequence[dict[str, Any]]) -> None:
        self.ids = [d["id"] for d in docs]
        self.counts = [Counter(terms(f"{d['title']} {d['text']}")) for d in docs]
        self.keywords = [set(terms(d.get("keywords", ""))) for d in docs]
        n = len(docs)
        df = Counter(t for c in self.counts for t in c)
        self.idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
        self.avg_len = sum(sum(c.values()) for c in self.counts) / max(n, 1)

    def search(self, query: str, k: int = TOP_K) -> list[tuple[str, float]]:
        """The ``k`` best ids scoring above :data:`MIN_SCORE`, best first."""
        words = set(terms(query))
        scored = [
            (self._score(words, c) + KEYWORD_BOOST * len(words & k), i)
            for i, c, k in zip(self.ids, self.counts, self.keywords, strict=True)
        ]
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


def _indexes() -> dict[str, _Index]:
    """One index per retrieval tool: the help centre, known issues, release notes, the web."""
    return _indexes_of(deployment()["retrieval"])


@lru_cache(maxsize=2)
def _indexes_of(version: str) -> dict[str, _Index]:
    corpus = _corpus(version)
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


def _indexed(fragment_id: str) -> str:
    """A fragment as the index holds it: its content, and its search keywords when it has any."""
    keywords = fragments()[fragment_id].get("keywords")
    return f"{_content(fragment_id)}\nKeywords: {keywords}" if keywords else _content(fragment_id)


def _record_hits(hits: dict[str, float]) -> list[str]:
    """Record the merged hits as the call's retrieval set; return their ids, best first."""
    ranked = sorted(hits, key=lambda i: (-hits[i], i))
    quiver.retrieved([{"doc_id": i, "content": _indexed(i), "score": hits[i]} for i in ranked])
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
    model = PLANNER_V2_MODEL if deployment()["model"] == "v2" else PLANNER_MODEL
    result = quiver.llm().chat(
        "support_bot.planner", model=model, response_format=PLAN_FORMAT,
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


def run(
    message: str, account_id: str, history: list[dict[str, Any]] | None = None,
    deployment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Answer one customer message.

    Args:
        message: The customer's new message.
        account_id: The customer's account (what ``account_api`` looks up).
        history: Earlier turns, ``{"role", "content", "refs"}``; the assistant's
            ``refs`` are the fragments its answer cited.
        deployment: The dimensions deployed at ``v2``, ``{"retrieval": "v2", ...}``
            (see :data:`DEPLOYMENT_DIMENSIONS`; default: all ``v1``). Configuration, not
            an input: the trace's inputs do not hold it.

    Returns:
        ``reply`` (the text sent), ``refs`` (the fragments cited) and ``path``
        (``smalltalk`` or ``answer``).
    """
    with deployed(deployment):
        return _answer(message, account_id, list(history or []))


def _answer(message: str, account_id: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    rewrite, signals, sufficiency = first_wave(message, history)
    gates = route(signals, sufficiency)
    if gates["small_talk"] == "short_circuit":
        return {"reply": smalltalk(message), "refs": [], "path": "smalltalk"}
    material = initial_material(gates, message, rewrite, signals, history)
    material, account_data = plan_and_act(message, rewrite, signals, material, account_id)
    reply = composer(message, signals["sentiment"], list(rewrite), material_lines(material, account_data))
    return {"reply": reply["response"], "refs": reply["selected_refs"], "path": "answer"}
