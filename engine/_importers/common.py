"""Importing traces written by other tools: spans to v1 traces (``quiver.import_traces``).

The formats (:class:`SpanFormat` subclasses registered by name with
:func:`~quiver._importers.import_format`: the built-in :mod:`quiver._importers.openinference`,
:mod:`quiver._importers.otel`, :mod:`quiver._importers.langfuse`, and any other) turn
each span or observation into a :class:`SourceSpan` and map its attributes onto a
:class:`MappedCall`; this module reads the files, :mod:`quiver._importers.build` builds
the traces. The mapping, for every format:

* **One span, one node call.** The spans of one trace id form one trace. A span
  without a trace id belongs to the trace of its root; a span with no ids at all is a
  single-call trace. A trace starts with the source call ``c0`` (node ``input``, kind
  ``source``) whose output is the trace's inputs, as a recording makes it.
* **Node names** are span names (``node_name="kind+name"`` prefixes the span's kind,
  ``"attribute.KEY"`` takes an attribute, a function takes the :class:`SourceSpan`).
* **Order.** Calls are numbered ``c1 .. cN`` in program order: depth first over the
  span tree, siblings by start time (ties by span id), which is start-time order
  except where parallel sibling subtrees overlap. ``occurrence`` is the k-th call of
  a node in that order; ``call_path`` follows the parent chain (``agent#0/llm#1``,
  ``k`` counted among the calls of that node under the same parent).
* **Parents** are the span parent's call id; a root span's parent is ``c0``. A span
  whose parent is not in the trace becomes a root-level call (parent ``c0``) and a
  problem names it. Parent cycles are broken the same way.
* **Times**: ``started_at`` and ``ended_at`` are seconds since the trace's first span.
* **Inputs and outputs** are parsed from JSON where they are JSON. ``input_hash`` is
  the content hash of the parsed input (``None`` when the span has none). The trace's
  inputs are its root span's input (a mapping as it is, anything else as
  ``{"input": value}``); its output is the last root span's output.
* **Groups**: ``input_id`` is ``in-`` and 16 hex digits of the hash of the inputs, so
  that repeats of one input group together (a trace with no input at all is a group
  of its own, under its trace id); ``group_by`` takes ``session``,
  ``metadata.KEY``, ``attribute.NAME`` (on the root span) or ``trace`` (every trace
  its own group) instead. ``repeat`` counts the traces of a group by start time
  (ties by trace id); traces come in start order (ties in the order read).
* **Nothing is dropped silently.** Attributes the mapping does not use are kept in
  the call's ``tags`` under ``"otel"`` (or ``"langfuse"``) with their original keys;
  span fields with no home (events, links, a non-internal span kind) under
  ``"otel.span"``; resource attributes and scopes under the trace's
  ``tags["import"]``. Empty values (null, ``""``, ``[]``, ``{}``) carry nothing and
  are not kept. :meth:`ImportResult.summary` counts the mapped and the kept keys.
* **Problems** (unreadable or truncated JSON, duplicated span ids, missing parents,
  parent cycles, values that do not fit a field) are collected with the location
  and the span id, and the import goes on: what can be read is imported. A
  duplicated span id identical to the first is dropped; one with other content is
  kept under the id suffixed ``~N`` (the N-th span seen with that id).
* **quiver attributes.** Spans written by :func:`quiver.export_openinference` carry
  ``quiver.*`` attributes (call id, node, occurrence, call path, loop, parents,
  input hash, decisions, tags, model version, prompt template, response details) and
  a trace span (``quiver.trace_id``); they take precedence over what is derived, so
  an export imports back as the traces it came from.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiver._canonical import to_jsonable
from quiver._errors import QuiverError
from quiver._trace import CallError, CallKind, LLMResponse, ModelInfo, PromptInfo, RetrievalDoc, ToolStep

from .otlp_proto import OtlpDecodeError, decode_export, looks_like_otlp
from .values import MAX_DEPTH, NestedTooDeep, loads, too_deep

__all__ = [
    "NOTHING",
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
]

NOTHING: Any = type("Nothing", (), {"__repr__": lambda self: "NOTHING"})()
"""Marks a span that has no input at all (as opposed to a null input)."""


@dataclass(frozen=True)
class ImportProblem:
    """Something in the imported data that could not be imported as it stands."""

    where: str
    """File and line (``spans.jsonl:12``), or the record's place in the input."""
    span_id: str | None
    """The span or observation it concerns, when known."""
    what: str
    """What was wrong and what was done about it."""

    def __str__(self) -> str:
        span = f"span {self.span_id}: " if self.span_id else ""
        return f"{self.where}: {span}{self.what}"

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON object."""
        return {"where": self.where, "span_id": self.span_id, "what": self.what}


@dataclass
class SourceSpan:
    """One span or observation as read, before it is mapped."""

    span_id: str | None
    trace_id: str | None
    parent_id: str | None
    name: str
    kind_label: str
    """The format's own kind (``LLM``, ``GENERATION``, ``chat`` ...), for ``node_name="kind+name"``."""
    start_ns: int | None
    end_ns: int | None
    attributes: dict[str, Any]
    """Flat attributes (OTel) or the observation's fields (Langfuse)."""
    where: str
    envelope: dict[str, Any] = field(default_factory=dict)
    """Span fields with no place in a node call (events, links, kind), kept in tags."""
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None
    trace_info: dict[str, Any] | None = None
    """The format's trace record, when it has one (a Langfuse trace)."""
    error: CallError | None = None
    """The error the span reports (status ERROR), if any."""
    index: int = 0
    # Set by a format's :meth:`SpanFormat.arrange` (framework spans); the defaults leave the span as read.
    as_trace: bool = False
    """The span is the trace itself (its input the trace's inputs, its output the trace's output), not a call."""
    links: list[str] | None = None
    """Span ids of the calls whose outputs this call consumed (its ``parents``); None: the span parent."""
    decision: dict[str, Any] = field(default_factory=dict)
    """Branch arms taken at this call, by gate name."""
    loop: str | None = None
    """The loop this call ran in, and its 0-based ``iteration``."""
    iteration: int | None = None
    absorbed: list[dict[str, Any]] = field(default_factory=list)
    """Spans folded into this call (``name``, ``span_id``, their unmapped ``attributes``), kept in tags."""
    trace_tags: dict[str, Any] = field(default_factory=dict)
    """Tags for the trace (loops), on the span that is the trace."""
    tool: tuple[str, Any, Any] | None = None
    """The tool step (name, arguments, response) of a call whose tool span was folded into it."""
    source_kind: str = "other"
    """The span's kind in the file (llm, tool, retriever, chain, other), for the reconciliation."""
    zero_parent: bool = False
    """The span names an invalid (all-zero) span id as its parent."""
    zero_id: bool = False
    """The span's own id is invalid (all zeros)."""


