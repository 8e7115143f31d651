"""Benchmark: a campaign's replay phase keeps its executor busy.

Records the support bot (``experiments/support_bot/record.yaml``, 225 traces) once at
zero latency, then runs a campaign of about ``--replays`` jobs on it with the engine's
own runner (``run_campaign``) against the bundled simulator at ``--latency-ms`` per LLM
call, once per executor (``local`` threads at ``--concurrency``; ``ray`` on a local
instance, ``ray.init(num_cpus=2)``), and prints, measured in this one run:

* jobs, LLM calls made in the replay phase, latency, the effective concurrency;
* the ideal replay time, ``LLM calls x latency / concurrency``, the actual one, and
  the efficiency ``ideal / actual`` (target: at least 0.9 for ``local`` at 64);
* the pairing phase that follows (the replays read back from the ledger and turned into
  pair rows, with the embedding model's load and encoding), and the efficiency of the
  two phases together: ideal / (replay phase + pairing phase);
* where the rest goes: the ledger commits (a separate thread, in batches), the replays'
  own time beyond their LLM calls and the replays in flight (``local`` only: Ray
  workers are other processes), the CPU this process used, and the same jobs run again
  at 0 ms latency: the engine's own cost per replay with no LLM wait;
* the first lines of the errors of failed replays, read from the run's ledger.

The perturbations: the rewriter's three prompt variants, an override each on
signal_analysis and context_sufficiency, and a list_edit ladder (1, 2, 3, 5 fragments
removed) on discovery; a seeded sample of traces and ``replay.repeats`` scale them to
about ``--replays`` jobs. No control replays (``replay.controls: 0``): they are replays
like the others, and would only shift the job count away from ``--replays``.

How the replay phase is timed: the runner's total time also holds the baseline's
loading and observational analysis (with the embedding model's load) and the writing of
the results, so this benchmark times the phases from the outside, without editing the
runner. In this process only, it wraps ``_replay_all`` of
``quiver.experiments._campaign`` (its wall time is the "actual" column: the ledger
check and set-up, the executor's run, and every replay committed to the ledger) and ``_pair_rows`` (the
pairing phase), and, for the breakdown, the executors' ``run``, ``pair_results`` as the
runner imported it, ``Ledger.commit``, the runner's ``EmbeddingStore`` (to read its
counters) and, for ``local``, ``_Worker.run`` (one replay). Each wrapper only reads
``time.perf_counter()`` around the original call; all are removed after each run.

Each run gets a fresh embedding cache, as a campaign's new replay texts would. Ray
workers' logs stay in Ray's log folder (``log_to_driver=False``).

Run: ``python benchmarks/campaign.py [--replays 3000] [--latency-ms 500]
[--concurrency 64] [--executors local,ray] [--quick]``. ``--quick`` is 300 replays at
100 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiver._trace import load_traces
from quiver.experiments._campaign import (
    CampaignRun,
    Ledger,
    results as campaign_results,
    run as campaign_run,
    run_campaign,
)
from quiver.replay import LocalExecutor, RayExecutor
from quiver.replay._executors import Worker

from _support_bot import DEMO, SPEC_HEAD, latency, record_baseline  # benchmarks/, first on the path

PERTURBATIONS = """\
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variants: [{demo}/prompts/rewriter_terse.txt, {demo}/prompts/rewriter_polite.txt,
                         {demo}/prompts/rewriter_verbose.txt]}}
  - id: sa-web-hint
    node: signal_analysis
    op: override
    params: {{set: {{web_search_hint: true}}}}
  - id: cs-sufficient
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: discovery-drop
    node: discovery
    op: list_edit
    params: {{action: remove}}
    ladder: {{count: [1, 2, 3, 5]}}
