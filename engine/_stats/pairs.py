"""Same-input pairs and their distances: the table every estimator reads.

For each input group (traces with one ``input_id``) every unordered pair of traces is
formed: sum over groups of C(n_g, 2); groups of unequal size are normal, groups of one
give no pair. For each pair and node the node distance follows QUIVER.md §6 "[engine]
Node distance": the k-th calls are aligned by occurrence, a call present in one trace
only counts 1, and a node absent from both traces has no distance (NaN). The pair's
trajectory divergences are computed alongside: D_iter, D_shape, D_struct.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quiver._canonical import canonical_json
from quiver._distance import TextDistance, get_kernel, output_distance, texts_to_compare
from quiver._errors import QuiverError
from quiver._graph import NodeSpec, PipelineGraph
from quiver._trace import Trace

__all__ = ["PairTable", "NoPairsError", "group_traces", "build_pairs", "texts_for"]


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

    Args:
        groups: Traces by input id (see :func:`group_traces`).
        graph: Gives each node's output spec (and the column order).
        text: Receives every text that some comparison needs embedded (each once,
            before any distance is computed) and returns the text distance to use.
        progress: Called as ``progress(stage, done, total)``.
    """
    indexed = {g: [_Indexed.of(t) for t in ts] for g, ts in groups.items()}
    pair_list = [(g, a, b) for g, ts in indexed.items() for a, b in itertools.combinations(ts, 2)]
    if not pair_list:
        sizes = sorted({len(ts) for ts in groups.values()})
        raise NoPairsError(
            f"no input group has two traces ({sum(len(t) for t in groups.values())} trace(s) in "
            f"{len(groups)} group(s) of size {', '.join(map(str, sizes)) or '0'}): the analysis compares "
            "repeats of the same input; record with repeats >= 2, or group traces by a shared input_id"
        )
    nodes = [n for n in graph.topological_order() if n in graph.nodes]
    comparisons = _unique_comparisons(pair_list, nodes)
    parsed = _Parsed()
    _check_types(indexed, nodes, graph, parsed)
    distance = text(_texts_needed(comparisons, graph, parsed))
    results = _compare_all(comparisons, graph, distance, parsed, progress)
    return _fill(pair_list, nodes, graph, list(indexed), results)


class _Parsed(dict[str, Any]):
    """Canonical JSON -> value, each output parsed once."""

    def __missing__(self, key: str) -> Any:
        value = self[key] = json.loads(key)
        return value


def _no_text(a: str, b: str) -> float:  # pragma: no cover - identical values never reach it
    raise AssertionError("an output compared with itself needs no text distance")


def _check_types(indexed: dict[str, list[_Indexed]], nodes: list[str], graph: PipelineGraph, parsed: _Parsed) -> None:
    """Check every distinct output against its node's declared types before any
    embedding work: a wrong type is reported at once, not after minutes of encoding."""
    seen: set[tuple[str, str]] = set()
    for traces in indexed.values():
        for t in traces:
            for node in nodes:
                for out in t.outputs.get(node, []):
                    if (node, out) in seen:
                        continue
                    seen.add((node, out))
                    try:
                        output_distance(graph.nodes[node], parsed[out], parsed[out], _no_text)
                    except QuiverError as exc:
                        exc.args = (f"node {node!r}: {exc}",)
                        raise


def _unique_comparisons(
    pair_list: list[tuple[str, _Indexed, _Indexed]], nodes: list[str]
) -> list[tuple[str, str, str]]:
    """Every distinct (node, output, other output) the pairs compare, the two outputs in
    sorted order, listed in the order the pairs first need them (deterministic: the
    texts to embed are gathered in this order)."""
    out: dict[tuple[str, str, str], None] = {}
    none: list[str] = []
    for _, a, b in pair_list:
        for node in nodes:
            for x, y in zip(a.outputs.get(node, none), b.outputs.get(node, none), strict=False):
                if x != y:
                    out[_comparison_key(node, x, y)] = None
    return list(out)


def _comparison_key(node: str, x: str, y: str) -> tuple[str, str, str]:
    """The key of comparing two (canonical JSON) outputs of ``node``: the same either way round."""
    return (node, x, y) if x < y else (node, y, x)


def _texts_needed(comparisons: list[tuple[str, str, str]], graph: PipelineGraph, parsed: _Parsed) -> list[str]:
    texts: dict[str, None] = {}
    for node, x, y in comparisons:
        for s, t in texts_for(graph.nodes[node], parsed[x], parsed[y]):
            texts[s] = None
            texts[t] = None
    return list(texts)


_TEXT = "text"
"""The type whose kernel compares its two strings themselves: read off directly."""


