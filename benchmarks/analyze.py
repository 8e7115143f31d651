"""Benchmark: ``quiver analyze`` on a System-Q-sized corpus.

Builds a synthetic corpus of about 1,500 traces in 200 input groups of skewed sizes
(about 24,000 same-input pairs), 6 nodes with structured fields and about 6,000 unique
texts, then analyses it twice on a fresh embedding cache and prints, from this one run:

* the total analysis time and the embedding time (model load included) of the cold
  run, and their ratio (target: under 1.25: the analysis adds at most a quarter to the
  unavoidable embedding work);
* texts embedded against texts that needed a vector (target: equal; identical texts
  never need one);
* the warm-cache re-analysis time (target: under 10 s here);
* peak memory (resident set high-water mark of this process).

Run: ``python benchmarks/analyze.py [--traces 1500] [--groups 200] [--pairs 24000]``.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from quiver import NodeCall, Trace
from quiver._observational import analyze

WORDS = (
    "invoice refund account password export server latency outage billing plan upgrade "
    "discount login token cluster region backup restore webhook quota limit sync mobile "
    "desktop browser email address payment card charge renewal trial seat admin role"
).split()
INTENTS = ["billing", "bug", "account", "other"]


def group_sizes(traces: int, groups: int, pairs: int, seed: int) -> list[int]:
    """Skewed group sizes (Zipf-like) summing to ``traces`` with about ``pairs`` pairs."""
    rng = random.Random(seed)
    ranks = list(range(1, groups + 1))
    rng.shuffle(ranks)

    def sizes_for(exponent: float) -> list[int]:
        weights = [1.0 / r**exponent for r in ranks]
        total = sum(weights)
        sizes = [max(2, round(traces * w / total)) for w in weights]
        sizes[sizes.index(max(sizes))] += traces - sum(sizes)
        return sizes

    low, high = 0.0, 3.0
    for _ in range(40):  # bisection on the exponent: more skew, more pairs
        mid = (low + high) / 2
        if sum(n * (n - 1) // 2 for n in sizes_for(mid)) < pairs:
            low = mid
        else:
            high = mid
    return sizes_for((low + high) / 2)


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_trace(input_id: str, repeat: int, query: str, rng: random.Random, noisy: bool) -> Trace:
    """One trace of a six-node pipeline: rewrite, signal, retrieve, plan, compose, audit.

    A deterministic input (``noisy`` false) gives the same outputs on every repeat, as a
    temperature-0 pipeline does: its texts never need a vector.
    """
    rng = rng if noisy else random.Random(query)
    rewrite = query if not noisy or rng.random() < 0.2 else f"{query} {sentence(rng, 4)}"
    signal = {"intent": rng.choice(INTENTS) if noisy and rng.random() < 0.3 else INTENTS[len(query) % 4],
              "urgent": bool(noisy and rng.random() < 0.2), "confidence": round(rng.uniform(0.5, 1.0), 2)}
    docs = sorted(rng.sample(range(40), 4)) if noisy else [1, 2, 3, 4]
    plan = {"action": rng.choice(["EXECUTE", "COMPOSE"]) if noisy else "COMPOSE", "thought": sentence(rng, 10)}
    compose = {"answer": sentence(rng, 18), "refs": [f"d{d}" for d in docs[:2]]}
    audit = {"summary": sentence(rng, 8), "tokens": rng.randint(50, 400)}
    outputs = [("rewrite", rewrite), ("signal", signal), ("retrieve", docs), ("plan", plan),
               ("compose", compose), ("audit", audit)]
    parents = {"rewrite": ["c0"], "signal": ["c1"], "retrieve": ["c1"], "plan": ["c2", "c3"],
               "compose": ["c4"], "audit": ["c5"]}
    calls = [NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source",
                      output={"query": query})]
    for i, (node, out) in enumerate(outputs, start=1):
        calls.append(NodeCall(call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0",
                              kind="transform", parents=parents[node], output=out,
                              decision={"action": out["action"]} if node == "plan" else {}))
    return Trace(trace_id=f"{input_id}/{repeat}", run_id="bench", pipeline="system_q", input_id=input_id,
                 repeat=repeat, inputs={"query": query}, calls=calls, output=compose["answer"])


def corpus(traces: int, groups: int, pairs: int, seed: int) -> list[Trace]:
    rng = random.Random(seed)
    out = []
    for g, size in enumerate(group_sizes(traces, groups, pairs, seed)):
        query = sentence(rng, 9)
        noisy = g % 8 != 0  # an eighth of the inputs are fully deterministic: nothing to embed there
        out += [make_trace(f"q{g}", r, query, rng, noisy) for r in range(size)]
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1500)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=24000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    traces = corpus(args.traces, args.groups, args.pairs, args.seed)
    unique_texts = {s for t in traces for c in t.calls for s in _strings(c.output)}
    print(f"corpus: {len(traces)} traces, {len({t.input_id for t in traces})} groups, "
          f"{len(unique_texts)} unique strings in outputs")
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        cold = analyze(traces, cache_dir=Path(cache))
        total = time.perf_counter() - t0
        emb = cold.to_json()["embedding"]
        embedding = emb["load_seconds"] + emb["encode_seconds"]
        t1 = time.perf_counter()
        warm = analyze(traces, cache_dir=Path(cache))
        warm_total = time.perf_counter() - t1
    print(f"pairs: {cold.to_json()['pairs']}")
    print(f"cold: total {total:.1f} s, embedding {embedding:.1f} s (load {emb['load_seconds']:.1f} s, "
          f"encode {emb['encode_seconds']:.1f} s), total / embedding = {total / max(embedding, 1e-9):.3f} "
          "(target < 1.25)")
    print(f"texts embedded {emb['embedded']} of {emb['needed']} that needed a vector "
          f"({'none embedded without need' if emb['embedded'] <= emb['needed'] else 'EXTRA EMBEDDINGS'})")
    print(f"warm: total {warm_total:.1f} s (target < 10 s), texts embedded {warm.to_json()['embedding']['embedded']}")
    print(f"peak memory: {peak_rss_mb():.0f} MB")
    return 0


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


if __name__ == "__main__":
    sys.exit(main())
