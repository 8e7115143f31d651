"""What is in force for the LLM calls of the current context: which client :func:`llm`
returns, request overrides (a replay's ``param_change``), and whether the response cache
may answer."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from quiver._errors import InstrumentationError

if TYPE_CHECKING:
    from quiver.perturbations import MessageSwap

    from .cache import ResponseCache
    from .client import LLMClient

__all__ = ["llm", "configure_llm", "use_llm", "request_overrides", "current_overrides", "message_swaps",
           "swapped_messages", "use_response_cache",
           "response_cache_enabled", "engine_request", "in_engine_request", "engine_request_node", "current_cache"]


_engine_request: contextvars.ContextVar[tuple[str | None] | None] = contextvars.ContextVar(
    "quiver_engine_request", default=None)


@contextlib.contextmanager
def engine_request(node: str | None = None) -> Iterator[None]:
    """Mark the HTTP requests made within the block as the engine's own (an
    :class:`LLMClient` call, already recorded): the transport capture lets them pass, and
    the wire ledger counts them for ``node`` (the call holding the LLM call)."""
    token = _engine_request.set((node,))
    try:
        yield
    finally:
        _engine_request.reset(token)


def in_engine_request() -> bool:
    """Whether the current context is inside :func:`engine_request`."""
    return _engine_request.get() is not None


def engine_request_node() -> str | None:
    """The node :func:`engine_request` names, if any."""
    held = _engine_request.get()
    return held[0] if held is not None else None


_cache_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("quiver_response_cache", default=True)


def use_response_cache(enabled: bool) -> contextvars.Token[bool]:
    """Whether LLM calls in the current context may be answered from the client's
    response cache (on by default when the client has one; a replay sets it from its
    mode: downstream ``live`` or ``cached``)."""
    return _cache_enabled.set(enabled)


_request_overrides: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "quiver_request_overrides", default=None
)


@contextlib.contextmanager
def request_overrides(params: Mapping[str, Any]) -> Iterator[None]:
    """Send every LLM request made within the block with ``params`` changed.

    ``model`` replaces the model; ``temperature``, ``top_p``, ``seed``, ``max_tokens``
    and the other request parameters replace the call's own. What a replay's
    ``param_change`` perturbation uses on its target.
    """
    token = _request_overrides.set({**(_request_overrides.get() or {}), **params})
    try:
        yield
    finally:
        _request_overrides.reset(token)


_message_swaps: contextvars.ContextVar[tuple[MessageSwap, ...]] = contextvars.ContextVar(
    "quiver_message_swaps", default=()
)


@contextlib.contextmanager
def swapped_messages(swaps: tuple[MessageSwap, ...]) -> Iterator[None]:
    """Send every LLM request made within the block with the messages ``swaps`` select
    replaced (an inline ``prompt_swap``: :class:`~quiver.perturbations.MessageSwap`)."""
    token = _message_swaps.set(_message_swaps.get() + tuple(swaps))
    try:
        yield
    finally:
        _message_swaps.reset(token)


def message_swaps() -> tuple[MessageSwap, ...]:
    """The inline prompt swaps in force (see :func:`swapped_messages`)."""
    return _message_swaps.get()


_current_llm: contextvars.ContextVar[LLMClient | None] = contextvars.ContextVar("quiver_llm", default=None)
_default_llm: list[LLMClient] = []


def configure_llm(client: LLMClient | None) -> None:
    """Set the process-wide client that :func:`llm` returns outside a recording."""
    _default_llm[:] = [client] if client is not None else []


def use_llm(client: LLMClient) -> contextvars.Token[LLMClient | None]:
    """Make ``client`` the one :func:`llm` returns in the current context."""
    return _current_llm.set(client)


def current_cache() -> ResponseCache | None:
    """The response cache of the client configured for the current run, when the run
    lets it answer (:func:`use_response_cache`); else None."""
    client = _current_llm.get() or (_default_llm[0] if _default_llm else None)
    return client.cache if client is not None and response_cache_enabled() else None


def llm() -> LLMClient:
    """The LLM client configured for the current run.

    ``quiver record`` and campaigns set it from the spec's ``llm:`` block; elsewhere
    call :func:`configure_llm` once.
    """
    client = _current_llm.get() or (_default_llm[0] if _default_llm else None)
    if client is None:
        raise InstrumentationError(
            "no LLM client is configured: run the pipeline under `quiver record`, or call "
            "quiver.configure_llm(quiver.LLMClient(base_url=..., model=...)) first"
        )
    return client


def current_overrides() -> Mapping[str, Any]:
    """The request overrides in force (see :func:`request_overrides`)."""
    return _request_overrides.get() or {}


def response_cache_enabled() -> bool:
    """Whether the response cache may answer calls in the current context."""
    return _cache_enabled.get()
