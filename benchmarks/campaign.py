"""Benchmark: a campaign's replays and pairing keep their executor at the latency bound.

Records the support bot (``experiments/support_bot/record.yaml``, 225 traces) once at
zero latency, then runs a campaign of about ``--replays`` jobs on it with the engine's
own runner (``run_campaign``) against the bundled simulator at ``--latency-ms`` per LLM
call, once per executor (``local`` at ``--concurrency``, in worker processes or threads;
``ray`` on a local instance with ``--ray-cpus`` CPUs, or on clusters of ``--ray-nodes``
worker nodes started with ``ray start`` on this machine, each node ``--ray-cpus`` CPUs,
beside a head without CPUs), and prints, measured in this one run:

* jobs, LLM calls made, latency, the effective concurrency (``ray``: the actors the
  cluster holds, CPUs / ``task_cpus``, x ``threads``, the executor's defaults);
* the ideal time, ``LLM calls x latency / concurrency``; the replay phase (up to the
  last replay committed: pairs are formed meanwhile, block by block) and its
  efficiency ``ideal / actual``; the pairing left after the last replay, and the
  end-to-end efficiency, ``ideal / (replay phase + pairing left)`` (targets: at least
  0.93 for ``local`` at 64 and for ``ray``, :data:`TARGET`);
* where the rest goes: the ledger commits (a thread of its own, in batches), the
  pairing (with the embedding model's load and encoding), the replays' own time beyond
  their LLM calls and the replays in flight (``local`` only: Ray workers are other
  processes), the CPU this process used, Ray's batch sizes and actor warm-up, and the
  same jobs run again at 0 ms latency: the engine's own cost per replay with no LLM
  wait;
* a third run on ``local``, SIGKILLed once half its jobs are in the ledger and resumed
  with ``quiver run --resume`` (``--no-resume`` skips it); then the md5 of every run's
  ``campaign.json`` at the benchmark's latency: they must be byte-identical.

The perturbations: the rewriter's three prompt variants, an override each on
signal_analysis and context_sufficiency, and a list_edit ladder (1, 2, 3, 5 fragments
removed) on discovery; a seeded sample of traces and ``replay.repeats`` scale them to
about ``--replays`` jobs. No control replays (``replay.controls: 0``): they are replays
like the others, and would only shift the job count away from ``--replays``.

How the phases are timed: the runner's total time also holds the baseline's loading and
observational analysis (with the embedding model's load) and the writing of the
results, so this benchmark times the phases from the outside, without editing the
runner. In this process only, it wraps ``CampaignRun._replay_jobs`` (the ledger check,
the executor's run, every replay committed, and the pairs: its wall time less the
pairing left is the replay phase) and ``Pairer.finish`` (the pairing left after the
last replay), and, for the breakdown, the executors' ``run``, ``pair_results`` as the
pairing imported it, ``Ledger.commit``, the runner's ``EmbeddingStore`` (to read its
counters) and, for ``local``, ``Worker.run`` (one replay). Each wrapper only reads
``time.perf_counter()`` around the original call; all are removed after each run.

Each run gets a fresh embedding cache, as a campaign's new replay texts would. Ray
workers' logs stay in Ray's log folder (``log_to_driver=False``).

Run: ``python benchmarks/campaign.py [--replays 3000] [--latency-ms 500]
[--concurrency 64] [--executors local,ray] [--processes 2,0] [--ray-nodes 1,2,4] [--quick]``.
``--processes 2,0`` runs the local executor with 2 worker processes and with threads of
the driver's process, side by side. ``--quick`` is 300 replays at 100 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import resource
import signal
import sqlite3
import subprocess
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
    Ledger,
    replays as campaign_replays,
    run as campaign_run,
    run_campaign,
)
from quiver.replay import LocalExecutor, RayExecutor
from quiver.replay._executors import Worker

from _support_bot import DEMO, SPEC_HEAD, latency, quiver, record_baseline  # benchmarks/, first on the path

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


def ray_slots(cpus: float) -> tuple[str, int, str]:
    """The ray executor block, the effective concurrency and how it comes about, on a
    cluster of ``cpus`` CPUs with the executor's defaults (the spec sets only the kind).

    An actor reserves ``task_cpus`` and replays ``threads`` batches at once: the cluster
    holds ``cpus / task_cpus`` actors.
    """
    d = RayExecutor()
    running = int(cpus / d.task_cpus + 1e-9)
    how = f"{cpus:g} CPUs / task_cpus {d.task_cpus:g} = {running} actors x {d.threads} threads"
    return "{kind: ray}", running * d.threads, how


# --------------------------------------------------------------------------- timing


TARGET = 0.93
"""The end-to-end efficiency each executor is meant to reach (a margin below 1: machines differ)."""


@dataclass
class Timings:
    """What the wrappers measured during one campaign run."""

    phase_s: float = 0.0
    """The replays and their pairing: from the ledger check to the last pair row."""
    pairing_s: float = 0.0
    """The pair rows read back once the last replay was committed (``collect_rows``:
    each replay was paired where it ran)."""
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
    batches: list[int] = field(default_factory=list)
    """Ray: the size of every batch submitted, in order."""
    warmup_s: float = 0.0
    """Ray: from the executor's start until every actor had returned a batch."""


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
                t.batches += list(getattr(self, "batches", []))
                t.warmup_s = float(getattr(self, "warmup_s", 0.0))
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
        stack.enter_context(_patched(campaign_run, "replay_jobs", timed("phase_s")))
        stack.enter_context(_patched(campaign_replays, "collect_rows", timed("pairing_s")))
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
    label: str
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
    output: Path

    @property
    def ideal_s(self) -> float:
        return self.llm_calls * self.latency_ms / 1000 / self.concurrency

    @property
    def replay_s(self) -> float:
        """The replay phase: up to the last replay committed (pairing overlapped with it)."""
        return self.t.phase_s - self.t.pairing_s

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.replay_s if self.replay_s > 0 else 0.0

    @property
    def efficiency_with_pairing(self) -> float:
        return self.ideal_s / self.t.phase_s if self.t.phase_s else 0.0


