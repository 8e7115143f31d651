"""The Ray executor: Ray tasks on a local instance or a cluster."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from quiver._errors import QuiverError

from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, run_jobs

__all__ = ["RayExecutor"]

log = logging.getLogger("quiver.executor")


def _ray_batch(context: ReplayContext, jobs: list[ReplayJob], threads: int) -> dict[str, Any]:
    """A Ray task: replay a batch; report which node ran it."""
    import ray

    return {"node": ray.get_runtime_context().get_node_id(), "results": run_jobs(context, jobs, threads)}


@executor("ray")
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

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RayExecutor:
        """``address``, ``batch_size``, ``max_in_flight`` and ``max_retries`` of the spec's
        ``executor:`` block (defaults as for the constructor)."""
        kwargs = {k: settings[k] for k in ("batch_size", "max_in_flight", "max_retries") if settings.get(k) is not None}
        return cls(address=settings.get("address"), **kwargs)

    def nodes_used(self) -> int:
        """The Ray nodes that ran tasks in the last run."""
        return len(self.nodes)

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
