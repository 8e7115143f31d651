"""Progress reporting for long jobs (recording, campaigns).

A :class:`Progress` prints to stderr: a line rewritten in place on a terminal, a new
line every few seconds elsewhere (CI logs). It shows items done of the total, the
rate, the ETA, and whatever counters the job reports (retries, failures).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import TextIO

__all__ = ["Progress", "StageProgress"]


class Progress:
    """A thread-safe progress line.

    Args:
        label: What is being counted ("record", "pairs").
        total: How many items there are.
        stream: Where to print (default stderr); ``None`` prints nothing.
        interval_s: Least time between two printed updates when not on a terminal.
        resumed: Items done before this process began (or before this pass).
        before: What those are called on the line (``resumed``, ``done before``).
    """

    def __init__(
        self, label: str, total: int, *, stream: TextIO | None = sys.stderr, interval_s: float = 5.0,
        resumed: int = 0, before: str = "resumed",
    ) -> None:
        self.label = label
        self.before = before
        """What the items done before are called on the line."""
        self.total = total
        self.done = resumed
        self.resumed = resumed
        """Items done before this process began (a resume): counted as done, not in the rate."""
        self.counters: Counter[str] = Counter()
        self._stream = stream
        self._tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._interval = 0.1 if self._tty else interval_s
        self._t0 = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def advance(self, n: int = 1, **counters: int) -> None:
        """Count ``n`` finished items and add to the named counters."""
        with self._lock:
            self.done += n
            self.counters.update({k: v for k, v in counters.items() if v})
            now = time.monotonic()
            if now - self._last >= self._interval:
                self._last = now
                self._print(self.line())

    def line(self) -> str:
        """The current progress line."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = (self.done - self.resumed) / elapsed  # this process's work only
        left = max(self.total - self.done, 0)
        remaining = 0.0 if not left else left / rate if rate > 0 else float("inf")
        eta = "?" if remaining == float("inf") else _duration(remaining)
        extra = "  ".join(f"{k} {v}" for k, v in sorted(self.counters.items()))
        resumed = f" ({self.resumed} {self.before})" if self.resumed else ""
        return (
            f"{self.label}: {self.done}/{self.total}{resumed}  {rate:.1f}/s  elapsed {_duration(elapsed)}  "
            f"ETA {eta}" + (f"  {extra}" if extra else "")
        )

    def close(self) -> None:
        """Print the final line."""
        with self._lock:
            self._print(self.line())
            if self._tty and self._stream is not None:
                self._stream.write("\n")
                self._stream.flush()

    def _print(self, text: str) -> None:
        if self._stream is None:
            return
        self._stream.write(f"\r\x1b[2K{text}" if self._tty else text + "\n")
        self._stream.flush()


class StageProgress:
    """Progress lines of a job in stages (an analysis: embedding, distances, estimates),
    as :func:`quiver.analyze`'s ``progress(stage, done, total)`` reports them: one line
    per stage every ``interval_s`` at most, and its last one; :meth:`say` prints what
    is being done where there is nothing to count (a model loading).

    Args:
        label: The line's prefix ("analyze", "analysis").
        stream: Where to print; ``None`` prints nothing.
    """

    INCREMENTAL = frozenset({"embedding"})
    """Stages reported as counts of items done since the last call (embedded batches);
    the others report the count done so far."""

    def __init__(self, label: str, stream: TextIO | None = sys.stderr, interval_s: float = 2.0) -> None:
        self.label = label
        self._stream = stream
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._done: Counter[str] = Counter()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        """Print ``LABEL: TEXT``."""
        if self._stream is not None:
            with self._lock:
                self._stream.write(f"{self.label}: {text}\n")
                self._stream.flush()

    def __call__(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            if stage in self.INCREMENTAL:
                self._done[stage] += done
                done = self._done[stage]
            now = time.monotonic()
            if self._stream is None or (done < total and now - self._last.get(stage, 0.0) < self._interval):
                return
            self._last[stage] = now
            self._stream.write(f"{self.label}: {stage} {min(done, total)}/{total}  "
                               f"elapsed {_duration(now - self._t0)}\n")
            self._stream.flush()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
