"""Running a pipeline as one trace: what recording and replay share."""

from __future__ import annotations

import contextvars
import logging
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from quiver._errors import InstrumentationError, QuiverError
from quiver._trace import Trace
from quiver.replay._instrument import Template, TraceBuilder, active_recordings, current_builder, template_overrides
from quiver.replay._llm import LLMClient, SeenEndpoints, trace_scope, trace_verdict, use_llm, use_response_cache

from .load import call_pipeline

__all__ = ["run_traced"]


def run_traced(
    builder: TraceBuilder,
    fn: Callable[..., Any],
    inputs: Mapping[str, Any],
    client: LLMClient | None,
    *,
    log: logging.Logger,
    response_cache: bool = True,
    templates: Mapping[str, Template] | None = None,
) -> Trace:
    """Run ``fn(**inputs)`` as ``builder``'s trace, in a fresh context.

    ``templates`` replace registered templates for the whole run (a template change
    deployed; see :func:`~quiver.replay.replay_trace`).

    A pipeline that raises gives a ``failed`` trace (the engine's own errors are logged
    in one line, anything else with its traceback); the run goes on.

    Raises:
        EndpointDown: An LLM endpoint stopped answering while the trace ran, and a
            request of the trace met it (:func:`~quiver.replay._llm.health.trace_verdict`),
            whether or not the pipeline caught the error: the trace is not what the
            pipeline would have given, and is not returned as failed.
    """

    def body() -> Trace:
        from quiver.replay._capture import HTTP_TOOLS_TAG, http_tools_setting

        setting = http_tools_setting()
        if setting is not None:
            builder.tags.setdefault(HTTP_TOOLS_TAG, setting)  # a replay keeps its recording's
        current_builder.set(builder)
        use_response_cache(response_cache)
        if client is not None:
            use_llm(client)
        with active_recordings, template_overrides(templates or {}), trace_scope() as seen:
            try:
                output = call_pipeline(fn, inputs)
            except QuiverError as exc:
                _raise_if_endpoint_down(seen)
                log.warning("trace %s failed: %s: %s", builder.trace_id, type(exc).__name__, exc)
                return builder.finish(None, exc)
            except Exception as exc:
                _raise_if_endpoint_down(seen)
                if _other_loop(exc):
                    exc = InstrumentationError(_OTHER_LOOP.format(exc=exc))
                    log.warning("trace %s failed: %s", builder.trace_id, exc)
                    return builder.finish(None, exc)
                log.error(
                    "trace %s failed: %s: %s\n%s", builder.trace_id, type(exc).__name__, exc,
                    "".join(traceback.format_exception(exc)),
                )
                return builder.finish(None, exc)
            _raise_if_endpoint_down(seen)
        return builder.finish(output)

    return contextvars.Context().run(body)


_OTHER_LOOP = (
    "{exc}: an async client shared by the whole process (an agent SDK's default client) was used from "
    "another event loop than the one it was made in; make the pipeline `async def` and await the agent (every "
    "trace's coroutine then runs in one event loop the engine shares), or build a client for each run, or "
    "record and replay with concurrency: 1"
)


def _other_loop(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is asyncio's "bound to a different event loop"."""
    while exc is not None:
        if isinstance(exc, RuntimeError) and "different event loop" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def _raise_if_endpoint_down(seen: SeenEndpoints) -> None:
    down = trace_verdict(seen)
    if down is not None:
        raise down
