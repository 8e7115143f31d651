"""Simulated models of the multi-hop QA example (see ``pipeline.py``).

Each model reads what a real model would read, the prompt, and describes its answer as
candidates with logits; the simulator samples them at the request's temperature (the
same request and sample key always give the same answer). The query writers have a few
equally reasonable phrasings, so repeats vary the queries and, through them, sometimes
the passages BM25 returns. The reader is steady: given the passage that holds the
answer it gives that answer, whatever else was retrieved and in whatever order.

* ``multihop-query``: keyword extractions of the question, with close logits: all its
  keywords; its named entities with the first words of what is asked; the entities
  alone; what is asked with the first entity.
* ``multihop-followup``: queries for the *bridge*, the entity the first passages lead
  to that the question does not name (capitalised spans of the passages, ranked by how
  many passages mention them and how high), with what is asked, with the question's
  entities or with all its keywords; or the runner-up bridge with what is asked. When its
  instructions say to write no query, an empty one (the second hop dropped: BM25 then
  returns the first passages of the question's ten).
* ``multihop-answer``: a short answer. It stands for a reader that knows HotpotQA and
  needs the evidence in front of it: the gold answer gains :data:`GOLD_LOGIT` when a
  passage of the prompt contains it (for yes/no questions, in proportion to how many of
  the two supporting paragraphs are there). The other candidates are capitalised spans
  (numbers, for how-many and what-year questions) of the passages that share the most
  words with the question, or yes and no.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from quiver.replay import SimRequest, Text, sim_model

__all__ = ["query", "followup", "answer"]

DATA_PATH = Path(__file__).resolve().parent / "data" / "hotpot_dev_distractor_v1_100.json"

_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_PASSAGE = re.compile(r"^\[(\d+)\] «(.+?)» (.*)$", re.MULTILINE)
_WORD = re.compile(r"\w+(?:['’.&-]\w+)*")
_CAP_WORD = r"(?:[A-ZÀ-ÖØ-Þ]\.|[A-ZÀ-ÖØ-Þ][\w'’&-]*)"
_CAPITALISED = re.compile(
    rf"{_CAP_WORD}(?:\s+(?:(?:of|the|de|von|van|der|du|la|le)\s+)*{_CAP_WORD})*"
)
_QUOTED = re.compile(r"\"([^\"]{2,60})\"")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")

_STOPWORDS = frozenset(
    "a an and are as at be been being both but by did do does for from had has have he her his "
    "how in into is it its of on or she that the their them they this to was were what when where "
    "which who whom whose why with same".split()
)
_LEADING = frozenset(
    "a an the in on at of what who whom whose which where when why how were was are is did do "
    "does has have had can could will would he she it they his her its their this that these "
    "those after before during as from for by with although while if".split()
)
_YES_NO = frozenset("are is was were do does did can could has have had will would".split())
_NUMERIC = re.compile(r"\b(how many|how much|what year|which year|when|how old|how long)\b", re.I)


def _question(text: str) -> str:
    found = _QUESTION.search(text)
    return found.group(1).strip() if found else ""


@dataclass(frozen=True)
class Passage:
    """A passage as the prompt lists it."""

    rank: int
    title: str
    text: str


def _passages(text: str) -> list[Passage]:
    """The ``[rank] «Title» text`` lines of the prompt, in order."""
    return [Passage(int(m.group(1)), m.group(2), m.group(3)) for m in _PASSAGE.finditer(text)]


def _words(text: str) -> set[str]:
    """The lower-cased words of a text."""
    return {w.lower() for w in _WORD.findall(text)}


def _unique(items: Iterable[str]) -> list[str]:
    """Non-empty items in first-seen order, without repeats (case-insensitive)."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.lower()
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _keywords(question: str) -> list[str]:
    """The question's words without stopwords, in order, as written."""
    return _unique(w for w in _WORD.findall(question) if w.lower() not in _STOPWORDS)


def _entities(text: str) -> list[str]:
    """Quoted titles and capitalised spans (leading function words dropped), in order."""
    spans = [m.group(1) for m in _QUOTED.finditer(text)]
    for match in _CAPITALISED.finditer(text):
        words = match.group(0).split()
        while words and words[0].lower() in _LEADING:
            words = words[1:]
        spans.append(" ".join(words))
    return _unique(s for s in spans if len(re.sub(r"\W", "", s)) > 1)


def _asked(question: str) -> list[str]:
    """What the question asks for: its lower-case keywords ("government position held")."""
    return [w for w in _keywords(question) if w[0].islower()]


