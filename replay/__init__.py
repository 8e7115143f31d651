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
    from quiver.replay._instrument import TraceBuilder
    from quiver.replay._instrument import (
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
    from quiver.replay._llm import (
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
    from quiver.replay._llm import ResponseCache
    from quiver._interventional import PairResult, pair_results
    from quiver.replay._pipeline import call_pipeline, load_pipeline
    from quiver._trace import Divergence, FieldDiff
    from quiver.replay._replayer import (
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
    from quiver.replay._record import InputItem, RecordResult, new_run_id, record_corpus, trace_sample_key
    from quiver.replay._sim import Fields, SimChoice, SimRequest, Text, complete, sim_model, sim_model_names
    from quiver.replay._sim import SimulatorProcess
    from quiver.replay._sim import (
        SAMPLE_KEY_HEADER,
        FaultConfig,
        LatencyConfig,
        Simulator,
        SimulatorConfig,
        check_loopback,
    )
    from quiver.replay._instrument import Template, get_template, load_template_file, template, template_overrides

_EXPORTS = {
    "DIMENSIONS": "._replayer",
    "Divergence": "quiver._trace",
    "FieldDiff": "quiver._trace",
    "ReplayError": "._replayer",
    "ReplayMode": "._replayer",
    "ReplayResult": "._replayer",
    "Target": "._replayer",
    "TargetReport": "._replayer",
    "replay_many": "._replayer",
    "replay_sample_key": "._replayer",
    "replay_trace": "._replayer",
    "request_overrides": "._llm",
    "use_response_cache": "._llm",
    "ResponseCache": "._llm",
    "PairResult": "quiver._interventional",
    "pair_results": "quiver._interventional",
    "bind": "._instrument",
    "call_pipeline": "._pipeline",
    "CallHandle": "._instrument",
    "ChatResult": "._llm",
    "check_loopback": "._sim",
    "complete": "._sim",
    "configure_llm": "._llm",
    "decide": "._instrument",
    "declared_graph": "._instrument",
    "derive_sample_key": "._llm",
    "FaultConfig": "._sim",
    "Fields": "._sim",
    "gather": "._instrument",
    "get_template": "._instrument",
    "InputItem": "._record",
    "iteration": "._instrument",
    "LatencyConfig": "._sim",
    "llm": "._llm",
    "LLMClient": "._llm",
    "load_pipeline": "._pipeline",
    "load_template_file": "._instrument",
    "loop": "._instrument",
    "new_run_id": "._record",
    "node": "._instrument",
    "NodeSpec": "._instrument",
    "record_corpus": "._record",
    "RecordResult": "._record",
    "retrieved": "._instrument",
    "RetryPolicy": "._llm",
    "SAMPLE_KEY_HEADER": "._sim",
    "sim_model": "._sim",
    "sim_model_names": "._sim",
    "SimChoice": "._sim",
    "SimRequest": "._sim",
    "Simulator": "._sim",
    "SimulatorConfig": "._sim",
    "SimulatorProcess": "._sim",
    "Template": "._instrument",
    "template": "._instrument",
    "template_overrides": "._instrument",
    "Text": "._sim",
    "ThreadPoolExecutor": "._instrument",
    "tool_step": "._instrument",
    "trace_sample_key": "._record",
    "TraceBuilder": "._instrument",
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
