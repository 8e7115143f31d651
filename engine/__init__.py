"""QUIVER engine: interventional perturbation and replay for compound LLM pipelines.

The core package holds the data model and the mathematics (traces, redaction,
graphs, distances, pairs, estimators, the observational profile and its report); it
never calls the network and never runs user code. The instrumentation API that pipelines use (``quiver.node``,
``quiver.decide``, ``quiver.loop``, ``quiver.template``, ``quiver.llm`` ...) lives in
:mod:`quiver.replay` and is re-exported here lazily, so importing ``quiver`` stays
light and the layering (core <- perturbations <- replay <- experiments) holds.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._canonical import canonical_json, content_hash, to_jsonable
from ._errors import (
    InstrumentationError,
    LLMError,
    LLMRequestError,
    LLMUnavailable,
    PipelineError,
    QuiverError,
    SimulatorError,
    SpecError,
    TraceFormatError,
)
from ._redact import RedactingFilter, RedactionConfig, Redactor
from ._trace import (
    SCHEMA_VERSION,
    CallError,
    CallKind,
    LLMResponse,
    Message,
    ModelInfo,
    NodeCall,
    PromptInfo,
    RetrievalDoc,
    ToolStep,
    Trace,
    trace_json_schema,
)
from ._traceio import TraceLoad, TraceWriter, iter_traces, load_traces, write_traces
from ._import_build import ImportResult, import_traces
from ._import_common import ImportProblem, SourceSpan
from ._import_openinference import export_openinference, write_openinference
from ._analyze import Profile, analyze, default_cache_dir
from ._distance import FieldTypeError, TextDistance, output_distance, texts_to_compare, value_distance
from ._embed import Embedder, EmbeddingError, EmbeddingStore, FunctionEmbedder, SentenceTransformerEmbedder
from ._estimate import Estimate, GroupBootstrap
from ._faithfulness import load_golden
from ._graph import FieldSpec, GraphInference, LoopSpec, NodeSpec, PipelineGraph, infer_graph, load_graph
from ._pairs import NoPairsError, PairTable
from ._report import render_report
from ._interventional import campaign_estimates
from ._intreport import interventional_report

__version__ = "0.1.0"

_REPLAY_NAMES = (
    "node",
    "decide",
    "loop",
    "iteration",
    "bind",
    "gather",
    "ThreadPoolExecutor",
    "retrieved",
    "tool_step",
    "template",
    "get_template",
    "Template",
    "llm",
    "configure_llm",
    "LLMClient",
    "ChatResult",
    "RetryPolicy",
)

if TYPE_CHECKING:
    from quiver.replay import (  # noqa: F401
        ChatResult,
        LLMClient,
        RetryPolicy,
        Template,
        ThreadPoolExecutor,
        bind,
        configure_llm,
        decide,
        gather,
        get_template,
        iteration,
        llm,
        loop,
        node,
        retrieved,
        template,
        tool_step,
    )


def __getattr__(name: str) -> Any:
    if name in _REPLAY_NAMES:
        value = getattr(importlib.import_module("quiver.replay"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'quiver' has no attribute {name!r}")


__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingStore",
    "Estimate",
    "FieldSpec",
    "FieldTypeError",
    "FunctionEmbedder",
    "GraphInference",
    "GroupBootstrap",
    "ImportProblem",
    "ImportResult",
    "LoopSpec",
    "NoPairsError",
    "NodeSpec",
    "PairTable",
    "PipelineGraph",
    "Profile",
    "SentenceTransformerEmbedder",
    "SourceSpan",
    "TextDistance",
    "analyze",
    "default_cache_dir",
    "export_openinference",
    "import_traces",
    "infer_graph",
    "load_golden",
    "load_graph",
    "output_distance",
    "render_report",
    "texts_to_compare",
    "value_distance",
    "write_openinference",
    "SCHEMA_VERSION",
    "CallError",
    "CallKind",
    "InstrumentationError",
    "LLMError",
    "LLMRequestError",
    "LLMResponse",
    "LLMUnavailable",
    "Message",
    "ModelInfo",
    "NodeCall",
    "PipelineError",
    "PromptInfo",
    "QuiverError",
    "RedactingFilter",
    "RedactionConfig",
    "Redactor",
    "RetrievalDoc",
    "SimulatorError",
    "SpecError",
    "ToolStep",
    "Trace",
    "TraceFormatError",
    "TraceLoad",
    "TraceWriter",
    "canonical_json",
    "content_hash",
    "iter_traces",
    "load_traces",
    "to_jsonable",
    "trace_json_schema",
    "write_traces",
    *_REPLAY_NAMES,
    "campaign_estimates",
    "interventional_report",
]
