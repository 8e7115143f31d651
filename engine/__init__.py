"""QUIVER engine: interventional perturbation and replay for compound LLM pipelines.

The core package holds the data model and the mathematics: traces, redaction, the
graph, distances, pairs, the observational and interventional estimators, reports and
importers. It never calls the network and never runs user code. The instrumentation API
that pipelines use (``quiver.node``, ``quiver.decide``, ``quiver.loop``,
``quiver.template``, ``quiver.llm`` ...) lives in :mod:`quiver.replay` and is
re-exported here.

Every public name is imported on first use (PEP 562 ``__getattr__``), so ``import
quiver`` loads only this file and a production pipeline that decorates its steps with
``@quiver.node`` pays for the instrumentation alone: no numpy, diskcache, pydantic or
OpenAI SDK until a recording, an analysis or an LLM call needs them. Measured with
``python -X importtime`` (see the README, "Layout").

Where each name lives (one family per private subpackage, see the README's layout):

* ``quiver._trace``: the trace format, its reading and writing, redaction, trace diffs;
* ``quiver._graph``: the pipeline graph and its inference;
* ``quiver._distance``: type-dispatched distances, their kernel registry, embeddings;
* ``quiver._stats``: estimates with intervals, the group bootstrap, the pair table;
* ``quiver._observational``: ``analyze`` and the estimators of QUIVER.md §3-§10;
* ``quiver._interventional``: pair results and the estimates of a campaign (§6-§7, §11-§13);
* ``quiver._report``: Markdown reports and plots;
* ``quiver._importers``: OpenInference, OTel GenAI and Langfuse spans in and out.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_FAMILIES: dict[str, tuple[str, ...]] = {
    "quiver._canonical": ("canonical_json", "content_hash", "to_jsonable"),
    "quiver._errors": (
        "QuiverError", "TraceFormatError", "SpecError", "InstrumentationError", "LLMError", "LLMRequestError",
        "LLMUnavailable", "SimulatorError", "PipelineError",
    ),
    "quiver._trace": (
        "SCHEMA_VERSION", "CallError", "CallKind", "LLMResponse", "Message", "ModelInfo", "NodeCall", "PromptInfo",
        "RetrievalDoc", "ToolStep", "Trace", "trace_json_schema", "TraceLoad", "TraceWriter", "iter_traces",
        "load_traces", "write_traces", "RedactingFilter", "RedactionConfig", "Redactor", "Divergence", "FieldDiff",
    ),
    "quiver._graph": ("FieldSpec", "GraphInference", "LoopSpec", "NodeSpec", "PipelineGraph", "infer_graph",
                      "load_graph"),
    "quiver._distance": (
        "FieldTypeError", "TextDistance", "output_distance", "texts_to_compare", "value_distance", "Embedder", "EmbeddingError", "EmbeddingStore", "FunctionEmbedder",
        "SentenceTransformerEmbedder", "default_cache_dir",
    ),
    "quiver._stats": ("Estimate", "GroupBootstrap", "NoPairsError", "PairTable"),
    "quiver._observational": ("Profile", "analyze", "load_golden"),
    "quiver._interventional": ("PairResult", "pair_results", "campaign_estimates"),
    "quiver._report": ("render_report", "interventional_report"),
    "quiver._importers": (
        "ImportProblem", "ImportResult", "SourceSpan", "import_traces",
        "export_openinference", "write_openinference",
    ),
    "quiver.replay": (
        "node", "decide", "loop", "iteration", "bind", "gather", "ThreadPoolExecutor", "retrieved", "tool_step",
        "template", "get_template", "Template", "llm", "configure_llm", "LLMClient", "ChatResult", "RetryPolicy",
    ),
}
_WHERE = {name: module for module, names in _FAMILIES.items() for name in names}

if TYPE_CHECKING:  # what type checkers and editors see; nothing here runs
    from quiver._canonical import canonical_json, content_hash, to_jsonable
    from quiver._distance import (
        Embedder,
        EmbeddingError,
        EmbeddingStore,
        FieldTypeError,
        FunctionEmbedder,
        Kernel,
        SentenceTransformerEmbedder,
        TextDistance,
        default_cache_dir,
        output_distance,
        register_kernel,
        registered_kernels,
        texts_to_compare,
        value_distance,
    )
    from quiver._errors import (
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
    from quiver._graph import FieldSpec, GraphInference, LoopSpec, NodeSpec, PipelineGraph, infer_graph, load_graph
    from quiver._importers import (
        ImportProblem,
        ImportResult,
        SourceSpan,
        export_openinference,
        import_format,
        import_traces,
        registered_formats,
        write_openinference,
    )
    from quiver._interventional import (
        CampaignEstimates,
        PairResult,
        PairRow,
        PerturbationEstimates,
        campaign_estimates,
        pair_results,
    )
    from quiver._observational import Profile, analyze, load_golden
    from quiver._report import interventional_report, render_report, write_profile
    from quiver._stats import Estimate, GroupBootstrap, NoPairsError, PairTable
    from quiver._trace import (
        SCHEMA_VERSION,
        CallError,
        CallKind,
        Divergence,
        FieldDiff,
        LLMResponse,
        Message,
        ModelInfo,
        NodeCall,
        PromptInfo,
        RedactingFilter,
        RedactionConfig,
        Redactor,
        RetrievalDoc,
        ToolStep,
        Trace,
        TraceLoad,
        TraceWriter,
        iter_traces,
        load_traces,
        trace_json_schema,
        write_traces,
    )
    from quiver.replay import (
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
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'quiver' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [name for names in _FAMILIES.values() for name in names]
