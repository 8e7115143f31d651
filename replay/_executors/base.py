"""Executors: where a campaign's replays run.

A campaign is a list of :class:`ReplayJob` (one perturbed replay each, sample keys fixed
up front by the job's perturbation id, repeat and the campaign seed) and one
:class:`ReplayContext` (how to reach the pipeline and the LLM endpoint). An executor runs
the jobs and hands every finished one back to the driver (``on_done``), in completion
order; the driver computes distances and commits pairs, so results do not depend on
where or in which order the jobs ran.

* :class:`LocalExecutor`: threads in this process, at most ``concurrency`` replays at
  once (LLM calls are I/O bound).
* :class:`RayExecutor`: a local Ray instance (``ray.init``) or a cluster (``address``).
  Jobs go out in batches of ``batch_size`` per task, spread over the nodes; at most
  ``max_in_flight`` tasks are pending at any time (back-pressure); a task whose worker
  dies is retried by Ray (``max_retries``) and then resubmitted once more by the driver
  before its jobs are reported failed.

Both stop submitting when ``should_stop()`` turns true (a budget reached) and finish
what is in flight.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._trace import Trace

__all__ = ["ReplayJob", "ReplayContext", "LocalExecutor", "RayExecutor", "run_jobs", "Executor", "quiet_collector"]

log = logging.getLogger("quiver.executor")

DoneFn = Callable[[str, dict[str, Any]], None]
StopFn = Callable[[], bool]


@dataclass(frozen=True)
class ReplayJob:
    """One replay of a campaign."""

    job_id: str
    seq: int
    """The job's place in the campaign (pairs are written in this order)."""
    trace: dict[str, Any]
    """The baseline trace, as JSON."""
    perturbation_id: str
    """Names the perturbation in sample keys (``id``, or ``id#step`` for a ladder step)."""
    node: str
    occurrence: int
    op: str
    """The operator's name; empty: the target runs live unchanged (a control replay)."""
    params: dict[str, Any]
    repeat: int
    templates: dict[str, str] = field(default_factory=dict)
    """Template id -> replacement in force for the whole replay (a template change deployed)."""
    sample_id: str = ""
    """What the replay's sample key derives from (empty: the baseline's
    :func:`~quiver.replay._replayer.replay_identity`)."""


@dataclass(frozen=True)
class ReplayContext:
    """What a worker needs to replay jobs: all of it plain data, so it pickles."""

    pipeline: str
    base_dir: str
    llm: dict[str, Any]
    """``base_url``, ``model``, ``api_key``/``api_key_env``, ``timeout_s``, ``retry``, ``params``."""
    mode: dict[str, Any]
    """The :class:`~quiver.replay.ReplayMode`, as JSON."""
    graph: dict[str, Any] | None
    seed: int
    run_id: str
    cache_dir: str | None = None
    """The LLM response cache folder (used when ``mode.downstream`` is ``cached``)."""
    environment: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()


class _Worker:
    """The pipeline, client and mode of one context, loaded once per process."""

    def __init__(self, context: ReplayContext) -> None:
        from quiver.replay._llm import ResponseCache
        from quiver.replay._llm import LLMClient, RetryPolicy
        from quiver.replay._pipeline import load_pipeline
        from quiver.replay._replayer import ReplayMode

        os.environ.update(context.environment)
        self.fn = load_pipeline(context.pipeline, Path(context.base_dir))
        llm = dict(context.llm)
        retry = RetryPolicy(**llm.pop("retry", {}) or {})
        self.cache = ResponseCache(context.cache_dir) if context.cache_dir else None
        self.client = LLMClient(**llm, retry=retry, cache=self.cache)
        self.mode = ReplayMode.model_validate(context.mode)
        self.graph = PipelineGraph.model_validate(context.graph) if context.graph is not None else None
        self.context = context
        self._baselines: dict[str, Trace] = {}

    def baseline(self, trace: dict[str, Any]) -> Trace:
        """The job's baseline trace, parsed once per trace id (a trace has many jobs)."""
        found = self._baselines.get(trace["trace_id"])
        if found is None:
            found = Trace.model_validate(trace)
            if len(self._baselines) >= _BASELINES_KEPT:
                self._baselines.clear()
            self._baselines[found.trace_id] = found
        return found

    def run(self, job: ReplayJob) -> dict[str, Any]:
        from quiver.perturbations import make_operator

        from quiver.replay._replayer import Target, replay_trace

        baseline = self.baseline(job.trace)
        try:
            result = replay_trace(
                baseline, self.fn, target=Target(job.node, job.occurrence),
                operator=make_operator(job.op, job.params) if job.op else None,
                perturbation_id=job.perturbation_id, repeat=job.repeat, seed=self.context.seed, mode=self.mode,
                client=self.client, graph=self.graph, base_dir=Path(self.context.base_dir),
                run_id=self.context.run_id, templates=job.templates or None, sample_id=job.sample_id or None,
            )
        except QuiverError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return result.to_json()


