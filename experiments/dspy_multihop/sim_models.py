"""The simulated model of the DSPy multi-hop example, answering in DSPy's own wire format.

``dspy-multihop`` reads a request as DSPy's ``ChatAdapter`` writes it: the system message
lists the fields and ends with ``In adhering to this structure, your objective is:``
and the instructions; the user message holds one ``[[ ## field ## ]]`` section per input
(a ``list[str]`` as JSON) and names the output fields to answer with. It answers the
same way the adapter parses: each output field under its ``[[ ## field ## ]]`` header,
then ``[[ ## completed ## ]]``. Which predictor is asking is told by the output fields:

* ``route`` (the router): ``multi_hop`` is likelier for a HotpotQA *bridge* question,
  ``single_hop`` for a *comparison* (the question's type is read from
  ``data/questions.jsonl``). Instructions that say "prefer one hop" move it towards
  ``single_hop``: a ``prompt_swap`` of the router's instructions changes routes.
* ``reasoning`` + ``query`` (``hops.gen_query``): with no passage yet, four close
  keyword phrasings of the question (all its keywords; its named entities with what is
  asked; the entities alone; what is asked with the first entity); with passages, the
  *bridge*: a capitalised span of the passages the question does not name, ranked by how
  many passages mention it and how high, with what is asked or with the entities.
* ``reasoning`` + ``answer`` (``answer``): a reader that knows the gold answer
  (``data/questions.jsonl``) and needs the evidence in front of it: the gold answer is
  far ahead when a passage holds it (for yes/no questions, in proportion to how many of
  the supporting paragraphs are there); otherwise capitalised spans of the passages that
  share the most words with the question, or yes and no.

Candidates are whole responses with logits; the simulator samples them at the request's
temperature with the request's sample key.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from quiver.replay import SimRequest, Text, sim_model

__all__ = ["dspy_multihop", "respond", "sections", "output_fields", "objective"]

QUESTIONS_PATH = Path(__file__).resolve().parent / "data" / "questions.jsonl"
HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")
ONE_HOP_BIAS = 1.5
"""Added to ``single_hop`` when the router's instructions say "prefer one hop"."""


def sections(text: str) -> dict[str, str]:
    """The ``[[ ## field ## ]]`` sections of a message, as the ChatAdapter parses them."""
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        match = HEADER.match(line.strip())
        if match:
            if current is not None:
                out.setdefault(current, "\n".join(lines).strip())
            rest = line.strip()[match.end():].strip()
            current, lines = match.group(1), [rest] if rest else []
        elif current is not None:
            lines.append(line)
    if current is not None:
        out.setdefault(current, "\n".join(lines).strip())
    return out


def output_fields(req: SimRequest) -> list[str]:
    """The output fields the request asks for, in order (from its last user message)."""
    for line in req.last_user.splitlines():
        if line.startswith("Respond with the corresponding output fields"):
            return [f for f in HEADER.findall(line) if f != "completed"]
    return []


def objective(req: SimRequest) -> str:
    """The signature's instructions, as the system message ends with them."""
    _, _, tail = req.system_text.partition("your objective is:")
    return " ".join(tail.split())


def respond(values: dict[str, str]) -> str:
    """A completion in the ChatAdapter's format: each field under its header, then completed."""
    body = "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in values.items())
    return f"{body}\n\n[[ ## completed ## ]]\n"


@lru_cache(maxsize=1)
def _types() -> dict[str, str]:
    rows = [json.loads(line) for line in QUESTIONS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["question"].strip(): r["type"] for r in rows}


def _passages(value: str) -> list[tuple[str, str]]:
    """A ``list[str]`` input (JSON) of ``Title | text`` passages as (title, text)."""
    try:  # the JSON list, then the adapter's closing request in the same section
        items, _ = json.JSONDecoder().raw_decode(value) if value else ([], 0)
    except json.JSONDecodeError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        title, _, text = str(item).partition(" | ")
        out.append((title, text))
    return out


def _route(req: SimRequest, question: str) -> Text:
    kind = _types().get(question.strip())
    logits = {"multi_hop": 1.2, "single_hop": 0.0} if kind != "comparison" else {"single_hop": 0.9, "multi_hop": 0.3}
    if "prefer one hop" in objective(req).lower():
        logits["single_hop"] += ONE_HOP_BIAS
    return Text({respond({"route": arm}): logit for arm, logit in logits.items()})


_WORD = re.compile(r"\w+(?:['’.&-]\w+)*")
_CAPITALISED = re.compile(r"[A-Z][\w'’&-]*(?:\s+(?:(?:of|the|de|von|van)\s+)*[A-Z][\w'’&-]*)*")
_STOPWORDS = frozenset(
    "a an and are as at be been being both but by did do does for from had has have he her his how in into is "
    "it its of on or she that the their them they this to was were what when where which who whom whose why "
    "with same".split()
)
_LEADING = frozenset("a an the in on at of what who which where when how were was are is did do does".split())
_YES_NO = frozenset("are is was were do does did can could has have had will would".split())
GOLD_LOGIT = 3.5
"""Added to the gold answer's logit in proportion to the evidence in the prompt."""


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in (" ".join(i.split()) for i in items):
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def _keywords(question: str) -> list[str]:
    return _unique([w for w in _WORD.findall(question) if w.lower() not in _STOPWORDS])


