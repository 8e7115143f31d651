"""quiver.replay: everything that executes a pipeline.

Instrumentation (nodes, decisions, loops, parallel branches, templates, retrieval and
tool steps), the LLM client, recording, frozen replay, executors and the bundled
OpenAI-compatible simulator. The most used names are also available from the top-level
``quiver`` package.

Names are imported on first use: a pipeline that only uses the instrumentation does not
pay for the OpenAI SDK, and the simulator's process does not pay for the replayer.

Families (one private subpackage or module each): ``_instrument`` (the API a pipeline
uses), ``_llm`` (the client), ``_keys`` (every sample key and seed), ``_pipeline``
(loading and running a pipeline as one trace), ``_record`` (recording a corpus),
``_replayer`` (frozen replay), ``_executors`` (where a campaign's replays run), ``_sim``
(the simulator), ``_capture`` (chat completions of other clients, recorded at their
transport).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver._lazy import lazy_exports
from quiver.replay import _capture as _capture  # registers the transport capture with the recordings

_FAMILIES: dict[str, tuple[str, ...]] = {
    "._capture": ("capture_stats", "installed_hooks", "unseen_llm_calls", "unseen_llm_nodes", "unseen_llm_warning"),
    "._executors": (
        "ClusterLost", "EndpointWatch", "Executor", "LocalExecutor", "RayExecutor", "ReplayContext", "ReplayJob",
        "executor", "make_executor", "registered_executors", "worker_for",
    ),
    "._instrument": (
        "CallHandle", "NodeSpec", "Template", "ThreadPoolExecutor", "TraceBuilder", "bind", "decide", "declared_graph",
        "gather", "get_template", "iteration", "load_template_file", "loop", "node", "retrieved", "template",
        "template_overrides", "tool_step",
    ),
    "._llm": (
        "ChatResult", "EndpointDown", "LLMClient", "ResponseCache", "RetryPolicy", "configure_llm", "llm",
        "request_overrides", "use_llm", "use_response_cache",
    ),
    "._keys": (
        "SAMPLE_KEY_HEADER", "derive_sample_key", "replay_identity", "replay_sample_key", "sample_ids",
        "trace_sample_key",
    ),
    "._pipeline": ("call_pipeline", "load_pipeline"),
    "._record": ("InputItem", "RecordResult", "new_run_id", "record_corpus"),
    "._replayer": (
        "DIMENSIONS", "ReplayError", "ReplayMode", "ReplayResult", "Replayer", "Target", "replay_many", "replay_trace",
    ),
    "._sim": (
        "FaultConfig", "Fields", "LatencyConfig", "SimChoice", "SimRequest", "Simulator", "SimulatorConfig",
        "SimulatorProcess", "Text", "ToolCall", "check_loopback", "complete", "sim_model", "sim_model_names",
    ),
    "quiver._trace": ("Divergence", "FieldDiff", "TargetReport"),
    "quiver._interventional": ("PairResult", "pair_results"),
}

if TYPE_CHECKING:  # what type checkers and editors see (re-exported); nothing here runs
    from quiver._interventional import (
        PairResult as PairResult,
        pair_results as pair_results,
    )
    from quiver._trace import (
        Divergence as Divergence,
        FieldDiff as FieldDiff,
        TargetReport as TargetReport,
    )
    from quiver.replay._capture import (
        capture_stats as capture_stats,
        installed_hooks as installed_hooks,
        unseen_llm_calls as unseen_llm_calls,
        unseen_llm_nodes as unseen_llm_nodes,
        unseen_llm_warning as unseen_llm_warning,
    )
    from quiver.replay._executors import (
        ClusterLost as ClusterLost,
        EndpointWatch as EndpointWatch,
        Executor as Executor,
        LocalExecutor as LocalExecutor,
        RayExecutor as RayExecutor,
        ReplayContext as ReplayContext,
        ReplayJob as ReplayJob,
        executor as executor,
        make_executor as make_executor,
        registered_executors as registered_executors,
        worker_for as worker_for,
    )
    from quiver.replay._instrument import (
        CallHandle as CallHandle,
        NodeSpec as NodeSpec,
        Template as Template,
        ThreadPoolExecutor as ThreadPoolExecutor,
        TraceBuilder as TraceBuilder,
        bind as bind,
        decide as decide,
        declared_graph as declared_graph,
        gather as gather,
        get_template as get_template,
        iteration as iteration,
        load_template_file as load_template_file,
        loop as loop,
        node as node,
        retrieved as retrieved,
        template as template,
        template_overrides as template_overrides,
        tool_step as tool_step,
    )
    from quiver.replay._keys import (
        SAMPLE_KEY_HEADER as SAMPLE_KEY_HEADER,
        derive_sample_key as derive_sample_key,
        replay_identity as replay_identity,
        replay_sample_key as replay_sample_key,
        sample_ids as sample_ids,
        trace_sample_key as trace_sample_key,
    )
    from quiver.replay._llm import (
        ChatResult as ChatResult,
        EndpointDown as EndpointDown,
        LLMClient as LLMClient,
        ResponseCache as ResponseCache,
        RetryPolicy as RetryPolicy,
        configure_llm as configure_llm,
        llm as llm,
        request_overrides as request_overrides,
        use_llm as use_llm,
        use_response_cache as use_response_cache,
    )
    from quiver.replay._pipeline import (
        call_pipeline as call_pipeline,
        load_pipeline as load_pipeline,
    )
    from quiver.replay._record import (
        InputItem as InputItem,
        RecordResult as RecordResult,
        new_run_id as new_run_id,
        record_corpus as record_corpus,
    )
    from quiver.replay._replayer import (
        DIMENSIONS as DIMENSIONS,
        Replayer as Replayer,
        ReplayError as ReplayError,
        ReplayMode as ReplayMode,
        ReplayResult as ReplayResult,
        Target as Target,
        replay_many as replay_many,
        replay_trace as replay_trace,
    )
    from quiver.replay._sim import (
        FaultConfig as FaultConfig,
        Fields as Fields,
        LatencyConfig as LatencyConfig,
        SimChoice as SimChoice,
        SimRequest as SimRequest,
        Simulator as Simulator,
        SimulatorConfig as SimulatorConfig,
        SimulatorProcess as SimulatorProcess,
        Text as Text,
        ToolCall as ToolCall,
        check_loopback as check_loopback,
        complete as complete,
        sim_model as sim_model,
        sim_model_names as sim_model_names,
    )


__getattr__, __dir__, __all__ = lazy_exports(__name__, _FAMILIES)
