"""Interrupting a command cleanly: SIGINT (Ctrl-C) and SIGTERM.

While :func:`signals_interrupt` is active (``quiver`` commands run under it), the first
SIGINT or SIGTERM sets a process-wide flag and raises :class:`KeyboardInterrupt` in the
main thread, as Ctrl-C does by default. Work in other threads sees the flag: the LLM
client starts no new attempt and cuts its backoff waits short (:func:`wait`), executors
and the recorder take no new job. What holds work lets what is in flight finish for at
most :data:`GRACE_S` seconds, keeps what finished, and raises :class:`Interrupted`
saying what was kept and how to continue; the command exits 130. A second signal ends
the process at once, also with 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

__all__ = ["GRACE_S", "Interrupted", "interrupted", "set_interrupted", "check_interrupted", "wait", "deadline",
           "signals_interrupt"]

GRACE_S = 4.0
"""How long work in flight may go on after an interrupt before it is abandoned (the
command then still has time to commit and say so within 5 s)."""

EXIT_INTERRUPTED = 130

_FLAG = threading.Event()


class Interrupted(KeyboardInterrupt):
    """The command was interrupted; the message says what was kept and how to continue."""


def interrupted() -> bool:
    """Whether this process was interrupted (and the work under way should stop)."""
    return _FLAG.is_set()


def set_interrupted() -> None:
    """Mark this process interrupted (the signal handler does it; so may a test)."""
    _FLAG.set()


def check_interrupted() -> None:
    """Raise :class:`Interrupted` when this process was interrupted."""
    if _FLAG.is_set():
        raise Interrupted("interrupted")


def wait(seconds: float) -> None:
    """Sleep ``seconds``, unless interrupted meanwhile: then raise :class:`Interrupted` at once."""
    if _FLAG.wait(max(0.0, seconds)):
        raise Interrupted("interrupted")


def deadline() -> float:
    """The monotonic time by which work in flight must be abandoned: :data:`GRACE_S` from now."""
    return time.monotonic() + GRACE_S


@contextlib.contextmanager
def signals_interrupt(command: str) -> Iterator[None]:
    """Handle SIGINT and SIGTERM as described in the module docstring while the block
    runs (in the main thread only; elsewhere the block runs with the handlers as they
    are). The flag is cleared on entry and on exit."""
    _FLAG.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if _FLAG.is_set():  # the second one: no more waiting
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
                os.write(2, f"quiver {command}: interrupted again; exiting at once\n".encode())
            os._exit(EXIT_INTERRUPTED)
        _FLAG.set()
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _FLAG.clear()