def _entities(text: str) -> list[str]:
    """Quoted titles and capitalised spans (leading function words dropped), in order."""
    spans = re.findall(r"\"([^\"]{2,60})\"", text)
    for match in _CAPITALISED.finditer(text):
        words = match.group(0).split()
        while words and words[0].lower() in _LEADING:
            words = words[1:]
        spans.append(" ".join(words))
    return _unique([s for s in spans if len(s) > 1])


def _asked(question: str) -> list[str]:
    return [w for w in _keywords(question) if w[0].islower()]


def _phrasings(question: str) -> dict[str, float]:
    keywords, entities, asked = _keywords(question), _entities(question), _asked(question)
    out: dict[str, float] = {}
    for text, logit in ((" ".join(keywords), 1.0), (" ".join(entities + asked[:2]), 0.9),
                        (" ".join(entities), 0.7), (" ".join(asked + entities[:1]), 0.5)):
        if text:
            out[text] = max(logit, out.get(text, logit))
    return out or {question: 0.0}


def _bridges(question: str, context: list[tuple[str, str]]) -> list[str]:
    """Entities of the passages that the question does not name, best first."""
    asked = _words(question)
    scores: dict[str, float] = {}
    for rank, (title, text) in enumerate(context, 1):
        for span in _entities(f"{title}. {text}"):
            words = _words(span)
            if words and len(words & asked) * 2 < len(words):
                scores[span] = scores.get(span, 0.0) + 1.0 / rank + (0.5 if len(words) > 1 else 0.0)
    return sorted(scores, key=lambda s: -scores[s])


def _query(req: SimRequest, question: str, context: list[tuple[str, str]]) -> Text:
    bridges = _bridges(question, context)
    if not context or not bridges:
        found = _phrasings(question)
        why = "No passage was found yet, so the query names what the question asks about."
    else:
        asked, entities = " ".join(_asked(question)), " ".join(_entities(question))
        first, second = bridges[0], bridges[1] if len(bridges) > 1 else bridges[0]
        found = {}
        for text, logit in ((f"{first} {asked}", 1.0), (f"{first} {entities}", 0.8), (f"{second} {asked}", 0.6)):
            found.setdefault(" ".join(text.split()), logit)
        why = f"The passages about {context[0][0]} lead to {first}, which the question does not name."
    return Text({respond({"reasoning": why, "query": q}): logit for q, logit in found.items()})


@lru_cache(maxsize=1)
def _gold() -> dict[str, tuple[str, frozenset[str]]]:
    rows = [json.loads(line) for line in QUESTIONS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["question"].strip(): (r["answer"], frozenset(r["supporting"])) for r in rows}


def _answers(question: str, context: list[tuple[str, str]]) -> dict[str, float]:
    if question.split(" ", 1)[0].lower() in _YES_NO:
        candidates = {"yes": 0.4, "no": 0.2}
    else:
        asked = _words(question)
        ranked = sorted(context, key=lambda p: -len(asked & _words(f"{p[0]} {p[1]}")))
        spans = _unique([s for t, x in ranked for s in _entities(f"{t}. {x}") if not _words(s) <= asked])
        candidates = dict(zip(spans, (1.0, 0.7, 0.4), strict=False))
    gold = _gold().get(question.strip())
    if gold is not None:
        answer, supporting = gold
        if answer in ("yes", "no"):
            evidence = len(supporting & {t for t, _ in context}) / max(len(supporting), 1)
        else:
            evidence = float(any(answer.lower() in f"{t} {x}".lower() for t, x in context))
        if evidence > 0:
            candidates[answer] = candidates.get(answer, 0.0) + GOLD_LOGIT * evidence
    return candidates or {"unknown": 0.0}


def _answer(req: SimRequest, question: str, context: list[tuple[str, str]]) -> Text:
    return Text({
        respond({"reasoning": f"The passages point to {a}.", "answer": a}): logit
        for a, logit in _answers(question, context).items()
    })


@sim_model("dspy-multihop")
def dspy_multihop(req: SimRequest) -> Text:
    """The router, the query writer or the reader, by the output fields asked for."""
    fields = output_fields(req)
    inputs = sections(req.last_user)
    question = inputs.get("question", "")
    context = _passages(inputs.get("context", ""))
    if fields == ["route"]:
        return _route(req, question)
    if fields == ["reasoning", "query"]:
        return _query(req, question, context)
    if fields == ["reasoning", "answer"]:
        return _answer(req, question, context)
    return Text(respond({f: "unknown" for f in fields}))
