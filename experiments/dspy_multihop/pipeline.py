# mypy: disable-error-code="import-untyped,misc"
# (DSPy ships no type information: its classes are Any to mypy, and so is subclassing them)
"""A DSPy multi-hop question answering program with a router, recorded by one line.

A plain DSPy program: a ``Predict`` router decides whether the question needs one
retrieval hop or two; each hop writes a search query with a ``ChainOfThought`` and
retrieves passages by BM25 from a small bundled corpus (the paragraphs of 14 HotpotQA
questions, ``data/corpus.jsonl``); a ``ChainOfThought`` reads the answer from every
passage found::

    router (llm) -> [ hops.gen_query (llm) -> hops.retrieve (retrieval) ] x 1 or 2 -> answer (llm)

The LM is a plain ``dspy.LM`` built from the environment (``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``, which ``quiver record``, ``run``, ``replay`` and ``gate`` point at
the spec's endpoint). The only line that knows about quiver is ``instrument(...)``
below: it names the nodes by attribute path (``router``, ``hops.gen_query``,
``hops.retrieve``, ``answer``), numbers the hops as iterations of the loop ``hops``,
records the router's ``route`` as a decision and registers each signature's
instructions as a template.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Literal

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM: no price list fetched at import

import dspy  # noqa: E402

from quiver.integrations.dspy import instrument  # noqa: E402

__all__ = ["MultiHop", "Retrieve", "program", "run", "MODEL"]

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.jsonl"
MODEL = "openai/dspy-multihop"
"""The simulated model (``sim_models.py``); any chat model works in its place."""
TOP_K = 3


class Route(dspy.Signature):
    """Decide how many retrieval hops the question needs: one hop when the question names
    everything it asks about, two hops when the answer is reached through an entity the
    question does not name."""

    question: str = dspy.InputField()
    route: Literal["single_hop", "multi_hop"] = dspy.OutputField(desc="single_hop or multi_hop")


class GenQuery(dspy.Signature):
    """Write one short keyword search query that finds the passages the question needs
    next: what the question names when no passage was found yet, else the person, work or
    place the passages lead to."""

    question: str = dspy.InputField()
    context: list[str] = dspy.InputField(desc="passages found so far, as 'Title | text'")
    query: str = dspy.OutputField(desc="a few keywords")


class Answer(dspy.Signature):
    """Answer the question from the passages only, in a few words (a name, a date, a
    number, or yes/no)."""

    question: str = dspy.InputField()
    context: list[str] = dspy.InputField(desc="the passages found, as 'Title | text'")
    answer: str = dspy.OutputField(desc="a few words")


_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(
    "a an and are as at be been both but by did do does for from had has have he her his how in into is it "
    "its of on or she that the their them they this to was were what when where which who whom whose why with".split()
)


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


@lru_cache(maxsize=1)
def _corpus() -> tuple[list[str], list[Counter[str]], dict[str, float], float]:
    """The passages (``Title | text``), their term counts, idf and average length."""
    rows = [json.loads(line) for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    passages = [f"{r['title']} | {r['text']}" for r in rows]
    counts = [Counter(_tokens(p)) for p in passages]
    df = Counter(t for c in counts for t in c)
    n = len(passages)
    idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
    avg = sum(sum(c.values()) for c in counts) / max(n, 1)
    return passages, counts, idf, avg


class Retrieve(dspy.Module):
    """BM25 (k1 = 1.5, b = 0.75) over the bundled corpus: the ``k`` best passages."""

    def __init__(self, k: int = TOP_K) -> None:
        super().__init__()
        self.k = k

    def forward(self, query: str) -> dspy.Prediction:
        passages, counts, idf, avg = _corpus()
        terms = set(_tokens(query))

        def score(i: int) -> float:
            c, length = counts[i], sum(counts[i].values())
            norm = 1.5 * (1 - 0.75 + 0.75 * length / avg)
            return math.fsum(idf[t] * c[t] * 2.5 / (c[t] + norm) for t in terms if c[t])

        ranked = sorted(range(len(passages)), key=lambda i: -score(i))
        return dspy.Prediction(passages=[passages[i] for i in ranked[: self.k]])


class Hop(dspy.Module):
    """One retrieval hop: a query from the question and the passages so far, then BM25."""

    def __init__(self) -> None:
        super().__init__()
        self.gen_query = dspy.ChainOfThought(GenQuery)
        self.retrieve = Retrieve()

    def forward(self, question: str, context: list[str]) -> list[str]:
        query = self.gen_query(question=question, context=context).query
        return list(self.retrieve(query=query).passages)


class MultiHop(dspy.Module):
    """Route, then one or two hops, then answer from everything found."""

    def __init__(self) -> None:
        super().__init__()
        self.router = dspy.Predict(Route)
        self.hops = Hop()
        self.answer = dspy.ChainOfThought(Answer)

    def forward(self, question: str) -> dspy.Prediction:
        route = self.router(question=question).route
        context: list[str] = []
        for _ in range(2 if route == "multi_hop" else 1):
            found = self.hops(question=question, context=context)
            context = context + [p for p in found if p not in context]
        prediction = self.answer(question=question, context=context)
        return dspy.Prediction(route=route, context=context, **prediction)


program = instrument(MultiHop())

_lms: dict[tuple[str | None, str | None], dspy.LM] = {}
_lms_lock = threading.Lock()


def _lm() -> dspy.LM:
    """A ``dspy.LM`` for the endpoint the environment names (one per endpoint)."""
    key = (os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY"))
    with _lms_lock:
        if key not in _lms:
            _lms[key] = dspy.LM(MODEL, temperature=0.7, max_tokens=400)
        return _lms[key]


def run(question: str) -> dict[str, object]:
    """Answer one question; returns the answer, the route taken and the passages' titles."""
    with dspy.context(lm=_lm()):
        prediction = program(question=question)
    return {
        "answer": prediction.answer,
        "route": prediction.route,
        "titles": [p.split(" | ", 1)[0] for p in prediction.context],
    }
