"""Noticing an LLM endpoint that stopped answering.

Every LLM request the engine sends or captures reports how it went, by the endpoint's
origin (``scheme://host:port``): answered (any HTTP status: the endpoint is there), or
failed to connect (refused, reset, unreachable, a connect timeout). A read timeout is
neither: a slow model is not a dead one.

When an origin's requests fail to connect, a probe thread tries a TCP connection to it
every :data:`PROBE_S` seconds. The origin is declared **down** when, for at least the
bound (``RetryPolicy.unreachable_s``, default 5 s), no request to it was answered and
the probe's last connection failed as well. From then on every request to it raises
:class:`EndpointDown` at once, instead of retrying with backoff: within a few seconds of
the endpoint dying, every replay in flight in the process has ended. An answered request
or a successful probe clears the state (the endpoint is back).

A trace remembers which of its LLM requests failed to connect (:func:`trace_scope`,
:func:`trace_verdict`): when it ends, each such origin is settled (up again, or declared
down), and a trace that an unreachable endpoint cut short is reported as such, as
:class:`EndpointDown`, even when the pipeline caught the error and carried on. Such a
trace is never written as a failed trace nor committed as a failed replay: the run stops
with one line, and ``--resume`` runs it again once the endpoint is back.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiver._errors import LLMUnavailable

__all__ = ["EndpointDown", "Endpoints", "SeenEndpoints", "endpoints", "origin_of", "is_connection_failure",
           "trace_scope", "trace_verdict", "DEFAULT_UNREACHABLE_S", "PROBE_S"]

DEFAULT_UNREACHABLE_S = 5.0
"""How long an endpoint may refuse every connection before it is declared down."""

PROBE_S = 0.25
"""Seconds between two connection probes of a failing endpoint (1 s once it is down)."""

_PROBE_TIMEOUT_S = 1.0


class EndpointDown(LLMUnavailable):
    """An LLM endpoint refused every connection for longer than the bound: the run stops.

    Attributes:
        origin: ``scheme://host:port`` of the endpoint.
        seconds: How long it had been failing when it was declared down.
        failures: Requests that failed to connect meanwhile.
        last_error: The last connection error, in one line.
        since: Wall-clock time (epoch seconds) of the first failure.
    """

    def __init__(self, origin: str, seconds: float, failures: int, last_error: str, since: float) -> None:
        self.origin = origin
        self.seconds = seconds
        self.failures = failures
        self.last_error = last_error
        self.since = since
        stamp = time.strftime("%H:%M:%S", time.localtime(since))
        super().__init__(
            f"the LLM endpoint {origin} stopped answering: every connection failed for {seconds:.1f} s since "
            f"{stamp} ({failures} request(s); last: {last_error})"
        )

    def with_note(self, note: str) -> EndpointDown:
        """The same error, its message ending with ``note`` (what was kept, how to go on)."""
        out = EndpointDown(self.origin, self.seconds, self.failures, self.last_error, self.since)
        out.args = (f"{self.args[0]}; {note}",)
        return out

    def to_json(self) -> dict[str, Any]:
        """The error as plain data (a worker process hands it to the driver)."""
        return {"origin": self.origin, "seconds": self.seconds, "failures": self.failures,
                "last_error": self.last_error, "since": self.since}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EndpointDown:
        """The error :meth:`to_json` described."""
        return cls(str(data.get("origin")), float(data.get("seconds") or 0.0), int(data.get("failures") or 0),
                   str(data.get("last_error") or ""), float(data.get("since") or time.time()))


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port filled in from the scheme)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme or "http"
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname or ""
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


_CONNECT_ERRORS = frozenset({"ConnectError", "ConnectTimeout", "RemoteProtocolError", "ReadError", "WriteError",
                             "CloseError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError",
                             "ConnectionAbortedError", "BrokenPipeError", "gaierror"})
"""Names of the exception classes (httpx, httpx2, httpcore, the standard library) that
mean the request did not reach an endpoint able to answer it."""


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a failure to connect to, or
    a connection dropped by, the endpoint: not a timeout while it was reading, nor an
    HTTP error status."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__name__ in _CONNECT_ERRORS for cls in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip().splitlines()
    name = type(exc).__name__ if isinstance(exc, BaseException) else ""
    message = text[0][:200] if text else ""
    return f"{name}: {message}" if name and message else name or message or "connection failed"


@dataclass
class _State:
    """One origin's health."""

    bound: float = DEFAULT_UNREACHABLE_S
    failing_since: float | None = None
    """Monotonic time of the first failure since the last answer (None: healthy)."""
    wall_since: float = 0.0
    failures: int = 0
    last_error: str = ""
    reachable: bool | None = None
    """What the last probe found since the first failure (None: no probe yet)."""
    down: EndpointDown | None = None
    probing: bool = False


