"""Where a campaign's replays run: threads in this process, or Ray tasks.

* ``base``: the jobs, the worker that replays them, the executor base class and registry;
* ``local``: worker processes of this machine, or threads in this process;
* ``ray``: Ray actors on a local instance or a cluster (``_ray_cluster``: connecting,
  the folder shipped to the workers, a head that is gone).
"""

from __future__ import annotations

from ._ray_cluster import ClusterLost
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
    "ClusterLost",
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