def run_one(folder: Path, name: str, executor: str, block: str, concurrency: int, latency_ms: float, *,
            baseline: Path, repeats: int, sample: int | None, label: str | None = None) -> Run:
    spec = write_spec(folder, name, baseline=baseline, latency_ms=latency_ms, executor=block, repeats=repeats,
                      sample=sample)
    print(f"  {name}: {label or executor}, {latency_ms:g} ms ...", file=sys.stderr, flush=True)
    with instrumented() as t:
        result = run_campaign(spec, executor=executor, progress_stream=None)
    ledger = Ledger(result.output / "ledger.sqlite")
    try:
        errors = Counter(str(data["error"]).splitlines()[0][:120] for _, data in ledger.replays() if "error" in data)
    finally:
        ledger.close()
    return Run(label=label or executor, executor=result.executor, latency_ms=latency_ms, concurrency=concurrency,
               jobs=result.jobs, done=result.done, failed=result.status.get("failed", 0), llm_calls=result.llm_calls,
               total_s=result.seconds, t=t, errors=errors, output=result.output)


def killed_and_resumed(folder: Path, latency_ms: float, concurrency: int, *, baseline: Path, repeats: int,
                       sample: int | None, jobs: int) -> Path:
    """``quiver run`` on the local executor, SIGKILLed once half its jobs are in the ledger,
    then ``quiver run --resume``; the run folder."""
    spec = write_spec(folder, "killed", baseline=baseline, latency_ms=latency_ms,
                      executor=f"{{kind: local, concurrency: {concurrency}}}", repeats=repeats, sample=sample)
    out = folder / "killed"
    print(f"  killed: local, {latency_ms:g} ms, SIGKILL at half the jobs, then --resume ...", file=sys.stderr,
          flush=True)
    proc = subprocess.Popen([*quiver(), "run", str(spec), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    ledger_path, committed = out / "ledger.sqlite", 0
    while proc.poll() is None:
        time.sleep(0.5)
        if ledger_path.is_file():
            with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(ledger_path)) as db:
                committed = db.execute("SELECT COUNT(*) FROM replays").fetchone()[0]
            if committed >= jobs // 2:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait()
    if committed < jobs // 2:
        sys.exit(f"the run to kill ended before half its jobs were committed: {proc.stderr.read()[-2000:]}")
    resumed = subprocess.run([*quiver(), "run", str(spec), "--resume", "--quiet"], capture_output=True, text=True,
                             check=False)
    if resumed.returncode not in (0, 1):
        sys.exit(f"quiver run --resume failed: {resumed.stderr[-2000:]}")
    print(f"    killed with {committed} of {jobs} jobs in the ledger; resumed", file=sys.stderr, flush=True)
    return out


def digest(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- report


def print_table(runs: list[Run]) -> None:
    print(f"{'executor':<9} {'jobs':>5} {'LLM calls':>9} {'latency':>8} {'concurrency':>11} {'ideal s':>8} "
          f"{'replays s':>9} {'efficiency':>10}  {'+ rows read s':>13} {'end to end':>10}  {'replays/s':>9} "
          f"{'driver CPU ms/replay':>20} {'driver ceiling /s':>17}  {'(runner total s)':>16}")
    for r in runs:
        rate = r.done / max(r.replay_s, 1e-9)
        cpu_ms = 1000 * r.t.cpu_s / max(r.done, 1)
        print(f"{r.label:<9} {r.jobs:>5} {r.llm_calls:>9} {r.latency_ms:>6g}ms {r.concurrency:>11} "
              f"{r.ideal_s:>8.1f} {r.replay_s:>9.1f} {f'{r.efficiency:.3f}' if r.latency_ms else '-':>10}  "
              f"{r.t.pairing_s:>13.1f} {f'{r.efficiency_with_pairing:.3f}' if r.latency_ms else '-':>10}  "
              f"{rate:>9.1f} {cpu_ms:>20.2f} {1000 / max(cpu_ms, 1e-9):>17.0f}  {r.total_s:>16.1f}")


def print_breakdown(r: Run, zero: Run | None) -> None:
    t, n = r.t, max(r.done, 1)
    print(f"{r.label} at {r.latency_ms:g} ms: replay phase {r.replay_s:.1f} s "
          f"(executor.run {t.executor_s:.1f} s; ledger check, set-up and last commits "
          f"{r.replay_s - t.executor_s:.1f} s), pairing left after it {t.pairing_s:.1f} s; "
          f"{r.done} pairs, {r.failed} failed, {r.llm_calls / n:.2f} LLM calls per pair")
    for error, count in r.errors.most_common(3):
        print(f"  failed x{count}: {error}")
    print(f"  driver process CPU {t.cpu_s:.1f} s during executor.run = "
          f"{t.cpu_s / max(t.executor_s, 1e-9):.2f} cores busy on average")
    print(f"  ledger: {t.commits} transactions ({r.done / max(t.commits, 1):.1f} replays each), "
          f"{t.commit_s:.1f} s in a thread of its own ({1000 * t.commit_s / n:.1f} ms/replay)")
    print(f"  driver CPU per replay during executor.run: {1000 * t.cpu_s / n:.2f} ms (replays finished, "
          f"redacted, stored and paired where they ran; the driver checks and commits)")
    print(f"  pair rows read back after the last replay: {t.pairing_s:.1f} s")
    if t.replay_s:
        floor = r.llm_calls * r.latency_ms / 1000
        busy = sum(t.replay_s)
        print(f"  replays (worker threads): {1000 * busy / len(t.replay_s):.0f} ms each on average against "
              f"{1000 * floor / len(t.replay_s):.0f} ms of LLM latency; "
              f"{busy / max(t.executor_s, 1e-9):.1f} replays in flight on average of {r.concurrency}")
    if zero is not None:
        z, zn = zero.t, max(zero.done, 1)
        print(f"  the same jobs at 0 ms (no LLM wait: the engine's own cost): replay phase {zero.replay_s:.1f} s = "
              f"{1000 * zero.replay_s / zn:.1f} ms/replay, {zn / max(zero.replay_s, 1e-9):.1f} replays/s; ledger "
              f"{1000 * z.commit_s / zn:.1f} ms/replay in {z.commits} transactions; driver process "
              f"{z.cpu_s / max(z.executor_s, 1e-9):.2f} cores busy"
              + (f"; replays {1000 * sum(z.replay_s) / len(z.replay_s):.0f} ms each, "
                 f"{sum(z.replay_s) / max(z.executor_s, 1e-9):.1f} in flight" if z.replay_s else ""))
    bounds = {"the ideal (LLM calls x latency / concurrency)": r.ideal_s}
    if zero is not None:
        bounds["the same jobs at 0 ms (the engine's own cost)"] = zero.replay_s
    print("  lower bounds on the replay phase: " + "; ".join(f"{k} {v:.1f} s" for k, v in bounds.items()))
    if r.efficiency < TARGET:
        worst = max(bounds, key=bounds.__getitem__)
        print(f"  efficiency {r.efficiency:.3f} < {TARGET}: the largest bound is {worst}, "
              f"{bounds[worst]:.1f} s = {100 * bounds[worst] / max(r.replay_s, 1e-9):.0f}% of the phase; "
              f"{r.replay_s - bounds[worst]:.1f} s of the phase is above it")
    if t.batches:
        sizes = sorted(t.batches)
        print(f"  ray batches: {len(t.batches)} calls; first {t.batches[:3]}, median {sizes[len(sizes) // 2]}, "
              f"largest {sizes[-1]}, last {t.batches[-3:]}; every actor had returned a batch "
              f"{t.warmup_s:.1f} s after the start")


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replays", type=int, default=3000, help="jobs in the campaign, about (3000)")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="fixed latency per simulated call (500)")
    parser.add_argument("--concurrency", type=int, default=64, help="local replays at once (64)")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray (local,ray)")
    parser.add_argument("--processes", default="",
                        help="local: comma-separated worker-process counts to run side by side (0: threads of "
                             "the driver's process); default: the executor's own (one per core)")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of each Ray node (2)")
    parser.add_argument("--ray-nodes", default="1",
                        help="comma-separated worker node counts of Ray clusters started with ray start on this "
                             "machine, for example 1,2,3; 1 alone: a plain local instance (1)")
    parser.add_argument("--no-zero", action="store_true", help="skip the 0 ms runs of the same jobs")
    parser.add_argument("--no-resume", action="store_true", help="skip the killed-then-resumed run")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 replays at 100 ms")
    args = parser.parse_args()
    if args.quick:
        args.replays, args.latency_ms = 300, 100.0
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    unknown = set(executors) - {"local", "ray"}
    if unknown:
        parser.error(f"--executors takes local and ray; got {', '.join(sorted(unknown))}")
    node_counts = [int(n) for n in args.ray_nodes.split(",")]
    if "ray" in executors and node_counts != [1] and (Path.home() / ".ray" / "auth_token").is_file():
        os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the nodes start; read when ray is imported

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
        sized = {"baseline": baseline, "repeats": repeats, "sample": sample}
        for executor in executors:
            if executor == "local":
                for procs in [p.strip() for p in args.processes.split(",") if p.strip()] or [None]:
                    extra, label = ("", "local") if procs is None else (f", processes: {int(procs)}", f"local p{procs}")
                    block = f"{{kind: local, concurrency: {args.concurrency}{extra}}}"  # default: one process a core
                    latencies = [args.latency_ms] if args.no_zero else [args.latency_ms, 0.0]
                    name = "local" if procs is None else f"local-p{procs}"
                    done = [run_one(folder, f"{name}-{ms:g}ms", "local", block, args.concurrency, ms, label=label,
                                    **sized) for ms in latencies]
                    runs.append((done[0], done[1] if len(done) > 1 else None))
                continue
            for nodes in node_counts:
                with ray_cluster(nodes, args.ray_cpus, simulated=node_counts != [1]) as block:
                    _, concurrency, how = ray_slots(nodes * args.ray_cpus)
                    label = "ray" if node_counts == [1] else f"ray x{nodes}"
                    print(f"{label}: effective concurrency {concurrency} = {how}")
                    latencies = [args.latency_ms] if args.no_zero else [args.latency_ms, 0.0]
                    done = [run_one(folder, f"ray{nodes}-{ms:g}ms", "ray", block, concurrency, ms, label=label,
                                    **sized) for ms in latencies]
                    runs.append((done[0], done[1] if len(done) > 1 else None))
        killed = None if args.no_resume else killed_and_resumed(
            folder, args.latency_ms, args.concurrency, jobs=jobs, **sized)
        print()
        print(f"load average (1, 5, 15 min) at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
              f"at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
              "(other work on the machine skews every number here)")
        print_table([r for pair in runs for r in pair if r is not None])
        for at_latency, at_zero in runs:
            print()
            print_breakdown(at_latency, at_zero)
        print()
        outputs = [(r.label + f" {r.latency_ms:g} ms", r.output) for pair in runs for r in pair if r is not None]
        if killed is not None:
            outputs.append(("local, killed then resumed", killed))
        same_latency = [(label, out) for label, out in outputs if not label.endswith(" 0 ms")]
        digests = {label: digest(out / "campaign.json") for label, out in same_latency}
        for label, value in digests.items():
            print(f"campaign.json md5 {value}  {label}")
        print("campaign.json " + ("byte-identical across these runs" if len(set(digests.values())) == 1
                                  else "DIFFERS between runs"))
    return 0


@contextlib.contextmanager
def ray_cluster(nodes: int, cpus: int, *, simulated: bool) -> Iterator[str]:
    """A local Ray instance (its spec block ``{kind: ray}``), or a cluster started with
    ``ray start`` on this machine: a head without CPUs and ``nodes`` worker nodes of
    ``cpus`` CPUs each (tests/ray_cluster.py); the spec's executor block; shut down
    afterwards (by PID)."""
    import ray

    if not simulated:
        for attempt in range(3):  # a loaded machine can make the instance miss its start-up deadline
            if ray.is_initialized():
                break
            try:
                # Worker logs stay in Ray's log folder; failed pairs are summed up from the ledger.
                ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
            except Exception as exc:
                print(f"  ray.init failed ({exc}); attempt {attempt + 1} of 3", file=sys.stderr, flush=True)
                ray.shutdown()
                if attempt == 2:
                    raise
        try:
            yield "{kind: ray}"
        finally:
            ray.shutdown()
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from ray_cluster import Cluster

    cluster = Cluster(head_cpus=0)
    try:
        for i in range(nodes):
            cluster.add_node(f"w{i}", cpus=cpus)
        yield f"{{kind: ray, address: '{cluster.address}', runtime_env: {{}}}}"  # one disk: nothing to ship
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
