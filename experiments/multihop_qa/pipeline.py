"""Multi-hop question answering over HotpotQA, written only with ``import quiver``.

The paper's DSPy cross-check (§5.5): a strict chain of five nodes, with no branch, no
loop and no gate, so two runs of one question always call the same nodes the same
number of times and differ only in the values they produce::

    generate_query_1 (llm) -> retrieve_1 (BM25) -> generate_query_2 (llm)
                           -> retrieve_2 (BM25) -> generate_answer (llm)

The first query searches for what the question names; the follow-up query searches for
the entity the first passages lead to (the "bridge"), and the answer is read from the
passages of the second hop. Retrieval is the distractor setting of HotpotQA, as in the
canonical DSPy setup: each question has its own 10 candidate paragraphs (2 gold, 8
distractors; one question of the slice has only its 2 gold ones), and BM25 ranks those
for each query. The paragraphs are looked up by the
question's id in the bundled dev slice (``data/``), like a search service would hold
them, so the recorded inputs stay small.

Outside ``quiver record`` every ``quiver.*`` call is a passthrough: configure a client
with ``quiver.configure_llm(...)`` and call :func:`run` like any function.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import quiver

__all__ = [
    "run", "generate_query_1", "retrieve_1", "generate_query_2", "retrieve_2", "generate_answer",
    "passage", "candidate_titles", "BM25",
]

DATA_PATH = Path(__file__).resolve().parent / "data" / "hotpot_dev_distractor_v1_100.json"
"""The HotpotQA dev slice (distractor setting, 103 questions); see ``data/NOTICE.md``."""

TOP_K = 3
"""How many passages each retrieval hop returns."""

QUERY_MODEL = "multihop-query"
FOLLOWUP_MODEL = "multihop-followup"
ANSWER_MODEL = "multihop-answer"

# --------------------------------------------------------------------------- prompts

quiver.template(
    "multihop_qa.generate_query_1",
    system=(
        "You write search queries for a multi-hop question answering system. Write one "
        "short keyword query that finds the passages about what the question names. "
        "Reply with the query only."
    ),
    user="Question: {question}",
)
quiver.template(
    "multihop_qa.generate_query_2",
    system=(
        "You write search queries for a multi-hop question answering system. The passages "
        "below were found for the question; write one short keyword query for the next "
        "hop: the person, work or place they lead to that the question does not name. "
        "Reply with the query only."
    ),
    user="Question: {question}\n\nPassages:\n{passages}",
)
quiver.template(
    "multihop_qa.generate_answer",
    system=(
        "Answer the question from the passages only, in a few words (a name, a date, a "
        "number, or yes/no). Reply with the answer only."
    ),
    user="Question: {question}\n\nPassages:\n{passages}",
)

# --------------------------------------------------------------------------- passages


@dataclass(frozen=True)
class _Corpus:
    """The dev slice as a search service holds it."""

    candidates: dict[str, tuple[str, ...]]
    """Question id -> the titles of its 10 candidate paragraphs, in dataset order."""
    texts: dict[str, str]
    """Title -> paragraph text (a title has one paragraph across the slice)."""


@lru_cache(maxsize=1)
def _corpus() -> _Corpus:
    """The paragraphs of :data:`DATA_PATH`, read once."""
    records = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    candidates: dict[str, tuple[str, ...]] = {}
    texts: dict[str, str] = {}
    for record in records:
        candidates[record["_id"]] = tuple(title for title, _ in record["context"])
        for title, sentences in record["context"]:
            texts[title] = " ".join(s.strip() for s in sentences)
    return _Corpus(candidates, texts)


def candidate_titles(question_id: str) -> tuple[str, ...]:
    """The titles of the question's candidate paragraphs (2 gold, the rest distractors).

    Raises:
        KeyError: The slice has no question with that id.
    """
    try:
        return _corpus().candidates[question_id]
    except KeyError:
        raise KeyError(f"no HotpotQA question with id {question_id!r} in {DATA_PATH.name}") from None


def passage(title: str) -> str:
    """The paragraph text of a title."""
    return _corpus().texts[title]


def _context(titles: Sequence[str]) -> str:
    """Passages as prompt lines: ``[1] «Title» text``."""
    return "\n".join(f"[{rank}] «{title}» {passage(title)}" for rank, title in enumerate(titles, 1))


# --------------------------------------------------------------------------- BM25

_STOPWORDS = frozenset(
    "a an and are as at be been being both but by did do does for from had has have he her his "
    "how in into is it its of on or she that the their them they this to was were what when where "
    "which who whom whose why with".split()
)


def _tokens(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords."""
    return [w for w in re.findall(r"\w+", text.lower()) if w not in _STOPWORDS]


