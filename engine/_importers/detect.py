"""What a span file holds, before it is imported: refusals in one line, and the ``auto`` format.

Each record read is sorted into a family by its shape and its attributes:

* ``langfuse``: Langfuse trace exports and observations (``{trace, observations[]}``,
  the public API's traces, ``{"data": [...]}`` pages, observations with a ``type``);
* ``openinference``: spans with ``openinference.span.kind``;
* ``otel-genai``: spans with GenAI (``gen_ai.*``), Vercel AI SDK (``ai.*``), OpenLLMetry
  (``traceloop.*``, ``llm.request.type``) or Langfuse SDK (``langfuse.observation.*``)
  attributes;
* ``otel``: OTel spans with none of these (an HTTP server span, a database call): they
  import as plain calls beside the others, and count for no format;
* ``unknown``: anything else (a record that is not a span; an object of named lists
  whose items are not spans). An object of named span lists
  (``{"ai.generateText": [spans...], ...}``) is sorted by the spans it holds.

A file is **refused** (:class:`SpanShapeError`, exit 2 from ``quiver import``) when the
format asked for reads none or fewer than half of its spans and another format reads
more (the line names the format that would read it), or when most of its records are of
no known shape, or when it holds only spans with nothing to map (the line says what was
found and what is read). The ``auto`` format takes, for all the files together, the
family most of their spans are in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from quiver._errors import QuiverError

from .common import SourceSpan, SpanFormat
from .otel import is_envelope, span_lists

__all__ = ["AUTO", "FAMILIES", "SpanShapeError", "families", "check_file", "choose_format"]

AUTO = "auto"
"""The format name that detects the format of the files."""

FAMILIES = ("openinference", "otel-genai", "langfuse")
"""The built-in formats, each reading one family of spans."""

_WHAT = {"openinference": "OpenInference span(s) (openinference.span.kind)",
         "otel-genai": "OTel GenAI / Vercel AI SDK / OpenLLMetry span(s) (gen_ai.*, ai.*, traceloop.*)",
         "langfuse": "Langfuse observation(s) ({trace, observations[]})",
         "otel": "OTel span(s) with no GenAI, OpenInference or Langfuse attribute",
         "unknown": "record(s) of no known span shape"}
_READS = ("OTLP/JSON or OTLP protobuf (resourceSpans), the OTel SDK's span.to_json() objects (concatenated, "
          "an array or JSON Lines), OTel JS spans (spanContext), Phoenix span exports, Langfuse exports "
          "({trace, observations[]})")
_GENAI_PREFIXES = ("gen_ai.", "ai.", "traceloop.", "llm.request.", "llm.usage.", "langfuse.observation.",
                   "langfuse.trace.")
_LANGFUSE_TYPES = {"GENERATION", "SPAN", "EVENT", "TOOL", "AGENT", "CHAIN", "RETRIEVER", "EMBEDDING", "EVALUATOR",
                   "GUARDRAIL"}


class SpanShapeError(QuiverError):
    """A span file of a shape the format asked for does not read (see :mod:`quiver._importers.detect`)."""


def _langfuse(value: Mapping[str, Any]) -> int | None:
    """How many observations a Langfuse record holds; None when it is not one."""
    if isinstance(value.get("observations"), list):
        return len(value["observations"])
    trace = value.get("trace")
    if isinstance(trace, Mapping) and isinstance(trace.get("observations"), list):
        return len(trace["observations"])
    if value.get("type") in _LANGFUSE_TYPES and "id" in value and ("traceId" in value or "startTime" in value):
        return 1
    return None


def _family(span: SourceSpan) -> str:
    keys = span.attributes
    if "openinference.span.kind" in keys:
        return "openinference"
    if any(k.startswith(_GENAI_PREFIXES) for k in keys):
        return "otel-genai"
    if span.span_id is not None or span.trace_id is not None or span.zero_id or span.envelope:
        return "otel"
    return "unknown"


def families(value: Any, otel: SpanFormat) -> Counter[str]:
    """The families of the spans in one record (``otel`` reads the OTel envelopes)."""
    if isinstance(value, list):
        out: Counter[str] = Counter()
        for item in value:
            out.update(families(item, otel))
        return out
    if not isinstance(value, Mapping):
        return Counter({"unknown": 1})
    if isinstance(value.get("data"), list) and value["data"] and all(isinstance(v, Mapping) and _langfuse(v)
                                                                      for v in value["data"]):
        return families(value["data"], otel)
    count = _langfuse(value)
    if count is not None:
        return Counter({"langfuse": count})
    lists = span_lists(value)
    if lists is not None:  # an object of named lists: their spans, or nothing a format reads
        return families([item for v in value.values() for item in v], otel) if lists else Counter({"unknown": 1})
    try:
        spans = otel.spans(value, "", [])
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError):
        return Counter({"unknown": 1})
    return Counter(_family(s) for s in spans) or Counter({"unknown": 1})


def _found(found: Counter[str]) -> str:
    return ", ".join(f"{n} {_WHAT[f]}" for f, n in found.most_common())


def _shape(sample: Any) -> str:
    if isinstance(sample, Mapping) and span_lists(sample) is False:
        first = next(item for v in sample.values() for item in v if not is_envelope(item))
        names = ", ".join(map(repr, list(sample)[:4])) + (" ..." if len(sample) > 4 else "")
        return f"an object of {len(sample)} named list(s) ({names}) whose items are not spans (one is {_shape(first)})"
    if isinstance(sample, Mapping):
        keys = list(sample)[:6]
        lists = sum(isinstance(v, list) for v in sample.values())
        held = f", {lists} of them holding lists" if lists else ""
        return f"a JSON object with keys {', '.join(map(repr, keys))}{' ...' if len(sample) > 6 else ''}{held}"
    return f"a JSON {type(sample).__name__}"


def check_file(path: str, found: Counter[str], asked: str, sample: Any) -> None:
    """Refuse a file whose spans the format ``asked`` does not read (see the module docstring).

    Raises:
        SpanShapeError: With one line naming what was found and the format that reads it.
    """
    total = sum(found.values())
    if not total or asked not in FAMILIES:
        return
    mine = found.get(asked, 0)
    known = [(f, n) for f, n in found.most_common() if f in FAMILIES and f != asked]
    if known and mine * 2 < total and known[0][1] > mine:
        raise SpanShapeError(f"{path}: holds {_found(found)}, not {asked} spans; import it with "
                             f"`quiver import {known[0][0]}` (or `quiver import auto`)")
    if found.get("unknown", 0) * 2 > total:
        raise SpanShapeError(f"{path}: not a span file quiver import reads: found {_shape(sample)} "
                             f"({_found(found)}); it reads {_READS}")
    if not mine and not known:
        raise SpanShapeError(f"{path}: holds {_found(found)}: nothing in it maps onto node calls (no LLM, tool "
                             f"or chain attributes); the formats read {', '.join(FAMILIES)} spans")


def choose_format(found: dict[str, Counter[str]], samples: Mapping[str, Any] | None = None) -> str:
    """The format for ``auto``: the family most spans of all the files are in (``samples``: a
    record of each file, to say what a file holds when nothing in it is a span).

    Raises:
        SpanShapeError: No file holds spans of a known family.
    """
    total: Counter[str] = Counter()
    for counts in found.values():
        total.update({f: n for f, n in counts.items() if f in FAMILIES})
    if not total:
        shapes = {path: f"{_shape(sample)}: " for path, sample in (samples or {}).items()
                  if isinstance(sample, Mapping) and span_lists(sample) is False}
        what = "; ".join(f"{path}: {shapes.get(path, '')}{_found(c) or 'nothing'}" for path, c in found.items())
        raise SpanShapeError(f"no span of a format quiver import reads was found ({what}); it reads {_READS}")
    return total.most_common(1)[0][0]
