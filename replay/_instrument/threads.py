"""A thread pool whose worker threads outlive it: :class:`ReusingThreadPool`.

A pipeline that fans out with ``with ThreadPoolExecutor(max_workers=3) as pool:`` once per
run starts three new threads per run. Starting a thread is cheap alone, but
``Thread.start()`` waits until the new thread has run, which takes the interpreter lock;
and the standard pool starts it while holding ``concurrent.futures.thread``'s global
shutdown lock, which every pool's ``submit`` takes. With 64 replays in flight in one
process, the replay threads queued on that lock while each thread start waited its turn
for the interpreter lock: py-spy found 8.6% of the replay threads' wall time in
``submit`` (``benchmarks/campaign.py``, 1,500 replays at 500 ms).

:class:`ReusingThreadPool` keeps the standard pool's interface and semantics
(``max_workers`` work items at once, in submission order; ``shutdown(wait,
cancel_futures)``; ``map``; the ``with`` block) but runs its work on *carrier* threads
shared by every pool in the process: a carrier that finishes a pool's work goes back to
an idle list, and the next pool takes it instead of starting a thread. ``submit`` never
waits for a thread to start once enough carriers exist, and takes only the pool's own
lock.

Differences from :class:`concurrent.futures.ThreadPoolExecutor`, all deliberate:

* Carriers are daemon threads. At interpreter exit, work that is still running is
  waited for (as the standard pool does) through the same hook the standard pool uses;
  idle carriers just end.
* A pool with an ``initializer`` runs on the standard pool's own threads (an initializer
  is meant to run once per new worker thread).
* A carrier is named ``<thread_name_prefix>_<n>`` while it runs a pool's work.
* After ``os.fork()`` the child starts with no carriers (threads do not survive a fork).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ReusingThreadPool"]

T = TypeVar("T")

_Task = Callable[[], None]

_idle: list[queue.SimpleQueue[_Task | None]] = []
"""Inboxes of the carriers waiting for work (``list.append`` and ``pop`` are atomic)."""

_busy = 0
_busy_changed = threading.Condition()
_exiting = False
_carrier_numbers = itertools.count()


def _unbusy() -> None:
    """One dispatched task fewer is running or about to run."""
    global _busy
    with _busy_changed:
        _busy -= 1
        _busy_changed.notify_all()


def _carrier(inbox: queue.SimpleQueue[_Task | None]) -> None:
    while True:
        task = inbox.get()
        if task is None:
            return
        try:
            task()
        finally:
            _unbusy()
            del task
        if _exiting:
            return
        _idle.append(inbox)


def _dispatch(task: _Task) -> None:
    """Run ``task`` on an idle carrier, or on a new one when none is idle."""
    global _busy
    with _busy_changed:
        _busy += 1
    try:
        inbox = _idle.pop()
    except IndexError:
        inbox = queue.SimpleQueue()
        thread = threading.Thread(target=_carrier, args=(inbox,), name=f"quiver-carrier-{next(_carrier_numbers)}",
                                  daemon=True)
        try:
            thread.start()
        except BaseException:
            _unbusy()
            raise
    inbox.put(task)


def _at_exit() -> None:
    """Let running work finish before the interpreter goes down; idle carriers end."""
    global _exiting
    _exiting = True
    while _idle:
        try:
            _idle.pop().put(None)
        except IndexError:
            break
    with _busy_changed:
        while _busy:
            _busy_changed.wait()


def _after_fork_in_child() -> None:
    global _busy, _busy_changed
    _idle.clear()
    _busy = 0
    _busy_changed = threading.Condition()


_register_atexit = getattr(threading, "_register_atexit", None)  # what concurrent.futures uses (3.9+)
if _register_atexit is not None:
    _register_atexit(_at_exit)
else:  # pragma: no cover - every supported Python has it
    import atexit

    atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ReusingThreadPool(concurrent.futures.ThreadPoolExecutor):
    """:class:`concurrent.futures.ThreadPoolExecutor` on threads reused across pools."""

    def __init__(
        self,
        max_workers: int | None = None,
        thread_name_prefix: str = "",
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(max_workers, thread_name_prefix, initializer, initargs)
        self._own_threads = initializer is not None
        self._items: deque[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...],
                                 dict[str, Any]]] = deque()
        self._running = 0
        self._drains = itertools.count()
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        if self._own_threads:
            return super().submit(fn, *args, **kwargs)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _exiting:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            self._items.append((future, fn, args, kwargs))
            start = self._running < self._max_workers
            if start:
                self._running += 1
        if start:
            try:
                _dispatch(self._drain)
            except BaseException:
                with self._lock:
                    self._running -= 1
                    self._drained.notify_all()
                raise
        return future

    def _drain(self) -> None:
        """Run this pool's queued work on the current carrier until none is left."""
        thread = threading.current_thread()
        name, thread.name = thread.name, f"{self._thread_name_prefix}_{next(self._drains)}"
        try:
            while True:
                with self._lock:
                    if not self._items:
                        self._running -= 1
                        self._drained.notify_all()
                        return
                    future, fn, args, kwargs = self._items.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                    del exc
                else:
                    future.set_result(result)
                    del result
                del future, fn, args, kwargs
        finally:
            thread.name = name

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._own_threads:
            super().shutdown(wait, cancel_futures=cancel_futures)
            return
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._items:
                    self._items.popleft()[0].cancel()
            if wait:
                while self._running:
                    self._drained.wait()