class Endpoints:
    """The health of every origin this process sends LLM requests to (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._states: dict[str, _State] = {}

    def _state(self, origin: str) -> _State:
        state = self._states.get(origin)
        if state is None:
            state = self._states[origin] = _State()
        return state

    def set_bound(self, origin: str, seconds: float) -> None:
        """How long ``origin`` may refuse every connection before it is declared down."""
        with self._cond:
            self._state(origin).bound = seconds

    def succeeded(self, origin: str) -> None:
        """A request to ``origin`` was answered (whatever its status)."""
        state = self._states.get(origin)
        if state is None or (state.failing_since is None and state.down is None):
            return  # the common case: nothing to clear, no lock taken
        with self._cond:
            self._clear(state)

    def failed(self, origin: str, error: BaseException | str) -> None:
        """A request to ``origin`` failed to connect; starts the probe if none runs."""
        with self._cond:
            state = self._state(origin)
            if state.failing_since is None:
                state.failing_since, state.wall_since, state.failures, state.reachable = (
                    time.monotonic(), time.time(), 0, None)
            state.failures += 1
            state.last_error = _one_line(error)
            start = not state.probing
            state.probing = True
        _note_failure(origin)
        if start:
            threading.Thread(target=self._probe, args=(origin,), name="quiver-endpoint-probe", daemon=True).start()

    def down(self, origin: str) -> EndpointDown | None:
        """The error ``origin`` was declared down with, or None while it is not down."""
        state = self._states.get(origin)
        return state.down if state is not None else None

    def check(self, origin: str) -> None:
        """Raise :class:`EndpointDown` when ``origin`` is down (and note it on the trace)."""
        down = self.down(origin)
        if down is not None:
            _note_down(down)
            raise down

    def settle(self, origin: str) -> EndpointDown | None:
        """Wait until ``origin`` answered again, a probe reached it, or it was declared
        down (at most its bound and two probe timeouts); the error when it is down."""
        with self._cond:
            state = self._state(origin)
            limit = time.monotonic() + state.bound + 2 * _PROBE_TIMEOUT_S + 1.0
            while (state.down is None and state.failing_since is not None and state.reachable is not True
                   and (left := limit - time.monotonic()) > 0):
                self._cond.wait(left)
            return state.down

    def reset(self) -> None:
        """Forget every origin's state (a new run in the same process starts clean)."""
        with self._cond:
            for state in self._states.values():
                self._clear(state)

    def _clear(self, state: _State) -> None:
        state.failing_since, state.failures, state.last_error, state.reachable, state.down = None, 0, "", None, None
        self._cond.notify_all()

    def _probe(self, origin: str) -> None:
        """Try a TCP connection to ``origin`` until it is healthy again; declare it down
        when it has failed for its bound and the last connection failed too."""
        try:
            while True:
                with self._cond:
                    state = self._state(origin)
                    if state.failing_since is None and state.down is None:
                        return
                    pause = 1.0 if state.down is not None else PROBE_S
                reached = _connects(origin)
                with self._cond:
                    if state.down is not None:
                        if reached:
                            self._clear(state)
                            return
                    elif state.failing_since is not None:
                        state.reachable = reached
                        if reached:
                            self._cond.notify_all()
                            return  # reachable: requests settle it; a new failure probes again
                        elapsed = time.monotonic() - state.failing_since
                        if elapsed >= state.bound:
                            state.down = EndpointDown(origin, elapsed, state.failures,
                                                      state.last_error or "no connection", state.wall_since)
                            self._cond.notify_all()
                time.sleep(pause)
        finally:
            with self._cond:
                self._state(origin).probing = False


def _connects(origin: str) -> bool:
    """Whether a TCP connection to ``origin`` opens now."""
    parts = urllib.parse.urlsplit(origin)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


endpoints = Endpoints()
"""This process' endpoint health."""


@dataclass
class SeenEndpoints:
    """What a trace's LLM requests met: origins that failed to connect, and a down endpoint."""

    failed: set[str] = field(default_factory=set)
    down: EndpointDown | None = None


_seen: contextvars.ContextVar[SeenEndpoints | None] = contextvars.ContextVar("quiver_endpoint_seen", default=None)


def _note_failure(origin: str) -> None:
    seen = _seen.get()
    if seen is not None:
        seen.failed.add(origin)


def _note_down(down: EndpointDown) -> None:
    seen = _seen.get()
    if seen is not None and seen.down is None:
        seen.down = down


@contextlib.contextmanager
def trace_scope() -> Iterator[SeenEndpoints]:
    """Within the block (one trace, in its own context), remember what its LLM requests met."""
    seen = SeenEndpoints()
    token = _seen.set(seen)
    try:
        yield seen
    finally:
        _seen.reset(token)


def trace_verdict(seen: SeenEndpoints) -> EndpointDown | None:
    """The error when an unreachable endpoint cut the trace short: a request of it met a
    down endpoint, or failed to connect to one that turns out to be down."""
    if seen.down is not None:
        return seen.down
    for origin in sorted(seen.failed):
        down = endpoints.settle(origin)
        if down is not None:
            return down
    return None
