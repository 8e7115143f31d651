"""quiver.replay: everything that executes a pipeline.

Instrumentation (nodes, decisions, loops, parallel branches, templates, retrieval and
tool steps), the LLM client, recording, and the bundled OpenAI-compatible simulator.
The most used names are also available from the top-level ``quiver`` package.
"""

from ._context import TraceBuilder
from ._instrument import (
    CallHandle,
    NodeSpec,
    ThreadPoolExecutor,
    bind,
    decide,
    gather,
    iteration,
    loop,
    node,
    retrieved,
    tool_step,
)
from ._llm import ChatResult, LLMClient, RetryPolicy, configure_llm, derive_sample_key, llm, use_llm
from ._pipeline import call_pipeline, load_pipeline
from ._record import InputItem, RecordResult, new_run_id, record_corpus, trace_sample_key
from ._simmodels import Fields, SimChoice, SimRequest, Text, complete, sim_model, sim_model_names
from ._simulator import (
    SAMPLE_KEY_HEADER,
    FaultConfig,
    LatencyConfig,
    Simulator,
    SimulatorConfig,
    SimulatorProcess,
    check_loopback,
)
from ._templates import Template, get_template, load_template_file, template, template_overrides

__all__ = [
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
