"""Executors: where a campaign's replays run; the jobs, the worker and the registry.

A campaign is a list of :class:`ReplayJob` (one perturbed replay each, sample keys fixed
up front by the job's perturbation id, repeat and the campaign seed) and one
:class:`ReplayContext` (how to reach the pipeline and the LLM endpoint). An executor runs
the jobs and hands every finished one back to the driver (``on_done``), in completion
order; the driver computes distances and commits pairs, so results do not depend on
where or in which order the jobs ran.

* :class:`LocalExecutor`: threads in this process, at most ``concurrency`` replays at
  once (LLM calls are I/O bound).
* :class:`RayExecutor`: a local Ray instance (``ray.init``) or a cluster (``address``).
  Long-lived actors, spread over the nodes, each replay ``threads`` batches at once
  from a queue the driver keeps full; batches are sized from the measured replay time.
  An actor whose process dies is restarted by Ray (``max_retries``) and its batches in
  flight are resubmitted once more before their jobs are reported failed.

Both stop submitting when ``should_stop()`` turns true (a budget reached) and finish
what is in flight.

**Registry.** Executors register by class decorator under the name a spec's
``executor.kind`` and ``quiver run --executor`` use; an executor builds itself from the
spec's ``executor:`` block (:meth:`Executor.from_settings`), says how many machines
ran its jobs (:meth:`Executor.nodes_used`), and may start its workers early and stop
them (:meth:`Executor.start`, :meth:`Executor.close`: a campaign starts it before
loading its baseline). Third-party executors come in through the
entry-point group ``quiver.executors`` (an :class:`Executor` subclass, or a module that
registers one), loaded the first time a name is not found::

    @executor("threads-1")
    class OneThread(Executor):
        @classmethod
        def from_settings(cls, settings):
            return cls()

        def run(self, context, jobs, on_done, should_stop):
            worker = worker_for(context)
            for job in jobs:
                if should_stop():
                    break
                on_done(job.job_id, worker.run(job))
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._registry import Registry, adopt_class
from quiver._trace import Redactor, Trace
from quiver.replay._llm import EndpointDown

__all__ = [
    "ReplayJob",
    "ReplayContext",
    "Worker",
    "worker_for",
    "run_jobs",
    "finisher_pool",
    "quiet_collector",
    "Executor",
    "executor",
    "registered_executors",
    "make_executor",
    "EXECUTORS",
    "DoneFn",
    "StopFn",
    "ENTRY_POINT_GROUP",
    "ENDPOINT_DOWN",
    "EndpointWatch",
]

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
    redaction: dict[str, Any] | None = None
    """The run's redactor (:meth:`~quiver.Redactor.to_json`): what the worker writes to
    disk itself (the response cache) is redacted as the run's own files are."""
    outcome: dict[str, Any] | None = None
    """The spec's outcome checks and their settings
    (:func:`~quiver.experiments._config.outcome_settings`): every replay carries its
    outcome."""
    finish: Callable[[ReplayJob, dict[str, Any]], dict[str, Any]] | None = None
    """Called by the worker on each replay's result, where the replay ran: what it
    returns is what the executor hands back (a campaign redacts, stores and pairs its
    replays there). It must pickle (a worker may be another process or machine)."""

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()


class Worker:
    """The pipeline, client and mode of one context, loaded once per process."""

    def __init__(self, context: ReplayContext) -> None:
        from quiver.replay._llm import LLMClient, ResponseCache, RetryPolicy
        from quiver.replay._pipeline import load_pipeline
        from quiver.replay._replayer import Replayer, ReplayMode

        os.environ.update(context.environment)
        # A pipeline's own clients talk to the context's endpoint with its key, as they do in the driver
        # (a Ray worker started before the run holds an earlier run's variables, or none).
        if context.llm.get("base_url"):
            os.environ["OPENAI_BASE_URL"] = str(context.llm["base_url"])
        if context.llm.get("api_key"):
            os.environ["OPENAI_API_KEY"] = str(context.llm["api_key"])
        self.fn = load_pipeline(context.pipeline, Path(context.base_dir))
        llm = dict(context.llm)
        retry = RetryPolicy(**llm.pop("retry", {}) or {})
        redactor = Redactor.from_json(context.redaction) if context.redaction is not None else None
        cache_dir = node_cache_dir(context.cache_dir)
        self.cache = ResponseCache(cache_dir, redactor=redactor) if cache_dir else None
        self.client = LLMClient(**llm, retry=retry, cache=self.cache)
        outcome = _outcome_runner(context, Path(context.base_dir), self.client)
        self.replayer = Replayer(
            self.fn, outcome=outcome,
            mode=ReplayMode.model_validate(context.mode),
            client=self.client,
            graph=PipelineGraph.model_validate(context.graph) if context.graph is not None else None,
            base_dir=Path(context.base_dir),
            run_id=context.run_id,
            seed=context.seed,
            redactor=redactor,
        )
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
        """Replay ``job`` and finish it: :meth:`replay`, then :meth:`finish` when it asks."""
        data, unfinished = self.replay(job)
        return self.finish(job, data) if unfinished else data

    def replay(self, job: ReplayJob) -> tuple[dict[str, Any], bool]:
        """Replay ``job``: its result and whether :meth:`finish` is still to run on it.

        Apart from :meth:`finish` so that an executor can free the replay's place (its
        LLM calls are over) while the result is finished by other threads: the finishing
        is Python and model work that would otherwise hold one of the run's replays at
        once without an LLM call in flight."""
        from quiver.perturbations import make_operator
        from quiver.replay._replayer import Target

        baseline = self.baseline(job.trace)
        try:
            result = self.replayer.replay(
                baseline,
                target=Target(job.node, job.occurrence),
                operator=make_operator(job.op, job.params) if job.op else None,
                perturbation_id=job.perturbation_id,
                repeat=job.repeat,
                templates=job.templates or None,
                sample_id=job.sample_id or None,
            )
        except EndpointDown as exc:  # not the replay's own result: see EndpointWatch
            return {"error": f"{type(exc).__name__}: {exc}", ENDPOINT_DOWN: exc.to_json()}, False
        except QuiverError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}, self.context.finish is not None
        return result.to_json(), self.context.finish is not None

    def finish(self, job: ReplayJob, data: dict[str, Any]) -> dict[str, Any]:
        """The context's finishing of a replayed job's result (redaction, storage, pairing)."""
        finish = self.context.finish
        return finish(job, data) if finish is not None else data