class BM25:
    """Okapi BM25 over a small fixed set of documents.

    ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` and per document
    ``sum_t idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` over the
    distinct query terms.
    """

    def __init__(self, docs: Sequence[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(_tokens(doc)) for doc in docs]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.avg_len = sum(self.lengths) / max(len(docs), 1) or 1.0
        df = Counter(term for c in self.counts for term in c)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def score(self, query: str, index: int) -> float:
        """The BM25 score of document ``index`` for ``query``."""
        doc, length = self.counts[index], self.lengths[index]
        norm = self.k1 * (1 - self.b + self.b * length / self.avg_len)
        return math.fsum(
            self.idf[t] * doc[t] * (self.k1 + 1) / (doc[t] + norm)
            for t in set(_tokens(query)) if doc[t]
        )

    def top_k(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents as ``(index, score)``; ties keep document order."""
        scored = sorted(((i, self.score(query, i)) for i in range(len(self.counts))), key=lambda p: -p[1])
        return scored[:k]


@cache
def _index(question_id: str) -> BM25:
    """A BM25 index over the question's candidate paragraphs (title and text)."""
    return BM25([f"{t} {passage(t)}" for t in candidate_titles(question_id)])


def _search(query: str, question_id: str) -> list[str]:
    """The :data:`TOP_K` best candidate titles for ``query``, recorded as the retrieval set."""
    titles = candidate_titles(question_id)
    hits = [(titles[i], s) for i, s in _index(question_id).top_k(query, TOP_K)]
    quiver.retrieved({"doc_id": t, "content": passage(t), "score": round(s, 4)} for t, s in hits)
    return [t for t, _ in hits]


# --------------------------------------------------------------------------- nodes


@quiver.node("generate_query_1", kind="llm")
def generate_query_1(question: str) -> str:
    """A keyword search query for what the question names."""
    return quiver.llm().chat(
        "multihop_qa.generate_query_1", model=QUERY_MODEL, question=question
    ).content.strip()


@quiver.node("retrieve_1", kind="retrieval", parents=["generate_query_1"])
def retrieve_1(query: str, question_id: str) -> list[str]:
    """First hop: the titles of the :data:`TOP_K` best paragraphs for the query."""
    return _search(query, question_id)


@quiver.node("generate_query_2", kind="llm", parents=["retrieve_1"])
def generate_query_2(question: str, titles: list[str]) -> str:
    """A follow-up query for the entity the first passages lead to."""
    return quiver.llm().chat(
        "multihop_qa.generate_query_2", model=FOLLOWUP_MODEL, question=question,
        passages=_context(titles),
    ).content.strip()


@quiver.node("retrieve_2", kind="retrieval", parents=["generate_query_2"])
def retrieve_2(query: str, question_id: str) -> list[str]:
    """Second hop: the titles of the :data:`TOP_K` best paragraphs for the follow-up."""
    return _search(query, question_id)


@quiver.node("generate_answer", kind="llm", parents=["retrieve_2"])
def generate_answer(question: str, titles: list[str]) -> str:
    """A short answer read from the second hop's passages."""
    return quiver.llm().chat(
        "multihop_qa.generate_answer", model=ANSWER_MODEL, question=question,
        passages=_context(titles),
    ).content.strip()


# --------------------------------------------------------------------------- pipeline


def run(question: str, question_id: str) -> dict[str, object]:
    """Answer one HotpotQA question in two retrieval hops.

    Returns the ``answer`` and the ``titles`` of the passages it was read from.
    """
    query_1 = generate_query_1(question)
    titles_1 = retrieve_1(query_1, question_id)
    query_2 = generate_query_2(question, titles_1)
    titles_2 = retrieve_2(query_2, question_id)
    answer = generate_answer(question, titles_2)
    return {"answer": answer, "titles": titles_2}
