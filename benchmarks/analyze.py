"""Benchmark: ``quiver analyze`` against its floor, the embedding model's own time.

Nearly all of a cold analysis is embedding texts. The floor is one
``SentenceTransformer.encode`` call over exactly the texts the analysis needed a vector
for (sentence-transformers sorts them by length itself), with the model's load: nothing
can embed those texts faster on this machine. Each side runs in a fresh Python process
(interpreter start, imports and model load included on both sides), after one process
that imports torch and sentence-transformers once so both find them in the page cache;
the times are wall times of those processes, measured here. Each side runs several
times, interleaved (cold, floor, cold, floor, ...), and the least time of each side is used: the
run least disturbed by other work on the machine (all are printed). Three times on the
long corpus, five on the short one: its floor is about 20 s, and other work on this
machine moves single runs of either side by 2 to 5 s.

Three corpora (see ``benchmarks/_corpora.py``):

* ``long``: agent conversations with real-trace text lengths (log-normal, median ~150
  characters, p90 ~600, a tail past 2,000, tool-response JSON among them). Printed: the
  cold analysis, the floor, their ratio (target: at most 1.1); the texts needed, encoded,
  and those that took the vector of a text the model sees the same way (cut at its
  window); and the largest difference between the analysis' text distances and the same
  distances from vectors encoded in arrival order, 64 at a time (how the store embedded
  before it sorted by length).
* ``short``: the System-Q-shaped corpus (1,500 traces, 200 input groups, about 24,000
  same-input pairs, short texts): the same cold / floor ratio (target: at most 1.1).
* ``paper``: paper-scale corpora of the same shape as ``short`` at 1,500 and 8,200
  traces (about 3.9 pairs per trace: 32,000 pairs at 8,200): cold time, warm time (a
  second analysis, every vector in the cache; target: at most 10 s at 8,200) and peak
  memory (the analysing process' resident high-water mark), and how each grows.

Run: ``python benchmarks/analyze.py [--corpora long,short,paper] [--conversations 200]
[--long-traces 700]``. Takes about 17 minutes for all three on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _corpora import long_corpus, short_corpus  # benchmarks/, first on the path

HERE = Path(__file__).resolve()
ROUNDS = {"long": 3, "short": 5}
"""Runs of each side of a cold / floor ratio, interleaved, by corpus."""


# --------------------------------------------------------------------------- children


def child_analyze(corpus: Path, cache: Path, texts_out: Path, distances_out: Path | None) -> dict[str, Any]:
    """Analyse the traces file ``corpus`` on the embedding cache ``cache``, as ``quiver
    analyze`` does (the file read included); record the distinct texts the store was
    asked for (and, on request, the text distances)."""
    from quiver._distance import EmbeddingStore
    from quiver._observational import analyze

    asked: dict[str, None] = {}
    pairs: dict[tuple[str, str], float] = {}
    ensure, distances = EmbeddingStore.ensure, EmbeddingStore.distances

    def recording_ensure(self: EmbeddingStore, texts: Any, progress: Any = None) -> None:
        texts = list(texts)
        asked.update(dict.fromkeys(texts))
        ensure(self, texts, progress)

    def recording_distances(self: EmbeddingStore, many: Any) -> list[float]:  # distance() calls it too
        many = list(many)
        found = distances(self, many)
        pairs.update(((a, b), d) for (a, b), d in zip(many, found, strict=True) if a != b)
        return found

    EmbeddingStore.ensure = recording_ensure  # type: ignore[method-assign]
    if distances_out is not None:
        EmbeddingStore.distances = recording_distances  # type: ignore[method-assign]
    start = time.perf_counter()
    profile = analyze(corpus, cache_dir=cache)
    seconds = time.perf_counter() - start
    texts_out.write_text(json.dumps(list(asked)), encoding="utf-8")
    if distances_out is not None:
        distances_out.write_bytes(pickle.dumps(pairs))
    data = profile.to_json()
    return {"analyze_seconds": seconds, "pairs": data["pairs"], "embedding": data["embedding"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_floor(texts_file: Path) -> dict[str, Any]:
    """One ``encode`` of the texts, with the model's load."""
    from quiver._distance import SentenceTransformerEmbedder

    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    embedder = SentenceTransformerEmbedder()
    model = embedder._loaded()
    start = time.perf_counter()
    model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return {"texts": len(texts), "load_seconds": embedder.load_seconds, "encode_seconds": time.perf_counter() - start}


