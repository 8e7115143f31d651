"""Running a pipeline as one trace: what recording and replay share."""

from __future__ import annotations

import contextvars
import logging
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from quiver._errors import QuiverError
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
                log.error(
                    "trace %s failed: %s: %s\n%s", builder.trace_id, type(exc).__name__, exc,
                    "".join(traceback.format_exception(exc)),
                )
                return builder.finish(None, exc)
            _raise_if_endpoint_down(seen)
        return builder.finish(output)

    return contextvars.Context().run(body)


def _raise_if_endpoint_down(seen: SeenEndpoints) -> None:
    down = trace_verdict(seen)
    if down is not None:
        raise down
