"""The hook on ``httpx`` and ``httpx2``: ``Client.send`` and ``AsyncClient.send``.

Every request of either library goes through ``send`` (``client.post`` and the
``openai`` and ``anthropic`` SDKs' own request loops included; the SDKs send through
``httpx2``, or through a legacy ``httpx`` client they are given, as LiteLLM does), so one
wrapper per class sees them all, whoever created the client.

What a wrapped ``send`` does is written once, as a generator (:func:`_exchange`) that
yields the I/O it needs (send this request, read that response) and is driven by the
synchronous and the asynchronous ``send`` alike (:func:`_drive`, :func:`_adrive`):

* an LLM request of a known format (:class:`~quiver.replay._capture.calls.CapturedCall`)
  is answered from the recording without a request, or sent rewritten and recorded; a
  streamed answer reaches the caller as it comes, through a stream that assembles it
  (:class:`_Tee`);
* an embeddings request (:mod:`.embeds`) and an HTTP request the spec names as a tool
  (:mod:`.http_tools`) are recorded as calls of their own, served while their dimension
  is frozen;
* anything else goes out as it came, counted on the trace's wire.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable, Generator
from types import ModuleType
from typing import Any

from quiver._interrupt import wait as interruptible_wait
from quiver._wire import SSEParser
from quiver.replay._llm import Ticket, origin_of, pacing_ticket, pacing_wait

from . import wire
from .calls import CapturedCall
from .embeds import CapturedEmbedding
from .http_steps import CapturedHTTP

__all__ = ["patch_httpx_module", "paced"]

_MARK = "__quiver_capture__"

Exchange = Generator[tuple[str, Any], Any, Any]
"""Yields ``("send", request)`` (answered with the response), ``("read", response)``
(answered once its body is read) or ``("wait", seconds)`` (a paced request's wait for
its place); returns the response for the caller."""


def _read(request: Any) -> bytes:
    try:
        return bytes(request.content)
    except Exception:  # a streamed body (httpx.RequestNotRead): never one we build
        return b""


def _rewritten(module: ModuleType, request: Any, headers: dict[str, str], content: bytes) -> Any:
    kept = [
        (k, v)
        for k, v in request.headers.multi_items()
        if k.lower() != "content-length" and k.lower() not in {h.lower() for h in headers}
    ]
    return module.Request(
        request.method,
        request.url,
        headers=kept + list(headers.items()),
        content=content,
        extensions=request.extensions,
    )


def _response(
    module: ModuleType, request: Any, status: int, content_type: str, chunks: list[bytes], stream: bool
) -> Any:
    """A response made here (served from a recording): a stream's events one chunk each."""
    headers = {"content-type": content_type}
    if stream:
        response = module.Response(status, headers=headers, request=request, stream=_events(module, chunks))
    else:
        response = module.Response(status, headers=headers, content=b"".join(chunks), request=request)
    response.elapsed = datetime.timedelta(0)
    return response


