"""A counting front that also keeps what each request asked: the query, the model, the
sample key and the JSON body (``tests/counting_front.py`` keeps the body's hash only).

It forwards every request to its target as it came, from a process of its own (nothing
the engine hooks in the test's process sees its traffic), and appends one JSON line per
request to its log. A test reads there what went over the wire: how many requests each
model got, and whether a perturbation's change was in the body that was sent.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from counting_front import CountingFront  # noqa: E402


class WireFront(CountingFront):
    """The front as a subprocess, keeping each request's body: ``url`` (the target's path
    prefix kept), ``root`` (no path), :meth:`requests` to read the log."""

    def __init__(self, target: str) -> None:
        super().__init__(target, bodies=True)
