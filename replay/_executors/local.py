"""The local executor: this machine's cores, worker processes of replay threads (or
threads of this process alone)."""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from quiver._errors import QuiverError
from quiver._interrupt import deadline
from quiver._trace import output_redactor

from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, quiet_collector, worker_for
from .processes import ProcessPool

__all__ = ["LocalExecutor", "PROCESSES_FROM"]

PROCESSES_FROM = 500
"""A campaign of at least this many replays runs in worker processes by default (a
process's start and imports take a few seconds: a smaller one runs as threads here)."""


@executor("local")
class LocalExecutor(Executor):
    """This machine: ``concurrency`` replays at once, in ``processes`` worker processes
    (:mod:`.processes`: threads in each, the run's pacing schedule and wire counts shared)
    or, with ``processes=0``, in threads of this process.

    Args:
        concurrency: Replays at once, over all processes.
        processes: Worker processes; None: one per core when the run has at least
            :data:`PROCESSES_FROM` jobs (:attr:`expected_jobs`, told by the campaign
            before :meth:`start`), else none.

    Attributes:
        warm: Called in each worker process once it has started (a campaign loads its
            text embedding model there while it analyses its baseline); must pickle.
        expected_jobs: How many jobs the next run will have, when known before it.
    """

    def __init__(self, concurrency: int = 8, processes: int | None = None) -> None:
        if concurrency < 1:
            raise QuiverError(f"executor concurrency must be at least 1; got {concurrency}")
        if processes is not None and processes < 0:
            raise QuiverError(f"executor processes must be at least 0; got {processes}")
        self.concurrency = concurrency
        self.processes = processes
        self.warm: Callable[[], None] | None = None
        self.expected_jobs: int | None = None
        self._pool: ProcessPool | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> LocalExecutor:
        """``concurrency`` (default 8) and ``processes`` of the spec's ``executor:`` block."""
        processes = settings.get("processes")
        return cls(int(settings.get("concurrency") or 8), None if processes is None else int(processes))

    def process_count(self, jobs: int | None) -> int:
        """Worker processes for a run of ``jobs`` jobs (0: threads of this process)."""
        if self.processes is not None:
            return min(self.processes, self.concurrency)
        if jobs is None or jobs < PROCESSES_FROM:
            return 0
        return max(1, min(os.cpu_count() or 1, self.concurrency))

    def start(self) -> None:
        """Start the worker processes (when the run will have them), which import what
        replays need, and :attr:`warm` up, meanwhile."""
        n = self.process_count(self.expected_jobs)
        if n and self._pool is None:
            self._pool = ProcessPool(n, math.ceil(self.concurrency / n), output_redactor().to_json(), self.warm)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        if self._pool is None and self.process_count(len(jobs)):
            self.expected_jobs = len(jobs)
            self.start()
        if self._pool is not None:
            try:
                self._pool.run(context, jobs, on_done, should_stop)
            except BaseException:
                self.close()
                raise
            return
        _run_threads(self.concurrency, context, jobs, on_done, should_stop)


def _run_threads(concurrency: int, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn,
                 should_stop: StopFn) -> None:
    """``concurrency`` threads of this process replaying ``jobs``."""
    worker = worker_for(context)
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
        for i in range(min(concurrency, len(todo)))
    ]
    running = 0
    until: float | None = None  # once interrupted: when the replays in flight are abandoned
    with quiet_collector():
        try:
            for thread in threads:
                thread.start()
                running += 1
            while running:
                # (the first Ctrl-C raises KeyboardInterrupt here, in the main thread)
                job, data = finished.get()
                if job is None:
                    running -= 1
                elif isinstance(data, BaseException):
                    raise data
                else:
                    assert data is not None
                    on_done(job.job_id, data)
        except KeyboardInterrupt:
            # interrupted: no new replay; those in flight finish (their LLM calls make no
            # new attempt) or are abandoned at the deadline; what finishes is handed on
            closed.set()
            until = deadline()
            _drain(finished, running, on_done, until)
            raise
        finally:
            closed.set()  # the slots finish the replays they hold and take no more
            for thread in threads:
                if thread.is_alive():
                    thread.join(None if until is None else max(0.0, until - time.monotonic()))


def _drain(
    finished: queue.SimpleQueue[tuple[ReplayJob | None, dict[str, Any] | BaseException | None]],
    running: int,
    on_done: DoneFn,
    until: float,
) -> None:
    """Hand the replays that finish before ``until`` to ``on_done``, until ``running``
    slots have ended; a replay that raised (cut short by the interrupt) is dropped."""
    while running:
        try:
            job, data = finished.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            return
        if job is None:
            running -= 1
        elif isinstance(data, dict):
            on_done(job.job_id, data)
