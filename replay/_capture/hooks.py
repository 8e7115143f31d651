"""Which libraries are hooked, and when."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

from .dspy_hooks import patch_dspy
from .httpx_hooks import patch_httpx_module

__all__ = ["install_loaded"]

_lock = threading.Lock()
_done: set[str] = set()


def install_loaded() -> list[str]:
    """Hook ``httpx`` and ``httpx2`` (imported here when installed: the ``openai`` SDK
    a pipeline imports later sends through them) and DSPy's engine when DSPy is loaded
    (importing it here would cost every recording a second). Returns the libraries
    hooked by this call."""
    if len(_done) == 3:
        return []
    hooked: list[str] = []
    with _lock:
        for name in ("httpx", "httpx2"):
            if name in _done or importlib.util.find_spec(name) is None:
                continue
            patch_httpx_module(importlib.import_module(name))
            _done.add(name)
            hooked.append(name)
        if "dspy" not in _done and "dspy" in sys.modules and patch_dspy():
            _done.add("dspy")
            hooked.append("dspy")
    return hooked
