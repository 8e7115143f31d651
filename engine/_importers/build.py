"""Building v1 traces from imported spans: ids, order, parents, groups, the summary.

The rules are stated in :mod:`quiver._importers.common`; the formats are looked up by
name in :mod:`quiver._importers.registry` (the built-in ones are in
:mod:`quiver._importers.openinference`, :mod:`quiver._importers.otel` and
:mod:`quiver._importers.langfuse`).
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from pydantic import ValidationError

from quiver._canonical import content_hash, to_jsonable
from quiver._errors import QuiverError
from quiver._outcome import outcome_from_attributes
from quiver._trace import CallKind, LLMResponse, NodeCall, PromptInfo, Redactor, ToolStep, Trace, write_traces

from .common import (
    NOTHING,
    Attrs,
    ImportProblem,
    MappedCall,
    SourceSpan,
    SpanFormat,
    input_mapping,
    summary_key,
)
from .detect import AUTO, FAMILIES, check_file, choose_format, families
from .frameworks import load_program_state
from .groups import Draft, check_group_by, finish
from .read import read_sources
from .reconcile import Reconciliation, dedupe, fingerprint
from .registry import get_format
from .values import MAX_DEPTH, loads, too_deep

__all__ = ["ImportResult", "import_traces"]

NodeNamer = Callable[[SourceSpan], str]
_KINDS = set(get_args(CallKind))
_QUIVER_JSON = {"parents", "decision", "tags", "prompt", "response", "tool.response", "trace.tags", "error",
                "trace.outcome"}
_QUIVER_KEYS = _QUIVER_JSON | {
    "call_id", "node", "kind", "occurrence", "call_path", "iteration", "loop", "input_hash", "model.version",
    "trace_id", "run_id", "pipeline", "input_id", "repeat", "status", "retrieval.count",
}


@dataclass
class ImportResult:
    """What :func:`import_traces` returns: the traces, the problems met, and the counts."""

    format: str
    traces: list[Trace] = field(default_factory=list)
    problems: list[ImportProblem] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    spans_read: int = 0
    mapped: Counter[str] = field(default_factory=Counter)
    """Attribute keys mapped onto trace fields, with how many spans had them."""
    kept: Counter[str] = field(default_factory=Counter)
    """Attribute keys kept in tags (not mapped), with how many spans had them."""
    reconciliation: Reconciliation = field(default_factory=Reconciliation)
    """Spans read by kind and what became of them (:mod:`quiver._importers.reconcile`)."""
    notes: list[str] = field(default_factory=list)
    """How files were read where the spans left something out that is not an error (spans written
    without ids, so without parent links), one line each."""

    @property
    def ok(self) -> bool:
        """True when nothing went wrong."""
        return not self.problems

    @property
    def calls(self) -> int:
        """Node calls made from spans (the source calls ``c0`` not counted)."""
        return sum(len(t.calls) - 1 for t in self.traces)

    @property
    def groups(self) -> int:
        """Same-input groups (distinct ``input_id``)."""
        return len({t.input_id for t in self.traces})

    def summary(self) -> dict[str, Any]:
        """Spans read, calls made, traces, groups, attribute keys mapped and kept, problems."""
        return {
            "format": self.format,
            "sources": self.sources,
            "spans_read": self.spans_read,
            "calls": self.calls,
            "traces": len(self.traces),
            "groups": self.groups,
            "reconciliation": self.reconciliation.to_json(),
            "notes": self.notes,
            "attributes": {
                "mapped": dict(sorted(self.mapped.items())),
                "kept_in_tags": dict(sorted(self.kept.items())),
            },
            "problems": [p.to_json() for p in self.problems],
        }

    def write(self, path: str | os.PathLike[str], *, redactor: Redactor | None = None) -> int:
        """Write the traces as a v1 corpus (JSONL), through ``redactor`` (default: the
        built-in rules; tags, attributes kept in tags, messages and tool arguments and
        responses alike); returns how many were written."""
        return write_traces(path, self.traces, redactor=redactor or Redactor())


def import_traces(
    format: str,
    files_or_records: Any,
    *,
    group_by: str | None = None,
    node_name: str | NodeNamer | None = None,
    dspy_program: Any = None,
) -> ImportResult:
    """Import spans written by another tool as v1 traces.

    Args:
        format: A registered format (:func:`~quiver._importers.registered_formats`):
            ``openinference`` (Arize Phoenix and other OpenInference
            instrumentations), ``otel-genai`` (OTel GenAI semantic conventions
            ``gen_ai.*``; Vercel AI SDK ``ai.*``, OpenLLMetry and Langfuse SDK spans),
            ``langfuse`` (trace exports ``{trace, observations[]}``), or one registered
            with :func:`~quiver._importers.import_format` or through the entry-point
            group ``quiver.importers``; or ``auto``: the built-in format most of the
            files' spans are in (:mod:`quiver._importers.detect`).
        files_or_records: A file, a list of files (JSON, JSON Lines, ``.gz``), or
            records already parsed (span dicts, lists of them, exports).
        group_by: The same-input group key: None (the hash of the root span's input,
            or ``quiver.input_id`` on spans the engine exported), ``input``,
            ``session``, ``metadata.KEY``, ``attribute.NAME`` or ``trace``.
        node_name: How a node is named: None or ``name`` (the span name),
            ``kind+name``, ``attribute.KEY``, or a function of the
            :class:`~quiver._importers.SourceSpan`.
        dspy_program: For OpenInference spans of a DSPy program: the program's saved
            state (the JSON file ``program.save(PATH)`` writes, or
            ``program.dump_state()``), whose predictor names give the nodes their
            attribute paths (``router``, ``hops.gen_query``), or the program itself
            (which names its other modules too); see :mod:`quiver._importers.frameworks`.

    Returns:
        The traces, the problems (each with its location and span id) and the
        counts of :meth:`ImportResult.summary`, with the reconciliation of the spans
        read with the calls made (:attr:`ImportResult.reconciliation`). Files that do
        not exist raise :class:`~quiver.QuiverError`, an unknown format
        :class:`~quiver._importers.ImportFormatError` (listing the registered ones), a
        file that a built-in format does not read (another format's spans, or no
        known span shape) :class:`~quiver._importers.detect.SpanShapeError`;
        everything else is a problem and the import goes on with what can be read.
    """
    fmt = None if format == AUTO else get_format(format)
    check_group_by(group_by)
    hints = {"dspy_program": load_program_state(dspy_program)} if dspy_program is not None else {}
    single = isinstance(files_or_records, (str, os.PathLike, Mapping))
    sources = [files_or_records] if single else list(files_or_records)
    problems: list[ImportProblem] = []
    records = list(read_sources(sources, problems))
    fmt = _checked_format(fmt, records)
    namer = _namer(node_name, fmt)
    result = ImportResult(format=fmt.name, sources=[str(s) for s in sources if isinstance(s, (str, os.PathLike))],
                          problems=problems)
    spans: list[SourceSpan] = []
    for value, where in records:
        spans += _spans_of(fmt, value, where, result.problems)
    for i, span in enumerate(spans):
        span.index = i
        span.source_kind = fmt.source_kind(span)
    result.spans_read = result.reconciliation.records = len(spans)
    spans = dedupe(spans, result.problems, result.reconciliation)
    result.reconciliation.spans.update(s.source_kind for s in spans)
    drafts = [d for group in _by_trace(spans, result.notes) if (d := _draft(fmt, group, namer, result, hints))]
    drafts.sort(key=lambda d: (d.start_ns is None, d.start_ns or 0, d.first_index))
    result.traces = finish(drafts, group_by, fmt, result.problems, result.reconciliation)
    return result


def _checked_format(fmt: SpanFormat | None, records: list[tuple[Any, str]]) -> SpanFormat:
    """The format that reads the files (``auto``: the one most of their spans are in); a file
    the format does not read is refused (:mod:`quiver._importers.detect`)."""
    if fmt is not None and fmt.name not in FAMILIES:
        return fmt
    found: dict[str, Counter[str]] = {}
    samples: dict[str, Any] = {}
    otel = get_format("otel-genai")
    for value, where in records:
        if where.startswith("<records>"):
            continue
        source = _source_of(where)
        found.setdefault(source, Counter()).update(families(value, otel))
        samples.setdefault(source, value)
    if fmt is None:
        if not found:
            raise QuiverError("the auto format detects the format of span files; name the format of the records "
                              f"passed in ({', '.join(FAMILIES)})")
        fmt = get_format(choose_format(found, samples))
    for source, counts in found.items():
        check_file(source, counts, fmt.name, samples[source])
    return fmt


_UNEXPECTED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
               ValidationError)
"""What a format's reading or mapping of data it did not foresee may raise: the record or
trace is reported as a problem (with the error) and the import goes on."""


def _spans_of(fmt: SpanFormat, value: Any, where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
    """The spans of one record; a record nested too deeply, or one the format fails on,
    is a problem and gives none."""
    if too_deep(value):
        problems.append(ImportProblem(where, None, f"the record is nested more than {MAX_DEPTH} levels deep; skipped"))
        return []
    try:
        return fmt.spans(value, where, problems)
    except _UNEXPECTED as exc:
        problems.append(ImportProblem(where, None, f"the {fmt.name} format could not read this record "
                                      f"({_error_text(exc)}); skipped"))
        return []


def _draft(fmt: SpanFormat, spans: list[SourceSpan], namer: NodeNamer | None, result: ImportResult,
           hints: Mapping[str, Any]) -> Draft | None:
    """One trace's draft; a trace whose spans the format fails to map is a problem and left out."""
    try:
        assembly = _Assembly(fmt, fmt.arrange(spans, hints, lambda s, what: _note(result, s, what)), namer, result)
        draft = assembly.draft()
    except _UNEXPECTED as exc:
        first = min(spans, key=lambda s: s.index)
        result.problems.append(ImportProblem(first.where, first.span_id, f"the trace of this span could not be "
                                             f"built ({_error_text(exc)}); its {len(spans)} span(s) were left out"))
        result.reconciliation.drop(spans, "in a trace that could not be built")
        return None
    calls = {id(s): assembly.mapped[id(s)][0].kind for s in assembly.calls}
    into = {str(a.get("span_id")): calls[id(s)] for s in assembly.calls for a in s.absorbed}
    draft.outcomes = [(s, "trace" if s is assembly.trace_span else calls.get(id(s)) or
                       ("folded:" + into[str(s.span_id)] if str(s.span_id) in into else "folded")) for s in spans]
    return draft