@dataclass
class MappedCall:
    """What a format made of one span: the node call's content, before ids and order."""

    kind: CallKind = "transform"
    input: Any = NOTHING
    output: Any = None
    model: ModelInfo | None = None
    prompt: PromptInfo | None = None
    response: LLMResponse | None = None
    retrieval: list[RetrievalDoc] | None = None
    tool: ToolStep | None = None
    error: CallError | None = None


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, dict)) and not value)


_INDEX = re.compile(r"\.\d+(?=\.|$)")


def summary_key(key: str) -> str:
    """An attribute key with its list indices folded: ``llm.input_messages.N.message.role``."""
    return _INDEX.sub(".N", key)


class Attrs:
    """A span's attributes, remembering which keys the mapping used."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.used: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (marked as mapped), or ``default``."""
        if key not in self.data:
            return default
        self.used.add(key)
        return self.data[key]

    def first(self, *keys: str) -> Any:
        """The first non-empty value among ``keys``; aliases holding the same value count as mapped too."""
        found = [(k, self.data[k]) for k in keys if k in self.data and not _empty(self.data[k])]
        if not found:
            return None
        value = found[0][1]
        self.used.update(k for k, v in found if v == value)
        return value

    def prefix(self, prefix: str) -> dict[str, Any]:
        """Keys under ``prefix.`` with the prefix removed (marked as mapped)."""
        out = {}
        for key, value in self.data.items():
            if key.startswith(prefix + "."):
                self.used.add(key)
                out[key[len(prefix) + 1:]] = value
        return out

    def peek(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` without marking it."""
        return self.data.get(key, default)

    def rest(self) -> dict[str, Any]:
        """The non-empty values the mapping did not use."""
        return {k: v for k, v in self.data.items() if k not in self.used and not _empty(v)}


def unflatten(flat: Mapping[str, Any]) -> Any:
    """Nested data from dotted keys: ``{"0.message.role": "user"}`` -> ``[{"message": {"role": "user"}}]``."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                nxt = node[part] = {"": nxt}
            node = nxt
        node[parts[-1]] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items


def input_mapping(value: Any) -> dict[str, Any]:
    """A trace's inputs from its root span's input: a mapping as it is, else ``{"input": value}``."""
    if value is NOTHING or value is None:
        return {}
    value = to_jsonable(value)
    return value if isinstance(value, dict) else {"input": value}


Note = Callable[[str], None]


class SpanFormat:
    """An import format: reads records into spans and maps one span onto a node call.

    The base of every format, built in or not. Subclass it, implement :meth:`record`
    and :meth:`map_call`, and register the class with
    :func:`~quiver._importers.import_format`, which sets :attr:`name` and builds the one
    instance :func:`~quiver.import_traces` uses (so ``__init__`` takes no argument)::

        @import_format("toy-jsonl")
        class ToyFormat(SpanFormat):
            tag_key = "toy"
            unit = "a toy record"

            def record(self, value, where, problems):
                return [SourceSpan(
                    span_id=value.get("span"), trace_id=value.get("trace"), parent_id=value.get("parent"),
                    name=str(value.get("name", "")), kind_label=str(value.get("kind", "")),
                    start_ns=None, end_ns=None, where=where,
                    attributes={k: v for k, v in value.items() if k in ("kind", "input", "output")},
                )]

            def map_call(self, span, attrs, note):
                kind = attrs.get("kind")
                return MappedCall(kind=kind if kind in ("llm", "tool") else "transform",
                                  input=attrs.get("input", NOTHING), output=attrs.get("output"))

    What the engine does with the spans (trace ids, parents, order, occurrences, call
    paths, groups, the summary, problems) is the same for every format; see this
    module's docstring.

    To implement:

    * :meth:`record` ``(value, where, problems) -> list[SourceSpan]``: the spans of one
      JSON object read from a file (a document, an element of a JSON array, a line of
      JSON Lines) or passed in. One record may hold many spans (an export envelope) or
      none. Put the span's content in :attr:`SourceSpan.attributes`; append an
      :class:`ImportProblem` for what cannot be read, and go on.
    * :meth:`map_call` ``(span, attrs, note) -> MappedCall``: the node call's content:
      its kind, input (:data:`NOTHING` when the span has none), output, and when known
      its model, prompt, response, retrieval set, tool step and error. Read the
      attributes through ``attrs`` (:meth:`Attrs.get`, :meth:`Attrs.first`,
      :meth:`Attrs.prefix`): the keys read count as mapped, every other non-empty key
      is kept in the call's tags under :attr:`tag_key`. ``note(what)`` reports a
      problem with the span.

    Optional hooks (the defaults read the span's attributes):

    * :meth:`spans`: records that are not JSON objects (by default a list is read item
      by item, anything else is reported and skipped);
    * :meth:`attribute`: an attribute for ``group_by="attribute.NAME"`` and
      ``node_name="attribute.KEY"``;
    * :meth:`session`, :meth:`metadata`: the trace's session and metadata, for
      ``group_by="session"`` and ``"metadata.KEY"``;
    * :meth:`trace_fields`: fields from the format's own trace record, for formats
      that have one (Langfuse);
    * :meth:`arrange`: the spans of one trace rearranged before they become calls
      (OpenInference: LangGraph and DSPy spans, see :mod:`quiver._importers.frameworks`).

    Attributes:
        name: The registered name (set by :func:`~quiver._importers.import_format`).
        tag_key: The call tag that keeps the attributes the mapping did not use
            (``otel``, ``langfuse``); span envelope fields go under ``TAG_KEY.span``.
        unit: What one record is (``a span``), for the message about a record that is
            not a JSON object.
    """

    name: str = ""
    tag_key: str = "otel"
    unit: str = "a span"

    def spans(self, value: Any, where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
        """The spans of one value read from a file (or passed in): a list is read item by
        item, an object by :meth:`record`, anything else is reported and skipped."""
        if isinstance(value, list):
            return [s for i, item in enumerate(value) for s in self.spans(item, f"{where}[{i}]", problems)]
        if not isinstance(value, Mapping):
            problems.append(ImportProblem(where, None, f"not {self.unit}: a JSON {type(value).__name__}; skipped"))
            return []
        return self.record(value, where, problems)

    def record(self, value: Mapping[str, Any], where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
        """The spans of one JSON object."""
        raise NotImplementedError

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        """The call content of one span; ``note(what)`` reports a problem with it."""
        raise NotImplementedError

    def arrange(self, spans: list[SourceSpan], hints: Mapping[str, Any], note: Callable[[SourceSpan, str], None],
                ) -> list[SourceSpan]:
        """The spans of one trace as they become calls: by default as read. A format may
        fold spans together, mark the span that is the trace (:attr:`SourceSpan.as_trace`)
        and set links, decisions and loops (see :class:`SourceSpan`); ``hints`` are the
        ``import_traces`` options meant for it, ``note(span, what)`` reports a problem."""
        return spans

    def attribute(self, span: SourceSpan, name: str) -> Any:
        """An attribute of a span, for ``group_by`` and ``node_name``."""
        return span.attributes.get(name)

    def source_kind(self, span: SourceSpan) -> str:
        """The span's kind in the file, as read (before any mapping): ``llm``, ``tool``,
        ``retriever``, ``chain`` or ``other``; the reconciliation counts spans by it."""
        return "other"

    def session(self, span: SourceSpan) -> Any:
        """The session (conversation) id of a trace, from its root span."""
        return span.attributes.get("session.id")

    def metadata(self, span: SourceSpan, key: str) -> Any:
        """A metadata field of a trace, from its root span."""
        return span.attributes.get(f"metadata.{key}")

    def trace_fields(self, root: SourceSpan) -> tuple[dict[str, Any], Counter[str], Counter[str]]:
        """Trace-level fields from the format's own trace record, with the keys mapped and kept.

        The fields a format may give: ``trace_id``, ``pipeline``, ``inputs``, ``output``
        and ``tags``; those it leaves out are derived from the spans. None by default.
        """
        return {}, Counter(), Counter()


# --------------------------------------------------------------------------- reading

_ID_IN_TEXT = re.compile(r'"(?:spanId|span_id|id)"\s*:\s*"([^"]{1,200})"')
_RECORD_KEYS = {"observations", "spans", "resourceSpans", "scopeSpans", "instrumentationLibrarySpans", "data"}


def _id_in(text: str) -> str | None:
    m = _ID_IN_TEXT.search(text)
    if m is None:
        return None
    return m.group(1)[2:] if m.group(1).startswith("0x") else m.group(1)


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise QuiverError(f"{path}: no such file; give span files exported as JSON or JSON Lines")
    raw = path.read_bytes()
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except zlib.error as exc:  # a damaged deflate stream (a bad header is an OSError)
            raise OSError(f"not a readable gzip file: {exc}") from None
    return raw


def _suffix(path: Path) -> str:
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix


def read_sources(sources: Iterable[Any], problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """Records with their location: every JSON value of every file, or the records passed in."""
    for i, item in enumerate(sources):
        if isinstance(item, (str, os.PathLike)):
            yield from read_file(Path(item), problems)
        else:
            yield item, f"<records>[{i}]"


def read_file(path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """A JSON document, a JSON array (element by element), JSON Lines, concatenated JSON values or
    an OTLP protobuf export; truncated files in part."""
    try:
        raw = _read_bytes(path)
        if looks_like_otlp(raw, _suffix(path)):
            yield from _protobuf(raw, path, problems)
            return
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raw = exc.object if isinstance(exc.object, bytes) else b""
        line = raw.count(b"\n", 0, exc.start) + 1
        problems.append(ImportProblem(f"{path}:{line}", None, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                                      f"byte {exc.start}); file skipped" if raw else "not UTF-8 text; file skipped"))
        return
    except (OSError, EOFError) as exc:
        problems.append(ImportProblem(str(path), None, f"cannot be read ({exc}); file skipped"))
        return
    if not text.strip():
        problems.append(ImportProblem(str(path), None, "the file is empty"))
        return
    whole = _try_json(text)
    if text.lstrip().startswith("["):  # an array is read record by record
        if whole is not NOTHING or not _looks_like_jsonl(text):
            yield from _array_items(text, path, problems)
            return
    if whole is _TOO_DEEP and not _looks_like_jsonl(text):
        problems.append(ImportProblem(str(path), None, f"the JSON is nested more than {MAX_DEPTH} levels deep; "
                                      "file skipped"))
        return
    if whole is not NOTHING and whole is not _TOO_DEEP:
        yield whole, str(path)
    elif _looks_like_jsonl(text):
        yield from _jsonl(text, path, problems)
    elif _concatenated(text):
        yield from _objects(text, path, problems)
    else:
        yield from _salvage(text, path, problems)


def _concatenated(text: str) -> bool:
    """JSON values one after the other (the OTel SDK's ``ConsoleSpanExporter`` and file exporters
    write pretty-printed ``span.to_json()`` objects so): the first value is whole and more follows."""
    start = len(text) - len(text.lstrip())
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        return False
    return bool(text[end:].strip())


def _objects(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """Each JSON value of concatenated JSON, with the line it starts on; a value that does not
    parse ends the reading, with a problem."""
    decoder = json.JSONDecoder()
    pos, line, last = 0, 1, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            return
        line += text.count("\n", last, pos)
        last = pos
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            problems.append(ImportProblem(
                f"{path}:{exc.lineno}:{exc.colno}", _id_in(text[last:last + 4000]),
                f"truncated or invalid JSON ({exc.msg}); the records before line {line} were imported, "
                "the record from there on was not"))
            return
        except RecursionError:
            problems.append(ImportProblem(f"{path}:{line}", None, f"the record is nested more than {MAX_DEPTH} "
                                          f"levels deep; the records before line {line} were imported, the "
                                          "record from there on was not"))
            return
        if too_deep(value):
            problems.append(ImportProblem(f"{path}:{line}", None, f"the record is nested more than {MAX_DEPTH} "
                                          "levels deep; skipped"))
            continue
        yield value, f"{path}:{line}"


def _protobuf(raw: bytes, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    try:
        yield decode_export(raw), str(path)
    except OtlpDecodeError as exc:
        problems.append(ImportProblem(str(path), None, f"not an OTLP protobuf export ({exc}); nothing in the file "
                                      "could be imported"))


_TOO_DEEP: Any = type("TooDeep", (), {"__repr__": lambda self: "TOO_DEEP"})()
"""What :func:`_try_json` returns for JSON nested more than :data:`MAX_DEPTH` levels."""


def _try_json(text: str) -> Any:
    try:
        return loads(text)
    except NestedTooDeep:
        return _TOO_DEEP
    except ValueError:
        return NOTHING


def _looks_like_jsonl(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) > 1 and any(isinstance(_try_json(line), (dict, list)) or _try_json(line) is _TOO_DEEP
                                  for line in lines[:2])


def _jsonl(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield loads(line), f"{path}:{lineno}"
        except ValueError as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            col = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            problems.append(ImportProblem(f"{path}:{lineno}", _id_in(line),
                                          f"not valid JSON ({msg}{col}); the line was skipped"))


def _array_items(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    line = 1 + text.count("\n", 0, pos)
    last = pos
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            problems.append(ImportProblem(f"{path}:{line}", None,
                                          "the file ends before the JSON array closes (truncated); "
                                          "every complete record was imported"))
            return
        if text[pos] == "]":
            return
        line += text.count("\n", last, pos)
        last = pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            problems.append(ImportProblem(
                f"{path}:{exc.lineno}:{exc.colno}", _id_in(text[pos:pos + 4000]),
                f"truncated or invalid JSON ({exc.msg}); the records before line {line} were imported, "
                "the record from there on was not"))
            return
        except RecursionError:
            problems.append(ImportProblem(
                f"{path}:{line}", _id_in(text[pos:pos + 4000]),
                f"the record is nested more than {MAX_DEPTH} levels deep; the records before line {line} were "
                "imported, the record from there on was not"))
            return
        yield value, f"{path}:{line}"
        pos = end


@dataclass
class _Frame:
    char: str
    key: str | None
    cut: int
    last_string: str | None = None


def _salvage(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """The complete records of a truncated JSON document: cut at the last whole record, close the rest."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        error = exc
    except (ValueError, RecursionError):  # not reached: read_file knows the text is not JSON
        problems.append(ImportProblem(str(path), None, "not valid JSON; nothing in the file could be imported"))
        return
    stack = _scan(text[: error.pos])
    recovered = NOTHING
    if stack:
        chosen = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].char == "[" and
                       (i == 0 or stack[i].key in _RECORD_KEYS)), 0)
        frame = stack[chosen]
        closers = "".join("]" if f.char == "[" else "}" for f in reversed(stack[: chosen + 1]))
        recovered = _try_json(text[: frame.cut] + closers)
        cut_id = _id_in(text[frame.cut: frame.cut + 4000])
    where = f"{path}:{error.lineno}:{error.colno}"
    if recovered is NOTHING or recovered is _TOO_DEEP or recovered in ({}, []):
        problems.append(ImportProblem(where, _id_in(text[: error.pos][-4000:]),
                                      f"not valid JSON ({error.msg}); nothing in the file could be imported"))
        return
    problems.append(ImportProblem(where, cut_id, f"truncated or invalid JSON ({error.msg}); the complete records "
                                  "before it were imported, the cut record and anything after it were not"))
    yield recovered, str(path)


def _scan(text: str) -> list[_Frame]:
    """The containers still open at the end of ``text``, with the last place each can be cut."""
    stack: list[_Frame] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if stack:
                stack[-1].last_string = text[i + 1: j]
            i = j + 1
            continue
        if ch in "[{":
            key = stack[-1].last_string if stack and stack[-1].char == "{" else None
            stack.append(_Frame(ch, key, i + 1))
        elif ch in "]}" and stack:
            stack.pop()
            if stack:
                stack[-1].cut = i + 1
        elif ch == "," and stack:
            stack[-1].cut = i
        i += 1
    return stack
