"""Pacing a run's LLM requests to the endpoint's rate limits, for all its workers at once.

A hosted model allows so many requests and tokens per minute, per key and model, and
says so in its answers (``x-ratelimit-limit-requests``, ``-remaining-requests``,
``-reset-requests``, and the same for tokens); past them it answers 429 with
``retry-after``. Each call backing off on its own after a 429 leaves the run to spend
its time in 429s and synchronised backoff. Here the whole run shares one schedule:

* **What is known.** The limits the spec states (``llm.limits``), and those the endpoint
  sends in its ``x-ratelimit-limit-*`` headers (the lower of the two wins). Until one of
  them is known, nothing waits.
* **The schedule** (one :class:`Bucket` per endpoint origin and model): every LLM request
  reserves its place before it is sent, evenly spaced at ``utilization`` of the request
  limit, and its token estimate's share of the token limit; the request waits until its
  place comes. The token estimate is made from the request (its size, and ``max_tokens``
  or the completions seen so far), scaled by what the endpoint's ``usage`` reported for
  earlier requests, and the schedule is corrected by the difference once the answer
  comes.
* **The endpoint's word.** A 429 holds every request of the run until its
  ``retry-after`` has passed and lowers the pace by a tenth (recovered a little with each
  request answered); ``remaining`` at 0 holds every request until its ``reset``.

Every LLM request a trace sends leaves through a hooked transport (the engine's own
client's too), which asks :func:`ticket` for its place: so each request is paced once,
whichever client made it. The state is per process (:data:`pacer`); on Ray, every
worker process asks one coordinator actor instead (:func:`use_remote`).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from quiver._interrupt import check_interrupted, wait as interruptible_wait

__all__ = ["RateLimits", "Bucket", "Pacer", "Ticket", "RemoteBackend", "pacer", "ticket", "use_remote",
           "configure", "parse_reset", "usage_tokens", "async_wait", "LIMIT_HEADERS"]

LIMIT_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
                 "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens")
"""The rate-limit headers an endpoint may send (OpenAI's names, also used by Azure,
vLLM's proxies and the bundled simulator)."""


class RateLimits(BaseModel):
    """The endpoint's rate limits for the run's key, per model (the ``limits:`` block of ``llm``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    requests_per_minute: int | None = Field(default=None, ge=1)
    """Requests a minute the key may send to one model (None: unknown, learnt from the
    endpoint's ``x-ratelimit-limit-requests`` when it sends it)."""
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Tokens a minute (prompt and completion) the key may use with one model (None: as above)."""
    pace: bool = True
    """Pace the run's requests to the limits; false: every call backs off on its own
    after a 429, nothing else."""
    utilization: float = Field(default=0.97, gt=0, le=1)
    """The share of each limit the run aims at, in (0, 1]: a little below the limit keeps
    the endpoint's window from filling at the edges (the schedule sends no burst, so 3%
    covers the jitter of requests on their way)."""


class Bucket:
    """One schedule: the requests and tokens a minute of one endpoint and model.

    Each request takes the next free place, ``60 / (rpm x utilization x pace)`` seconds
    after the previous one, and at least its tokens' share of the token limit after the
    previous request's tokens (a generic cell rate algorithm: no burst).
    """

    def __init__(self, limits: RateLimits) -> None:
        self.stated = limits
        self.rpm = limits.requests_per_minute
        self.tpm = limits.tokens_per_minute
        self.next_request = 0.0
        self.next_token = 0.0
        self.pace = 1.0
        self.token_scale = 1.0
        """Endpoint tokens per estimated token, from the usage answers reported."""
        self.completion = 0.0
        """The mean completion tokens of the answers seen (for requests without ``max_tokens``)."""
        self.answers = 0

    @property
    def active(self) -> bool:
        """Whether a limit is known."""
        return self.rpm is not None or self.tpm is not None

    def _rate(self, per_minute: int) -> float:
        return per_minute * self.stated.utilization * self.pace / 60.0

    def reserve(self, now: float, tokens: float) -> float:
        """Take the next place for a request of ``tokens`` (estimated); the wait until it."""
        if not self.active:
            return 0.0
        start = max(now, self.next_request if self.rpm else now, self.next_token if self.tpm else now)
        if self.rpm:
            self.next_request = start + 1.0 / self._rate(self.rpm)
        if self.tpm:
            self.next_token = start + tokens / self._rate(self.tpm)
        return start - now

    def estimate(self, raw: float, max_tokens: int | None) -> float:
        """The tokens a request will use: ``raw`` (its prompt, from its size) scaled by the
        usage seen so far, plus its ``max_tokens`` or the mean completion seen."""
        if not self.answers:
            completion = float(max_tokens or 0)
        else:
            completion = self.completion if max_tokens is None else min(self.completion, float(max_tokens))
        return raw * self.token_scale + completion

    def settle(self, raw: float, estimate: float, prompt: int | None, total: int) -> None:
        """The endpoint reported ``total`` tokens (``prompt`` of them the prompt's) for a
        request estimated at ``estimate``: the schedule takes the difference, and later
        estimates learn from it."""
        self.answers += 1
        weight = 1.0 / min(self.answers, 20)
        if prompt is not None and raw > 0:
            self.token_scale += weight * (prompt / raw - self.token_scale)
            self.completion += weight * (max(0, total - prompt) - self.completion)
        if self.tpm:
            self.next_token += (total - estimate) / self._rate(self.tpm)

    def learn(self, now: float, headers: Mapping[str, str]) -> None:
        """What the endpoint's ``x-ratelimit-*`` headers say: its limits (the lower of them
        and the stated ones wins), and a hold until ``reset`` when nothing ``remaining``."""
        for kind in ("requests", "tokens"):
            limit = _number(headers.get(f"x-ratelimit-limit-{kind}"))
            stated = self.stated.requests_per_minute if kind == "requests" else self.stated.tokens_per_minute
            if limit is not None and limit >= 1:
                value = int(limit) if stated is None else min(stated, int(limit))
                setattr(self, "rpm" if kind == "requests" else "tpm", value)
            remaining = _number(headers.get(f"x-ratelimit-remaining-{kind}"))
            reset = parse_reset(headers.get(f"x-ratelimit-reset-{kind}"))
            if remaining is not None and remaining <= 0 and reset is not None:
                self.hold(now + reset)
        self.pace = min(1.0, self.pace + _RECOVERY)

    def hold(self, until: float) -> None:
        """No request before ``until``."""
        self.next_request = max(self.next_request, until)
        self.next_token = max(self.next_token, until)

    def limited(self, now: float, retry_after: float | None) -> None:
        """A 429: every request waits out ``retry_after`` (1 s when not given), and the pace drops."""
        self.hold(now + (retry_after if retry_after is not None else 1.0))
        self.pace = max(_SLOWEST, self.pace * _SLOWDOWN)


_SLOWDOWN = 0.9
"""The pace after a 429, relative to the one before."""

_SLOWEST = 0.5
"""The slowest pace 429s bring a run to (a share of the limit aimed at)."""

_RECOVERY = 0.002
"""The pace regained with each answer that was not a 429."""


class Backend(Protocol):
    """Where the schedules live: this process (:class:`Pacer`) or a coordinator (:class:`RemoteBackend`)."""

    def configure(self, origin: str, limits: RateLimits | None) -> None: ...
    def paced(self, origin: str) -> bool: ...
    def active(self, origin: str, model: str) -> bool: ...
    def reserve(self, origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]: ...
    def answered(self, origin: str, model: str, answer: dict[str, Any]) -> None: ...


class Pacer:
    """The schedules of this process, by endpoint origin and model; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limits: dict[str, RateLimits] = {}
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self.stats: dict[str, float] = {"requests": 0, "waited": 0, "wait_s": 0.0, "rate_limited": 0}

    def configure(self, origin: str, limits: RateLimits | None) -> None:
        """Pace requests to ``origin`` by ``limits`` (``pace: false``: not at all; None:
        to what its headers say, unless limits were given before); when they differ from
        those in force, its schedules start over."""
        with self._lock:
            if limits is None:
                if origin in self._limits:
                    return
                limits = RateLimits()
            if self._limits.get(origin) == limits:
                return
            for key in [k for k in self._buckets if k[0] == origin]:
                del self._buckets[key]
            self._limits[origin] = limits

    def paced(self, origin: str) -> bool:
        """Whether requests to ``origin`` are paced (known limits or not)."""
        found = self._limits.get(origin)
        return found is not None and found.pace

    def _bucket(self, origin: str, model: str) -> Bucket | None:
        found = self._buckets.get((origin, model))
        if found is None:
            limits = self._limits.get(origin)
            if limits is None or not limits.pace:
                return None
            found = self._buckets[(origin, model)] = Bucket(limits)
        return found

    def active(self, origin: str, model: str) -> bool:
        """Whether a limit is known for ``model`` at ``origin``."""
        with self._lock:
            bucket = self._bucket(origin, model)
            return bucket is not None and bucket.active

    def reserve(self, origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]:
        """``(wait in seconds, token estimate)`` of a request of ``raw`` prompt tokens (estimated)."""
        with self._lock:
            bucket = self._bucket(origin, model)
            if bucket is None:
                return 0.0, 0.0
            estimate = bucket.estimate(raw, max_tokens)
            wait = bucket.reserve(time.monotonic(), estimate)
            self.stats["requests"] += 1
            if wait > 0:
                self.stats["waited"] += 1
                self.stats["wait_s"] += wait
            return wait, estimate

    def answered(self, origin: str, model: str, answer: dict[str, Any]) -> None:
        """A paced request's answer (:meth:`Ticket.answer`): learn from it."""
        with self._lock:
            bucket = self._bucket(origin, model)
            if bucket is None:
                return
            now = time.monotonic()
            if answer.get("headers"):
                bucket.learn(now, answer["headers"])
            if answer.get("status") == 429:
                self.stats["rate_limited"] += 1
                bucket.limited(now, answer.get("retry_after"))
            elif answer.get("total") is not None and answer.get("estimate") is not None:
                bucket.settle(float(answer.get("raw") or 0.0), float(answer["estimate"]), answer.get("prompt"),
                              int(answer["total"]))


class RemoteBackend:
    """A worker process's view of a coordinator's :class:`Pacer` (see
    :mod:`quiver.replay._executors.pacing`): a request reserves its place there; answers
    are reported without waiting. While no limit is known for an origin and model here,
    nothing is asked (no round trip per request for an endpoint that states none)."""

    def __init__(self, reserve: Callable[..., tuple[float, float]], report: Callable[..., None],
                 configure: Callable[[str, RateLimits | None], None]) -> None:
        self._reserve, self._report, self._configure = reserve, report, configure
        self._origins: dict[str, RateLimits] = {}
        self._active: set[tuple[str, str]] = set()

    def configure(self, origin: str, limits: RateLimits | None) -> None:
        if limits is None:
            if origin in self._origins:
                return
            limits = RateLimits()
        self._origins[origin] = limits
        self._configure(origin, limits)

    def paced(self, origin: str) -> bool:
        found = self._origins.get(origin)
        return found is not None and found.pace

    def active(self, origin: str, model: str) -> bool:
        limits = self._origins.get(origin)
        if limits is None or not limits.pace:
            return False
        stated = limits.requests_per_minute is not None or limits.tokens_per_minute is not None
        return stated or (origin, model) in self._active

    def reserve(self, origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]:
        return self._reserve(origin, model, raw, max_tokens)

    def answered(self, origin: str, model: str, answer: dict[str, Any]) -> None:
        if answer.get("headers") and any(h.startswith("x-ratelimit-limit") for h in answer["headers"]):
            self._active.add((origin, model))
        self._report(origin, model, answer)


pacer = Pacer()
"""This process's schedules."""

_backend: Backend = pacer
_backend_owner: object = None


def configure(origin: str, limits: RateLimits | None) -> None:
    """Pace requests to ``origin`` by ``limits`` in this process (or at its coordinator)."""
    _backend.configure(origin, limits)


def use_remote(owner: object, backend: RemoteBackend | None) -> None:
    """Ask ``backend`` (a coordinator's) for places from now on, or this process's own
    :data:`pacer` again (None); ``owner`` names who installed it (installed once per owner)."""
    global _backend, _backend_owner
    if backend is None:
        _backend, _backend_owner = pacer, None
    elif _backend_owner != owner:
        _backend, _backend_owner = backend, owner


def remote_owner() -> object:
    """Who installed the backend in use (None: this process's own)."""
    return _backend_owner


# --------------------------------------------------------------------------- requests

_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.){1,200})"')
_MAX_TOKENS = re.compile(rb'"(?:max_tokens|max_completion_tokens|max_output_tokens)"\s*:\s*(\d{1,9})')
_TOTAL = re.compile(rb'"total_tokens"\s*:\s*(\d{1,12})')
_PROMPT = re.compile(rb'"(?:prompt_tokens|input_tokens)"\s*:\s*(\d{1,12})')
_OUTPUT = re.compile(rb'"(?:output_tokens|completion_tokens)"\s*:\s*(\d{1,12})')