def _note(result: ImportResult, span: SourceSpan, what: str) -> None:
    result.problems.append(ImportProblem(span.where, span.span_id, what))


def _error_text(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _namer(spec: str | NodeNamer | None, fmt: SpanFormat) -> NodeNamer | None:
    if spec is None:
        return None
    if callable(spec):
        return lambda s: str(spec(s))
    if spec == "name":
        return lambda s: s.name
    if spec == "kind+name":
        return lambda s: f"{s.kind_label.lower()}:{s.name}" if s.kind_label else s.name
    if spec.startswith("attribute.") and len(spec) > len("attribute."):
        key = spec[len("attribute."):]

        def by_attribute(s: SourceSpan) -> str:
            value = fmt.attribute(s, key)
            return s.name if value in (None, "") else str(value)

        return by_attribute
    raise QuiverError(f"node_name must be name, kind+name, attribute.KEY or a function; got {spec!r}")


def _by_trace(spans: list[SourceSpan], notes: list[str]) -> list[list[SourceSpan]]:
    """Spans by trace: the trace id, else the root reached through parent ids, else (spans written
    without ids) their file, else the span alone; a file of spans without ids is noted."""
    loose = {s.span_id: s for s in spans if s.trace_id is None and s.span_id is not None}
    root = _roots(loose)
    groups: dict[tuple[str, Any], list[SourceSpan]] = {}
    for span in spans:
        if span.trace_id is not None:
            key: tuple[str, Any] = ("trace", span.trace_id)
        elif span.span_id is not None:
            key = ("root", root[span.span_id])
        elif span.no_ids:
            key = ("file", _source_of(span.where))
        else:
            key = ("span", span.index)
        groups.setdefault(key, []).append(span)
    for (how, source), group in groups.items():
        if how == "file" and len(group) > 1:
            order = "start order" if all(s.start_ns is not None for s in group) else "the order of the file"
            notes.append(f"{source}: {len(group)} spans carry no span, parent or trace id: imported as one trace "
                         f"with every call at the top level, in {order} (the file holds no parent structure to "
                         "rebuild; export the spans with their ids to keep it)")
    return list(groups.values())


def _roots(loose: dict[str, SourceSpan]) -> dict[str, str]:
    """The root span id of every span, through parent ids, each link followed once; the
    spans of a parent cycle (and those under it) share the least span id of the cycle."""
    root: dict[str, str] = {}
    for start in loose:
        path: list[str] = []
        on_path: dict[str, int] = {}
        cur = start
        while True:
            if cur in root:
                found = root[cur]
                break
            if cur in on_path:
                found = min(path[on_path[cur]:])
                break
            on_path[cur] = len(path)
            path.append(cur)
            pid = loose[cur].parent_id
            if pid is None or pid not in loose:
                found = cur
                break
            cur = pid
        for span_id in path:
            root[span_id] = found
    return root


def _take_quiver(attrs: Attrs, note: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in [k for k in attrs.data if k.startswith("quiver.") and k[7:] in _QUIVER_KEYS]:
        name, value = key[7:], attrs.get(key)
        if name in _QUIVER_JSON and isinstance(value, str):
            try:
                value = loads(value)
            except ValueError:
                attrs.used.discard(key)
                note(f"{key} is not JSON; kept in tags")
                continue
        out[name] = value
    return out


class _Assembly:
    """One trace: its spans mapped, ordered, numbered and linked."""

    def __init__(self, fmt: SpanFormat, spans: list[SourceSpan], namer: NodeNamer | None, result: ImportResult):
        self.fmt, self.spans, self.namer, self.result = fmt, spans, namer, result
        self.mapped: dict[int, tuple[MappedCall, dict[str, Any], dict[str, Any]]] = {}
        for span in spans:
            self.mapped[id(span)] = self._map(span)
        self.trace_span = next((s for s in spans if s.as_trace), None) or next(
            (s for s in spans if "trace_id" in self.mapped[id(s)][1] and "call_id" not in self.mapped[id(s)][1]), None)
        self.calls = [s for s in spans if s is not self.trace_span]

    def note(self, span: SourceSpan, what: str) -> None:
        self.result.problems.append(ImportProblem(span.where, span.span_id, what))

    def _map(self, span: SourceSpan) -> tuple[MappedCall, dict[str, Any], dict[str, Any]]:
        attrs = Attrs(span.attributes)
        mc = self.fmt.map_call(span, attrs, lambda what: self.note(span, what))
        q = _take_quiver(attrs, lambda what: self.note(span, what))
        _apply_contract(mc, q, lambda what: self.note(span, what))
        rest = attrs.rest()
        tags: dict[str, Any] = dict(q["tags"]) if isinstance(q.get("tags"), dict) else {}
        if rest:
            tags[self.fmt.tag_key] = rest
        if span.envelope:
            tags[f"{self.fmt.tag_key}.span"] = span.envelope
        if span.absorbed:
            tags[f"{self.fmt.tag_key}.absorbed"] = span.absorbed
        if span.as_trace and span.trace_tags:
            tags.update(span.trace_tags)
        self.result.mapped.update(summary_key(k) for k in attrs.used)
        self.result.kept.update(summary_key(k) for k in rest)
        self.result.kept.update(f"span.{k}" for k in span.envelope)
        return mc, q, tags

    def parents(self) -> dict[int, SourceSpan | None]:
        by_id = {s.span_id: s for s in self.calls if s.span_id is not None}
        top = self.trace_span.span_id if self.trace_span else None
        parent: dict[int, SourceSpan | None] = {}
        for span in self.calls:
            pid = span.parent_id
            if pid is None or (top is not None and pid == top):
                parent[id(span)] = None
            elif pid not in by_id:
                where = f"trace {span.trace_id}" if span.trace_id else "the spans read"
                self.note(span, f"parent span {pid} is not in {where}; imported as a root-level call")
                parent[id(span)] = None
            else:
                parent[id(span)] = by_id[pid]
        self._repair_zero_parents(parent)
        self._break_cycles(parent)
        return parent

    def _repair_zero_parents(self, parent: dict[int, SourceSpan | None]) -> None:
        """Spans naming the invalid (all-zero) span id as their parent go under the trace's root
        span (the one whose own id is that invalid id, else the first root), with one problem."""
        orphans = [s for s in self.calls if s.zero_parent and parent[id(s)] is None]
        if not orphans:
            return
        roots = [s for s in self.calls if parent[id(s)] is None and not s.zero_parent]
        root = next((s for s in roots if s.zero_id), None) or (min(roots, key=_sibling_key) if roots else None)
        if root is None:
            self.note(orphans[0], f"{len(orphans)} span(s) name the invalid span id 0000000000000000 as their "
                      "parent and the trace has no root span; imported as root-level calls")
            return
        for span in orphans:
            parent[id(span)] = root
        self.note(orphans[0], f"{len(orphans)} span(s) name the invalid span id 0000000000000000 as their parent; "
                  f"attached to the trace's root span '{root.name}'")

    def _break_cycles(self, parent: dict[int, SourceSpan | None]) -> None:
        """Root one span of every parent cycle (the first by start time, then span id), in
        one pass over the spans: each parent link is followed once."""
        done: set[int] = set()
        for span in self.calls:
            path: list[SourceSpan] = []
            on_path: dict[int, int] = {}
            cur: SourceSpan | None = span
            while cur is not None and id(cur) not in done and id(cur) not in on_path:
                on_path[id(cur)] = len(path)
                path.append(cur)
                cur = parent[id(cur)]
            if cur is not None and id(cur) in on_path:
                cycle = path[on_path[id(cur)]:]
                head = min(cycle, key=_sibling_key)
                parent[id(head)] = None
                self.note(head, f"parent links form a cycle of {len(cycle)} span(s) ({_cycle_text(head, cycle)}); "
                          "imported as a root-level call")
            done.update(on_path)

    def order(self, parent: dict[int, SourceSpan | None]) -> list[SourceSpan]:
        ids = [self.mapped[id(s)][1].get("call_id") for s in self.calls]
        numbers = [int(m.group(1)) for i in ids if isinstance(i, str) and (m := re.fullmatch(r"c(\d+)", i))]
        if self.calls and len(numbers) == len(self.calls) and len(set(numbers)) == len(numbers) and min(numbers) > 0:
            return [s for _, s in sorted(zip(numbers, self.calls, strict=True), key=lambda x: x[0])]
        if any(i is not None for i in ids):
            self.note(self.calls[0], "quiver.call_id is missing, repeated or not c1..cN on some spans of "
                      "the trace; call ids follow the span order")
            for span in self.calls:
                self.mapped[id(span)][1].pop("call_id", None)
        children: dict[int | None, list[SourceSpan]] = defaultdict(list)
        for span in self.calls:
            p = parent[id(span)]
            children[id(p) if p is not None else None].append(span)
        out: list[SourceSpan] = []
        stack = sorted(children[None], key=_sibling_key, reverse=True)
        while stack:
            span = stack.pop()
            out.append(span)
            stack += sorted(children[id(span)], key=_sibling_key, reverse=True)
        return out

    def draft(self) -> Draft:
        parent = self.parents()
        order = self.order(parent)
        starts = [s.start_ns for s in self.spans if s.start_ns is not None]
        t0 = min(starts) if starts else None
        ids = {id(s): self.mapped[id(s)][1].get("call_id") or f"c{i}" for i, s in enumerate(order, start=1)}
        calls = [NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source")]
        occurrences: Counter[str] = Counter()
        siblings: Counter[tuple[int | None, str]] = Counter()
        paths: dict[int, str] = {}
        known = set(ids.values())
        for span in order:
            p = parent[id(span)]
            mc, q, tags = self.mapped[id(span)]
            node = self.namer(span) if self.namer else str(q.get("node") or span.name)
            k = siblings[(id(p) if p else None, node)]
            siblings[(id(p) if p else None, node)] += 1
            paths[id(span)] = f"{paths[id(p)]}/{node}#{k}" if p is not None else f"{node}#{k}"
            derived = {
                "call_id": ids[id(span)], "node": node, "occurrence": occurrences[node], "call_path": paths[id(span)],
                "kind": mc.kind, "parents": self._parents(span, p, ids),
                "decision": span.decision, "loop": span.loop, "iteration": span.iteration,
                "input_hash": content_hash(to_jsonable(mc.input)) if mc.input is not NOTHING else None,
                "output": to_jsonable(mc.output), "model": mc.model, "prompt": mc.prompt, "response": mc.response,
                "retrieval": mc.retrieval, "tool": mc.tool, "tags": tags, "error": mc.error,
                "started_at": _seconds(span.start_ns, t0), "ended_at": _seconds(span.end_ns or span.start_ns, t0),
            }
            occurrences[node] += 1
            calls.append(self._call(span, derived, q, known))
        calls[0] = calls[0].model_copy(update={"output": self._inputs(order, parent)})
        return self._draft(order, parent, calls, t0)

    def _parents(self, span: SourceSpan, parent: SourceSpan | None, ids: dict[int, str]) -> list[str]:
        """The span parent's call, or the calls of the span's links (``c0`` when none is in the trace)."""
        if span.links is None:
            return [ids[id(parent)] if parent is not None else "c0"]
        by_span = {s.span_id: ids[id(s)] for s in self.calls if s.span_id is not None}
        if self.trace_span is not None and self.trace_span.span_id is not None:
            by_span[self.trace_span.span_id] = "c0"  # a link to the trace's span: the trace's input
        found = sorted({by_span[link] for link in span.links if link in by_span}, key=lambda c: (len(c), c))
        return found or ["c0"]

    def _call(self, span: SourceSpan, derived: dict[str, Any], q: dict[str, Any], ids: set[str]) -> NodeCall:
        plain = ("occurrence", "call_path", "iteration", "loop", "input_hash", "decision")
        overrides: dict[str, Any] = {k: q[k] for k in plain if k in q}
        if q.get("kind") in _KINDS:
            overrides["kind"] = q["kind"]
        if isinstance(q.get("parents"), list):
            known = ids | {"c0"}
            overrides["parents"] = [p for p in q["parents"] if p in known]
            if len(overrides["parents"]) != len(q["parents"]):
                self.note(span, f"quiver.parents names calls not in the trace: {sorted(set(q['parents']) - known)}")
        try:
            return NodeCall.model_validate({**derived, **overrides})
        except ValidationError as exc:
            self.note(span, f"quiver.* attributes do not fit the trace format ({exc.errors()[0]['msg']}); "
                      "derived values used")
            return NodeCall(**derived)

    def _inputs(self, order: list[SourceSpan], parent: dict[int, SourceSpan | None]) -> dict[str, Any]:
        roots = [s for s in order if parent[id(s)] is None]
        source = self.trace_span or (roots[0] if roots else None)
        extra = self.fmt.trace_fields(source)[0] if source is not None else {}
        if "inputs" in extra:
            return input_mapping(extra["inputs"])
        return input_mapping(self.mapped[id(source)][0].input) if source is not None else {}

    def _draft(self, order: list[SourceSpan], parent: dict[int, SourceSpan | None], calls: list[NodeCall],
               t0: int | None) -> Draft:
        roots = [s for s in order if parent[id(s)] is None]
        root = self.trace_span or (roots[0] if roots else self.spans[0])
        extra, mapped, kept = self.fmt.trace_fields(root)
        self.result.mapped.update(mapped)
        self.result.kept.update(kept)
        tq = self.mapped[id(self.trace_span)][1] if self.trace_span else {}
        last = self.trace_span or (roots[-1] if roots else None)
        output = extra["output"] if "output" in extra else (self.mapped[id(last)][0].output if last else None)
        errors = [self.mapped[id(s)][0].error for s in roots if self.mapped[id(s)][0].error is not None]
        tags = dict(tq["trace.tags"]) if isinstance(tq.get("trace.tags"), dict) else dict(extra.get("tags", {}))
        if self.trace_span is not None:
            tags.update({k: v for k, v in self.mapped[id(self.trace_span)][2].items() if k not in tags})
        tags["import"] = self._import_note(root)
        fields = {
            "trace_id": str(tq.get("trace_id") or extra.get("trace_id") or root.trace_id or root.span_id
                            or "span-" + content_hash(fingerprint(root))[7:23]),
            "run_id": str(tq.get("run_id") or f"import-{self.fmt.name}"),
            "pipeline": str(tq.get("pipeline") or extra.get("pipeline") or root.name),
            "inputs": calls[0].output, "calls": calls, "output": to_jsonable(output), "tags": tags,
            "status": tq.get("status") or ("failed" if errors else "ok"),
            "error": tq.get("error") or (errors[0] if errors else None),
            "outcome": tq.get("trace.outcome") or extra.get("outcome") or outcome_from_attributes(root.attributes),
        }
        return Draft(fields, root, t0, min(s.index for s in self.spans), tq)

    def _import_note(self, root: SourceSpan) -> dict[str, Any]:
        note: dict[str, Any] = {"format": self.fmt.name,
                                "sources": sorted({_source_of(s.where) for s in self.spans})}
        if root.trace_id is not None:
            note["trace_id"] = root.trace_id
        resource = next((s.resource for s in self.spans if s.resource), None)
        if resource:
            note["resource"] = resource
        scopes = sorted({s.scope for s in self.spans if s.scope})
        if scopes:
            note["scopes"] = scopes
        return note


_CYCLE_SHOWN = 12
"""Span ids a cycle's problem lists before it counts the rest."""


def _cycle_text(head: SourceSpan, cycle: list[SourceSpan]) -> str:
    """The cycle's span ids from ``head`` along the parent links: ``a -> c -> b -> a``."""
    start = cycle.index(head)
    ids = [str(s.span_id) for s in cycle[start:] + cycle[:start]]
    if len(ids) > _CYCLE_SHOWN:
        return " -> ".join(ids[:_CYCLE_SHOWN]) + f" -> ... ({len(ids) - _CYCLE_SHOWN} more) -> {ids[0]}"
    return " -> ".join([*ids, ids[0]])


def _sibling_key(span: SourceSpan) -> tuple[Any, ...]:
    return (span.start_ns is None, span.start_ns or 0, span.span_id or "", span.index)


def _seconds(ns: int | None, t0: int | None) -> float:
    return (ns - t0) / 1e9 if ns is not None and t0 is not None else 0.0


def _source_of(where: str) -> str:
    return re.sub(r"(:\d+)*(: .*)?$", "", where)


def _apply_contract(mc: MappedCall, q: dict[str, Any], note: Callable[[str], None]) -> None:
    """quiver.model.version, quiver.prompt, quiver.response, quiver.tool.response onto the mapped call."""
    try:
        if "model.version" in q and mc.model is not None:
            mc.model = mc.model.model_validate({**mc.model.model_dump(), "version": q["model.version"]})
        if isinstance(q.get("prompt"), dict):
            base = mc.prompt.model_dump() if mc.prompt else {}
            mc.prompt = PromptInfo.model_validate({**base, **q["prompt"]})
        if isinstance(q.get("response"), dict):
            base = mc.response.model_dump() if mc.response else {"content": ""}
            extra = dict(q["response"])
            usage = {**base.get("usage", {}), **extra.pop("usage", {})}
            mc.response = LLMResponse.model_validate({**base, **extra, "usage": usage})
        if q.get("retrieval.count") == 0 and mc.retrieval is None:
            mc.retrieval = []
        if "tool.response" in q and mc.tool is not None:
            response = to_jsonable(q["tool.response"])
            mc.tool = ToolStep(name=mc.tool.name, args=mc.tool.args, response=response,
                               response_hash=content_hash(response))
    except ValidationError as exc:
        note(f"quiver.* replay-contract attributes do not fit the trace format ({exc.errors()[0]['msg']}); "
             "the standard attributes were used")