def _candidates(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Text candidates and logits; a text proposed twice keeps its higher logit."""
    out: dict[str, float] = {}
    for text, logit in pairs:
        text = " ".join(text.split())
        if text:
            out[text] = max(logit, out.get(text, logit))
    return out


# --------------------------------------------------------------------------- queries


@sim_model("multihop-query")
def query(req: SimRequest) -> Text:
    """A first-hop keyword query: four close phrasings of the question."""
    question = _question(req.user_text)
    keywords, entities, asked = _keywords(question), _entities(question), _asked(question)
    return Text(_candidates([
        (" ".join(keywords), 1.0),
        (" ".join(entities + asked[:2]), 0.9),
        (" ".join(entities), 0.7),
        (" ".join(asked + entities[:1]), 0.5),
    ]) or {question: 0.0})


BRIDGE_MULTIWORD = 0.5
"""Added to a bridge candidate's score when it has more than one word."""


def _bridges(question: str, passages: list[Passage]) -> list[str]:
    """Entities of the passages that the question does not name, best first.

    A span scores ``1 / rank`` for each passage that mentions it (title or text), plus
    :data:`BRIDGE_MULTIWORD` when it has several words; half its words or more in the
    question disqualify it.
    """
    asked = _words(question)
    scores: dict[str, float] = {}
    for p in passages:
        for span in _entities(f"{p.title}. {p.text}"):
            words = _words(span)
            if not words or len(words & asked) * 2 >= len(words):
                continue
            bonus = BRIDGE_MULTIWORD if len(words) > 1 and span not in scores else 0.0
            scores[span] = scores.get(span, 0.0) + 1.0 / p.rank + bonus
    return sorted(scores, key=lambda s: -scores[s])


@sim_model("multihop-followup")
def followup(req: SimRequest) -> Text:
    """A second-hop query: the bridge entity with some of the question's words; none
    when its instructions say to write no query (the second hop dropped)."""
    if "write no query" in req.system_text.lower():
        return Text("")
    question = _question(req.user_text)
    bridges = _bridges(question, _passages(req.user_text))
    asked, entities = " ".join(_asked(question)), _entities(question)
    if not bridges:
        return Text({" ".join(_keywords(question)) or question: 0.0})
    first, second = bridges[0], bridges[1] if len(bridges) > 1 else bridges[0]
    return Text(_candidates([
        (f"{first} {asked}", 1.0),
        (f"{first} {' '.join(entities)}", 0.8),
        (f"{first} {' '.join(_keywords(question))}", 0.7),
        (f"{second} {asked}", 0.6),
    ]))


# --------------------------------------------------------------------------- answer

GOLD_LOGIT = 3.5
"""Added to the gold answer's logit in proportion to the evidence in the prompt."""
SPAN_LOGITS = (1.0, 0.7, 0.4)
"""Logits of the best, second and third other candidate answers."""
YES_NO_PRIOR = {"yes": 0.4, "no": 0.2}
"""Logits of yes and no before the evidence."""


@dataclass(frozen=True)
class Gold:
    """What the reader knows of a question: its answer and supporting paragraphs."""

    answer: str
    supporting: frozenset[str]


@lru_cache(maxsize=1)
def _gold() -> dict[str, Gold]:
    """Question text -> its gold answer, from the bundled dev slice."""
    records = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    return {
        r["question"].strip(): Gold(r["answer"], frozenset(t for t, _ in r["supporting_facts"]))
        for r in records
    }


def _evidence(gold: Gold, passages: list[Passage]) -> float:
    """How much of the gold answer's evidence the passages hold, in [0, 1].

    A span answer needs one passage that contains it; a yes/no answer needs both
    supporting paragraphs (one of the two is half the evidence).
    """
    if gold.answer in YES_NO_PRIOR:
        return len(gold.supporting & {p.title for p in passages}) / len(gold.supporting)
    needle = gold.answer.lower()
    return float(any(needle in f"{p.title} {p.text}".lower() for p in passages))


def _relevance(question: str, p: Passage) -> tuple[int, str]:
    """How well a passage matches the question (shared keywords; the rank does not count)."""
    asked = {w.lower() for w in _keywords(question)}
    return -len(asked & _words(f"{p.title} {p.text}")), p.title


def _spans(question: str, passages: list[Passage]) -> list[str]:
    """Candidate answers from the passages, the best matching passage first."""
    asked = _words(question)
    numeric = bool(_NUMERIC.search(question))
    out: list[str] = []
    for p in sorted(passages, key=lambda p: _relevance(question, p)):
        found = _NUMBER.findall(p.text) if numeric else _entities(f"{p.title}. {p.text}")
        out += [s for s in found if not _words(s) <= asked]
    return _unique(out)


@sim_model("multihop-answer")
def answer(req: SimRequest) -> Text:
    """A short answer; the gold one when the passages hold its evidence."""
    question = _question(req.user_text)
    passages = _passages(req.user_text)
    if question.split(" ", 1)[0].lower() in _YES_NO:
        candidates = dict(YES_NO_PRIOR)
    else:
        candidates = dict(zip(_spans(question, passages), SPAN_LOGITS, strict=False))
    gold = _gold().get(question)
    if gold is not None and (evidence := _evidence(gold, passages)) > 0:
        candidates[gold.answer] = candidates.get(gold.answer, 0.0) + GOLD_LOGIT * evidence
    return Text(candidates or {"unknown": 0.0})
