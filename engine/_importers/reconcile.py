"""What became of every span of an import: the reconciliation, and the duplicates merged.

Every span read is counted by its kind in the file (**LLM**, **tool**, **retriever**,
**chain**, **other**: what the format's own attributes say, before anything is mapped)
and by what it became: a node call of some kind, the trace itself (a framework's root
span), folded into another call (a framework's inner spans), merged with another record
of the same span, or dropped, with the reason. :meth:`Reconciliation.line` says it in one
line, so that a user sees at once that 34 LLM spans became 34 LLM calls.

**Spans written twice.** Exporters that write a span when it starts (no end time) and
again when it ends give two records with one span id: they are one span, and the
finished record wins (its content, at the place of the first record). Two identical
records are one span too; two finished records with one id and other content are two
spans, the second kept under the id suffixed ``~N``, with a problem.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from quiver._canonical import canonical_json

from .common import ImportProblem, SourceSpan

__all__ = ["KINDS", "Reconciliation", "dedupe", "fingerprint"]

KINDS = ("llm", "tool", "retriever", "chain", "other")
"""The kinds of span a file holds, as the reconciliation counts them."""

_LABELS = {"llm": "LLM", "tool": "tool", "retriever": "retriever", "chain": "chain", "other": "other"}


@dataclass
class Reconciliation:
    """Spans read by kind, and what became of them."""

    records: int = 0
    """Span records read (a span written at start and at end is two)."""
    merged: int = 0
    """Records merged into another record of the same span (start and end, identical copies)."""
    spans: Counter[str] = field(default_factory=Counter)
    """Distinct spans by their kind in the file (:data:`KINDS`)."""
    became: dict[str, Counter[str]] = field(default_factory=dict)
    """For each kind in the file: ``llm``/``tool``/``retrieval``/``transform`` (a call of that kind),
    ``trace`` (the trace itself), ``folded:KIND`` (into a call of that kind), ``folded`` (into the
    trace: structure only), ``dropped``."""
    dropped: Counter[str] = field(default_factory=Counter)
    """Spans left out, by reason."""

    def count(self, span: SourceSpan, outcome: str) -> None:
        """Count what ``span`` became."""
        self.became.setdefault(span.source_kind, Counter())[outcome] += 1

    def drop(self, spans: list[SourceSpan], reason: str) -> None:
        """Count ``spans`` as dropped for ``reason``."""
        for span in spans:
            self.count(span, "dropped")
        self.dropped[reason] += len(spans)

    def calls(self) -> Counter[str]:
        """Calls made, by call kind."""
        out: Counter[str] = Counter()
        for outcomes in self.became.values():
            out.update({k: v for k, v in outcomes.items() if k in ("llm", "tool", "retrieval", "transform")})
        return out

    def to_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return {
            "records": self.records, "merged": self.merged,
            "spans": {k: self.spans.get(k, 0) for k in KINDS},
            "became": {k: dict(sorted(self.became.get(k, Counter()).items())) for k in KINDS if self.spans.get(k)},
            "calls": dict(sorted(self.calls().items())),
            "dropped": dict(sorted(self.dropped.items())),
        }

    def line(self) -> str:
        """One line: each kind of span and what it became, the merged records, the dropped spans."""
        parts = []
        for kind in KINDS:
            n = self.spans.get(kind, 0)
            if not n:
                continue
            outcomes = self.became.get(kind, Counter())
            shown = ", ".join(f"{m} {_outcome(o)}" for o, m in sorted(outcomes.items(), key=lambda x: (-x[1], x[0])))
            parts.append(f"{n} {_LABELS[kind]} -> {shown or 'nothing'}")
        merged = (f"; {self.merged} record(s) merged into the same span (written at start and at end, or copied)"
                  if self.merged else "")
        dropped = sum(self.dropped.values())
        why = f" ({', '.join(f'{n} {r}' for r, n in sorted(self.dropped.items()))})" if dropped else ""
        return f"reconciliation: {'; '.join(parts) or 'no span'}{merged}; {dropped} dropped{why}"


def _outcome(outcome: str) -> str:
    if outcome in ("llm", "tool", "retrieval", "transform"):
        return f"{outcome} call(s)"
    if outcome.startswith("folded:"):
        return f"folded into {outcome[7:]} call(s)"
    return {"trace": "the trace itself", "folded": "folded into the trace", "dropped": "dropped"}.get(outcome, outcome)


def fingerprint(span: SourceSpan) -> str:
    """The content of a span record, for telling copies apart."""
    return canonical_json([span.name, span.parent_id, span.start_ns, span.end_ns, span.attributes, span.envelope])


def dedupe(spans: list[SourceSpan], problems: list[ImportProblem], counts: Reconciliation) -> list[SourceSpan]:
    """One span per (trace id, span id): see the module docstring."""
    first: dict[tuple[str | None, str], int] = {}
    seen: Counter[tuple[str | None, str]] = Counter()
    out: list[SourceSpan] = []
    for span in spans:
        if span.span_id is None:
            out.append(span)
            continue
        key = (span.trace_id, span.span_id)
        seen[key] += 1
        if key not in first:
            first[key] = len(out)
            out.append(span)
            continue
        kept = out[first[key]]
        if kept.end_ns is None and span.end_ns is not None:  # started, then finished: the finished record wins
            span.index = kept.index
            out[first[key]] = span
            counts.merged += 1
        elif span.end_ns is None and kept.end_ns is not None:  # the start record of a finished span
            counts.merged += 1
        elif fingerprint(span) == fingerprint(kept):
            counts.merged += 1
            problems.append(ImportProblem(span.where, span.span_id, f"duplicate of the identical span at "
                                          f"{kept.where}; dropped"))
        else:
            new_id = f"{span.span_id}~{seen[key]}"
            problems.append(ImportProblem(span.where, span.span_id, f"span id already used by the span at "
                                          f"{kept.where} with other content; kept as span {new_id}"))
            span.span_id = new_id
            out.append(span)
    return out
