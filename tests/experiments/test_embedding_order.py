"""Embedding texts in one length-sorted pass keeps the distances of arrival-order batches.

The store once sent the texts it had to embed to the model 64 at a time in the order
they came, each batch padded to its longest text; it now sorts them by length first
(and gives texts cut at the model's window the vector of what the model sees). The
distances must not move: checked on the README campaign's recorded texts (baseline and
replays) and on real agent traces exported from Langfuse, against vectors encoded the
old way, to 1e-6.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np

from quiver._distance import EmbeddingStore, SentenceTransformerEmbedder
from quiver._importers import import_traces
from quiver._trace import Trace, iter_traces, load_traces

LANGFUSE = Path(__file__).parents[1] / "data" / "traces" / "langfuse"


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _texts(traces: list[Trace]) -> list[str]:
    return list(dict.fromkeys(s for t in traces for c in t.calls for s in _strings(c.output) if s.strip()))


def _sample(texts: list[str], n: int, seed: int) -> list[str]:
    """The 30 longest texts (windows cut) and a seeded sample of the rest, in arrival order."""
    longest = set(sorted(texts, key=len)[-30:])
    rest = [t for t in texts if t not in longest]
    chosen = longest | set(random.Random(seed).sample(rest, min(n - len(longest), len(rest))))
    return [t for t in texts if t in chosen]


def test_sorted_and_windowed_embedding_gives_the_distances_of_arrival_order_batches(support_bot_run: Path) -> None:
    baseline = load_traces(support_bot_run / "baseline" / "traces.jsonl").traces
    replays = list(itertools.islice(iter_traces(support_bot_run / "replays.jsonl"), 300))
    agents = import_traces("langfuse", sorted(LANGFUSE.glob("*.json"))).traces
    corpora = {"support_bot": _sample(_texts(baseline + replays), 170, 1), "langfuse": _sample(_texts(agents), 170, 2)}
    embedder = SentenceTransformerEmbedder()
    for name, texts in corpora.items():
        if name == "langfuse":
            assert max(len(t) for t in texts) > 1500  # some texts reach past the model's window
        before: dict[str, np.ndarray] = {}
        for i in range(0, len(texts), 64):
            before.update(zip(texts[i:i + 64], embedder.encode(texts[i:i + 64]), strict=True))
        with EmbeddingStore(embedder) as store:
            store.ensure(texts)
            pairs = random.Random(3).sample(list(itertools.combinations(texts, 2)), 2000)
            worst = max(
                abs(store.distance(a, b) - min(max(1.0 - float(np.dot(before[a].astype(np.float64),
                                                                        before[b].astype(np.float64))), 0.0), 1.0))
                for a, b in pairs
            )
        assert worst <= 1e-6, (name, worst)