BYTES_PER_TOKEN = 4.0
"""A request's prompt tokens, estimated from its body's size before the endpoint's usage
answers teach the scale."""


def usage_tokens(body: bytes) -> tuple[int | None, int] | None:
    """``(prompt tokens, total tokens)`` an answer's ``usage`` reports (chat completions,
    the Responses API, Anthropic's messages, embeddings), or None without one."""
    total = _TOTAL.search(body)
    prompt = _PROMPT.search(body)
    if total is not None:
        return (int(prompt.group(1)) if prompt else None), int(total.group(1))
    output = _OUTPUT.search(body)
    if prompt is None and output is None:
        return None
    first = int(prompt.group(1)) if prompt else 0
    return first, first + (int(output.group(1)) if output else 0)


def parse_reset(value: str | None) -> float | None:
    """Seconds in a ``x-ratelimit-reset-*`` value: ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s`` or a number."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


class Ticket:
    """One LLM request's place in its run's schedule: :meth:`wait` (or :meth:`await_`)
    before sending, :meth:`answer` with what came back."""

    __slots__ = ("origin", "model", "raw", "max_tokens", "estimate", "delay", "_backend")

    def __init__(self, backend: Backend, origin: str, model: str, raw: float, max_tokens: int | None) -> None:
        self._backend, self.origin, self.model, self.raw, self.max_tokens = backend, origin, model, raw, max_tokens
        self.estimate: float | None = None
        self.delay = 0.0

    def reserve(self) -> float:
        """Take the request's place; the seconds to wait for it."""
        if self._backend.active(self.origin, self.model):
            self.delay, self.estimate = self._backend.reserve(self.origin, self.model, self.raw, self.max_tokens)
        return self.delay

    def wait(self) -> None:
        """Take the request's place and wait for it (cut short by an interrupt, raising)."""
        if self.reserve() > 0:
            interruptible_wait(self.delay)

    async def await_place(self) -> None:
        """:meth:`wait` without holding the event loop."""
        if self.reserve() > 0:
            await async_wait(self.delay)

    def answer(self, status: int, headers: Any, body: bytes | None) -> None:
        """What the endpoint answered: its status, headers and (when read) body."""
        found = {name: headers.get(name) for name in LIMIT_HEADERS if headers.get(name) is not None}
        if not found and status != 429 and self.estimate is None:
            return  # nothing known nor to learn
        report: dict[str, Any] = {"status": status, "headers": found}
        if status == 429:
            report["retry_after"] = _retry_after(headers)
        elif body is not None and self.estimate is not None:
            usage = usage_tokens(body)
            if usage is not None:
                report.update(prompt=usage[0], total=usage[1], raw=self.raw, estimate=self.estimate)
        self._backend.answered(self.origin, self.model, report)


async def async_wait(seconds: float) -> None:
    """Wait ``seconds`` without holding the event loop; cut short by an interrupt (raising)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        check_interrupted()
        await asyncio.sleep(min(left, 0.1))
    check_interrupted()


def _retry_after(headers: Any) -> float | None:
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000.0
    return _number(headers.get("retry-after"))


def ticket(origin: str, body: Callable[[], bytes]) -> Ticket | None:
    """The place in the schedule of an LLM request to ``origin`` whose body ``body()``
    reads, or None when requests to ``origin`` are not paced."""
    backend = _backend
    if not backend.paced(origin):
        return None
    data = body()
    found = _MODEL.search(data)
    model = found.group(1).decode("utf-8", "replace") if found else ""
    cap = _MAX_TOKENS.search(data)
    return Ticket(backend, origin, model, len(data) / BYTES_PER_TOKEN, int(cap.group(1)) if cap else None)
