"""The local executor's worker processes: every core of this machine replays.

One Python process replays at most one core's worth of Python at a time (the
interpreter's lock), and a campaign's replays, with their finishing (:mod:`quiver.
experiments._campaign.finish`: redaction, differences, compression, pairing), are Python
work between LLM calls. :class:`ProcessPool` starts ``processes`` worker processes
(``spawn``: nothing of the driver's threads or locks is copied), each replaying with
``threads`` threads; the driver keeps each fed with twice ``threads`` jobs, so no thread
idles until the jobs run out.

What the threads of one process share, the processes share through the driver:

* **the pacing schedule**: each process asks the run's one :class:`~quiver.replay._llm.
  pacing.Pacer`, held by the driver, for every request's place (a
  :class:`~quiver.replay._llm.pacing.RemoteBackend` over a pipe of its own; one round
  trip per request, made only once a limit is known), as Ray actors ask their
  coordinator;
* **the wire ledger**: every request is counted where it leaves its process, by the
  same hooks, and each replay's counts travel with its result;
* **logging**: a worker's log records are handed to the driver's loggers (the run's
  log of failures, its redaction); what a pipeline prints goes through the run's
  redactor (:mod:`._redirect`).

A process that dies hands its jobs to the others (each job at most three more times);
when none is left, the run stops. Ctrl-C reaches the whole process group: the workers
ignore it, and the driver tells them to take no new job and to make no new LLM attempt,
then collects what finishes before the deadline.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from multiprocessing.connection import Connection
from typing import Any

from quiver._errors import QuiverError

from .base import DoneFn, ReplayContext, ReplayJob, StopFn

__all__ = ["ProcessPool"]

log = logging.getLogger("quiver.executor")

_TRIES = 3
"""Times a job is handed out again after the process holding it died."""


# --------------------------------------------------------------------------- the worker side


def _worker(conn: Connection, pace: Connection, threads: int, redaction: dict[str, Any] | None,
            warm: Callable[[], None] | None, level: int) -> None:
    """A worker process's life: replay the jobs the driver sends, ``threads`` at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides, for the whole group
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from ._redirect import redact_worker_output

    redact_worker_output(redaction)
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            conn.send(message)

    logging.getLogger().addHandler(_PipeHandler(send))
    logging.getLogger().setLevel(level)
    import quiver.perturbations
    import quiver.replay._replayer  # noqa: F401  (the replayer, the LLM client and the SDK)

    _remote_pacing(pace)
    if warm is not None:
        with contextlib.suppress(Exception):  # a model that cannot load says so when a replay needs it
            warm()
    send(("ready",))
    _serve(conn, send, threads)


def _serve(conn: Connection, send: Callable[[tuple[Any, ...]], None], threads: int) -> None:
    from quiver._interrupt import set_interrupted

    from .base import finisher_pool, quiet_collector, worker_for

    todo: queue.SimpleQueue[tuple[ReplayContext, ReplayJob] | None] = queue.SimpleQueue()
    finishing: set[Future[None]] = set()

    def raised(job: ReplayJob, exc: BaseException) -> None:  # reported to the driver, which stops the run
        send(("raised", job.job_id, "".join(traceback.format_exception(exc))))

    def finish(worker: Any, job: ReplayJob, data: dict[str, Any]) -> None:
        try:
            data = worker.finish(job, data)
        except BaseException as exc:
            raised(job, exc)
            return
        send(("done", job.job_id, data))

    def slot() -> None:
        # a replay's place is free again once its pipeline has run: the process's
        # finishers finish it (the driver holds at most twice ``threads`` jobs here, so
        # the results waiting for them are bounded too)
        while (item := todo.get()) is not None:
            context, job = item
            try:
                worker = worker_for(context)
                data, more = worker.replay(job)
            except BaseException as exc:
                raised(job, exc)
                continue
            if more:
                future = finisher_pool().submit(finish, worker, job, data)
                finishing.add(future)
                future.add_done_callback(finishing.discard)
            else:
                send(("done", job.job_id, data))

    pool = [threading.Thread(target=slot, name=f"quiver-replay-{i}", daemon=True) for i in range(threads)]
    context: ReplayContext | None = None
    with quiet_collector():
        for thread in pool:
            thread.start()
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "context":
                context = message[1]
            elif message[0] == "jobs":
                assert context is not None
                for job in message[1]:
                    todo.put((context, job))
            elif message[0] == "interrupt":
                set_interrupted()  # LLM calls make no new attempt; the driver takes what finishes
            elif message[0] == "close":
                break
        for _ in pool:
            todo.put(None)
        for thread in pool:
            thread.join()
        wait(list(finishing))


