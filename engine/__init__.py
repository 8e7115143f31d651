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
* ``quiver._diff``: why two traces diverged: the first divergent call and its cause;
* ``quiver._compare``: first divergences over a corpus, divergence baselines of two corpora;
* ``quiver._importers``: OpenInference, OTel GenAI and Langfuse spans in and out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver._lazy import lazy_exports

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
        "FieldTypeError", "TextDistance", "output_distance", "texts_to_compare", "value_distance", "Kernel",
        "register_kernel", "registered_kernels", "Embedder", "EmbeddingError", "EmbeddingStore", "FunctionEmbedder",
        "SentenceTransformerEmbedder", "default_cache_dir",
    ),
    "quiver._stats": ("Estimate", "GroupBootstrap", "NoPairsError", "PairTable"),
    "quiver._observational": ("Profile", "analyze", "load_golden"),
    "quiver._interventional": (
        "PairResult", "pair_results", "campaign_estimates", "CampaignEstimates", "PerturbationEstimates", "PairRow",
    ),
    "quiver._diff": ("Cause", "Evidence", "FirstDivergence", "PairDiff", "diff_traces"),
    "quiver._compare": ("DivergenceTable", "first_divergence_table", "Comparison", "compare_corpora"),
    "quiver._report": ("render_report", "interventional_report", "write_profile"),
    "quiver._importers": (
        "ImportProblem", "ImportResult", "SourceSpan", "SpanFormat", "import_traces", "import_format",
        "registered_formats",
        "export_openinference", "write_openinference",
    ),
    "quiver.replay": (
        "node", "decide", "loop", "iteration", "bind", "gather", "ThreadPoolExecutor", "retrieved", "tool_step",
        "template", "get_template", "Template", "llm", "configure_llm", "LLMClient", "ChatResult", "RetryPolicy",
    ),
}

if TYPE_CHECKING:  # what type checkers and editors see (re-exported); nothing here runs
    from quiver._canonical import (
        canonical_json as canonical_json,
        content_hash as content_hash,
        to_jsonable as to_jsonable,
    )
    from quiver._compare import (
        Comparison as Comparison,
        DivergenceTable as DivergenceTable,
        compare_corpora as compare_corpora,
        first_divergence_table as first_divergence_table,
    )
    from quiver._diff import (
        Cause as Cause,
        Evidence as Evidence,
        FirstDivergence as FirstDivergence,
        PairDiff as PairDiff,
        diff_traces as diff_traces,
    )
    from quiver._distance import (
        Embedder as Embedder,
        EmbeddingError as EmbeddingError,
        EmbeddingStore as EmbeddingStore,
        FieldTypeError as FieldTypeError,
        FunctionEmbedder as FunctionEmbedder,
        Kernel as Kernel,
        SentenceTransformerEmbedder as SentenceTransformerEmbedder,
        TextDistance as TextDistance,
        default_cache_dir as default_cache_dir,
        output_distance as output_distance,
        register_kernel as register_kernel,
        registered_kernels as registered_kernels,
        texts_to_compare as texts_to_compare,
        value_distance as value_distance,
    )
    from quiver._errors import (
        InstrumentationError as InstrumentationError,
        LLMError as LLMError,
        LLMRequestError as LLMRequestError,
        LLMUnavailable as LLMUnavailable,
        PipelineError as PipelineError,
        QuiverError as QuiverError,
        SimulatorError as SimulatorError,
        SpecError as SpecError,
        TraceFormatError as TraceFormatError,
    )
    from quiver._graph import (
        FieldSpec as FieldSpec,
        GraphInference as GraphInference,
        LoopSpec as LoopSpec,
        NodeSpec as NodeSpec,
        PipelineGraph as PipelineGraph,
        infer_graph as infer_graph,
        load_graph as load_graph,
    )
    from quiver._importers import (
        ImportProblem as ImportProblem,
        ImportResult as ImportResult,
        SourceSpan as SourceSpan,
        SpanFormat as SpanFormat,
        export_openinference as export_openinference,
        import_format as import_format,
        import_traces as import_traces,
        registered_formats as registered_formats,
        write_openinference as write_openinference,
    )
    from quiver._interventional import (
        CampaignEstimates as CampaignEstimates,
        PairResult as PairResult,
        PairRow as PairRow,
        PerturbationEstimates as PerturbationEstimates,
        campaign_estimates as campaign_estimates,
        pair_results as pair_results,
    )
    from quiver._observational import (
        Profile as Profile,
        analyze as analyze,
        load_golden as load_golden,
    )
    from quiver._report import (
        interventional_report as interventional_report,
        render_report as render_report,
        write_profile as write_profile,
    )
    from quiver._stats import (
        Estimate as Estimate,
        GroupBootstrap as GroupBootstrap,
        NoPairsError as NoPairsError,
        PairTable as PairTable,
    )
    from quiver._trace import (
        SCHEMA_VERSION as SCHEMA_VERSION,
        CallError as CallError,
        CallKind as CallKind,
        Divergence as Divergence,
        FieldDiff as FieldDiff,
        LLMResponse as LLMResponse,
        Message as Message,
        ModelInfo as ModelInfo,
        NodeCall as NodeCall,
        PromptInfo as PromptInfo,
        RedactingFilter as RedactingFilter,
        RedactionConfig as RedactionConfig,
        Redactor as Redactor,
        RetrievalDoc as RetrievalDoc,
        ToolStep as ToolStep,
        Trace as Trace,
        TraceLoad as TraceLoad,
        TraceWriter as TraceWriter,
        iter_traces as iter_traces,
        load_traces as load_traces,
        trace_json_schema as trace_json_schema,
        write_traces as write_traces,
    )
    from quiver.replay import (
        ChatResult as ChatResult,
        LLMClient as LLMClient,
        RetryPolicy as RetryPolicy,
        Template as Template,
        ThreadPoolExecutor as ThreadPoolExecutor,
        bind as bind,
        configure_llm as configure_llm,
        decide as decide,
        gather as gather,
        get_template as get_template,
        iteration as iteration,
        llm as llm,
        loop as loop,
        node as node,
        retrieved as retrieved,
        template as template,
        tool_step as tool_step,
    )


__getattr__, __dir__, __all__ = lazy_exports(__name__, _FAMILIES)
