"""Progress reporting for long jobs (recording, campaigns).

A :class:`Progress` prints to stderr: a line rewritten in place on a terminal, a new
line every few seconds elsewhere (CI logs). It shows items done of the total and what
they are (``replays: 495/5,988 replays done``), the rate and the ETA, and whatever
counters the job reports, each saying what it counts (``256 paired``, ``3 LLM retries``).

The rate and the ETA are shown only once they are measured: from the first item done
(what comes before it is start-up, not throughput), over at least
:data:`MEASURE_S` seconds and :data:`MEASURE_ITEMS` items. Before that the line says
the ETA is being measured (a first line's ETA, from one item, was off by an order of
magnitude or more).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "StageProgress", "MEASURE_S", "MEASURE_ITEMS", "UNITS", "COUNTERS", "STAGE_UNITS"]

MEASURE_S = 3.0
"""Seconds since the first item done before a rate (and an ETA) is shown."""
MEASURE_ITEMS = 5
"""Items done since the first before a rate (and an ETA) is shown."""
UNITS = {"record": "traces recorded", "replays": "replays done", "gate replays": "replays done",
         "attribution replays": "replays done", "pairs": "replays paired"}
"""What the items of each job are, when its caller does not say (``unit=``)."""
COUNTERS = {"paired": "turned into pairs", "failed": "failed", "diverged": "diverged",
            "retries": "LLM retries"}
"""What each counter counts, written after its number (other names are written as they are)."""
STAGE_UNITS = {"embedding": "texts embedded", "distances": "aligned calls compared", "estimates": "done"}
"""What the count of each stage of an analysis counts."""


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
        resumed: int = 0, before: str = "resumed", unit: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.unit = unit if unit is not None else UNITS.get(label, "done")
        """What the items are, written after the count (``replays done``)."""
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
        self._clock = clock
        self._t0 = clock()
        self._first: tuple[float, int] | None = None
        """When the first item of this process was done, and the count done then."""
        self._last = 0.0
        self._lock = threading.Lock()

    def advance(self, n: int = 1, **counters: int) -> None:
        """Count ``n`` finished items and add to the named counters."""
        with self._lock:
            self.done += n
            self.counters.update({k: v for k, v in counters.items() if v})
            now = self._clock()
            if self._first is None and self.done > self.resumed:
                self._first = (now, self.done)
            if now - self._last >= self._interval:
                self._last = now
                self._print(self.line())

    def rate(self) -> float | None:
        """Items per second since the first item done, once measured (else None)."""
        if self._first is None:
            return None
        since, count = self._first
        span, items = self._clock() - since, self.done - count
        return items / span if span >= MEASURE_S and items >= MEASURE_ITEMS else None

    def line(self) -> str:
        """The current progress line."""
        elapsed = max(self._clock() - self._t0, 0.0)
        left = max(self.total - self.done, 0)
        rate = self.rate()
        if rate is None:  # done before it could be measured: the rate over the whole run
            whole = (self.done - self.resumed) / elapsed if elapsed > 0 and self.done > self.resumed else None
            speed = "  ETA: measuring the rate" if left else f"  {whole:.1f}/s" if whole else ""
        else:
            speed = f"  {rate:.1f}/s" + (f"  ETA {_duration(left / rate)}" if left and rate > 0 else "")
        extra = "  ".join(f"{v:,} {COUNTERS.get(k, k)}" for k, v in sorted(self.counters.items()))
        resumed = f" ({self.resumed:,} {self.before})" if self.resumed else ""
        return (f"{self.label}: {self.done:,}/{self.total:,} {self.unit}{resumed}  elapsed {_duration(elapsed)}{speed}"
                + (f"  {extra}" if extra else ""))

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
            unit = STAGE_UNITS.get(stage, "done")
            self._stream.write(f"{self.label}: {stage} {min(done, total):,}/{total:,} {unit}  "
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