def _remote_pacing(pace: Connection) -> None:
    """This process's LLM requests take their places at the driver's schedule."""
    from quiver.replay._llm import RemoteBackend, use_remote

    lock = threading.Lock()

    def reserve(origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]:
        with lock:
            pace.send(("reserve", origin, model, raw, max_tokens))
            placed: tuple[float, float] = pace.recv()
        return placed

    def report(origin: str, model: str, answer: dict[str, Any]) -> None:
        with lock:
            pace.send(("answered", origin, model, answer))

    def configure(origin: str, limits: Any) -> None:
        with lock:
            pace.send(("configure", origin, limits))

    use_remote(f"driver-{os.getppid()}", RemoteBackend(reserve=reserve, report=report, configure=configure))


class _PipeHandler(logging.Handler):
    """Hands a worker's log records to the driver (formatted here: what reaches the
    driver is plain text)."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + "".join(traceback.format_exception(*record.exc_info))
            self.send(("log", record.name, record.levelno, text))
        except Exception:
            self.handleError(record)


# --------------------------------------------------------------------------- the driver side


class _Process:
    def __init__(self, ctx: Any, index: int, threads: int, redaction: dict[str, Any] | None,
                 warm: Callable[[], None] | None) -> None:
        self.index = index
        self.conn, child = ctx.Pipe()
        self.pace, pace_child = ctx.Pipe()
        level = logging.getLogger().getEffectiveLevel()
        self.proc = ctx.Process(target=_worker, args=(child, pace_child, threads, redaction, warm, level),
                                name=f"quiver-worker-{index}", daemon=True)
        self.proc.start()
        child.close()
        pace_child.close()
        self.held: dict[str, ReplayJob] = {}
        self.alive = True
        self.lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        with self.lock:
            self.conn.send(message)


class ProcessPool:
    """``processes`` worker processes of ``threads`` threads each (see the module docstring).

    Args:
        processes: Worker processes.
        threads: Replays at once in each.
        redaction: The driver's redactor, for what the workers print.
        warm: Called in each worker once it has started (loads what replays will need).
    """

    def __init__(self, processes: int, threads: int, redaction: dict[str, Any] | None = None,
                 warm: Callable[[], None] | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.threads = threads
        self.workers = [_Process(ctx, i, threads, redaction, warm) for i in range(processes)]
        self.events: queue.SimpleQueue[tuple[int, tuple[Any, ...]]] = queue.SimpleQueue()
        from quiver.replay._llm import Pacer

        self.pacer = Pacer()
        """The schedule every worker's requests take their places in (the pool's life long)."""
        for worker in self.workers:
            threading.Thread(target=self._receive, args=(worker,), name=f"quiver-from-{worker.index}",
                             daemon=True).start()
            threading.Thread(target=self._pace, args=(worker,), name=f"quiver-pace-{worker.index}",
                             daemon=True).start()

    def _receive(self, worker: _Process) -> None:
        while True:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                self.events.put((worker.index, ("died",)))
                return
            self.events.put((worker.index, message))

    def _pace(self, worker: _Process) -> None:
        while True:
            try:
                message = worker.pace.recv()
            except (EOFError, OSError):
                return
            pacer = self.pacer
            if message[0] == "reserve":
                worker.pace.send(pacer.reserve(*message[1:]))
            elif message[0] == "answered":
                pacer.answered(*message[1:])
            elif message[0] == "configure":
                pacer.configure(*message[1:])

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        """Replay ``jobs`` (an :class:`~.base.Executor`'s ``run``, see :class:`ProcessPool`)."""
        from quiver._interrupt import deadline
        from quiver.replay._llm import RateLimits, origin_of

        limits = RateLimits.model_validate(context.llm.get("limits") or {})
        if limits.pace and context.llm.get("base_url"):  # the run's limits, as its coordinator's on Ray
            self.pacer.configure(origin_of(str(context.llm["base_url"])), limits)
        for worker in self.workers:
            if worker.alive:
                try:
                    worker.send(("context", context))
                except OSError:  # it died: its receiver says so
                    pass
        todo = deque(jobs)
        tries: Counter[str] = Counter()
        until: float | None = None
        try:
            self._feed(todo, should_stop)
            while any(w.held for w in self.workers) or (todo and not should_stop() and self._live()):
                index, message = self.events.get()
                self._handle(self.workers[index], message, on_done, todo, tries)
                self._feed(todo, should_stop)
            if todo and not should_stop() and not self._live():
                raise QuiverError("every worker process of the local executor died; the replays committed are kept: "
                                  "resume the campaign (quiver run SPEC --resume)")
        except KeyboardInterrupt:
            until = deadline()
            for worker in self.workers:
                if worker.alive:
                    with contextlib.suppress(OSError):
                        worker.send(("interrupt",))
            self._drain(on_done, until)
            raise

    def _live(self) -> list[_Process]:
        return [w for w in self.workers if w.alive]

    def _feed(self, todo: deque[ReplayJob], should_stop: StopFn) -> None:
        """Top every live process up to twice its threads."""
        for worker in self._live():
            room = 2 * self.threads - len(worker.held)
            if room <= 0 or not todo or should_stop():
                continue
            batch = [todo.popleft() for _ in range(min(room, len(todo)))]
            for job in batch:
                worker.held[job.job_id] = job
            try:
                worker.send(("jobs", batch))
            except OSError:  # it died: its receiver says so
                pass

    def _handle(self, worker: _Process, message: tuple[Any, ...], on_done: DoneFn, todo: deque[ReplayJob],
                tries: Counter[str]) -> None:
        kind = message[0]
        if kind == "done":
            worker.held.pop(message[1], None)
            on_done(message[1], message[2])
        elif kind == "raised":
            worker.held.pop(message[1], None)
            raise QuiverError(f"a replay raised in worker process {worker.index}: {message[2].strip()}")
        elif kind == "log":
            logging.getLogger(message[1]).log(message[2], "%s", message[3])
        elif kind == "died":
            self._died(worker, on_done, todo, tries)

    def _died(self, worker: _Process, on_done: DoneFn, todo: deque[ReplayJob], tries: Counter[str]) -> None:
        worker.alive = False
        held, worker.held = list(worker.held.values()), {}
        code = worker.proc.exitcode if not worker.proc.is_alive() else None
        if held:
            log.warning("worker process %d stopped (exit code %s) with %d replay(s) in hand; they go to the "
                        "other processes", worker.index, code, len(held))
        again = []
        for job in held:
            tries[job.job_id] += 1
            if tries[job.job_id] > _TRIES:
                on_done(job.job_id, {"error": f"worker failed: the worker processes running it died "
                                              f"{tries[job.job_id]} times (exit code {code})"})
            else:
                again.append(job)
        todo.extendleft(reversed(again))

    def _drain(self, on_done: DoneFn, until: float) -> None:
        """Hand on the replays that finish before ``until`` (interrupted)."""
        while any(w.held for w in self._live()) and time.monotonic() < until:
            try:
                index, message = self.events.get(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return
            worker = self.workers[index]
            if message[0] == "done":
                worker.held.pop(message[1], None)
                on_done(message[1], message[2])
            elif message[0] in ("raised", "died"):
                if message[0] == "died":
                    worker.alive = False
                    worker.held = {}
                else:
                    worker.held.pop(message[1], None)

    def close(self) -> None:
        """Stop the workers: they finish nothing more (the run is over or abandoned)."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.send(("close",))
        for worker in self.workers:
            worker.proc.join(timeout=5)
            if worker.proc.is_alive():
                worker.proc.kill()
                worker.proc.join()
            for conn in (worker.conn, worker.pace):
                conn.close()
