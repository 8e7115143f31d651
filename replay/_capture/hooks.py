"""Which libraries are hooked, and when."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

from .count_hooks import patch_aiohttp, patch_http_client
from .dspy_hooks import patch_dspy
from .http_steps import patch_requests
from .httpx_hooks import patch_httpx_module

__all__ = ["install_loaded"]

_lock = threading.Lock()
_done: set[str] = set()


def install_loaded() -> list[str]:
    """Hook ``httpx`` and ``httpx2`` (imported here when installed: the ``openai`` SDK
    a pipeline imports later sends through them), the standard library's ``http.client``
    (counted only), and DSPy's engine, ``requests`` (HTTP tools) and ``aiohttp`` (counted
    only) when they are loaded
    (importing them here would cost every recording their import time). Returns the
    libraries hooked by this call."""
    if len(_done) == _ALL:
        return []
    hooked: list[str] = []
    with _lock:
        for name in ("httpx", "httpx2"):
            if name in _done or importlib.util.find_spec(name) is None:
                continue
            patch_httpx_module(importlib.import_module(name))
            _done.add(name)
            hooked.append(name)
        if "http.client" not in _done:
            patch_http_client()
            _done.add("http.client")
            hooked.append("http.client")
        if "dspy" not in _done and "dspy" in sys.modules and patch_dspy():
            _done.add("dspy")
            hooked.append("dspy")
        if "requests" not in _done and "requests" in sys.modules and patch_requests(sys.modules["requests"]):
            _done.add("requests")
            hooked.append("requests")
        if "aiohttp" not in _done and "aiohttp" in sys.modules:
            patch_aiohttp(sys.modules["aiohttp"])
            _done.add("aiohttp")
            hooked.append("aiohttp")
    return hooked


_ALL = 6
"""The libraries there are to hook: httpx, httpx2, http.client, dspy, requests, aiohttp."""
