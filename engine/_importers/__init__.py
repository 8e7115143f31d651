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

from .common import NOTHING, ImportProblem, SourceSpan, MappedCall, Attrs, Note, SpanFormat, read_sources, summary_key, unflatten, input_mapping
from .values import parse_json, parse_json_strict, normalise_messages, render_messages, messages_text, documents, to_ns, iso_from_ns
from .registry import ImportFormatError, import_format, get_format, registered_formats, unregister_format
from .otel import OtelFormat, flatten, response_usage
from .openinference import OpenInferenceFormat, export_openinference, write_openinference, to_otlp
from .langfuse import LangfuseFormat
from .build import ImportResult, import_traces

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