NODE_CACHE = "node:"
"""A context's ``cache_dir`` starting with this names a folder on each worker's own disk
(under ``~/.cache/quiver/responses``): the driver's output folder is not a cluster
worker's to write."""


def node_cache_dir(cache_dir: str | None) -> str | None:
    """The folder a worker uses for a context's ``cache_dir`` (see :data:`NODE_CACHE`)."""
    if cache_dir is None or not cache_dir.startswith(NODE_CACHE):
        return cache_dir
    root = os.environ.get("QUIVER_CACHE_DIR") or str(Path.home() / ".cache" / "quiver")
    return str(Path(root) / "responses" / cache_dir[len(NODE_CACHE):])


def _outcome_runner(context: ReplayContext, base_dir: Path, client: Any) -> Any:
    """The context's outcome checks, run with the worker's client (None without checks)."""
    if context.outcome is None:
        return None
    from quiver._outcome import CheckSpec
    from quiver.replay._outcome import OutcomeRunner

    settings = context.outcome
    return OutcomeRunner(CheckSpec.model_validate(settings["check"]), base_dir=base_dir, client=client,
                         default_model=settings.get("default_model"), embedder=settings.get("embedder"),
                         cache_dir=settings.get("cache_dir"))


ENDPOINT_DOWN = "endpoint_down"
"""The key of a job's result when an unreachable LLM endpoint cut the replay short (its
value: :meth:`~quiver.replay._llm.health.EndpointDown.to_json`)."""


class EndpointWatch:
    """Between an executor and the driver it reports to: the results of replays an
    unreachable LLM endpoint cut short are held back (never handed on, so never committed
    nor counted as failed: a resume runs them), and the executor is told to stop.

    Args:
        on_done: The driver's callback, for every other result.
        should_stop: The driver's own reason to stop.
    """

    def __init__(self, on_done: DoneFn, should_stop: StopFn) -> None:
        self._on_done = on_done
        self._should_stop = should_stop
        self.down: EndpointDown | None = None
        """The first endpoint found down, if any."""
        self.held = 0
        """Results held back."""

    def done(self, job_id: str, data: dict[str, Any]) -> None:
        """An executor's ``on_done``."""
        found = data.get(ENDPOINT_DOWN)
        if isinstance(found, Mapping):
            self.held += 1
            if self.down is None:
                self.down = EndpointDown.from_json(found)
            return
        self._on_done(job_id, data)

    def should_stop(self) -> bool:
        """An executor's ``should_stop``: an endpoint is down, or the driver says so."""
        return self.down is not None or self._should_stop()

    def raise_if_down(self, note: str) -> None:
        """Raise the endpoint's error, its message ending with ``note``, when one was found down."""
        if self.down is not None:
            raise self.down.with_note(note)


_BASELINES_KEPT = 4096
"""Parsed baseline traces a worker keeps (then it starts over)."""

_workers: dict[str, Worker] = {}
_workers_lock = threading.Lock()


def worker_for(context: ReplayContext) -> Worker:
    key = context.key()
    with _workers_lock:
        worker = _workers.get(key)
        if worker is None:
            worker = _workers[key] = Worker(context)
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


