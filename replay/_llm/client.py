"""The LLM client: the OpenAI SDK with the engine's retry policy and the replay contract.

:class:`LLMClient` talks to any OpenAI-compatible endpoint (OpenAI, Azure, vLLM,
Ollama, the bundled simulator) through the unmodified ``openai`` SDK, with the SDK's
own retries off (``max_retries=0``): the engine's :class:`RetryPolicy` is the only one.
It retries rate limits (honouring ``retry-after-ms`` / ``Retry-After``), 5xx, timeouts,
connection errors and malformed bodies with exponential backoff (tenacity), and counts
every retry by reason.

Requests go through the SDK's generic ``post`` (its documented way to make a request it
has no typed method for) with the body as the engine built it, and the answer is read as
the JSON body: the SDK's own transport, headers, timeouts and error types, without its
per-call walk of the request through the typed parameter schema and the building of a
typed response object. Those two cost about as much CPU as the HTTP exchange itself,
and at campaign scale the driver's CPU is what bounds the replay rate. A body that is
not a chat completion (no ``choices``) counts as malformed, like one that is not JSON.

Inside a recorded trace each chat call records the replay contract (QUIVER.md §12) on
the current ``llm`` node call, or on a child ``llm`` call it opens when there is none:
model name, reported version and sampling parameters; template id and hash, assembled
messages and fragment hashes; the raw response, usage and logprobs. Every call carries
a *sample key* in the ``X-Quiver-Sample-Key`` header, derived from the trace's key and
the call's path, so a response is reproducible where the endpoint honours it (the
simulator does; other endpoints ignore the header).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import json
import os
import random
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from quiver._errors import InstrumentationError, LLMError, LLMRequestError, LLMUnavailable
from quiver._interrupt import check_interrupted, wait as interruptible_wait
from quiver._wire import CHAT
from quiver.replay._instrument import Template
from quiver.replay._keys import SAMPLE_KEY_HEADER

from . import pacing
from .cache import ResponseCache
from .contract import OPTION_NAMES, PARAM_NAMES, ChatResult, PendingChat, build_prompt, swapped_prompt
from .current import current_overrides, engine_request, response_cache_enabled
from .health import DEFAULT_UNREACHABLE_S, endpoints, is_connection_failure, origin_of
from .pacing import RateLimits

__all__ = ["RetryPolicy", "LLMClient", "MalformedCompletion"]


class RetryPolicy(BaseModel):
    """How LLM calls are retried (the ``retry:`` block of a spec)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    attempts: int = Field(default=8, ge=1)
    """Attempts in all, the first included."""
    initial_s: float = Field(default=0.5, gt=0)
    """First backoff wait; it doubles each attempt, with jitter."""
    max_s: float = Field(default=30.0, gt=0)
    """Longest backoff wait."""
    max_retry_after_s: float = Field(default=120.0, gt=0)
    """Longest wait a server's Retry-After may impose."""
    unreachable_s: float = Field(default=DEFAULT_UNREACHABLE_S, gt=0)
    """How long the endpoint may refuse every connection (each request and a connection
    probe failing) before the run stops, with nothing counted as failed because of it
    (``--resume`` continues once the endpoint is back)."""


def _reason(exc: BaseException) -> str | None:
    """Why a failed attempt is worth retrying, or None when it is not."""
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.APIStatusError):
        return "server_error" if exc.status_code >= 500 or exc.status_code in (408, 409) else None
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, MalformedCompletion)):
        return "malformed"
    return None


class MalformedCompletion(ValueError):
    """A response body that is JSON but not a chat completion."""


def _completion(body: Any) -> dict[str, Any]:
    """The chat completion in a response body (bytes or parsed JSON); raises
    :class:`json.JSONDecodeError` or :class:`MalformedCompletion`."""
    data = json.loads(body) if isinstance(body, (bytes, str)) else body
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(data, dict) or not isinstance(first, dict) or not isinstance(first.get("message"), dict):
        raise MalformedCompletion(
            f"the response is not a chat completion (no choices with a message): {str(body)[:200]}"
        )
    return data


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _response_format(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, type) and issubclass(value, BaseModel):
        return {
            "type": "json_schema",
            "json_schema": {"name": value.__name__, "schema": value.model_json_schema(), "strict": True},
        }
    raise InstrumentationError(
        f"response_format must be a dict or a pydantic model class; got {type(value).__name__}"
    )


