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
from quiver.replay._llm import LLMClient, use_llm, use_response_cache

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
    """

    def body() -> Trace:
        current_builder.set(builder)
        use_response_cache(response_cache)
        if client is not None:
            use_llm(client)
        with active_recordings, template_overrides(templates or {}):
            try:
                output = call_pipeline(fn, inputs)
            except QuiverError as exc:
                log.warning("trace %s failed: %s: %s", builder.trace_id, type(exc).__name__, exc)
                return builder.finish(None, exc)
            except Exception as exc:
                log.error(
                    "trace %s failed: %s: %s\n%s", builder.trace_id, type(exc).__name__, exc,
                    "".join(traceback.format_exception(exc)),
                )
                return builder.finish(None, exc)
        return builder.finish(output)

    return contextvars.Context().run(body)
