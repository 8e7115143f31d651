"""Traces written by other tools, in and out: OpenInference, OTel GenAI and Langfuse.

* ``common``: the rules every format follows, and the span records;
* ``values``: messages, documents and times in their many spellings;
* ``otel``, ``openinference``, ``langfuse``: one format each;
* ``build``: spans into v1 traces (``import_traces``).
"""

from __future__ import annotations

from .common import FORMATS, NOTHING, ImportFormat, ImportProblem, SourceSpan, MappedCall, Attrs, Note, SpanFormat, read_sources, summary_key, unflatten, input_mapping
from .values import parse_json, parse_json_strict, normalise_messages, render_messages, messages_text, documents, to_ns, iso_from_ns
from .otel import OtelFormat, FORMAT, flatten, response_usage
from .openinference import OpenInferenceFormat, export_openinference, write_openinference, to_otlp
from .langfuse import LangfuseFormat
from .build import ImportResult, import_traces

__all__ = [
    "FORMATS",
    "NOTHING",
    "ImportFormat",
    "ImportProblem",
    "SourceSpan",
    "MappedCall",
    "Attrs",
    "Note",
    "SpanFormat",
    "read_sources",
    "summary_key",
    "unflatten",
    "input_mapping",
    "parse_json",
    "parse_json_strict",
    "normalise_messages",
    "render_messages",
    "messages_text",
    "documents",
    "to_ns",
    "iso_from_ns",
    "OtelFormat",
    "FORMAT",
    "flatten",
    "response_usage",
    "OpenInferenceFormat",
    "export_openinference",
    "write_openinference",
    "to_otlp",
    "LangfuseFormat",
    "ImportResult",
    "import_traces",
]
