"""The hook on DSPy 3.4's own LM engine, and on DSPy's response cache.

``dspy.LM`` sends through its vendored ``lm15`` engine when no OpenAI base URL is set
in the environment (with one set, through LiteLLM and the ``openai`` SDK: the httpx
hook sees those). ``lm15`` speaks HTTP/1.1 over sockets itself: every request goes
through ``StdlibTransport.stream`` (``StdlibAsyncTransport.stream`` for ``acall``),
which is wrapped here. The response a captured call returns is the whole body,
already read.

DSPy answers a request it has seen before from its cache, keyed by the request
without the sample key: inside a trace that would hand a repeat the first repeat's
answer without a request, so ``Cache.get`` misses and ``Cache.put`` stores nothing
there (outside a trace, and in a node with capture off, the cache works as usual).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any

from quiver.replay._llm import Ticket

from . import wire
from .calls import CapturedChat, wants_capture
from .httpx_hooks import paced

__all__ = ["patch_dspy"]

_MARK = "__quiver_capture__"
_JSON = [("Content-Type", "application/json")]


def _headers(request: Any, captured: CapturedChat) -> list[tuple[str, str]]:
    added = captured.headers()
    kept = [(k, v) for k, v in request.headers if k.lower() != "content-length" and k not in added]
    return kept + list(added.items())


def _rewritten(request: Any, captured: CapturedChat) -> Any:
    return dataclasses.replace(request, headers=_headers(request, captured), body=captured.request_body())


def _answered(place: Ticket | None, response: Any, content: bytes) -> None:
    """Report a paced request's answer to the run's schedule."""
    if place is not None:
        place.answer(response.status, {str(k).lower(): v for k, v in response.headers}, content)


def patch_dspy() -> bool:
    """Wrap lm15's transports and DSPy's cache once; False when DSPy has neither."""
    try:  # DSPy ships no type information: its modules are read as Any
        transports = importlib.import_module("dspy._vendor.lm15.transports")
        cache = importlib.import_module("dspy.clients.cache")
    except ImportError:
        return False
    StdlibTransport, StdlibAsyncTransport = transports.StdlibTransport, transports.StdlibAsyncTransport
    TransportResponse, AsyncTransportResponse = transports.TransportResponse, transports.AsyncTransportResponse
    if getattr(StdlibTransport.stream, _MARK, False):
        return True
    original_sync, original_async = StdlibTransport.stream, StdlibAsyncTransport.stream

    def whole(status: int, reason: str, headers: list[tuple[str, str]], version: str, body: bytes) -> Any:
        return TransportResponse(
            status=status,
            reason=reason,
            headers=headers,
            http_version=version,
            chunks=iter([body]),
            release=lambda consumed: None,
        )

    async def _no_release(consumed: bool) -> None:
        return None

    async def _chunks(body: bytes) -> Any:
        yield body

    def whole_async(status: int, reason: str, headers: list[tuple[str, str]], version: str, body: bytes) -> Any:
        return AsyncTransportResponse(
            status=status,
            reason=reason,
            headers=headers,
            http_version=version,
            chunks=_chunks(body),
            release=_no_release,
        )

    @functools.wraps(original_sync)
    def stream(self: Any, request: Any) -> Any:
        captured = CapturedChat.begin(request.method, request.url, lambda: request.body)
        if captured is None:
            site = wire.begin(request.method, request.url)
            if site is None:
                return original_sync(self, request)
            with wire.counted(site):
                return original_sync(self, request)
        body = captured.served_body()
        if body is not None:
            return whole(200, "OK", _JSON, "HTTP/1.1", body)
        site = wire.begin(request.method, request.url, wire.node_of(captured))
        rewritten = _rewritten(request, captured)
        place = paced(request.url, lambda: rewritten.body)
        try:
            if place is not None:
                place.wait()
            with wire.counted(site), original_sync(self, rewritten) as response:
                content = response.read()
        except BaseException as exc:
            captured.fail(exc)
            raise
        _answered(place, response, content)
        captured.finish(response.status, content)
        return whole(response.status, response.reason, response.headers, response.http_version, content)

    async def captured_async(self: Any, request: Any, captured: CapturedChat) -> Any:
        body = captured.served_body()
        if body is not None:
            return whole_async(200, "OK", _JSON, "HTTP/1.1", body)
        site = wire.begin(request.method, request.url, wire.node_of(captured))
        rewritten = _rewritten(request, captured)
        place = paced(request.url, lambda: rewritten.body)
        try:
            if place is not None:
                await place.await_place()
            with wire.counted(site):
                async with original_async(self, rewritten) as response:
                    content = await response.read()
        except BaseException as exc:
            captured.fail(exc)
            raise
        _answered(place, response, content)
        captured.finish(response.status, content)
        return whole_async(response.status, response.reason, response.headers, response.http_version, content)

    async def counted_async(self: Any, request: Any, site: wire.Site) -> Any:
        with wire.counted(site):
            return await original_async(self, request)

    @functools.wraps(original_async)
    def async_stream(self: Any, request: Any) -> Any:
        captured = CapturedChat.begin(request.method, request.url, lambda: request.body)
        if captured is None:
            site = wire.begin(request.method, request.url)
            return (
                original_async(self, request)
                if site is None
                else _AsyncResponse(lambda: counted_async(self, request, site))
            )
        return _AsyncResponse(lambda: captured_async(self, request, captured))

    _patch_cache(cache.Cache)
    setattr(stream, _MARK, True)
    setattr(async_stream, _MARK, True)
    StdlibTransport.stream = stream
    StdlibAsyncTransport.stream = async_stream
    return True


class _AsyncResponse:
    """What ``StdlibAsyncTransport.stream`` returns: awaitable, and an async context
    manager closing the response."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._response: Any = None

    def __await__(self) -> Any:
        return self._make().__await__()

    async def __aenter__(self) -> Any:
        self._response = await self._make()
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            await self._response.aclose()


def _patch_cache(cache: Any) -> None:
    original_get, original_put = cache.get, cache.put

    @functools.wraps(original_get)
    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        return None if wants_capture() else original_get(self, *args, **kwargs)

    @functools.wraps(original_put)
    def put(self: Any, *args: Any, **kwargs: Any) -> None:
        if not wants_capture():
            original_put(self, *args, **kwargs)

    cache.get, cache.put = get, put
