"""Importing traces written by other tools: spans to v1 traces (``quiver.import_traces``).

The formats (:class:`SpanFormat` subclasses registered by name with
:func:`~quiver._importers.import_format`: the built-in :mod:`quiver._importers.openinference`,
:mod:`quiver._importers.otel`, :mod:`quiver._importers.langfuse`, and any other) turn
each span or observation into a :class:`SourceSpan` and map its attributes onto a
:class:`MappedCall`; :mod:`quiver._importers.read` reads the files, :mod:`quiver._importers.build`
builds the traces. The mapping, for every format:

* **One span, one node call.** The spans of one trace id form one trace. A span
  without a trace id belongs to the trace of its root; a bare attribute mapping (no
  ids, no span envelope) is a single-call trace; the spans of one file written with
  neither span nor trace id (a name and attributes: the Vercel AI SDK's test tracer)
  form one trace whose calls all sit at the top level, in start order (file order
  where there are no times), and a note says so (:attr:`ImportResult.notes`). A trace
  starts with the source call ``c0`` (node ``input``, kind ``source``) whose output is
  the trace's inputs, as a recording makes it.
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

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import to_jsonable
from quiver._trace import CallError, CallKind, LLMResponse, ModelInfo, PromptInfo, RetrievalDoc, ToolStep

__all__ = [
    "NOTHING",
    "ImportProblem",
    "SourceSpan",
    "MappedCall",
    "Attrs",
    "Note",
    "SpanFormat",
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
    no_ids: bool = False
    """A span written with neither span nor trace id (the Vercel AI SDK's test tracer writes its
    spans so): the spans of one file without ids form one trace, every call at the top level."""
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
