"""quiver.replay: everything that executes a pipeline.

Instrumentation (nodes, decisions, loops, parallel branches, templates, retrieval and
tool steps), the LLM client, recording, and the bundled OpenAI-compatible simulator.
The most used names are also available from the top-level ``quiver`` package.

Names are imported on first use: the simulator's process and the instrumentation do
not pay for importing the OpenAI SDK unless they use the LLM client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._context import TraceBuilder
    from ._instrument import (
        CallHandle,
        NodeSpec,
        ThreadPoolExecutor,
        bind,
        decide,
        declared_graph,
        gather,
        iteration,
        loop,
        node,
        retrieved,
        tool_step,
    )
    from ._llm import (
        ChatResult,
        LLMClient,
        RetryPolicy,
        configure_llm,
        derive_sample_key,
        llm,
        request_overrides,
        use_llm,
        use_response_cache,
    )
    from ._cache import ResponseCache
    from ._pairing import PairResult, pair_results
    from ._pipeline import call_pipeline, load_pipeline
    from ._diff import Divergence, FieldDiff
    from ._replay import (
        DIMENSIONS,
        ReplayError,
        ReplayMode,
        ReplayResult,
        Target,
        TargetReport,
        replay_many,
        replay_sample_key,
        replay_trace,
    )
    from ._record import InputItem, RecordResult, new_run_id, record_corpus, trace_sample_key
    from ._simmodels import Fields, SimChoice, SimRequest, Text, complete, sim_model, sim_model_names
    from ._simprocess import SimulatorProcess
    from ._simulator import (
        SAMPLE_KEY_HEADER,
        FaultConfig,
        LatencyConfig,
        Simulator,
        SimulatorConfig,
        check_loopback,
    )
    from ._templates import Template, get_template, load_template_file, template, template_overrides

_EXPORTS = {
    "DIMENSIONS": "._replay",
    "Divergence": "._diff",
    "FieldDiff": "._diff",
    "ReplayError": "._replay",
    "ReplayMode": "._replay",
    "ReplayResult": "._replay",
    "Target": "._replay",
    "TargetReport": "._replay",
    "replay_many": "._replay",
    "replay_sample_key": "._replay",
    "replay_trace": "._replay",
    "request_overrides": "._llm",
    "use_response_cache": "._llm",
    "ResponseCache": "._cache",
    "PairResult": "._pairing",
    "pair_results": "._pairing",
    "bind": "._instrument",
    "call_pipeline": "._pipeline",
    "CallHandle": "._instrument",
    "ChatResult": "._llm",
    "check_loopback": "._simulator",
    "complete": "._simmodels",
    "configure_llm": "._llm",
    "decide": "._instrument",
    "declared_graph": "._instrument",
    "derive_sample_key": "._llm",
    "FaultConfig": "._simulator",
    "Fields": "._simmodels",
    "gather": "._instrument",
    "get_template": "._templates",
    "InputItem": "._record",
    "iteration": "._instrument",
    "LatencyConfig": "._simulator",
    "llm": "._llm",
    "LLMClient": "._llm",
    "load_pipeline": "._pipeline",
    "load_template_file": "._templates",
    "loop": "._instrument",
    "new_run_id": "._record",
    "node": "._instrument",
    "NodeSpec": "._instrument",
    "record_corpus": "._record",
    "RecordResult": "._record",
    "retrieved": "._instrument",
    "RetryPolicy": "._llm",
    "SAMPLE_KEY_HEADER": "._simulator",
    "sim_model": "._simmodels",
    "sim_model_names": "._simmodels",
    "SimChoice": "._simmodels",
    "SimRequest": "._simmodels",
    "Simulator": "._simulator",
    "SimulatorConfig": "._simulator",
    "SimulatorProcess": "._simprocess",
    "Template": "._templates",
    "template": "._templates",
    "template_overrides": "._templates",
    "Text": "._simmodels",
    "ThreadPoolExecutor": "._instrument",
    "tool_step": "._instrument",
    "trace_sample_key": "._record",
    "TraceBuilder": "._context",
    "use_llm": "._llm",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'quiver.replay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "DIMENSIONS",
    "Divergence",
    "FieldDiff",
    "PairResult",
    "ReplayError",
    "ReplayMode",
    "ReplayResult",
    "Target",
    "TargetReport",
    "pair_results",
    "replay_many",
    "replay_sample_key",
    "replay_trace",
    "request_overrides",
    "ResponseCache",
    "use_response_cache",
    "CallHandle",
    "ChatResult",
    "FaultConfig",
    "Fields",
    "InputItem",
    "LLMClient",
    "LatencyConfig",
    "NodeSpec",
    "RecordResult",
    "RetryPolicy",
    "SAMPLE_KEY_HEADER",
    "SimChoice",
    "SimRequest",
    "Simulator",
    "SimulatorConfig",
    "SimulatorProcess",
    "Template",
    "Text",
    "ThreadPoolExecutor",
    "TraceBuilder",
    "bind",
    "call_pipeline",
    "check_loopback",
    "complete",
    "configure_llm",
    "decide",
    "declared_graph",
    "derive_sample_key",
    "gather",
    "get_template",
    "iteration",
    "llm",
    "load_pipeline",
    "load_template_file",
    "loop",
    "new_run_id",
    "node",
    "record_corpus",
    "retrieved",
    "sim_model",
    "sim_model_names",
    "template",
    "template_overrides",
    "tool_step",
    "trace_sample_key",
    "use_llm",
]