def child_arrival(texts_file: Path, distances_file: Path) -> dict[str, Any]:
    """The analysis' text distances again, from vectors encoded in arrival order 64 at a time."""
    from quiver._distance import SentenceTransformerEmbedder

    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    pairs: dict[tuple[str, str], float] = pickle.loads(distances_file.read_bytes())
    embedder = SentenceTransformerEmbedder()
    vectors: dict[str, np.ndarray] = {}
    for i in range(0, len(texts), 64):
        chunk = texts[i:i + 64]
        vectors.update(zip(chunk, embedder.encode(chunk), strict=True))
    worst = 0.0
    for (a, b), d in pairs.items():
        before = min(max(1.0 - float(np.dot(vectors[a].astype(np.float64), vectors[b].astype(np.float64))), 0.0), 1.0)
        worst = max(worst, abs(before - d))
    return {"pairs": len(pairs), "max_abs_difference": worst}


def child_warmup() -> dict[str, Any]:
    import sentence_transformers  # noqa: F401
    import torch  # noqa: F401

    from quiver._observational import analyze  # noqa: F401
    return {}


def write_corpus(path: Path, traces: list[Any]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for trace in traces:
            fh.write(trace.model_dump_json() + "\n")


def run_child(*args: str) -> tuple[float, dict[str, Any]]:
    """Run this file as a child ``args``; its wall time and the JSON it printed last."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(HERE), "--child", *args], capture_output=True, text=True, env=env,
                          check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark child {args[0]} failed:\n{proc.stderr[-3000:]}")
    return seconds, json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- measurements


def against_floor(name: str, traces: list[Any], work: Path, *, check_distances: bool) -> None:
    """Cold analysis and floor of one corpus, each in a fresh process; print the ratio."""
    folder = work / name
    folder.mkdir()
    corpus, texts = folder / "traces.jsonl", folder / "texts.json"
    write_corpus(corpus, traces)
    distances = folder / "distances.pkl" if check_distances else None
    colds, floors = [], []
    for attempt in range(ROUNDS[name]):  # interleaved; the least of each side is the least disturbed by other work
        cache = folder / f"cache-{attempt}"  # cold every time
        colds.append(run_child("analyze", str(corpus), str(cache), str(texts), str(distances or "")))
        floors.append(run_child("floor", str(texts)))
    (cold, info), (floor, floor_info) = min(colds, key=lambda r: r[0]), min(floors, key=lambda r: r[0])
    emb = info["embedding"]
    asked = json.loads(texts.read_text(encoding="utf-8"))
    lengths = np.array([len(t) for t in asked]) if asked else np.zeros(1)
    print(f"\n[{name}] {len(traces)} traces, {len({t.input_id for t in traces})} inputs, {info['pairs']} pairs; "
          f"{floor_info['texts']} texts needed a vector (length median {np.median(lengths):.0f}, "
          f"p90 {np.percentile(lengths, 90):.0f}, max {lengths.max()}, {(lengths > 2000).sum()} over 2,000)")
    print(f"  encoded {emb['embedded']}; {emb['shared_window']} took the vector of a text the model sees the "
          f"same way (cut at its window); {emb['cache_hits']} from the cache")
    print(f"  cold analysis {cold:.1f} s (analyze() {info['analyze_seconds']:.1f} s: load {emb['load_seconds']:.1f} s, "
          f"encode {emb['encode_seconds']:.1f} s); floor {floor:.1f} s (load {floor_info['load_seconds']:.1f} s, "
          f"encode {floor_info['encode_seconds']:.1f} s); cold / floor = {cold / floor:.3f} (target <= 1.1); "
          f"the least of {ROUNDS[name]} interleaved runs of each "
          f"(all cold: {', '.join(f'{c:.1f}' for c, _ in colds)} s; "
          f"floor: {', '.join(f'{f:.1f}' for f, _ in floors)} s)")
    if distances is not None:
        _, check = run_child("arrival", str(texts), str(distances))
        print(f"  text distances vs vectors encoded in arrival order 64 at a time: {check['pairs']} text pairs, "
              f"max |difference| {check['max_abs_difference']:.2e} (target <= 1e-6)")


def scaling(sizes: list[int], work: Path) -> None:
    """Cold and warm analysis and peak memory at each size, paper-shaped corpora."""
    rows = []
    for traces in sizes:
        groups = max(2, round(traces / 8.2))
        pairs = round(traces * 32_000 / 8_200)
        corpus = short_corpus(traces, groups, pairs, seed=7)
        folder = work / f"paper-{traces}"
        folder.mkdir()
        path = folder / "traces.jsonl"
        write_corpus(path, corpus)
        cache = folder / "cache"
        cold, info = run_child("analyze", str(path), str(cache), str(folder / "texts.json"), "")
        warm, warm_info = run_child("analyze", str(path), str(cache), str(folder / "texts-warm.json"), "")
        rows.append((traces, info["pairs"], info["embedding"]["embedded"], cold, warm, warm_info["analyze_seconds"],
                     max(info["peak_rss_mb"], warm_info["peak_rss_mb"]), warm_info["embedding"]["embedded"]))
    print("\n[paper] cold and warm analysis (each a fresh process), peak memory")
    print("  traces   pairs  embedded   cold s   warm s (analyze())   peak MB")
    for traces, pairs, embedded, cold, warm, warm_analyze, peak, warm_embedded in rows:
        print(f"  {traces:>6} {pairs:>7} {embedded:>9} {cold:>8.1f} {warm:>8.1f} ({warm_analyze:>5.1f}) {peak:>13.0f}"
              + ("" if warm_embedded == 0 else f"  (warm run embedded {warm_embedded})"))
    if len(rows) > 1:
        (t0, p0, _, c0, w0, _, m0, _), (t1, p1, _, c1, w1, _, m1, _) = rows[0], rows[-1]
        print(f"  from {t0} to {t1} traces (x{t1 / t0:.1f}; pairs x{p1 / p0:.1f}): cold x{c1 / c0:.2f}, "
              f"warm x{w1 / w0:.2f}, peak memory x{m1 / m0:.2f}; warm at {t1}: {w1:.1f} s (target <= 10 s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="long,short,paper")
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--long-traces", type=int, default=700)
    parser.add_argument("--paper-sizes", default="1500,8200")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "analyze":
            distances = Path(rest[3]) if rest[3:] and rest[3] else None
            out = child_analyze(Path(rest[0]), Path(rest[1]), Path(rest[2]), distances)
        elif kind == "floor":
            out = child_floor(Path(rest[0]))
        elif kind == "arrival":
            out = child_arrival(Path(rest[0]), Path(rest[1]))
        else:
            out = child_warmup()
        print(json.dumps(out))
        return 0
    wanted = args.corpora.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run_child("warmup")
        if "long" in wanted:
            against_floor("long", long_corpus(args.conversations, args.long_traces, args.seed), work,
                          check_distances=True)
        if "short" in wanted:
            against_floor("short", short_corpus(1500, 200, 24000, args.seed), work, check_distances=False)
        if "paper" in wanted:
            scaling([int(s) for s in args.paper_sizes.split(",")], work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