class LLMClient:
    """An OpenAI-compatible chat client that records the replay contract.

    Args:
        base_url: The endpoint, e.g. ``https://api.openai.com/v1`` or the simulator's url.
        model: The default model name.
        api_key: The key itself (prefer ``api_key_env``).
        api_key_env: The environment variable holding the key; read now.
        timeout_s: Per-attempt HTTP timeout.
        retry: The retry policy.
        params: Default sampling parameters (temperature, top_p, seed, max_tokens).
        cache: A :class:`~quiver.replay.ResponseCache`: a call that carries a sample key
            is answered from it when the same request with the same key was answered
            before (see :func:`use_response_cache`).
        limits: The endpoint's rate limits (:class:`~quiver.replay._llm.pacing.RateLimits`,
            or its fields): every LLM request this process sends to the endpoint, this
            client's and those captured at the transport, is paced to them and to what the
            endpoint's ``x-ratelimit-*`` headers say (None: to the headers alone, unless
            limits were given for the endpoint before in this process).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        params: Mapping[str, Any] | None = None,
        cache: ResponseCache | None = None,
        limits: RateLimits | Mapping[str, Any] | None = None,
    ) -> None:
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise LLMError(
                    f"environment variable {api_key_env} holds no API key; set it, or name the "
                    "variable that does in llm.api_key_env"
                )
        self.base_url = base_url
        self.model = model
        self.api_key = api_key or "unused"
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.params = dict(params or {})
        self.cache = cache
        self.origin = origin_of(base_url)
        endpoints.set_bound(self.origin, self.retry.unreachable_s)
        given = limits if isinstance(limits, RateLimits) or limits is None else RateLimits.model_validate(limits)
        pacing.configure(self.origin, given)  # None: the headers alone, unless limits were given before
        self.limits = given or RateLimits()
        # Synchronous calls go round several SDK clients, each with its own connection
        # pool: httpcore's pool scans all its connections and waiting requests on every
        # request and release, so one pool shared by 64 threads costs about 12% more CPU
        # per call than eight pools of eight (measured against the simulator).
        self._sync_pools: list[openai.OpenAI | None] = [None] * _SYNC_POOLS
        self._next_pool = itertools.count()
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()

    # -- public API ------------------------------------------------------------------
    def chat(self, template: str | Template | None = None, /, **kwargs: Any) -> ChatResult:
        """One chat completion.

        Args:
            template: A registered template id or :class:`Template`; its variables come
                from ``variables=`` and from the other keyword arguments not listed here.
            messages: Raw messages instead of a template.
            model, temperature, top_p, seed, max_tokens, response_format, logprobs,
            top_logprobs: Request parameters (``response_format`` may be a pydantic
                model class: the reply is then parsed JSON in ``ChatResult.data``).
            name: The node name of the ``llm`` call opened when the current call cannot
                hold this one (default: the template id, else ``llm``).
        """
        call = self._prepare(template, kwargs)
        served = call.served()
        if served is not None:
            return served
        try:
            response, attempts = self._send_sync(call)
            result = self._finish(call, response, attempts)
        except BaseException as exc:
            call.fail(exc)
            raise
        return result

    async def achat(self, template: str | Template | None = None, /, **kwargs: Any) -> ChatResult:
        """The async form of :meth:`chat`."""
        call = self._prepare(template, kwargs)
        served = call.served()
        if served is not None:
            return served
        try:
            response, attempts = await self._send_async(call)
            result = self._finish(call, response, attempts)
        except BaseException as exc:
            call.fail(exc)
            raise
        return result

    def close(self) -> None:
        """Close the HTTP connections."""
        with self._lock:
            pools, self._sync_pools = self._sync_pools, [None] * _SYNC_POOLS
        for client in pools:
            if client is not None:
                client.close()

    # -- internals -------------------------------------------------------------------
    def _prepare(self, template: str | Template | None, kwargs: dict[str, Any]) -> PendingChat:
        options = {k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs}
        variables = {**kwargs.pop("variables", {}), **kwargs}
        prompt = swapped_prompt(build_prompt(template, options.pop("messages", None), variables, extra=kwargs))
        params = {**self.params, **{k: v for k, v in options.items() if k in PARAM_NAMES and v is not None}}
        overrides = current_overrides() or {}
        params.update({k: v for k, v in overrides.items() if k in PARAM_NAMES})
        if "response_format" in params:
            params["response_format"] = _response_format(params["response_format"])
        model = overrides.get("model") or options.get("model") or self.model
        if not model:
            raise InstrumentationError("no model given: pass model= to chat() or to LLMClient(model=...)")
        return PendingChat.open(self, model, params, prompt, options.get("name"))

    def _request(self, call: PendingChat) -> dict[str, Any]:
        """The request body, and the sample key header as ``extra_headers`` (the response
        cache's key covers both)."""
        body: dict[str, Any] = {
            "model": call.model,
            "messages": [m.model_dump() for m in call.prompt.assembled],
            **call.params,
        }
        if call.sample_key:
            body["extra_headers"] = {SAMPLE_KEY_HEADER: call.sample_key}
        return body

    def _retrying_kwargs(self, call: PendingChat) -> dict[str, Any]:
        policy = self.retry

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            after = _retry_after(exc) if exc else None
            if after is not None:
                return min(after, policy.max_retry_after_s)
            backoff: float = min(policy.max_s, policy.initial_s * 2 ** (state.attempt_number - 1))
            return backoff * (0.5 + _jitter() / 2)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            call.note_retry(_reason(exc) or "other" if exc else "other")

        return {
            "stop": stop_after_attempt(policy.attempts),
            "wait": wait,
            "retry": retry_if_exception(lambda e: _reason(e) is not None),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def _cache_key(self, call: PendingChat, request: dict[str, Any]) -> str | None:
        if self.cache is None or not call.sample_key or not response_cache_enabled():
            return None
        return self.cache.key(request, call.sample_key)

    def _cached(self, key: str | None) -> dict[str, Any] | None:
        if key is None:
            return None
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is None:
            return None
        with self._lock:
            self.stats["cache_hits"] += 1
        return _completion(hit)

    def _store(self, key: str | None, response: dict[str, Any]) -> None:
        if key is not None and self.cache is not None:
            self.cache.put(key, response)

    @staticmethod
    def _post_args(request: dict[str, Any]) -> dict[str, Any]:
        body = dict(request)
        headers = body.pop("extra_headers", None)
        return {"cast_to": bytes, "body": body, "options": {"headers": headers} if headers else {}}

    def _send_sync(self, call: PendingChat) -> tuple[dict[str, Any], int]:
        request = self._request(call)
        key = self._cache_key(call, request)
        cached = self._cached(key)
        if cached is not None:
            return cached, 0
        args = self._post_args(request)
        attempts = 0
        try:
            for attempt in Retrying(sleep=self._wait, **self._retrying_kwargs(call)):
                with attempt:
                    check_interrupted()  # interrupted: no new attempt, no backoff wait
                    endpoints.check(self.origin)  # down: no new attempt either
                    attempts += 1
                    with engine_request(call.record.node if call.record is not None else None), self._watched():
                        body = self._sync_client().post("/chat/completions", **args)
                    response = _completion(body)
                    self._store(key, response)
                    return response, attempts
        except BaseException as exc:
            raise _mapped(exc, attempts) from exc
        raise LLMUnavailable("no attempt was made")  # pragma: no cover - tenacity always tries once

    async def _send_async(self, call: PendingChat) -> tuple[dict[str, Any], int]:
        request = self._request(call)
        key = self._cache_key(call, request)
        cached = self._cached(key)
        if cached is not None:
            return cached, 0
        client = self._async_client()
        args = self._post_args(request)
        attempts = 0
        try:
            async for attempt in AsyncRetrying(sleep=self._async_wait, **self._retrying_kwargs(call)):
                with attempt:
                    check_interrupted()
                    endpoints.check(self.origin)
                    attempts += 1
                    with engine_request(call.record.node if call.record is not None else None), self._watched():
                        body = await client.post("/chat/completions", **args)
                    response = _completion(body)
                    self._store(key, response)
                    return response, attempts
        except BaseException as exc:
            raise _mapped(exc, attempts) from exc
        raise LLMUnavailable("no attempt was made")  # pragma: no cover

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """Report how one attempt went to the endpoint's health (:mod:`.health`)."""
        try:
            yield
        except Exception as exc:
            if is_connection_failure(exc):
                endpoints.failed(self.origin, exc)
            elif isinstance(exc, openai.APIStatusError):
                endpoints.succeeded(self.origin)
            raise
        endpoints.succeeded(self.origin)

    def _wait(self, seconds: float) -> None:
        """A backoff wait, cut short when the process is interrupted (raising) or the
        endpoint is declared down (the next attempt raises)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and endpoints.down(self.origin) is None:
            interruptible_wait(min(left, _WAIT_STEP_S))
        check_interrupted()

    async def _async_wait(self, seconds: float) -> None:
        """The async form of :meth:`_wait`."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and endpoints.down(self.origin) is None:
            check_interrupted()
            await asyncio.sleep(min(left, _WAIT_STEP_S))
        check_interrupted()

    def _sync_client(self) -> openai.OpenAI:
        i = next(self._next_pool) % _SYNC_POOLS
        client = self._sync_pools[i]
        if client is None:
            with self._lock:
                client = self._sync_pools[i]
                if client is None:
                    client = openai.OpenAI(
                        base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=self.timeout_s
                    )
                    self._sync_pools[i] = client
        return client

    def _async_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = openai.AsyncOpenAI(
                    base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=self.timeout_s
                )
                self._async[loop] = client
        return client

    @staticmethod
    def _finish(call: PendingChat, response: dict[str, Any], attempts: int) -> ChatResult:
        answer = CHAT.read_answer(response)
        if answer is None:  # pragma: no cover - _completion checked the shape
            raise MalformedCompletion(f"the response is not a chat completion: {str(response)[:200]}")
        return call.finish(answer, attempts)


_SYNC_POOLS = 8
"""SDK clients (connection pools) synchronous calls go round."""

_WAIT_STEP_S = 0.1
"""How often a backoff wait looks whether the process was interrupted or the endpoint
declared down."""


def _jitter() -> float:
    """Backoff jitter in [0, 1): random on purpose, so that clients spread out."""
    return random.random()


def _mapped(exc: BaseException, attempts: int) -> BaseException:
    if isinstance(exc, LLMError) or not isinstance(exc, Exception):
        return exc
    reason = _reason(exc)
    if reason is not None:
        return LLMUnavailable(f"LLM call failed after {attempts} attempt(s), last: {reason}: {exc}")
    if isinstance(exc, openai.APIStatusError):
        return LLMRequestError(f"the endpoint refused the request (HTTP {exc.status_code}): {exc.message}")
    return exc


