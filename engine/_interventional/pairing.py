"""Pair results: a recorded baseline next to its perturbed replay (QUIVER.md §6, §13).

For every replay, :func:`pair_results` gives what the interventional estimates read:
the distance per node and per field (the same node distance as the observational
pairs: calls aligned by occurrence, a call in one trace only counting 1), call counts,
the decisions of both traces, D_iter, D_shape, D_output and D_struct, the first call
where the two traces differ, the operator and its parameters, its magnitude and the
stratum.

Choices made here (QUIVER.md §13 leaves them open):

* The *magnitude* d_i is the target node's type-dispatched distance between the
  recorded output of the target call and the perturbed one (the target call alone,
  not the node's mean over occurrences).
* Stratum: a perturbation that did not land (the replay's target report says so: the
  output it sets could not be set, or no request of the target carried the change) is
  ``not_applied``, whatever its magnitude; else a binary operator (override, flips) is
  ``noop`` when the baseline already had the value, and any other operator is
  ``effective`` iff its magnitude exceeds epsilon. A replay without an operator has no
  stratum.
* A pair whose replay failed has ``status: failed`` and no metrics; one whose replay
  diverged from the recording before the target keeps its metrics with
  ``status: diverged`` (campaigns leave such pairs out of estimates).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from quiver._canonical import canonical_json
from quiver._distance import (
    Embedder,
    EmbeddingStore,
    default_cache_dir,
    make_embedder,
    output_distance,
    texts_to_compare,
)
from quiver._graph import PipelineGraph, infer_graph
from quiver._observational import DEFAULT_EPSILON
from quiver._stats import build_pairs
from quiver._trace import Divergence, FieldDiff, TargetReport, Trace, diff_values

from .results import NOT_APPLIED

__all__ = ["Replayed", "PairResult", "pair_results", "first_divergent_call", "seen_part"]


class Replayed(Protocol):
    """What a pair is formed from: a replay next to its recording (a
    :class:`quiver.replay.ReplayResult` is one)."""

    baseline: Trace
    trace: Trace
    perturbation_id: str
    repeat: int
    divergences: list[Divergence]
    target: TargetReport | None
    llm_calls: dict[str, int]


@dataclass
class PairResult:
    """One interventional pair: the recorded baseline and its perturbed replay."""

    perturbation_id: str
    trace_id: str
    """The baseline trace."""
    repeat: int
    status: str
    """``ok``, ``diverged`` (the replay left the recording before the target) or ``failed``."""
    target: TargetReport | None
    magnitude: float | None
    stratum: str | None
    d: dict[str, float | None] = field(default_factory=dict)
    """Node distance per node (None: the node ran in neither trace)."""
    fields: dict[str, dict[str, float]] = field(default_factory=dict)
    counts: dict[str, list[int]] = field(default_factory=dict)
    """Calls per node: [baseline, perturbed]."""
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``baseline`` / ``perturbed``: ``node#occurrence`` -> decisions taken there."""
    d_iter: int = 0
    d_shape: bool = False
    d_output: bool = False
    d_struct: bool = False
    first_divergent_call: dict[str, Any] | None = None
    replay_divergences: list[Divergence] = field(default_factory=list)
    llm_calls: dict[str, int] = field(default_factory=dict)
    baseline: Trace | None = None
    perturbed: Trace | None = None

    @property
    def operator(self) -> dict[str, Any] | None:
        """``{"op": name, "params": {...}}``."""
        return self.target.operator if self.target is not None else None

    def to_json(self, *, traces: bool = True) -> dict[str, Any]:
        """The pair as JSON (``traces=False`` leaves the two traces out)."""
        data: dict[str, Any] = {
            "perturbation_id": self.perturbation_id, "trace_id": self.trace_id,
            "input_id": self.baseline.input_id if self.baseline is not None else None, "repeat": self.repeat,
            "status": self.status,
            "node": self.target.node if self.target else None,
            "occurrence": self.target.occurrence if self.target else None,
            "op": self.operator["op"] if self.operator else None,
            "params": self.operator["params"] if self.operator else None,
            "magnitude": self.magnitude, "stratum": self.stratum,
            "noop_by_value": self.target.noop if self.target else None,
            "D_iter": self.d_iter, "D_shape": self.d_shape, "D_output": self.d_output, "D_struct": self.d_struct,
            "d": self.d, "fields": self.fields, "counts": self.counts, "decisions": self.decisions,
            "first_divergent_call": self.first_divergent_call,
            "replay_divergences": [d.to_json() for d in self.replay_divergences],
            "llm_calls": self.llm_calls,
        }
        outcome = pair_outcome(self.baseline, self.perturbed)
        if outcome is not None:
            data["outcome"] = outcome
        failed = next((t for t in (self.perturbed, self.baseline) if t is not None and t.error is not None), None)
        if self.status == "failed" and failed is not None and failed.error is not None:
            data["error"] = f"{failed.error.type}: {failed.error.message}"
        if traces:
            data["baseline"] = self.baseline.model_dump(mode="json") if self.baseline else None
            data["perturbed"] = self.perturbed.model_dump(mode="json") if self.perturbed else None
        return data


