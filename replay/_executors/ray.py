"""The Ray executor: Ray actors on a local instance or a cluster."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from traceback import format_exception
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Redactor, output_redactor
from quiver.replay._llm import RateLimits, origin_of

from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, run_jobs
from .pacing import Coordination, coordinate, start_coordinator, use_coordinator

__all__ = ["RayExecutor"]

log = logging.getLogger("quiver.executor")


class _ReplayActor:
    """A Ray actor: one process of replays, ``threads`` calls at once (the actor's
    ``max_concurrency``), each call a batch of jobs replayed in turn. It imports what
    replays need when it starts, before the campaign hands it any job.

    Nothing leaves its process unredacted (:mod:`._redirect`): from its start, what it
    prints and logs (and what native code writes to its standard output and error) goes
    through the redactor it was made with, the one the driver had then (the built-in
    rules and the run's secrets); a call adds its context's redactor before its first
    job; the errors a call returns or raises are redacted by that redactor.

    Args:
        redaction: The driver's redactor (:meth:`~quiver.Redactor.to_json`).
    """

    def __init__(self, redaction: dict[str, Any] | None = None) -> None:
        from ._redirect import redact_worker_output

        redact_worker_output(redaction)
        import quiver.perturbations
        import quiver.replay._replayer  # noqa: F401  (the replayer, the LLM client and the SDK)

        self._redactors: dict[str, Redactor] = {}

    def replay(self, context: ReplayContext, jobs: list[ReplayJob], pace: Coordination | None = None) -> dict[str, Any]:
        """Replay ``jobs`` in turn, their LLM requests paced at the run's coordinator
        (``pace``, when the run paces); report which node ran them and how long it took."""
        import ray

        if pace is not None:
            use_coordinator(pace)
        redactor = self._redactor(context)
        start = time.perf_counter()
        try:
            results = run_jobs(context, jobs)
        except Exception as exc:  # what reaches the driver (and Ray's logs) holds no secret
            raise QuiverError(
                redactor.text(f"replays failed in a Ray worker: {''.join(format_exception(exc))}")
            ) from None
        return {
            "node": ray.get_runtime_context().get_node_id(),
            "results": [(job_id, redactor.data(r) if "error" in r else r) for job_id, r in results],
            "seconds": time.perf_counter() - start,
        }

    def _redactor(self, context: ReplayContext) -> Redactor:
        """The context's redactor, its secrets added to what this process's output is
        redacted with (once per redaction)."""
        from ._redirect import redact_worker_output

        key = json.dumps(context.redaction, sort_keys=True)
        found = self._redactors.get(key)
        if found is None:
            found = self._redactors[key] = redact_worker_output(context.redaction)
        return found


@executor("ray")
class RayExecutor(Executor):
    """Ray actors on a local instance or a cluster, each running ``threads`` replays at once.

    How many replays run at once: an actor reserves ``task_cpus`` of a node's CPUs for
    its life, so the cluster holds ``CPUs / task_cpus`` actors, spread over the nodes,
    each replaying ``threads`` batches at once: with the defaults, 16 replays per CPU.
    The driver keeps every actor fed with twice ``threads`` batches (at most
    ``max_in_flight`` in all): when one of its replays ends, an actor starts the next
    batch already waiting in its queue, so no slot idles until the jobs run out, and
    jobs finish about in job order (the campaign pairs them block by block meanwhile).

    How large a batch is (``batch_size``, default sized from the replays' own time): one
    job at first; from then on what one thread replays in about ``task_seconds``, at the
    mean replay time measured so far (a replay waits on its LLM calls: the latency sets
    it), so the driver's cost per call stays small next to the work it carries; near
    the end of the jobs, batches shrink so that what is left spreads over every slot.

    An actor whose process dies is restarted by Ray (``max_retries`` times); its batches
    in flight are submitted again, once, to another actor, and then reported failed.

    The actors live from :meth:`start` (or the first :meth:`run`) to :meth:`close`, so
    the rounds of an adaptive ladder, one :meth:`run` each, share them; a :meth:`run`
    that fails stops them.

    Their LLM requests are paced to the endpoint's rate limits (the context's
    ``llm.limits`` and the endpoint's ``x-ratelimit-*`` headers) from one schedule, held
    by a coordinator actor started with them (:mod:`.pacing`): the limit is the run's, not
    each actor's.

    Args:
        address: A cluster to connect to (``ray://...`` or ``host:port``); None starts
            or reuses a local instance.
        num_cpus: CPUs of a local instance (default: the machine's).
        batch_size: Jobs per call; None sizes batches from the measured replay time.
        max_in_flight: Batches submitted and not yet returned, in all (default: twice
            the replays that can run at once).
        max_retries: Restarts of an actor whose process died.
        task_cpus: CPUs an actor reserves (replays wait on LLM calls: a fraction).
        threads: Replays run at once by one actor.
        task_seconds: The time a sized batch aims at.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        batch_size: int | None = None,
        max_in_flight: int | None = None,
        max_retries: int = 3,
        task_cpus: float = 0.25,
        threads: int = 4,
        task_seconds: float = 2.0,
    ) -> None:
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("max_in_flight", max_in_flight, 1),
            ("threads", threads, 1),
            ("max_retries", max_retries, 0),
        ):
            if value is not None and value < low:
                raise QuiverError(f"executor {name} must be at least {low}; got {value}")
        if task_cpus <= 0 or task_seconds <= 0:
            raise QuiverError(f"executor task_cpus and task_seconds must be positive; got {task_cpus}, {task_seconds}")
        self.address = address
        self.num_cpus = num_cpus
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.task_cpus = task_cpus
        self.threads = threads
        self.task_seconds = task_seconds
        self.nodes: set[str] = set()
        self.batches: list[int] = []
        """The size of every batch submitted in the last run, in order."""
        self.actors = 0
        """Actors of the last run."""
        self.warmup_s = 0.0
        """Seconds from the start of the last run until every actor had returned a batch."""
        self._handles: list[Any] = []
        self._coordinator: Any = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RayExecutor:
        """``address``, ``batch_size``, ``max_in_flight``, ``max_retries``, ``threads``,
        ``task_cpus`` and ``task_seconds`` of the spec's ``executor:`` block (defaults as
        for the constructor)."""
        names = ("batch_size", "max_in_flight", "max_retries", "threads", "task_cpus", "task_seconds")
        kwargs = {k: settings[k] for k in names if settings.get(k) is not None}
        return cls(address=settings.get("address"), **kwargs)

    def nodes_used(self) -> int:
        """The Ray nodes that ran replays in the last run."""
        return len(self.nodes)

    def concurrency(self) -> int:
        """Replays at once in the last run: actors x ``threads``."""
        return self.actors * self.threads

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
                # "local": a new instance, even where another process left a cluster's
                # address behind (plain ray.init() would join that one)
                ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
        return ray

    def start(self) -> None:
        """Connect and start the actors, which import what replays need meanwhile."""
        if self._handles:
            return
        ray = self._connect()
        cpus = float(ray.cluster_resources().get("CPU", 1))
        n = max(1, int(cpus / self.task_cpus + 1e-9))
        if self.max_in_flight is not None:
            n = min(n, max(1, math.ceil(self.max_in_flight / (2 * self.threads))))
        cls = ray.remote(_ReplayActor).options(
            num_cpus=self.task_cpus,
            max_concurrency=self.threads,
            max_restarts=self.max_retries,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        )
        redaction = output_redactor().to_json()  # the built-in rules and the secrets the run's redactors hold
        self._handles = [cls.remote(redaction) for _ in range(n)]
        self._coordinator = start_coordinator(ray)

    def close(self) -> None:
        """Stop the actors."""
        handles, self._handles = self._handles, []
        if self._coordinator is not None:
            handles.append(self._coordinator)
            self._coordinator = None
        if handles:
            import ray

            for actor in handles:
                ray.kill(actor)

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        self.start()
        ray = self._connect()
        actors = self._handles
        n = len(actors)
        self.actors, self.batches = n, []
        queue_per_actor = 2 * self.threads
        limit = self.max_in_flight or n * queue_per_actor
        context_ref = ray.put(context)
        pace = self._coordinate(ray, context)
        sizer = _BatchSizer(self.batch_size, self.task_seconds, n * self.threads)
        todo = deque(jobs)
        outstanding = [0] * n
        failures = [0] * n
        live = list(range(n))
        pending: dict[Any, tuple[int, list[ReplayJob], int]] = {}

        def submit(i: int, batch: list[ReplayJob], resubmitted: int) -> None:
            pending[actors[i].replay.remote(context_ref, batch, pace)] = (i, batch, resubmitted)
            outstanding[i] += 1

        def fill() -> None:
            # round after round over the live actors, each topped up to its queue
            while todo and live and len(pending) < limit and not should_stop():
                i = min(live, key=lambda k: outstanding[k])
                if outstanding[i] >= queue_per_actor:
                    return
                batch = [todo.popleft() for _ in range(min(sizer.next(len(todo)), len(todo)))]
                self.batches.append(len(batch))
                submit(i, batch, 0)

        started, warm = time.perf_counter(), set[int]()
        try:
            fill()
            while pending:
                refs = list(pending)
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.02)
                if not ready:
                    ready, _ = ray.wait(refs, num_returns=1)
                for ref in ready:
                    i, batch, resubmitted = pending.pop(ref)
                    outstanding[i] -= 1
                    try:
                        out = ray.get(ref)
                    except Exception as exc:  # the actor's process died (Ray restarts it)
                        failures[i] += 1
                        if failures[i] > self.max_retries and i in live:
                            live.remove(i)
                        others = [k for k in live if k != i] or live
                        if resubmitted < 1 and others:
                            log.warning(
                                "a Ray actor died with %d job(s) in hand (%s); submitting them again", len(batch), exc
                            )
                            submit(min(others, key=lambda k: outstanding[k]), batch, resubmitted + 1)
                        else:
                            for job in batch:
                                on_done(job.job_id, {"error": f"worker failed: {type(exc).__name__}: {exc}"})
                        continue
                    self.nodes.add(out["node"])
                    if len(warm) < n:
                        warm.add(i)
                        self.warmup_s = time.perf_counter() - started
                    sizer.measured(len(batch), float(out.get("seconds") or 0.0))
                    for job_id, result in out["results"]:
                        on_done(job_id, result)
                fill()
            if not live:  # every actor died for good: what was never submitted cannot run
                for job in todo:
                    on_done(job.job_id, {"error": "worker failed: every Ray actor died"})
        except BaseException:
            self.close()  # batches may be in flight: stop them
            raise

    def _coordinate(self, ray: Any, context: ReplayContext) -> Coordination | None:
        """The run's pacing at the coordinator (:mod:`.pacing`), unless the run does not pace."""
        limits = RateLimits.model_validate(context.llm.get("limits") or {})
        base_url = context.llm.get("base_url")
        if not limits.pace or not base_url:
            return None
        if self._coordinator is None:
            self._coordinator = start_coordinator(ray)
        return coordinate(self._coordinator, origin_of(str(base_url)), limits)


class _BatchSizer:
    """Batch sizes from the measured replay time (see :class:`RayExecutor`)."""

    MAX = 256

    def __init__(self, fixed: int | None, seconds: float, slots: int) -> None:
        self.fixed, self.seconds, self.slots = fixed, seconds, slots
        self.busy = 0.0
        self.replays = 0

    def measured(self, jobs: int, seconds: float) -> None:
        """A batch of ``jobs`` replays, run one after the other, took ``seconds``."""
        self.busy += seconds
        self.replays += jobs

    def next(self, left: int) -> int:
        """The size of the next batch, ``left`` jobs not yet submitted."""
        if self.fixed is not None:
            return self.fixed
        if not self.replays:
            return 1
        per_replay = max(self.busy / self.replays, 1e-6)
        size = math.ceil(self.seconds / per_replay)
        spread = math.ceil(left / self.slots)  # near the end: what is left over every slot
        return max(1, min(size, spread, self.MAX))
