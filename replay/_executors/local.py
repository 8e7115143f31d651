"""The local executor: threads in this process (LLM calls are I/O bound)."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from quiver._errors import QuiverError
from quiver._interrupt import deadline

from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, quiet_collector, worker_for

__all__ = ["LocalExecutor"]


@executor("local")
class LocalExecutor(Executor):
    """Threads in this process, ``concurrency`` replays at once."""

    def __init__(self, concurrency: int = 8) -> None:
        if concurrency < 1:
            raise QuiverError(f"executor concurrency must be at least 1; got {concurrency}")
        self.concurrency = concurrency

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> LocalExecutor:
        """``concurrency`` of the spec's ``executor:`` block (default 8)."""
        return cls(int(settings.get("concurrency") or 8))

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
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
            for i in range(min(self.concurrency, len(todo)))
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