_BASELINES_KEPT = 4096
"""Parsed baseline traces a worker keeps (then it starts over)."""

_workers: dict[str, _Worker] = {}
_workers_lock = threading.Lock()


def _worker(context: ReplayContext) -> _Worker:
    key = context.key()
    with _workers_lock:
        worker = _workers.get(key)
        if worker is None:
            worker = _workers[key] = _Worker(context)
    return worker


_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation during a run (Python's
default is 700)."""

_quiet = 0
_quiet_lock = threading.Lock()
_saved_thresholds: tuple[int, ...] = ()


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """Keep the cyclic garbage collector from stalling the replay threads during a run.

    Every collection holds the interpreter lock: no replay thread reads its LLM
    response meanwhile. Two things made collections costly in a campaign:

    * The objects alive when the replays start (the baseline traces and the jobs, the
      loaded pipeline, in a campaign's driver the embedding model: about 690,000 objects
      for the support bot) live through the whole run, yet every full collection walks
      them all. ``gc.freeze()`` moves them to the collector's permanent generation for
      the run, so collections walk only what the replays create.
    * Python collects the youngest generation every 700 net allocations: with 64 replays
      in flight, every replay's working objects survived a few young collections and
      were walked again in the older generations. The young threshold is raised to
      ``_YOUNG_THRESHOLD`` for the run, so most of them die by reference count first.

    Measured in ``benchmarks/campaign.py`` (1,500 replays, 64 slots, 500 ms per call):
    without either, three full collections took 0.7-0.9 s each during the run, and the
    LLM calls' round trip averaged 563-575 ms; with both, the collections during the run
    take under 1 s in all and efficiency rose from 0.77-0.80 to 0.87-0.90.

    Both are undone when the last run in this process ends (runs may nest or overlap:
    counted). Objects are still freed by reference counting meanwhile; only garbage
    cycles among the frozen objects wait for the end of the run.
    """
    global _quiet, _saved_thresholds
    with _quiet_lock:
        if _quiet == 0:
            _saved_thresholds = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(_saved_thresholds[0], _YOUNG_THRESHOLD), *_saved_thresholds[1:])
        _quiet += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet -= 1
            if _quiet == 0:
                gc.set_threshold(*_saved_thresholds)
                gc.unfreeze()


def run_jobs(context: ReplayContext, jobs: Sequence[ReplayJob], threads: int = 1) -> list[tuple[str, dict[str, Any]]]:
    """Replay ``jobs`` in this process: ``(job_id, replay result JSON)`` for each, in order."""
    worker = _worker(context)
    with quiet_collector():
        if threads <= 1 or len(jobs) <= 1:
            return [(job.job_id, worker.run(job)) for job in jobs]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(zip([j.job_id for j in jobs], pool.map(worker.run, jobs)))


class Executor:
    """Runs jobs and reports each finished one to ``on_done``."""

    name = "executor"

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        raise NotImplementedError


class LocalExecutor(Executor):
    """Threads in this process, ``concurrency`` replays at once."""

    name = "local"

    def __init__(self, concurrency: int = 8) -> None:
        if concurrency < 1:
            raise QuiverError(f"executor concurrency must be at least 1; got {concurrency}")
        self.concurrency = concurrency

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        worker = _worker(context)
        # ``concurrency`` long-lived threads, each taking the next job as soon as its
        # replay ends, and no lock anywhere on that path: a thread that holds a lock
        # can lose the interpreter lock to one of the other replay threads and keep
        # every thread that wants its lock waiting meanwhile. With a thread pool
        # refilled from done callbacks under a lock, py-spy found half of the replay
        # threads' samples waiting on that lock. The deque's popleft and the queue's
        # put are atomic. Finished replays reach this loop in the order they finish;
        # on_done runs here, in this thread, one at a time.
        todo = deque(jobs)
        finished: queue.SimpleQueue[tuple[ReplayJob | None, dict[str, Any] | BaseException | None]] = (
            queue.SimpleQueue()
        )
        closed = threading.Event()

        def slot() -> None:
            try:
                while not closed.is_set() and not should_stop():
                    try:
                        job = todo.popleft()
                    except IndexError:
                        return
                    try:
                        data: dict[str, Any] | BaseException = worker.run(job)
                    except BaseException as exc:  # reported to the driver, which raises it
                        data = exc
                    finished.put((job, data))
            finally:
                finished.put((None, None))  # this slot is done

        threads = [
            threading.Thread(target=slot, name=f"quiver-replay-{i}", daemon=True)
            for i in range(min(self.concurrency, len(todo)))
        ]
        with quiet_collector():
            try:
                for thread in threads:
                    thread.start()
                running = len(threads)
                while running:
                    job, data = finished.get()
                    if job is None:
                        running -= 1
                    elif isinstance(data, BaseException):
                        raise data
                    else:
                        assert data is not None
                        on_done(job.job_id, data)
            finally:
                closed.set()  # the slots finish the replays they hold and take no more
                for thread in threads:
                    if thread.is_alive():
                        thread.join()


def _ray_batch(context: ReplayContext, jobs: list[ReplayJob], threads: int) -> dict[str, Any]:
    """A Ray task: replay a batch; report which node ran it."""
    import ray

    return {"node": ray.get_runtime_context().get_node_id(), "results": run_jobs(context, jobs, threads)}


class RayExecutor(Executor):
    """Ray tasks, ``batch_size`` jobs each, on a local instance or a cluster.

    Args:
        address: A cluster to connect to (``ray://...`` or ``host:port``); None starts
            or reuses a local instance.
        num_cpus: CPUs of a local instance (default: the machine's).
        batch_size: Jobs per task.
        max_in_flight: Tasks pending at once (default: 4 per CPU of the cluster).
        max_retries: Ray's retries of a task whose worker died.
        task_cpus: CPUs reserved per task (replays wait on LLM calls: a fraction).
        threads: Replays run at once inside one task.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        batch_size: int = 8,
        max_in_flight: int | None = None,
        max_retries: int = 3,
        task_cpus: float = 0.25,
        threads: int = 4,
    ) -> None:
        if batch_size < 1:
            raise QuiverError(f"executor batch_size must be at least 1; got {batch_size}")
        self.address = address
        self.num_cpus = num_cpus
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.task_cpus = task_cpus
        self.threads = threads
        self.nodes: set[str] = set()

    def _connect(self) -> Any:
        try:
            import ray
        except ImportError:
            raise QuiverError(
                "executor ray needs Ray: pip install 'quiver-engine[ray]' (or use executor: local)"
            ) from None
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
        return ray

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        ray = self._connect()
        task = ray.remote(_ray_batch).options(
            num_cpus=self.task_cpus, max_retries=self.max_retries, scheduling_strategy="SPREAD"
        )
        cpus = int(ray.cluster_resources().get("CPU", 1))
        limit = self.max_in_flight or max(2, 4 * cpus)
        batches = [list(jobs[i : i + self.batch_size]) for i in range(0, len(jobs), self.batch_size)]
        context_ref = ray.put(context)
        pending: dict[Any, tuple[list[ReplayJob], int]] = {}
        while batches or pending:
            while batches and len(pending) < limit and not should_stop():
                batch = batches.pop(0)
                pending[task.remote(context_ref, batch, self.threads)] = (batch, 0)
            if not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                batch, resubmitted = pending.pop(ref)
                try:
                    out = ray.get(ref)
                except Exception as exc:  # the worker died after Ray's own retries
                    if resubmitted < 1:
                        log.warning("a Ray task of %d job(s) failed (%s); submitting it again", len(batch), exc)
                        pending[task.remote(context_ref, batch, self.threads)] = (batch, resubmitted + 1)
                    else:
                        for job in batch:
                            on_done(job.job_id, {"error": f"worker failed: {type(exc).__name__}: {exc}"})
                    continue
                self.nodes.add(out["node"])
                for job_id, result in out["results"]:
                    on_done(job_id, result)