def texts_for(spec: NodeSpec, a: Any, b: Any) -> list[tuple[str, str]]:
    """The text pairs the distance of ``a`` and ``b`` needs: :func:`texts_to_compare`,
    read directly off plain text fields instead of running the distance, and run only
    for specs with parts of another type whose kernel uses text (``Kernel.uses_text``:
    mapping, json, registered types that say so)."""
    if spec.fields is None:
        kind = spec.output.type if spec.output is not None else "json"
        if kind == _TEXT:
            return [(a, b)] if isinstance(a, str) and isinstance(b, str) and a != b else []
        return texts_to_compare(spec, a, b) if get_kernel(kind).uses_text else []
    if any(f.type != _TEXT and get_kernel(f.type).uses_text for f in spec.fields.values()):
        return texts_to_compare(spec, a, b)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return []
    out = []
    for name, f in spec.fields.items():
        x, y = a.get(name), b.get(name)
        if f.type == _TEXT and isinstance(x, str) and isinstance(y, str) and x != y:
            out.append((x, y))
    return out


def _compare_all(
    comparisons: list[tuple[str, str, str]],
    graph: PipelineGraph,
    distance: TextDistance,
    parsed: _Parsed,
    progress: Callable[[str, int, int], None] | None,
) -> dict[tuple[str, str, str], tuple[float, dict[str, float]]]:
    results = {}
    total = len(comparisons)
    memos: dict[str, dict[Any, float | None]] = {node: {} for node in graph.nodes}  # field distances of scalars
    for i, key in enumerate(comparisons):
        node, x, y = key
        try:
            results[key] = output_distance(graph.nodes[node], parsed[x], parsed[y], distance, memo=memos[node])
        except QuiverError as exc:
            exc.args = (f"node {node!r}: {exc}",)  # say which node, keep the error's type
            raise
        if progress is not None and (i + 1) % 500 == 0:
            progress("distances", i + 1, total)
    if progress is not None:
        progress("distances", total, total)
    return results


def _field_names(spec: NodeSpec) -> list[str]:
    return list(spec.fields) if spec.fields is not None else ["output"]


def _fill(
    pair_list: list[tuple[str, _Indexed, _Indexed]],
    nodes: list[str],
    graph: PipelineGraph,
    group_names: list[str],
    results: dict[tuple[str, str, str], tuple[float, dict[str, float]]],
) -> PairTable:
    p, n = len(pair_list), len(nodes)
    d = np.full((p, n), np.nan)
    counts = np.zeros((p, n, 2), dtype=np.int64)
    fields = {node: {f: np.full(p, np.nan) for f in _field_names(graph.nodes[node])} for node in nodes}
    d_iter = np.zeros(p, dtype=np.int64)
    d_shape = np.zeros(p, dtype=bool)
    d_struct = np.zeros(p, dtype=bool)
    gindex = {g: i for i, g in enumerate(group_names)}
    group = np.array([gindex[g] for g, _, _ in pair_list], dtype=np.int64)
    columns = [(col, node, _field_names(graph.nodes[node]), fields[node]) for col, node in enumerate(nodes)]
    none: list[str] = []
    for row, (_, a, b) in enumerate(pair_list):
        d_shape[row] = a.decisions != b.decisions
        ran_a, ran_b = a.outputs.keys(), b.outputs.keys()
        d_struct[row] = ran_a != ran_b
        d_iter[row] = sum(abs(len(a.outputs.get(k, none)) - len(b.outputs.get(k, none))) for k in ran_a | ran_b)
        for col, node, names, columns_of in columns:
            xs, ys = a.outputs.get(node, none), b.outputs.get(node, none)
            counts[row, col] = (len(xs), len(ys))
            if xs or ys:
                total, per_field = _node_distance(node, xs, ys, results, names)
                d[row, col] = total
                for f, v in per_field.items():
                    columns_of[f][row] = v
    return PairTable(
        nodes=nodes, groups=group_names, group=group,
        trace_ids=[(a.trace_id, b.trace_id) for _, a, b in pair_list], d=d, fields=fields,
        counts=counts, d_iter=d_iter, d_shape=d_shape, d_struct=d_struct,
    )


def _node_distance(
    node: str,
    xs: list[str],
    ys: list[str],
    results: dict[tuple[str, str, str], tuple[float, dict[str, float]]],
    names: list[str],
) -> tuple[float, dict[str, float]]:
    """QUIVER.md §6 [engine]: mean over aligned occurrences, a call in one trace only = 1."""
    if len(xs) == 1 and len(ys) == 1:  # one call on each side: the common case, without the lists
        x, y = xs[0], ys[0]
        if x == y:
            return 0.0, {f: 0.0 for f in _present(x, tuple(names))}
        return results[_comparison_key(node, x, y)]
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
            for f in _present(xs[k], tuple(names)):
                per_field[f].append(0.0)
            continue
        total, fs = results[_comparison_key(node, xs[k], ys[k])]
        totals.append(total)
        for f in names:
            if f in fs:
                per_field[f].append(fs[f])
    return sum(totals) / len(totals), {f: sum(v) / len(v) for f, v in per_field.items() if v}


@functools.lru_cache(maxsize=65536)
def _present(output: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The fields of a (canonical JSON) output that are present: a field missing on
    both sides of a comparison is left out of that field's mean (QUIVER.md §6)."""
    if names == ("output",):
        return names
    value = json.loads(output)
    return tuple(f for f in names if isinstance(value, dict) and f in value)
