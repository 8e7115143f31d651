"""What one trace sent over the wire: the counts behind every number of LLM calls the
engine states (filled in by the transport hooks, :mod:`quiver.replay._capture.wire`)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

__all__ = ["Wire"]


class Wire:
    """What one trace sent over the wire, by node (see :mod:`quiver.replay._capture.wire`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.llm: Counter[str] = Counter()
        """LLM requests the endpoint answered, by node."""
        self.http: Counter[str] = Counter()
        """Other HTTP requests answered, by node."""
        self.unanswered: Counter[str] = Counter()
        """Requests (LLM or HTTP) that got no answer, by node."""
        self.unaccounted: Counter[tuple[str, str]] = Counter()
        """Requests the replay contract did not account for, by (node, endpoint)."""

    def add(self, node: str, endpoint: str, *, llm: bool, accounted: bool, answered: bool) -> None:
        """Count one request ``node`` sent to ``endpoint`` (``METHOD host:port/path``)."""
        with self._lock:
            if not answered:
                self.unanswered[node] += 1
            elif llm:
                self.llm[node] += 1
            else:
                self.http[node] += 1
            if not accounted:
                self.unaccounted[(node, endpoint)] += 1

    def add_llm(self, node: str, requests: int) -> None:
        """Count ``requests`` LLM requests answered for ``node`` that another trace's wire
        saw (an operator's own calls, made in a scratch trace)."""
        if requests:
            with self._lock:
                self.llm[node] += requests

    @property
    def llm_total(self) -> int:
        return sum(self.llm.values())

    def to_json(self) -> dict[str, Any]:
        """The counts as plain data, empty parts left out (a worker hands them to the driver)."""
        with self._lock:
            out: dict[str, Any] = {
                "llm": dict(sorted(self.llm.items())),
                "http": dict(sorted(self.http.items())),
                "unanswered": dict(sorted(self.unanswered.items())),
                "unaccounted": [{"node": n, "endpoint": e, "requests": k}
                                for (n, e), k in sorted(self.unaccounted.items())],
            }
        return {k: v for k, v in out.items() if v}  # nothing sent: {}
