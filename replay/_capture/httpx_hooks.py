"""The hook on ``httpx`` and ``httpx2``: ``Client.send`` and ``AsyncClient.send``.

Every request of either library goes through ``send`` (``client.post`` and the
``openai`` SDK's own request loop included; the SDK 3.x sends through ``httpx2``, or
through a legacy ``httpx`` client it is given, as LiteLLM does), so one wrapper per
class sees them all, whoever created the client. The wrapper asks
:meth:`CapturedChat.begin` first and, when it declines, calls the original ``send``
with the same arguments.
"""

from __future__ import annotations

import datetime
import functools
from types import ModuleType
from typing import Any

from . import wire
from .calls import CapturedChat

__all__ = ["patch_httpx_module"]

_MARK = "__quiver_capture__"


def _begin(request: Any) -> CapturedChat | None:
    def read() -> bytes:
        try:
            return bytes(request.content)
        except Exception:  # a streamed body (httpx.RequestNotRead): never a chat completion we build
            return b""

    return CapturedChat.begin(request.method, str(request.url), read)


def _rewritten(module: ModuleType, request: Any, captured: CapturedChat) -> Any:
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    headers += list(captured.headers().items())
    return module.Request(
        request.method, request.url, headers=headers, content=captured.request_body(),
        extensions=request.extensions,
    )


def _served(module: ModuleType, request: Any, body: bytes) -> Any:
    response = module.Response(200, headers={"content-type": "application/json"}, content=body, request=request)
    response.elapsed = datetime.timedelta(0)
    return response


def patch_httpx_module(module: ModuleType) -> bool:
    """Wrap ``module.Client.send`` and ``module.AsyncClient.send`` once; True when
    patched now."""
    client, async_client = module.Client, module.AsyncClient
    if getattr(client.send, _MARK, False):
        return False
    original_sync, original_async = client.send, async_client.send

    @functools.wraps(original_sync)
    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        captured = _begin(request)
        if captured is None:
            site = wire.begin(request.method, str(request.url))
            if site is None:
                return original_sync(self, request, **kwargs)
            with wire.counted(site):
                return original_sync(self, request, **kwargs)
        body = captured.served_body()
        if body is not None:
            return _served(module, request, body)
        site = wire.begin(request.method, str(request.url), wire.node_of(captured))
        try:
            with wire.counted(site):
                response = original_sync(self, _rewritten(module, request, captured), **kwargs)
            response.read()
        except BaseException as exc:
            captured.fail(exc)
            raise
        captured.finish(response.status_code, response.content)
        return response

    @functools.wraps(original_async)
    async def async_send(self: Any, request: Any, **kwargs: Any) -> Any:
        captured = _begin(request)
        if captured is None:
            site = wire.begin(request.method, str(request.url))
            if site is None:
                return await original_async(self, request, **kwargs)
            with wire.counted(site):
                return await original_async(self, request, **kwargs)
        body = captured.served_body()
        if body is not None:
            return _served(module, request, body)
        site = wire.begin(request.method, str(request.url), wire.node_of(captured))
        try:
            with wire.counted(site):
                response = await original_async(self, _rewritten(module, request, captured), **kwargs)
            await response.aread()
        except BaseException as exc:
            captured.fail(exc)
            raise
        captured.finish(response.status_code, response.content)
        return response

    setattr(send, _MARK, True)
    setattr(async_send, _MARK, True)
    client.send = send
    async_client.send = async_send
    return True
