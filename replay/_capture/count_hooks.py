"""Hooks that count requests the capture does not record: the standard library's
``http.client`` (and so ``urllib.request``, ``urllib3`` and ``requests``, which send
through it) and ``aiohttp``.

They put every request sent inside a trace on the trace's wire
(:mod:`quiver.replay._capture.wire`), and change nothing else: the request goes out as
the caller made it.
"""

from __future__ import annotations

import functools
import http.client
from typing import Any

from . import wire

__all__ = ["patch_http_client", "patch_aiohttp"]

_MARK = "__quiver_count__"
_SITE = "_quiver_wire_site"


def _url(connection: http.client.HTTPConnection, url: str) -> str:
    if url.startswith(("http://", "https://")):  # through a proxy: the absolute URL
        return url
    scheme = "https" if isinstance(connection, http.client.HTTPSConnection) else "http"
    return f"{scheme}://{connection.host}:{connection.port}{url}"


def patch_http_client() -> bool:
    """Wrap ``HTTPConnection.putrequest`` and ``getresponse`` once (``urllib3`` overrides
    ``request`` but calls both); True when patched now."""
    cls = http.client.HTTPConnection
    if getattr(cls.putrequest, _MARK, False):
        return False
    original_put, original_get = cls.putrequest, cls.getresponse

    @functools.wraps(original_put)
    def putrequest(self: http.client.HTTPConnection, method: str, url: str, *args: Any, **kwargs: Any) -> None:
        site = wire.begin(method, _url(self, url))
        try:
            original_put(self, method, url, *args, **kwargs)
        except BaseException:
            if site is not None:
                site.done(answered=False)
            raise
        if site is not None:
            setattr(self, _SITE, site)  # answered or not: getresponse says

    @functools.wraps(original_get)
    def getresponse(self: http.client.HTTPConnection) -> http.client.HTTPResponse:
        site = self.__dict__.pop(_SITE, None)
        with wire.counted(site):
            return original_get(self)

    setattr(putrequest, _MARK, True)
    cls.putrequest = putrequest  # type: ignore[method-assign]
    cls.getresponse = getresponse  # type: ignore[method-assign]
    return True


def patch_aiohttp(module: Any) -> bool:
    """Wrap ``aiohttp.ClientSession._request`` once; True when patched now."""
    session = module.ClientSession
    if getattr(session._request, _MARK, False):
        return False
    original = session._request

    @functools.wraps(original)
    async def _request(self: Any, method: str, str_or_url: Any, *args: Any, **kwargs: Any) -> Any:
        site = wire.begin(method, str(str_or_url))
        with wire.counted(site):
            return await original(self, method, str_or_url, *args, **kwargs)

    setattr(_request, _MARK, True)
    session._request = _request
    return True
