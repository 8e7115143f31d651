"""Where a campaign's replays run: threads in this process, or Ray tasks.
"""

from __future__ import annotations

from .base import ReplayJob, ReplayContext, LocalExecutor, RayExecutor, run_jobs, Executor, quiet_collector

__all__ = [
    "ReplayJob",
    "ReplayContext",
    "LocalExecutor",
    "RayExecutor",
    "run_jobs",
    "Executor",
    "quiet_collector",
]