FINISHERS = 2
"""Threads of a worker process (a local worker process, a Ray actor) that finish replayed
results (:meth:`Worker.finish`: redaction, storage, pairing with its text embeddings). A
replay's place among the run's replays at once is taken only while its pipeline runs, so
the LLM waits of the next replays overlap this Python and model work. The embedding model
encodes one text at a time per process; two finishers keep the rest of the finishing
going meanwhile."""

_finishers: ThreadPoolExecutor | None = None
_finishers_lock = threading.Lock()


def finisher_pool() -> ThreadPoolExecutor:
    """This process's :data:`FINISHERS` threads (started on first use, kept for its life)."""
    global _finishers
    with _finishers_lock:
        if _finishers is None:
            _finishers = ThreadPoolExecutor(max_workers=FINISHERS, thread_name_prefix="quiver-finish")
        return _finishers


def run_jobs(context: ReplayContext, jobs: Sequence[ReplayJob]) -> list[tuple[str, dict[str, Any]]]:
    """Replay ``jobs`` in turn in this thread: ``(job_id, finished result JSON)`` for each,
    in order. Each replayed result is finished by the process's :func:`finisher_pool`
    while this thread replays the next job; the call returns once all are finished (a
    replay or a finishing that raises is raised, after the others handed on are done)."""
    worker = worker_for(context)
    with quiet_collector():
        if len(jobs) == 1:
            return [(jobs[0].job_id, worker.run(jobs[0]))]
        pending: list[tuple[str, Future[dict[str, Any]] | dict[str, Any]]] = []
        try:
            for job in jobs:
                data, more = worker.replay(job)
                pending.append((job.job_id, finisher_pool().submit(worker.finish, job, data) if more else data))
        except BaseException:
            wait([r for _, r in pending if isinstance(r, Future)])
            raise
        return [(job_id, r.result() if isinstance(r, Future) else r) for job_id, r in pending]


class Executor(ABC):
    """Runs a campaign's jobs and reports each finished one to ``on_done``.

    Subclasses register with :func:`executor`, build themselves from the spec's
    ``executor:`` block in :meth:`from_settings`, and implement :meth:`run`.

    Attributes:
        name: The registered name (set by :func:`executor`).
    """

    name: ClassVar[str] = ""

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Executor:
        """The executor a spec's ``executor:`` block describes (its fields as a mapping:
        ``concurrency``, ``address``, ``batch_size``, ``max_in_flight``, ``max_retries``,
        and ``options``, a free mapping for an executor's own settings)."""

    @abstractmethod
    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        """Replay ``jobs`` (see the module docstring); raise what cannot be reported per job."""

    def nodes_used(self) -> int:
        """How many machines ran jobs in the last :meth:`run` (this process counts one)."""
        return 1

    def start(self) -> None:
        """Get ready to run, in the background (a campaign calls it before loading its
        baseline, so start-up overlaps that work): the default does nothing."""
        return None

    def close(self) -> None:
        """Release what :meth:`start` or :meth:`run` holds (a campaign calls it once
        done, also after a failure): the default does nothing."""
        return None


ENTRY_POINT_GROUP = "quiver.executors"
"""The entry-point group third-party executors are published under."""

E = TypeVar("E", bound=type[Executor])


def _builtins() -> None:
    """Import the built-in executors (``local``, ``ray``), which register themselves."""
    importlib.import_module("quiver.replay._executors")


EXECUTORS: Registry[type[Executor]] = Registry(
    "executor",
    "executors",
    ENTRY_POINT_GROUP,
    how="with @quiver.replay.executor",
    builtins=_builtins,
    adopt=adopt_class(
        lambda name, cls: _register(name, cls), QuiverError, "executor", "an Executor subclass", "@executor"
    ),
)
"""Every executor by name (see :class:`quiver._registry.Registry`)."""


def executor(name: str) -> Callable[[E], E]:
    """Class decorator registering an :class:`Executor` subclass as ``name``.

    Raises:
        QuiverError: ``name`` is empty or taken by another class, or the class is not an
            :class:`Executor`.
    """

    def decorate(cls: E) -> E:
        _register(name, cls)
        return cls

    return decorate


def _register(name: str, cls: Any) -> None:
    EXECUTORS.check_name(name)
    if not (isinstance(cls, type) and issubclass(cls, Executor)):
        raise QuiverError(f"executor {name!r} must be a subclass of quiver.replay.Executor; got {cls!r}")
    EXECUTORS.add(name, cls)
    cls.name = name


def registered_executors() -> dict[str, type[Executor]]:
    """Every registered executor by name, those from entry points included."""
    return EXECUTORS.items()


def make_executor(name: str, settings: Mapping[str, Any] | None = None) -> Executor:
    """The executor registered as ``name``, built from ``settings`` (a spec's ``executor:`` block).

    Raises:
        QuiverError: No executor has that name (the message lists the registered ones), or
            its entry point failed to load.
    """
    return EXECUTORS.get(name).from_settings(dict(settings or {}))