"""
STEPS = {"rewriter": 3, "signal_analysis": 1, "context_sufficiency": 1, "discovery": 4}
"""Replays per selected trace and repeat, by target node (variants x ladder steps)."""
SPEC = SPEC_HEAD + """\
select: {select}
perturbations:
{perturbations}replay: {{repeats: {repeats}, controls: 0}}
executor: {executor}
analysis: {{resamples: 100, permutations: 100, cache_dir: {cache}}}
output: {output}
"""


# --------------------------------------------------------------------------- sizing


def eligible_counts(baseline: Path) -> dict[str, int]:
    """Baseline traces where each target node ran (first occurrence), ok traces only."""
    traces = load_traces(baseline).traces
    return {node: sum(t.status == "ok" and any(c.node == node and c.occurrence == 0 for c in t.calls) for t in traces)
            for node in STEPS}


def sizing(replays: int, eligible: dict[str, int]) -> tuple[int, int | None, int]:
    """``(repeats, traces sampled per perturbation or None for all, jobs)`` nearest ``replays``."""
    def jobs(n: int | None, repeats: int) -> int:
        return repeats * sum(steps * (eligible[node] if n is None else min(n, eligible[node]))
                             for node, steps in STEPS.items())

    repeats = max(1, math.ceil(replays / jobs(None, 1)))
    most = max(eligible.values())
    n = min(range(1, most + 1), key=lambda k: (abs(jobs(k, repeats) - replays), k))
    chosen = None if n >= most else n
    return repeats, chosen, jobs(chosen, repeats)


def write_spec(folder: Path, name: str, *, baseline: Path, latency_ms: float, executor: str, repeats: int,
               sample: int | None) -> Path:
    select = "{mode: all}" if sample is None else f"{{mode: sample, n: {sample}, seed: 3}}"
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(
        demo=DEMO, latency=latency(latency_ms), baseline=baseline, select=select,
        perturbations=PERTURBATIONS.format(demo=DEMO),
        repeats=repeats, executor=executor, cache=folder / f"{name}-emb", output=folder / name,
    ), encoding="utf-8")
    return path


def ray_slots(concurrency: int, num_cpus: int) -> tuple[str, int, str]:
    """The ray executor block for ``concurrency``, the effective concurrency and how it comes about.

    A task replays its batch ``threads`` at a time and reserves ``task_cpus``: at most
    ``num_cpus / task_cpus`` tasks run at once whatever ``max_in_flight`` allows (the
    spec sets neither ``threads`` nor ``task_cpus``; the executor's defaults apply).
    """
    defaults = RayExecutor()
    in_flight = max(1, math.ceil(concurrency / defaults.threads))
    running = min(in_flight, int(num_cpus / defaults.task_cpus))
    block = f"{{kind: ray, batch_size: 8, max_in_flight: {in_flight}}}"
    how = (f"min(max_in_flight {in_flight}, {num_cpus} CPUs / task_cpus {defaults.task_cpus:g}) tasks "
           f"x {defaults.threads} threads")
    return block, running * defaults.threads, how


# --------------------------------------------------------------------------- timing


@dataclass
class Timings:
    """What the wrappers measured during one campaign run."""

    phase_s: float = 0.0
    pairing_s: float = 0.0
    executor_s: float = 0.0
    cpu_s: float = 0.0
    """CPU time of this process (all its threads) during the executor's run."""
    pair_results_s: float = 0.0
    commit_s: float = 0.0
    commits: int = 0
    """Ledger transactions (batches of replays)."""
    replay_s: list[float] = field(default_factory=list)
    embedding: dict[str, float] = field(default_factory=dict)
    encode_calls: int = 0
    """Calls of the embedding model by the pairing phase's store (each with a batch of texts)."""
    torch_threads: int | None = None


@contextlib.contextmanager
def _patched(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def instrumented() -> Iterator[Timings]:
    """Time the runner's replay phase and its parts (this process only; see the docstring)."""
    t = Timings()
    lock = threading.Lock()
    stores: list[Any] = []

    def timed(attr: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    setattr(t, attr, getattr(t, attr) + time.perf_counter() - start)
            return wrapper
        return make

    def executor_run(original: Any) -> Any:
        def wrapper(self: Any, context: Any, jobs: Any, on_done: Any, should_stop: Any) -> Any:
            start, cpu = time.perf_counter(), _cpu_s()
            try:
                return original(self, context, jobs, on_done, should_stop)
            finally:
                t.executor_s += time.perf_counter() - start
                t.cpu_s += _cpu_s() - cpu
        return wrapper

    def commit(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                t.commit_s += time.perf_counter() - start
                t.commits += 1
        return wrapper

    def worker_run(original: Any) -> Any:
        def wrapper(self: Any, job: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(self, job)
            finally:
                elapsed = time.perf_counter() - start
                with lock:
                    t.replay_s.append(elapsed)
        return wrapper

    def store_class(original: Any) -> Any:
        def make(*args: Any, **kwargs: Any) -> Any:
            store = original(*args, **kwargs)
            stores.append(store)
            encode = store.embedder.encode

            def counted(texts: list[str]) -> Any:  # on this instance only
                t.encode_calls += 1
                return encode(texts)
            store.embedder.encode = counted
            return store
        return make

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(CampaignRun, "_replay_jobs", timed("phase_s")))
        stack.enter_context(_patched(campaign_results, "pair_rows", timed("pairing_s")))
        stack.enter_context(_patched(campaign_results, "pair_results", timed("pair_results_s")))
        stack.enter_context(_patched(campaign_run, "EmbeddingStore", store_class))
        stack.enter_context(_patched(Ledger, "commit", commit))
        stack.enter_context(_patched(LocalExecutor, "run", executor_run))
        stack.enter_context(_patched(RayExecutor, "run", executor_run))
        stack.enter_context(_patched(Worker, "run", worker_run))
        yield t
    for store in stores:
        for key, value in store.stats.items():
            t.embedding[key] = t.embedding.get(key, 0.0) + float(value)
    torch = sys.modules.get("torch")
    t.torch_threads = torch.get_num_threads() if torch is not None else None


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Run:
    executor: str
    latency_ms: float
    concurrency: int
    jobs: int
    done: int
    failed: int
    llm_calls: int
    total_s: float
    t: Timings
    errors: Counter[str]

    @property
    def ideal_s(self) -> float:
        return self.llm_calls * self.latency_ms / 1000 / self.concurrency

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.t.phase_s if self.t.phase_s else 0.0

    @property
    def efficiency_with_pairing(self) -> float:
        both = self.t.phase_s + self.t.pairing_s
        return self.ideal_s / both if both else 0.0


def run_one(folder: Path, name: str, executor: str, block: str, concurrency: int, latency_ms: float, *,
            baseline: Path, repeats: int, sample: int | None) -> Run:
    spec = write_spec(folder, name, baseline=baseline, latency_ms=latency_ms, executor=block, repeats=repeats,
                      sample=sample)
    print(f"  {name}: {executor}, {latency_ms:g} ms ...", file=sys.stderr, flush=True)
    with instrumented() as t:
        result = run_campaign(spec, executor=executor, progress_stream=None)
    ledger = Ledger(result.output / "ledger.sqlite")
    try:
        errors = Counter(str(data["error"]).splitlines()[0][:120] for _, data in ledger.replays() if "error" in data)
    finally:
        ledger.close()
    return Run(executor=result.executor, latency_ms=latency_ms, concurrency=concurrency, jobs=result.jobs,
               done=result.done, failed=result.status.get("failed", 0), llm_calls=result.llm_calls,
               total_s=result.seconds, t=t, errors=errors)


# --------------------------------------------------------------------------- report


def print_table(runs: list[Run]) -> None:
    print(f"{'executor':<9} {'jobs':>5} {'LLM calls':>9} {'latency':>8} {'concurrency':>11} {'ideal s':>8} "
          f"{'actual s':>8} {'efficiency':>10}  {'pairing s':>9} {'with pairing':>12}  {'(runner total s)':>16}")
    for r in runs:
        print(f"{r.executor:<9} {r.jobs:>5} {r.llm_calls:>9} {r.latency_ms:>6g}ms {r.concurrency:>11} "
              f"{r.ideal_s:>8.1f} {r.t.phase_s:>8.1f} {f'{r.efficiency:.3f}' if r.latency_ms else '-':>10}  "
              f"{r.t.pairing_s:>9.1f} {f'{r.efficiency_with_pairing:.3f}' if r.latency_ms else '-':>12}  "
              f"{r.total_s:>16.1f}")


def print_breakdown(r: Run, zero: Run | None) -> None:
    t, n = r.t, max(r.done, 1)
    emb = t.embedding
    print(f"{r.executor} at {r.latency_ms:g} ms: replay phase {t.phase_s:.1f} s "
          f"(executor.run {t.executor_s:.1f} s; ledger check and set-up {t.phase_s - t.executor_s:.1f} s); "
          f"{r.done} pairs, {r.failed} failed, {r.llm_calls / n:.2f} LLM calls per pair")
    for error, count in r.errors.most_common(3):
        print(f"  failed x{count}: {error}")
    print(f"  driver process CPU {t.cpu_s:.1f} s during executor.run = "
          f"{t.cpu_s / max(t.executor_s, 1e-9):.2f} cores busy on average")
    print(f"  ledger: {t.commits} transactions ({r.done / max(t.commits, 1):.1f} replays each), "
          f"{t.commit_s:.1f} s in a thread of its own ({1000 * t.commit_s / n:.1f} ms/replay)")
    embedded, calls = emb.get("embedded", 0), max(t.encode_calls, 1)
    print(f"  pairing phase {t.pairing_s:.1f} s ({1000 * t.pairing_s / n:.1f} ms/pair): pair_results "
          f"{t.pair_results_s:.1f} s, of which embedding model load {emb.get('load_seconds', 0):.1f} s, encoding "
          f"{emb.get('encode_seconds', 0):.1f} s: {embedded:.0f} texts embedded ({emb.get('cache_hits', 0):.0f} from "
          f"cache) in {t.encode_calls} model calls, {embedded / calls:.1f} texts and "
          f"{1000 * emb.get('encode_seconds', 0) / calls:.0f} ms per call (torch threads: {t.torch_threads})")
    if t.replay_s:
        floor = r.llm_calls * r.latency_ms / 1000
        busy = sum(t.replay_s)
        print(f"  replays (worker threads): {1000 * busy / len(t.replay_s):.0f} ms each on average against "
              f"{1000 * floor / len(t.replay_s):.0f} ms of LLM latency; "
              f"{busy / max(t.executor_s, 1e-9):.1f} replays in flight on average of {r.concurrency}")
    if zero is not None:
        z, zn = zero.t, max(zero.done, 1)
        print(f"  the same jobs at 0 ms (no LLM wait: the engine's own cost): replay phase {z.phase_s:.1f} s = "
              f"{1000 * z.phase_s / zn:.1f} ms/replay, {zn / max(z.phase_s, 1e-9):.1f} replays/s; ledger "
              f"{1000 * z.commit_s / zn:.1f} ms/replay in {z.commits} transactions; driver process "
              f"{z.cpu_s / max(z.executor_s, 1e-9):.2f} cores busy"
              + (f"; replays {1000 * sum(z.replay_s) / len(z.replay_s):.0f} ms each, "
                 f"{sum(z.replay_s) / max(z.executor_s, 1e-9):.1f} in flight" if z.replay_s else ""))
    bounds = {"the ideal (LLM calls x latency / concurrency)": r.ideal_s}
    if zero is not None:
        bounds["the same jobs at 0 ms (the engine's own cost)"] = zero.t.phase_s
    print("  lower bounds on the replay phase: " + "; ".join(f"{k} {v:.1f} s" for k, v in bounds.items()))
    if r.efficiency < 0.9:
        worst = max(bounds, key=bounds.__getitem__)
        print(f"  efficiency {r.efficiency:.3f} < 0.9: the largest bound is {worst}, "
              f"{bounds[worst]:.1f} s = {100 * bounds[worst] / max(t.phase_s, 1e-9):.0f}% of the phase; "
              f"{t.phase_s - bounds[worst]:.1f} s of the phase is above it")


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replays", type=int, default=3000, help="jobs in the campaign, about (3000)")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="fixed latency per simulated call (500)")
    parser.add_argument("--concurrency", type=int, default=64, help="replays at once (64)")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray (local,ray)")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray instance (2)")
    parser.add_argument("--no-zero", action="store_true", help="skip the 0 ms runs of the same jobs")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 replays at 100 ms")
    args = parser.parse_args()
    if args.quick:
        args.replays, args.latency_ms = 300, 100.0
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    unknown = set(executors) - {"local", "ray"}
    if unknown:
        parser.error(f"--executors takes local and ray; got {', '.join(sorted(unknown))}")

    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="quiver-bench-campaign-") as tmp:
        folder = Path(tmp)
        baseline = record_baseline(folder)
        eligible = eligible_counts(baseline)
        repeats, sample, jobs = sizing(args.replays, eligible)
        print(f"campaign: {jobs} jobs = repeats {repeats} x "
              f"{'all traces' if sample is None else f'{sample} sampled traces'} where the target ran "
              f"({', '.join(f'{k} {v}' for k, v in eligible.items())} of the baseline) x steps "
              f"({', '.join(f'{k} {v}' for k, v in STEPS.items())})")
        runs: list[tuple[Run, Run | None]] = []
        for executor in executors:
            if executor == "ray":
                import ray

                if not ray.is_initialized():
                    # Worker logs stay in Ray's log folder; failed pairs are summed up from the ledger.
                    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
                block, concurrency, how = ray_slots(args.concurrency, args.ray_cpus)
                print(f"ray: effective concurrency {concurrency} = {how}")
            else:
                block, concurrency = f"{{kind: local, concurrency: {args.concurrency}}}", args.concurrency
            latencies = [args.latency_ms] if args.no_zero else [args.latency_ms, 0.0]
            done = [
                run_one(folder, f"{executor}-{ms:g}ms", executor, block, concurrency, ms, baseline=baseline,
                        repeats=repeats, sample=sample)
                for ms in latencies
            ]
            runs.append((done[0], done[1] if len(done) > 1 else None))
        print()
        print(f"load average (1, 5, 15 min) at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
              f"at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
              "(other work on the machine skews every number here)")
        print_table([r for pair in runs for r in pair if r is not None])
        for at_latency, at_zero in runs:
            print()
            print_breakdown(at_latency, at_zero)
    return 0


if __name__ == "__main__":
    sys.exit(main())