def pair_outcome(baseline: Trace | None, replay: Trace | None) -> dict[str, Any] | None:
    """The outcomes of a pair's two runs, as a pair row keeps them: each one's status and
    the replay's score (None: neither run carries an outcome)."""
    before = baseline.outcome if baseline is not None else None
    after = replay.outcome if replay is not None else None
    if before is None and after is None:
        return None
    return {"baseline": before.status if before is not None else None,
            "replay": after.status if after is not None else None,
            "score": after.score if after is not None else None}


def first_divergent_call(baseline: Trace, perturbed: Trace) -> dict[str, Any] | None:
    """The first call, in the baseline's program order, where the two traces differ.

    Calls are aligned by (node, occurrence); a call missing from the perturbed trace,
    or one with another output or other decisions, is the answer; when every baseline
    call is matched, the first call only the perturbed trace has.
    """
    other = {(c.node, c.occurrence): c for c in perturbed.calls}
    for call in baseline.calls:
        if call.kind == "source":
            continue
        twin = other.get((call.node, call.occurrence))
        where = {"node": call.node, "occurrence": call.occurrence, "call_path": call.call_path}
        if twin is None:
            return {**where, "reason": "not in the perturbed trace", "diff": []}
        a = {"output": call.output, "decision": call.decision}
        b = {"output": twin.output, "decision": twin.decision}
        if canonical_json(a) != canonical_json(b):
            diff: list[FieldDiff] = []
            diff_values(a, b, "", diff)
            return {**where, "reason": "differs", "diff": [d.to_json() for d in diff]}
    mine = {(c.node, c.occurrence) for c in baseline.calls}
    for call in perturbed.calls:
        if (call.node, call.occurrence) not in mine:
            return {
                "node": call.node, "occurrence": call.occurrence, "call_path": call.call_path,
                "reason": "only in the perturbed trace", "diff": [],
            }
    return None


def _decisions(trace: Trace) -> dict[str, Any]:
    return {f"{c.node}#{c.occurrence}": c.decision for c in trace.calls if c.decision}


