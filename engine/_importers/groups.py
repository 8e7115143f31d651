"""Traces grouped and finished: same-input groups, repeats, trace ids, the spans' outcomes counted.

The rules are stated in :mod:`quiver._importers.common` (**Groups**); ``group_by`` takes
``input`` (the default), ``session``, ``trace``, ``metadata.KEY``, ``attribute.NAME`` (on
the root span; a resource attribute when the span has no such attribute) or
``resource.KEY`` (an attribute of the resource the spans came from: ``service.name``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from quiver._canonical import canonical_json, content_hash
from quiver._errors import QuiverError
from quiver._trace import Trace

from .common import ImportProblem, SourceSpan, SpanFormat
from .reconcile import Reconciliation

__all__ = ["Draft", "check_group_by", "finish"]


@dataclass
class Draft:
    """One trace before its group and repeat are known."""

    fields: dict[str, Any]
    root: SourceSpan
    start_ns: int | None
    first_index: int
    quiver: dict[str, Any]
    outcomes: list[tuple[SourceSpan, str]] = field(default_factory=list)
    """What became of each span of the trace (see :class:`Reconciliation`)."""


def check_group_by(group_by: str | None) -> None:
    if group_by in (None, "input", "session", "trace"):
        return
    if isinstance(group_by, str) and re.fullmatch(r"(metadata|attribute|resource)\..+", group_by):
        return
    raise QuiverError(f"group_by must be input, session, trace, metadata.KEY, attribute.NAME or resource.KEY; "
                      f"got {group_by!r}")


def _input_key(fields: dict[str, Any]) -> str:
    """``in-`` and 16 hex digits of the inputs' hash; a trace without inputs is a group of its own."""
    if not fields["inputs"]:
        return str(fields["trace_id"])
    return "in-" + content_hash(fields["inputs"])[7:23]


def _group_value(group_by: str | None, draft: Draft, fmt: SpanFormat, problems: list[ImportProblem]) -> str:
    fields, root = draft.fields, draft.root
    if group_by is None:
        return str(draft.quiver.get("input_id") or _input_key(fields))
    if group_by == "input":
        return _input_key(fields)
    if group_by == "trace":
        return str(fields["trace_id"])
    if group_by == "session":
        value = fmt.session(root)
    elif group_by.startswith("metadata."):
        value = fmt.metadata(root, group_by[len("metadata."):])
    elif group_by.startswith("resource."):
        value = _resource(draft, group_by[len("resource."):])
    else:
        value = fmt.attribute(root, group_by[len("attribute."):])
        if value in (None, ""):  # an attribute of the resource the spans came from
            value = _resource(draft, group_by[len("attribute."):])
    if value is None or value == "":
        problems.append(ImportProblem(root.where, root.span_id, f"trace {fields['trace_id']} has no {group_by} "
                                      "on its root span; grouped by the hash of its input instead"))
        return _input_key(fields)
    return value if isinstance(value, str) else canonical_json(value)


def _resource(draft: Draft, key: str) -> Any:
    """A resource attribute of the trace (``service.name``): the root span's resource, else any span's."""
    spans = [draft.root, *(s for s, _ in draft.outcomes)]
    return next((s.resource[key] for s in spans if s.resource.get(key) not in (None, "")), None)


def finish(drafts: list[Draft], group_by: str | None, fmt: SpanFormat,
            problems: list[ImportProblem], counts: Reconciliation) -> list[Trace]:
    """Traces in start order (ties in input order); repeats numbered by start time, ties by trace id."""
    used_ids: Counter[str] = Counter()
    rows: list[dict[str, Any]] = []
    for draft in drafts:
        fields = dict(draft.fields)
        used_ids[fields["trace_id"]] += 1
        if used_ids[fields["trace_id"]] > 1:
            fields["trace_id"] = f"{fields['trace_id']}~{used_ids[fields['trace_id']]}"
        renamed = Draft(fields, draft.root, draft.start_ns, draft.first_index, draft.quiver, draft.outcomes)
        fields["input_id"] = _group_value(group_by, renamed, fmt, problems)
        repeat = draft.quiver.get("repeat") if group_by is None and "input_id" in draft.quiver else None
        fields["repeat"] = repeat if isinstance(repeat, int) else None
        rows.append(fields)
    groups: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for draft, fields in zip(drafts, rows, strict=True):
        groups[fields["input_id"]].append((draft.start_ns is None, draft.start_ns or 0, fields["trace_id"]))
    rank = {key[2]: i for members in groups.values() for i, key in enumerate(sorted(members))}
    traces: list[Trace] = []
    for draft, fields in zip(drafts, rows, strict=True):
        if fields["repeat"] is None:
            fields["repeat"] = rank[fields["trace_id"]]
        try:
            traces.append(Trace(**fields))
        except ValidationError as exc:
            problems.append(ImportProblem(draft.root.where, draft.root.span_id,
                                          f"trace {fields['trace_id']} does not fit the trace format "
                                          f"({exc.errors()[0]['msg']}); left out"))
            counts.drop([s for s, _ in draft.outcomes], "in a trace that does not fit the trace format")
            continue
        for span, outcome in draft.outcomes:
            counts.count(span, outcome)
    return traces
