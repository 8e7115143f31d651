"""The simulator's rate limits: requests and tokens per minute, per key and model.

As a hosted model does, the simulator counts each API key's requests and tokens to each
model over a sliding window (``window_s``, 60 s by default: the limits are a minute's,
and a window of ``window_s`` seconds admits ``window_s / 60`` of them). A request that
would take the window past either limit is answered 429, with ``retry-after-ms`` and
``Retry-After`` saying when the window will hold it; every answer to a limited key and
model carries the ``x-ratelimit-*`` headers:

==================================  ========================================================
``x-ratelimit-limit-requests``      the requests a minute (``requests_per_minute``)
``x-ratelimit-remaining-requests``  requests the window admits now
``x-ratelimit-reset-requests``      until the window admits one more (``0s`` when it does:
                                    ``1.5s``, ``20ms``, ``1m3s``)
``x-ratelimit-*-tokens``            the same for tokens
==================================  ========================================================

A request's tokens are its prompt's (words, as the simulator's ``usage`` counts them)
when it is admitted, and its completion's once answered; a 429 counts nothing. The key
is the ``Authorization`` bearer token (or ``x-api-key``); a request without one counts
under the empty key.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelLimits", "LimitsConfig", "RateLimiter", "Admission", "format_reset"]

_MODEL_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ModelLimits(BaseModel):
    """One model's limits, for each key."""

    model_config = _MODEL_CONFIG

    requests_per_minute: int | None = Field(default=None, ge=1)
    """Requests a minute (None: no limit)."""
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Tokens a minute, prompt and completion (None: no limit)."""


class LimitsConfig(ModelLimits):
    """Rate limits per key and model (the simulator's ``limits``)."""

    window_s: float = Field(default=60.0, gt=0, le=3600)
    """The sliding window the limits are counted over, in seconds, in (0, 3600]."""
    models: dict[str, ModelLimits] = {}
    """Limits of particular models (by the name asked for), in place of the ones above."""

    @property
    def enabled(self) -> bool:
        """Whether any limit is set."""
        return any(m.requests_per_minute or m.tokens_per_minute for m in (self, *self.models.values()))

    def of(self, model: str) -> ModelLimits:
        """The limits of ``model``."""
        return self.models.get(model, self)


def format_reset(seconds: float) -> str:
    """A duration as OpenAI writes it in ``x-ratelimit-reset-*``: ``20ms``, ``1.5s``, ``1m3s``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class _Window:
    """One key and model's admitted requests in the window: ``[arrival, tokens]`` each."""

    def __init__(self) -> None:
        self.entries: deque[list[float]] = deque()
        self.tokens = 0.0

    def expire(self, now: float, window: float) -> None:
        while self.entries and self.entries[0][0] <= now - window:
            self.tokens -= self.entries.popleft()[1]

    def wait_for(self, now: float, window: float, requests: float | None, tokens: float | None,
                 cost: float) -> float:
        """How long until one more request of ``cost`` tokens fits (0: it fits now)."""
        wait = 0.0
        if requests is not None and len(self.entries) + 1 > requests:
            index = int(len(self.entries) - requests)  # the entry whose expiry makes room
            wait = self.entries[max(0, index)][0] + window - now
        if tokens is not None and self.tokens + cost > tokens:
            need, freed = self.tokens + cost - tokens, 0.0
            for arrival, used in self.entries:
                freed += used
                if freed >= need:
                    wait = max(wait, arrival + window - now)
                    break
            else:
                wait = max(wait, window)  # more than the window holds: the whole window
        return max(0.0, wait)


class Admission:
    """The verdict on one request: admitted or not, how long to wait, and the headers."""

    __slots__ = ("admitted", "retry_after_s", "headers", "_entry", "_window", "_limiter", "_model")

    def __init__(self, admitted: bool, retry_after_s: float, headers: dict[str, str],
                 entry: list[float] | None = None, window: _Window | None = None,
                 limiter: RateLimiter | None = None, model: str = "") -> None:
        self.admitted, self.retry_after_s, self.headers = admitted, retry_after_s, headers
        self._entry, self._window, self._limiter, self._model = entry, window, limiter, model

    def used(self, tokens: float) -> None:
        """The answer's completion took ``tokens`` more."""
        if self._entry is not None and self._window is not None and self._limiter is not None and tokens > 0:
            self._limiter._add_tokens(self._window, self._entry, tokens, self._model)


class RateLimiter:
    """The windows of every key and model; thread-safe."""

    def __init__(self, config: LimitsConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}
        self.stats: dict[str, dict[str, float]] = {}
        """By model: admitted and refused requests, tokens used, and the monotonic times of
        the first and last admitted request."""

    def admit(self, key: str, model: str, prompt_tokens: float) -> Admission:
        """Admit a request of ``prompt_tokens`` from ``key`` to ``model``, or refuse it."""
        limits = self.config.of(model)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if rpm is None and tpm is None:
            return Admission(True, 0.0, {})
        scale = self.config.window_s / 60.0
        requests = rpm * scale if rpm is not None else None
        tokens = tpm * scale if tpm is not None else None
        with self._lock:
            now = time.monotonic()
            window = self._windows.setdefault((key, model), _Window())
            window.expire(now, self.config.window_s)
            wait = window.wait_for(now, self.config.window_s, requests, tokens, prompt_tokens)
            entry = None
            stats = self._stats(model)
            if wait <= 0:
                entry = [now, float(prompt_tokens)]
                window.entries.append(entry)
                window.tokens += prompt_tokens
                stats["admitted"] += 1
                stats["tokens"] += prompt_tokens
                stats["first"] = stats["first"] or now
                stats["last"] = now
            else:
                stats["refused"] += 1
            headers = self._headers(window, now, rpm, tpm, requests, tokens)
        return Admission(entry is not None, wait, headers, entry, window, self, model)

    def _stats(self, model: str) -> dict[str, float]:
        found = self.stats.get(model)
        if found is None:
            found = self.stats[model] = {"admitted": 0, "refused": 0, "tokens": 0.0, "first": 0.0, "last": 0.0}
        return found

    def _add_tokens(self, window: _Window, entry: list[float], tokens: float, model: str) -> None:
        with self._lock:
            self._stats(model)["tokens"] += tokens
            if window.entries and window.entries[0][0] <= entry[0]:  # still in its window
                entry[1] += tokens
                window.tokens += tokens

    def _headers(self, window: _Window, now: float, rpm: int | None, tpm: int | None, requests: float | None,
                 tokens: float | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        span = self.config.window_s
        if rpm is not None and requests is not None:
            left = int(requests) - len(window.entries)
            headers["x-ratelimit-limit-requests"] = str(rpm)
            headers["x-ratelimit-remaining-requests"] = str(max(0, left))
            headers["x-ratelimit-reset-requests"] = format_reset(
                0.0 if left > 0 else max(0.0, window.entries[0][0] + span - now) if window.entries else 0.0)
        if tpm is not None and tokens is not None:
            left_tokens = int(tokens - window.tokens)
            headers["x-ratelimit-limit-tokens"] = str(tpm)
            headers["x-ratelimit-remaining-tokens"] = str(max(0, left_tokens))
            headers["x-ratelimit-reset-tokens"] = format_reset(
                0.0 if left_tokens > 0 else window.wait_for(now, span, None, tokens, 1.0))
        return headers

    def snapshot(self) -> dict[str, dict[str, float]]:
        """The counts so far, by model (:attr:`stats`)."""
        with self._lock:
            return {model: dict(counts) for model, counts in self.stats.items()}