def _events(module: ModuleType, chunks: list[bytes]) -> Any:
    class Events(module.SyncByteStream, module.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __iter__(self) -> Any:
            yield from chunks

        async def __aiter__(self) -> Any:
            for chunk in chunks:
                yield chunk

    return Events()


def _exchange(module: ModuleType, request: Any) -> Exchange:
    """What a hooked ``send`` does with ``request`` (see the module docstring)."""
    method, url = request.method, str(request.url)
    for kind in (CapturedCall, CapturedEmbedding, CapturedHTTP):
        captured = kind.begin(method, url, lambda: _read(request))
        if captured is not None:
            break
    else:
        site = wire.begin(method, url)
        with wire.counted(site):
            return (yield from _sent(request))
    if isinstance(captured, CapturedCall):
        return (yield from _call_exchange(captured, module, request))
    return (yield from _child_exchange(captured, module, request))


def _child_exchange(captured: CapturedEmbedding | CapturedHTTP, module: ModuleType, request: Any) -> Exchange:
    """An embeddings or HTTP tool call's exchange: served, or sent and recorded."""
    served = captured.served()
    if served is not None:
        return _response(module, request, served.status, served.content_type, [served.body], False)
    site = wire.begin(request.method, str(request.url), captured.node)
    try:
        with wire.counted(site):
            response = yield from _sent(request)
        yield ("read", response)
    except BaseException as exc:
        captured.fail(exc)
        raise
    captured.finish(response.status_code, response.headers.get("content-type"), response.content)
    return response


def _call_exchange(captured: CapturedCall, module: ModuleType, request: Any) -> Exchange:
    """An LLM call's exchange: served, or sent rewritten and recorded."""
    served = captured.served()
    if served is not None:
        return _response(module, request, 200, served.content_type, served.chunks, served.stream)
    site = wire.begin(request.method, str(request.url), wire.node_of(captured))
    try:
        with wire.counted(site):
            response = yield from _sent(_rewritten(module, request, captured.headers(), captured.request_body()))
        if captured.stream and response.status_code < 400 and not hasattr(response, "_content"):
            response.stream = _Tee.around(module, response, captured)
            return response
        yield ("read", response)
        if captured.stream and response.status_code < 400:  # read whole by the client's send
            _Tee.around(module, response, captured).feed_all(response.content)
            return response
    except BaseException as exc:
        captured.fail(exc)
        raise
    captured.finish(response.status_code, response.content)
    return response


def _sent(request: Any) -> Exchange:
    """Send ``request``; an LLM request first waits for its place in the run's schedule
    (:mod:`quiver.replay._llm.pacing`), and its answer is reported to it."""
    place = paced(str(request.url), lambda: _read(request))
    if place is not None and place.reserve() > 0:
        yield ("wait", place.delay)
    response = yield ("send", request)
    if place is not None:
        place.answer(response.status_code, response.headers, getattr(response, "_content", None))
    return response


@functools.lru_cache(maxsize=256)
def _origin(url: str) -> str:
    return origin_of(url)


def paced(url: str, body: Callable[[], bytes]) -> Ticket | None:
    """The place in the run's schedule of a request to ``url`` (None: not an LLM
    request, or its endpoint is not paced)."""
    return pacing_ticket(_origin(url), body) if wire.llm_api(url) is not None else None


class _Tee:
    """A live answer's stream, passed on chunk by chunk and assembled as it goes; the
    call is recorded when the stream ends or is closed."""

    @staticmethod
    def around(module: ModuleType, response: Any, captured: CapturedCall) -> Any:
        inner = response.stream
        status = response.status_code
        parser, assembler = SSEParser(), captured.stream_assembler()
        start = time.perf_counter()
        timing: dict[str, Any] = {"chunks": 0}
        done: list[bool] = []

        def take(chunk: bytes) -> None:
            if not timing["chunks"]:
                timing["first_chunk_s"] = round(time.perf_counter() - start, 6)
            timing["chunks"] += 1
            for event, data in parser.feed(chunk):
                assembler.feed(event, data)

        def end(error: BaseException | None = None) -> None:
            if done:
                return
            done.append(True)
            if error is not None and assembler.answer() is None:
                captured.fail(error)
                return
            for event, data in parser.close():
                assembler.feed(event, data)
            timing["events"] = assembler.events
            timing["total_s"] = round(time.perf_counter() - start, 6)
            captured.finish_stream(status, assembler, timing)

        class Tee(module.SyncByteStream, module.AsyncByteStream):  # type: ignore[name-defined,misc]
            def feed_all(self, content: bytes) -> None:
                take(content)
                end()

            def __iter__(self) -> Any:
                try:
                    for chunk in inner:
                        take(chunk)
                        yield chunk
                except BaseException as exc:
                    end(exc)
                    raise
                end()

            async def __aiter__(self) -> Any:
                try:
                    async for chunk in inner:
                        take(chunk)
                        yield chunk
                except BaseException as exc:
                    end(exc)
                    raise
                end()

            def close(self) -> None:
                try:
                    inner.close()
                finally:
                    end()

            async def aclose(self) -> None:
                try:
                    await inner.aclose()
                finally:
                    end()

        return Tee()


def _drive(gen: Exchange, send: Any) -> Any:
    """Run an exchange with blocking I/O (``send``: the original ``Client.send``)."""
    try:
        step = next(gen)
        while True:
            try:
                if step[0] == "wait":
                    interruptible_wait(step[1])
                    result = None
                else:
                    result = send(step[1]) if step[0] == "send" else step[1].read()
            except BaseException as exc:
                step = gen.throw(exc)
            else:
                step = gen.send(result)
    except StopIteration as stop:
        return stop.value


async def _adrive(gen: Exchange, send: Any) -> Any:
    """Run an exchange with awaited I/O (``send``: the original ``AsyncClient.send``)."""
    try:
        step = next(gen)
        while True:
            try:
                if step[0] == "wait":
                    await pacing_wait(step[1])
                    result = None
                else:
                    result = await send(step[1]) if step[0] == "send" else await step[1].aread()
            except BaseException as exc:
                step = gen.throw(exc)
            else:
                step = gen.send(result)
    except StopIteration as stop:
        return stop.value


def patch_httpx_module(module: ModuleType) -> bool:
    """Wrap ``module.Client.send`` and ``module.AsyncClient.send`` once; True when
    patched now."""
    client, async_client = module.Client, module.AsyncClient
    if getattr(client.send, _MARK, False):
        return False
    original_sync, original_async = client.send, async_client.send

    @functools.wraps(original_sync)
    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        return _drive(_exchange(module, request), lambda r: original_sync(self, r, **kwargs))

    @functools.wraps(original_async)
    async def async_send(self: Any, request: Any, **kwargs: Any) -> Any:
        return await _adrive(_exchange(module, request), lambda r: original_async(self, r, **kwargs))

    setattr(send, _MARK, True)
    setattr(async_send, _MARK, True)
    client.send = send
    async_client.send = async_send
    return True
