"""The trace format (v1) and everything that reads, writes, redacts and compares it.

* ``model``: :class:`Trace`, :class:`NodeCall` and the replay-contract records;
* ``io``: streaming JSONL reading (a bad line costs only itself) and byte-stable writing;
* ``redact``: secrets removed when anything is written, never later;
* ``diff``: field diffs between a recorded and a replayed call, and replay divergences.
"""

from __future__ import annotations

from .model import SCHEMA_VERSION, CallKind, Message, ModelInfo, PromptInfo, LLMResponse, RetrievalDoc, ToolStep, CallError, NodeCall, Trace, trace_json_schema
from .io import iter_traces, load_traces, TraceLoad, TraceWriter, write_traces, trace_to_line, format_loc
from .redact import RedactionConfig, Redactor, RedactingFilter
from .diff import FieldDiff, Divergence, TargetReport, call_diff, call_names, trace_diff, diff_values, PERTURBED_TAG

__all__ = [
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
    "Trace",
    "trace_json_schema",
    "iter_traces",
    "load_traces",
    "TraceLoad",
    "TraceWriter",
    "write_traces",
    "trace_to_line",
    "format_loc",
    "RedactionConfig",
    "Redactor",
    "RedactingFilter",
    "FieldDiff",
    "Divergence",
    "TargetReport",
    "call_diff",
    "call_names",
    "trace_diff",
    "diff_values",
    "PERTURBED_TAG",
]
