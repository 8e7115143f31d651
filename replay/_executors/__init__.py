"""Where a campaign's replays run: threads in this process, or Ray tasks.

* ``base``: the jobs, the worker that replays them, the executor base class and registry;
* ``local``: threads in this process;
* ``ray``: Ray tasks on a local instance or a cluster.
"""

from __future__ import annotations

from .base import (
    ENTRY_POINT_GROUP,
    EXECUTORS,
    DoneFn,
    EndpointWatch,
    Executor,
    ReplayContext,
    ReplayJob,
    StopFn,
    Worker,
    executor,
    make_executor,
    quiet_collector,
    registered_executors,
    run_jobs,
    worker_for,
)
from .local import LocalExecutor
from .ray import RayExecutor

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXECUTORS",
    "DoneFn",
    "EndpointWatch",
    "Executor",
    "ReplayContext",
    "ReplayJob",
    "StopFn",
    "Worker",
    "executor",
    "make_executor",
    "quiet_collector",
    "registered_executors",
    "run_jobs",
    "worker_for",
    "LocalExecutor",
    "RayExecutor",
]
