"""Transport-level capture of OpenAI-compatible chat completions.

Inside a recorded or replayed trace, a chat completion that a pipeline sends through a
client the engine did not build (a plain ``openai.OpenAI()``, LangChain's
``ChatOpenAI``, ``dspy.LM``, a raw ``httpx`` post) is recorded as an LLM call of the
current node with the replay contract, served when the replay serves it, sent live with
the replay's sample key otherwise, and rewritten by ``param_change``. Covered paths and
how each is hooked:

==========================================  ==============================================
client path                                 hook
==========================================  ==============================================
``openai.OpenAI`` / ``AsyncOpenAI`` (SDK    ``httpx2.Client.send`` /
3.x, default transport)                     ``httpx2.AsyncClient.send``
``openai`` SDK given an ``httpx`` client     ``httpx.Client.send`` / ``httpx.AsyncClient.send``
(LiteLLM does this; so DSPy with
``OPENAI_BASE_URL`` set)
LangChain ``ChatOpenAI`` (invoke, ainvoke)  through the ``openai`` SDK, as above
raw ``httpx`` / ``httpx2`` posts            the same ``send`` methods
``dspy.LM`` on DSPy's own engine (lm15,     ``StdlibTransport.stream`` /
used when no OpenAI base URL is set)        ``StdlibAsyncTransport.stream``
==========================================  ==============================================

DSPy's response cache neither answers nor stores inside a trace (a repeat must reach
the endpoint with its own sample key). Streaming requests (``"stream": true``) inside a
trace are refused with an :class:`~quiver.InstrumentationError`; requests of the
engine's own client (``quiver.llm()``) are recorded once, by that client.

The hooks are installed when the first trace starts being recorded or replayed in the
process (for each library loaded by then; one loaded later is hooked when the next
trace starts) and stay: outside a trace a hooked ``send`` reads one context variable
and calls the original.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver.replay._instrument import on_recording

if TYPE_CHECKING:  # loaded on first use (they read traces or load the client; a pipeline needs neither)
    from .http_steps import HTTP_TOOLS_TAG, http_tools, http_tools_setting
    from .unseen import unseen_llm_calls, unseen_llm_nodes, unseen_llm_warning
    from .wire import merge_unaccounted, stray_requests, unaccounted_json, unaccounted_lines

__all__ = [
    "install",
    "installed_hooks",
    "capture_stats",
    "http_tools",
    "http_tools_setting",
    "HTTP_TOOLS_TAG",
    "unseen_llm_calls",
    "unseen_llm_nodes",
    "unseen_llm_warning",
    "merge_unaccounted",
    "stray_requests",
    "unaccounted_json",
    "unaccounted_lines",
]

_installed: list[str] = []


def install() -> None:
    """Hook every supported library that is loaded now (once each; see
    :func:`installed_hooks`)."""
    from .hooks import install_loaded

    _installed.extend(install_loaded())


def installed_hooks() -> list[str]:
    """The hooks installed so far, by library (``httpx``, ``httpx2``, ``dspy``)."""
    return list(_installed)


def capture_stats() -> dict[str, int]:
    """What the capture did in this process: ``calls`` sent live, ``served`` from a
    recording, ``failed``."""
    from .calls import counter

    with counter._lock:
        return dict(counter.stats)


def __getattr__(name: str) -> object:
    if name in ("unseen_llm_calls", "unseen_llm_nodes", "unseen_llm_warning"):
        from . import unseen

        return getattr(unseen, name)
    if name in ("HTTP_TOOLS_TAG", "http_tools", "http_tools_setting"):
        from . import http_steps as module

        return getattr(module, name)
    if name in ("merge_unaccounted", "stray_requests", "unaccounted_json", "unaccounted_lines"):
        from . import wire

        return getattr(wire, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


on_recording(install)
