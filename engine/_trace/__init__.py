"""The trace format (v1) and everything that reads, writes, redacts and compares it.

* ``model``: :class:`Trace`, :class:`NodeCall` and the replay-contract records;
* ``io``: streaming JSONL reading (a bad line costs only itself, a damaged file gives
  the lines before the damage and one error) and byte-stable writing;
* ``redact``: secrets removed when anything is written, never later (the kinds it knows
  in ``secret_kinds``);
* ``redact_output``: one redaction boundary for what a process logs and prints;
* ``diff``: field diffs between a recorded and a replayed call, and replay divergences.
"""

from __future__ import annotations

from .delta import DELTA_KEY, apply_delta, baseline_digest, baseline_text, pack_delta, trace_delta
from .diff import (
    PERTURBED_TAG,
    Divergence,
    FieldDiff,
    TargetReport,
    call_diff,
    call_names,
    diff_values,
    outcome_divergence,
    outcome_view,
    trace_diff,
)
from .io import (
    MAX_NESTING,
    TraceLoad,
    TraceWriter,
    check_trace_file,
    format_loc,
    iter_lines,
    iter_traces,
    load_traces,
    parse_line,
    read_corpus,
    trace_to_line,
    write_traces,
)
from .marks import read_back_marks, redaction_marks
from .model import (
    SCHEMA_VERSION,
    CallError,
    CallKind,
    CheckResult,
    JudgeRecord,
    LLMResponse,
    Message,
    ModelInfo,
    NodeCall,
    Outcome,
    OutcomeStatus,
    PromptInfo,
    RetrievalDoc,
    ToolStep,
    Trace,
    call_graph_problems,
    printable,
    trace_json_schema,
)
from .redact import SECRET_KINDS, RedactingFilter, RedactionConfig, Redactor, SecretKind, known_secrets_redactor
from .redact_output import (
    RedactingStream,
    output_redactor,
    redact_process_output,
    redacted_console,
    redacted_logs,
    split_lines,
)

__all__ = [
    "DELTA_KEY",
    "apply_delta",
    "baseline_digest",
    "baseline_text",
    "pack_delta",
    "trace_delta",
    "read_back_marks",
    "redaction_marks",
    "SCHEMA_VERSION",
    "CallKind",
    "Message",
    "ModelInfo",
    "PromptInfo",
    "LLMResponse",
    "RetrievalDoc",
    "ToolStep",
    "CallError",
    "NodeCall",
    "CheckResult",
    "JudgeRecord",
    "Outcome",
    "OutcomeStatus",
    "Trace",
    "trace_json_schema",
    "call_graph_problems",
    "printable",
    "MAX_NESTING",
    "check_trace_file",
    "iter_lines",
    "parse_line",
    "iter_traces",
    "load_traces",
    "read_corpus",
    "TraceLoad",
    "TraceWriter",
    "write_traces",
    "trace_to_line",
    "format_loc",
    "RedactionConfig",
    "Redactor",
    "RedactingFilter",
    "SECRET_KINDS",
    "SecretKind",
    "known_secrets_redactor",
    "redacted_logs",
    "redacted_console",
    "redact_process_output",
    "output_redactor",
    "RedactingStream",
    "split_lines",
    "FieldDiff",
    "Divergence",
    "TargetReport",
    "call_diff",
    "call_names",
    "trace_diff",
    "diff_values",
    "PERTURBED_TAG",
    "outcome_divergence",
    "outcome_view",
]
