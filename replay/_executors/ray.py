"""The Ray executor: Ray tasks on a local instance or a cluster."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from quiver._errors import QuiverError

from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, run_jobs

__all__ = ["RayExecutor"]

log = logging.getLogger("quiver.executor")


def _ray_batch(context: ReplayContext, jobs: list[ReplayJob], threads: int) -> dict[str, Any]:
    """A Ray task: replay a batch; report which node ran it and how long it took."""
    import ray

    start = time.perf_counter()
    results = run_jobs(context, jobs, threads)
    return {"node": ray.get_runtime_context().get_node_id(), "results": results,
            "seconds": time.perf_counter() - start}


@executor("ray")
class RayExecutor(Executor):
    """Ray tasks on a local instance or a cluster, each replaying a batch of jobs with
    ``threads`` replays at once.

    How many replays run at once: a task reserves ``task_cpus`` of a node's CPUs, so the
    cluster runs ``CPUs / task_cpus`` tasks at a time (fewer if ``max_in_flight`` is
    smaller), each ``threads`` replays at once: with the defaults, 16 replays per CPU.
    The driver keeps ``max_in_flight`` tasks submitted (default: twice what can run,
    so a task waits, already scheduled, behind each running one).

    How large a batch is (``batch_size``, default sized from the replays' own time): the
    first tasks carry one job per thread; from then on a batch holds what ``threads``
    threads replay in about ``task_seconds``, at the mean replay time measured so far
    (a replay waits on its LLM calls: the latency sets it), so a task's fixed costs
    (scheduling, shipping its results) stay small next to its work, and the threads of
    a task idle at its end for a small share of it. Near the end of the jobs, batches
    shrink so that what is left is spread over every slot.

    Args:
        address: A cluster to connect to (``ray://...`` or ``host:port``); None starts
            or reuses a local instance.
        num_cpus: CPUs of a local instance (default: the machine's).
        batch_size: Jobs per task; None sizes batches from the measured replay time.
        max_in_flight: Tasks submitted and not yet returned (default: twice the tasks
            the cluster can run at once).
        max_retries: Ray's retries of a task whose worker died.
        task_cpus: CPUs reserved per task (replays wait on LLM calls: a fraction).
        threads: Replays run at once inside one task.
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
        task_seconds: float = 8.0,
    ) -> None:
        for name, value, low in (("batch_size", batch_size, 1), ("max_in_flight", max_in_flight, 1),
                                 ("threads", threads, 1), ("max_retries", max_retries, 0)):
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
        self.slots = 0
        """Tasks the cluster could run at once in the last run."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RayExecutor:
        """``address``, ``batch_size``, ``max_in_flight``, ``max_retries``, ``threads``,
        ``task_cpus`` and ``task_seconds`` of the spec's ``executor:`` block (defaults as
        for the constructor)."""
        names = ("batch_size", "max_in_flight", "max_retries", "threads", "task_cpus", "task_seconds")
        kwargs = {k: settings[k] for k in names if settings.get(k) is not None}
        return cls(address=settings.get("address"), **kwargs)

    def nodes_used(self) -> int:
        """The Ray nodes that ran tasks in the last run."""
        return len(self.nodes)

    def concurrency(self) -> int:
        """Replays at once in the last run: tasks running at once x ``threads``."""
        return min(self.slots, self.max_in_flight or self.slots) * self.threads

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
        self.slots = max(1, int(float(ray.cluster_resources().get("CPU", 1)) / self.task_cpus + 1e-9))
        limit = self.max_in_flight or 2 * self.slots
        self.batches = []
        sizer = _BatchSizer(self.batch_size, self.threads, self.task_seconds, min(limit, self.slots))
        todo = deque(jobs)
        context_ref = ray.put(context)
        pending: dict[Any, tuple[list[ReplayJob], int]] = {}
        while todo or pending:
            while todo and len(pending) < limit and not should_stop():
                batch = [todo.popleft() for _ in range(min(sizer.next(len(todo)), len(todo)))]
                self.batches.append(len(batch))
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
                sizer.measured(len(batch), float(out.get("seconds") or 0.0))
                for job_id, result in out["results"]:
                    on_done(job_id, result)


class _BatchSizer:
    """Batch sizes from the measured replay time (see :class:`RayExecutor`)."""

    MAX = 1024

    def __init__(self, fixed: int | None, threads: int, task_seconds: float, running: int) -> None:
        self.fixed, self.threads, self.task_seconds, self.running = fixed, threads, task_seconds, running
        self.thread_seconds = 0.0
        self.replays = 0

    def measured(self, jobs: int, seconds: float) -> None:
        """A task of ``jobs`` replays took ``seconds``."""
        self.thread_seconds += seconds * min(self.threads, jobs)
        self.replays += jobs

    def next(self, left: int) -> int:
        """The size of the next batch, ``left`` jobs not yet submitted."""
        if self.fixed is not None:
            return self.fixed
        if not self.replays:
            return self.threads
        per_replay = max(self.thread_seconds / self.replays, 1e-6)
        size = math.ceil(self.task_seconds * self.threads / per_replay)
        spread = math.ceil(left / self.running)  # near the end: what is left over every slot
        return max(1, min(max(size, self.threads), spread, self.MAX))
