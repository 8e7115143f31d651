"""Traces written by other tools, in and out: OpenInference, OTel GenAI, Langfuse, and
any format registered with :func:`import_format`.

* ``common``: the rules every format follows, the span records, and
  :class:`SpanFormat`, the base of every format;
* ``registry``: the formats by name (:func:`import_format`, :func:`registered_formats`,
  the entry-point group ``quiver.importers``);
* ``values``: messages, documents and times in their many spellings;
* ``otel``, ``openinference``, ``langfuse``: one built-in format each (importing them
  registers them);
* ``build``: spans into v1 traces (``import_traces``).
"""

from __future__ import annotations

from .build import ImportResult, import_traces
from .common import (
    NOTHING,
    Attrs,
    ImportProblem,
    MappedCall,
    Note,
    SourceSpan,
    SpanFormat,
    input_mapping,
    summary_key,
    unflatten,
)
from .langfuse import LangfuseFormat
from .openinference import OpenInferenceFormat, export_openinference, to_otlp, write_openinference
from .otel import OtelFormat, flatten, response_usage
from .read import read_sources
from .registry import ImportFormatError, get_format, import_format, registered_formats, unregister_format
from .values import (
    MAX_DEPTH,
    NestedTooDeep,
    documents,
    iso_from_ns,
    loads,
    messages_text,
    normalise_messages,
    parse_json,
    parse_json_strict,
    render_messages,
    to_ns,
)

__all__ = [
    "NOTHING",
    "ImportProblem",
    "SourceSpan",
    "MappedCall",
    "Attrs",
    "Note",
    "SpanFormat",
    "ImportFormatError",
    "import_format",
    "get_format",
    "registered_formats",
    "unregister_format",
    "read_sources",
    "summary_key",
    "unflatten",
    "input_mapping",
    "MAX_DEPTH",
    "NestedTooDeep",
    "loads",
    "parse_json",
    "parse_json_strict",
    "normalise_messages",
    "render_messages",
    "messages_text",
    "documents",
    "to_ns",
    "iso_from_ns",
    "OtelFormat",
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
