"""Same-input pairs and their distances: the table every estimator reads.

For each input group (traces with one ``input_id``) every unordered pair of traces is
formed: sum over groups of C(n_g, 2); groups of unequal size are normal, groups of one
give no pair. For each pair and node the node distance follows QUIVER.md §6 "[engine]
Node distance": the k-th calls are aligned by occurrence, a call present in one trace
only counts 1, and a node absent from both traces has no distance (NaN). The pair's
trajectory divergences are computed alongside: D_iter, D_shape, D_struct.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quiver._canonical import canonical_json
from quiver._distance import OutputColumns, TextDistance
from quiver._errors import QuiverError
from quiver._graph import NodeSpec, PipelineGraph
from quiver._trace import Trace

__all__ = ["PairTable", "NoPairsError", "group_traces", "build_pairs"]


@dataclass
class PairTable:
    """Pairs x nodes: the distances and divergences of every pair.

    Attributes:
        nodes: Node names, the column order of ``d`` and ``counts``.
        groups: Input ids; ``group`` indexes into it.
        group: (P,) int, the input group of each pair.
        trace_ids: (P,) the two trace ids of each pair.
        d: (P, N) float, the node distance of each pair (NaN: the node ran in neither trace).
        fields: node -> field -> (P,) float, per-field distances (NaN where undefined).
        counts: (P, N, 2) int, how many times each node ran in each trace of the pair.
        d_iter: (P,) int, sum over nodes of |c_i - c_i'|.
        d_shape: (P,) bool, the decision mappings {(node, occurrence) -> decision} differ.
        d_struct: (P,) bool, the sets of nodes that ran differ.
        traces_per_group: (G,) int, traces in each group (failed traces left out).
    """

    nodes: list[str]
    groups: list[str]
    group: np.ndarray
    trace_ids: list[tuple[str, str]]
    d: np.ndarray
    fields: dict[str, dict[str, np.ndarray]]
    counts: np.ndarray
    d_iter: np.ndarray
    d_shape: np.ndarray
    d_struct: np.ndarray
    traces_per_group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def n_pairs(self) -> int:
        """P, the number of pairs."""
        return len(self.group)

    def col(self, node: str) -> np.ndarray:
        """The (P,) distances of one node."""
        return self.d[:, self.nodes.index(node)]

    def d_output(self, epsilon: float) -> np.ndarray:
        """(P,) bool: some node distance exceeds epsilon (QUIVER.md §6)."""
        with np.errstate(invalid="ignore"):
            above: np.ndarray = np.nan_to_num(self.d, nan=0.0).max(axis=1, initial=0.0) > epsilon
        return above

    def subset(self, mask: np.ndarray) -> PairTable:
        """The pairs selected by ``mask`` (same nodes and groups)."""
        idx = np.flatnonzero(mask)
        return PairTable(
            nodes=self.nodes, groups=self.groups, group=self.group[idx],
            trace_ids=[self.trace_ids[i] for i in idx], d=self.d[idx],
            fields={n: {f: v[idx] for f, v in fs.items()} for n, fs in self.fields.items()},
            counts=self.counts[idx], d_iter=self.d_iter[idx], d_shape=self.d_shape[idx],
            d_struct=self.d_struct[idx], traces_per_group=self.traces_per_group,
        )


# --------------------------------------------------------------------------- building


@dataclass
class _Indexed:
    """One trace, indexed for pairing."""

    trace_id: str
    outputs: dict[str, list[str]]  # node -> canonical JSON of each call's output, by occurrence
    decisions: frozenset[tuple[str, int, str]]

    @classmethod
    def of(cls, trace: Trace) -> _Indexed:
        outputs: dict[str, list[str]] = {}
        decisions = []
        for call in sorted(trace.calls, key=lambda c: (c.node, c.occurrence)):
            outputs.setdefault(call.node, []).append(canonical_json(call.output))
            if call.decision:
                decisions.append((call.node, call.occurrence, canonical_json(call.decision)))
        return cls(trace.trace_id, outputs, frozenset(decisions))


class NoPairsError(QuiverError):
    """The corpus has no input group with two traces: there is nothing to compare."""


def group_traces(traces: Iterable[Trace]) -> tuple[dict[str, list[Trace]], int]:
    """Traces by input_id (failed traces left out) and how many failed."""
    groups: dict[str, list[Trace]] = {}
    failed = 0
    for trace in traces:
        if trace.status != "ok":
            failed += 1
            continue
        groups.setdefault(trace.input_id, []).append(trace)
    return groups, failed


def build_pairs(
    groups: dict[str, list[Trace]],
    graph: PipelineGraph,
    text: Callable[[Iterable[str]], TextDistance],
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> PairTable:
    """Form every same-input pair and compute its node and field distances.

    Each node's distinct comparisons (two different outputs the pairs align) are
    computed once, with :class:`~quiver._distance.OutputColumns`; the pairs read them
    off by index.

    Args:
        groups: Traces by input id (see :func:`group_traces`).
        graph: Gives each node's output spec (and the column order).
        text: Receives every text that some comparison needs embedded (each once,
            before any distance is computed, in an order fixed by the traces: node by
            node in the graph's order, field by field, then by the pairs of values)
            and returns the text distance to use. A text distance
            with a ``distances(pairs)`` method (an
            :class:`~quiver._distance.EmbeddingStore`) gets the plain text pairs of a
            field in one call.
        progress: Called as ``progress(stage, done, total)``.
    """
    indexed = {g: [_Indexed.of(t) for t in ts] for g, ts in groups.items()}
    traces = [t for ts in indexed.values() for t in ts]
    starts = itertools.accumulate((len(ts) for ts in indexed.values()), initial=0)
    rows = np.array(
        [(gi, start + i, start + j) for gi, (start, ts) in enumerate(zip(starts, indexed.values(), strict=False))
         for i, j in itertools.combinations(range(len(ts)), 2)],
        dtype=np.int64,
    ).reshape(-1, 3)
    if not len(rows):
        sizes = sorted({len(ts) for ts in groups.values()})
        raise NoPairsError(
            f"no input group has two traces ({sum(len(t) for t in groups.values())} trace(s) in "
            f"{len(groups)} group(s) of size {', '.join(map(str, sizes)) or '0'}): the analysis compares "
            "repeats of the same input; record with repeats >= 2, or group traces by a shared input_id"
        )
    group, left, right = rows[:, 0], rows[:, 1], rows[:, 2]
    nodes = [n for n in graph.topological_order() if n in graph.nodes]
    parsed = _Parsed()
    plans = {node: _NodePlan.of(node, traces, left, right) for node in nodes}
    columns = {node: OutputColumns(graph.nodes[node], [parsed[o] for o in plans[node].outputs]) for node in nodes}
    for node in nodes:  # every value against its declared type before any embedding work: a wrong type is
        _named(node, columns[node].check)  # reported at once, not after minutes of encoding
    needed: dict[str, None] = {}
    for node, plan in plans.items():
        for pair in _named(node, columns[node].texts, plan.lo, plan.hi):
            needed.update(dict.fromkeys(pair))
    distance = text(list(needed))
    done, total = 0, sum(len(plan.lo) for plan in plans.values())
    for node, plan in plans.items():
        plan.total, plan.fields = _named(node, columns[node].distances, plan.lo, plan.hi, distance)
        done += len(plan.lo)
        if progress is not None:
            progress("distances", done, total)
    return _fill(traces, left, right, group, nodes, graph, list(indexed), plans, parsed)


def _named(node: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, its errors saying which node (the error's type kept)."""
    try:
        return fn(*args)
    except QuiverError as exc:
        exc.args = (f"node {node!r}: {exc}",)
        raise


class _Parsed(dict[str, Any]):
    """Canonical JSON -> value, each output parsed once."""

    def __missing__(self, key: str) -> Any:
        value = self[key] = json.loads(key)
        return value


@dataclass
class _NodePlan:
    """One node's comparisons. Its distinct outputs (canonical JSON) are numbered in
    sorted order; comparison ``k`` is ``outputs[lo[k]]`` against ``outputs[hi[k]]``
    (``lo < hi``: the smaller text first, either way round the same comparison), with
    distance ``total[k]`` and per-field distances ``fields[f][k]`` (NaN: undefined).

    Attributes:
        outputs: The node's distinct outputs in all traces.
        first: (T,) per trace, the number of its output when the node ran exactly once
            in it, else -1.
        single: (P,) the node ran exactly once in each trace of the pair.
        single_k: the comparison of each pair in ``single`` whose two outputs differ
            (in row order), -1 where they are the same.
        multi: code ``lo * len(outputs) + hi`` -> k, for the comparisons of pairs where
            the node ran another number of times.
        number: output -> its number.
    """

    outputs: list[str]
    number: dict[str, int]
    first: np.ndarray
    single: np.ndarray
    single_k: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    multi: dict[int, int]
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fields: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, node: str, traces: list[_Indexed], left: np.ndarray, right: np.ndarray) -> _NodePlan:
        none: list[str] = []
        outputs = sorted({o for t in traces for o in t.outputs.get(node, none)})
        number = {o: i for i, o in enumerate(outputs)}
        size = max(len(outputs), 1)
        ran = np.array([len(t.outputs.get(node, none)) for t in traces], dtype=np.int64)
        first = np.array(
            [number[t.outputs[node][0]] if n == 1 else -1 for t, n in zip(traces, ran.tolist(), strict=True)],
            dtype=np.int64,
        )
        a, b = first[left], first[right]
        single = (a >= 0) & (b >= 0)
        differ = single & (a != b)
        codes = [(np.minimum(a, b) * size + np.maximum(a, b))[differ]]
        extra: list[int] = []
        for row in np.flatnonzero(~single & (ran[left] > 0) & (ran[right] > 0)).tolist():
            xs, ys = traces[left[row]].outputs[node], traces[right[row]].outputs[node]
            extra += [min(number[x], number[y]) * size + max(number[x], number[y]) for x, y in zip(xs, ys, strict=False)
                      if x != y]
        distinct, inverse = np.unique(np.concatenate([*codes, np.array(extra, dtype=np.int64)]), return_inverse=True)
        inverse = inverse.reshape(-1)
        single_k = np.full(int(single.sum()), -1, dtype=np.int64)
        single_k[differ[single]] = inverse[:len(codes[0])]
        multi = {code: k for k, code in zip(inverse[len(codes[0]):].tolist(), extra, strict=True)}
        return cls(outputs, number, first, single, single_k, distinct // size, distinct % size, multi)

    def of_pair(self, x: str, y: str) -> tuple[float, dict[str, float]]:
        """The distance of two different outputs and their defined per-field distances."""
        i, j = self.number[x], self.number[y]
        k = self.multi[min(i, j) * max(len(self.outputs), 1) + max(i, j)]
        return float(self.total[k]), {f: float(v[k]) for f, v in self.fields.items() if not np.isnan(v[k])}


def _field_names(spec: NodeSpec) -> list[str]:
    return list(spec.fields) if spec.fields is not None else ["output"]


def _fill(
    traces: list[_Indexed],
    left: np.ndarray,
    right: np.ndarray,
    group: np.ndarray,
    nodes: list[str],
    graph: PipelineGraph,
    group_names: list[str],
    plans: dict[str, _NodePlan],
    parsed: _Parsed,
) -> PairTable:
    """The table, column by column: pair ``p`` compares ``traces[left[p]]`` with
    ``traces[right[p]]``. A node that ran once in each trace (the common case) is read
    off its comparisons by array indexing; any other count goes through
    :func:`_node_distance`."""
    p = len(left)
    ran = sorted({node for t in traces for node in t.outputs})
    ran_col = {node: k for k, node in enumerate(ran)}
    calls = np.zeros((len(traces), len(ran)), dtype=np.int64)
    for i, t in enumerate(traces):
        for node, outs in t.outputs.items():
            calls[i, ran_col[node]] = len(outs)
    decided: dict[frozenset[tuple[str, int, str]], int] = {}
    decision_id = np.array([decided.setdefault(t.decisions, len(decided)) for t in traces], dtype=np.int64)
    d = np.full((p, len(nodes)), np.nan)
    counts = np.zeros((p, len(nodes), 2), dtype=np.int64)
    fields = {node: {f: np.full(p, np.nan) for f in _field_names(graph.nodes[node])} for node in nodes}
    none: list[str] = []
    for col, node in enumerate(nodes):
        if node not in ran_col:
            continue
        n_a, n_b = calls[left, ran_col[node]], calls[right, ran_col[node]]
        counts[:, col, 0], counts[:, col, 1] = n_a, n_b
        plan, names, columns = plans[node], _field_names(graph.nodes[node]), fields[node]
        rows = np.flatnonzero(plan.single)
        same, differ = rows[plan.single_k < 0], rows[plan.single_k >= 0]
        d[same, col] = 0.0  # identical outputs: every field present in them is 0 (QUIVER.md §6)
        outputs, of_row = np.unique(plan.first[left[same]], return_inverse=True)
        has = [set(_present(parsed[plan.outputs[i]], names)) for i in outputs.tolist()]
        present = np.array([[f in fs for f in names] for fs in has], dtype=bool).reshape(len(outputs), len(names))
        for c, f in enumerate(names):
            columns[f][same[present[of_row.reshape(-1), c]]] = 0.0
        k = plan.single_k[plan.single_k >= 0]
        d[differ, col] = plan.total[k]
        for f in names:
            columns[f][differ] = plan.fields[f][k]
        for row in np.flatnonzero(~plan.single & ((n_a > 0) | (n_b > 0))).tolist():
            xs, ys = traces[left[row]].outputs.get(node, none), traces[right[row]].outputs.get(node, none)
            d[row, col], per_field = _node_distance(plan, xs, ys, names, parsed)
            for f, v in per_field.items():
                columns[f][row] = v
    return PairTable(
        nodes=nodes, groups=group_names, group=group,
        trace_ids=[(traces[a].trace_id, traces[b].trace_id)
                   for a, b in zip(left.tolist(), right.tolist(), strict=True)],
        d=d, fields=fields, counts=counts, d_iter=np.abs(calls[left] - calls[right]).sum(axis=1),
        d_shape=decision_id[left] != decision_id[right], d_struct=((calls[left] > 0) != (calls[right] > 0)).any(axis=1),
    )


def _node_distance(
    plan: _NodePlan, xs: list[str], ys: list[str], names: list[str], parsed: _Parsed
) -> tuple[float, dict[str, float]]:
    """QUIVER.md §6 [engine]: mean over aligned occurrences, a call in one trace only = 1."""
    totals: list[float] = []
    per_field: dict[str, list[float]] = {f: [] for f in names}
    for k in range(max(len(xs), len(ys))):
        if k >= len(xs) or k >= len(ys):
            totals.append(1.0)
            for f in names:
                per_field[f].append(1.0)
            continue
        if xs[k] == ys[k]:
            totals.append(0.0)
            for f in _present(parsed[xs[k]], names):
                per_field[f].append(0.0)
            continue
        total, fs = plan.of_pair(xs[k], ys[k])
        totals.append(total)
        for f in names:
            if f in fs:
                per_field[f].append(fs[f])
    return sum(totals) / len(totals), {f: sum(v) / len(v) for f, v in per_field.items() if v}


def _present(output: Any, names: list[str]) -> list[str]:
    """The fields of an output that are present: a field missing on both sides of a
    comparison is left out of that field's mean (QUIVER.md §6)."""
    if names == ["output"]:
        return names
    return [f for f in names if isinstance(output, dict) and f in output]