def pair_results(
    results: Sequence[Replayed],
    graph: PipelineGraph | None = None,
    *,
    epsilon: float = DEFAULT_EPSILON,
    embedder: Embedder | str | Callable[[list[str]], Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    store: EmbeddingStore | None = None,
) -> list[PairResult]:
    """The pair result of every replay, in the order given.

    Args:
        results: Replays (from :func:`~quiver.replay.replay_trace`).
        graph: Field types and roles; what it leaves out is inferred from the traces.
        epsilon: The distance below which a node counts as unchanged.
        embedder: The text embedder (default all-MiniLM-L6-v2), as for ``analyze``.
        cache_dir: The embedding cache (default ``~/.cache/quiver/embeddings``).
        store: An open embedding store to use instead (kept open: a campaign computes
            pairs batch by batch with one store and one loaded model).
    """
    ok = [i for i, r in enumerate(results) if r.trace.status == "ok" and r.baseline.status == "ok"]
    everything: list[Trace] = [t for i in ok for t in (results[i].baseline, results[i].trace)]
    full = infer_graph(everything, seen_part(graph, everything))[0] if everything else (graph or PipelineGraph())
    out = [_empty(r) for r in results]
    if not ok:
        return out
    own = store is None
    if store is None:
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        store = EmbeddingStore(make_embedder(embedder), folder)
    try:
        magnitude_texts = [
            s for i in ok for pair in _magnitude_texts(results[i].target, full) for s in pair
        ]

        def text(texts: Iterable[str]) -> Any:
            store.ensure([*texts, *magnitude_texts])
            return store  # a TextDistance that also takes many pairs at once

        groups = {f"pair-{i}": [results[i].baseline, results[i].trace] for i in ok}
        table = build_pairs(groups, full, text)
        for row, i in enumerate(ok):
            _fill(out[i], results[i], table, row, full, store.distance, epsilon)
    finally:
        if own:
            store.close()
    return out


def seen_part(graph: PipelineGraph | None, traces: Sequence[Trace]) -> PipelineGraph | None:
    """The part of ``graph`` about nodes that ran in ``traces`` (a perturbation
    campaign often touches only some of a pipeline's nodes)."""
    if graph is None:
        return None
    seen = {c.node for t in traces for c in t.calls}
    loop = graph.loop
    if loop is not None:
        body = [n for n in loop.body if n in seen]
        loop = loop.model_copy(update={"body": body}) if body else None
    return PipelineGraph(
        nodes={n: s for n, s in graph.nodes.items() if n in seen},
        edges=[(a, b) for a, b in graph.edges if a in seen and b in seen],
        loop=loop,
    )


def _empty(result: Replayed) -> PairResult:
    status = "failed" if result.trace.status != "ok" or result.baseline.status != "ok" else "ok"
    return PairResult(
        perturbation_id=result.perturbation_id, trace_id=result.baseline.trace_id, repeat=result.repeat,
        status=status, target=result.target, magnitude=None, stratum=None,
        replay_divergences=list(result.divergences), llm_calls=dict(result.llm_calls),
        baseline=result.baseline, perturbed=result.trace,
    )


def _magnitude_texts(target: TargetReport | None, graph: PipelineGraph) -> list[tuple[str, str]]:
    if target is None or not target.reached or target.node not in graph.nodes:
        return []
    return texts_to_compare(graph.nodes[target.node], target.original, target.perturbed)


def _fill(
    pair: PairResult, result: Replayed, table: Any, row: int, graph: PipelineGraph,
    distance: Callable[[str, str], float], epsilon: float,
) -> None:
    d = table.d[row]
    pair.d = {n: (None if np.isnan(v) else round(float(v), 6)) for n, v in zip(table.nodes, d, strict=True)}
    pair.fields = {
        n: {f: round(float(v[row]), 6) for f, v in fs.items() if not np.isnan(v[row])}
        for n, fs in table.fields.items()
    }
    pair.fields = {n: fs for n, fs in pair.fields.items() if fs}
    pair.counts = {
        n: [int(table.counts[row, j, 0]), int(table.counts[row, j, 1])]
        for j, n in enumerate(table.nodes) if table.counts[row, j].any()
    }
    pair.d_iter = int(table.d_iter[row])
    pair.d_shape = bool(table.d_shape[row])
    pair.d_struct = bool(table.d_struct[row])
    pair.d_output = bool(np.nan_to_num(d, nan=0.0).max(initial=0.0) > epsilon)
    pair.decisions = {"baseline": _decisions(result.baseline), "perturbed": _decisions(result.trace)}
    pair.first_divergent_call = first_divergent_call(result.baseline, result.trace)
    target = result.target
    if target is not None and target.reached and target.node in graph.nodes:
        pair.magnitude = round(
            float(output_distance(graph.nodes[target.node], target.original, target.perturbed, distance)[0]), 6
        )
        op = target.operator
        if op is not None:
            if target.landed is False:
                pair.stratum = NOT_APPLIED
            elif target.noop is not None:
                pair.stratum = "noop" if target.noop else "effective"
            else:
                pair.stratum = "effective" if pair.magnitude > epsilon else "noop"
    if result.divergences:
        pair.status = "diverged"
