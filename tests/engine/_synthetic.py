"""Builders of synthetic pair tables and graphs whose estimates are known in closed form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from quiver._graph import LoopSpec, NodeSpec, PipelineGraph
from quiver._stats import GroupBootstrap, PairTable

PAIRS_PER_GROUP = 3
"""Default grouping: three repeats per input give C(3, 2) = 3 pairs per group."""


def make_table(
    d: Mapping[str, ArrayLike],
    *,
    group: ArrayLike | None = None,
    d_shape: ArrayLike | None = None,
    d_iter: ArrayLike | None = None,
    d_struct: ArrayLike | None = None,
) -> PairTable:
    """A PairTable from node -> (P,) distances (NaN: the node ran in neither trace).

    ``group`` defaults to consecutive runs of :data:`PAIRS_PER_GROUP` pairs; the
    divergences default to 0. Every node ran once in each trace where it is defined.
    """
    nodes = list(d)
    cols = np.column_stack([np.asarray(d[n], dtype=np.float64) for n in nodes])
    p = cols.shape[0]
    g = np.arange(p) // PAIRS_PER_GROUP if group is None else np.asarray(group, dtype=np.int64)
    n_groups = int(g.max()) + 1 if p else 0
    ran = np.isfinite(cols).astype(np.int64)
    return PairTable(
        nodes=nodes,
        groups=[f"q{k}" for k in range(n_groups)],
        group=g,
        trace_ids=[(f"t{k}a", f"t{k}b") for k in range(p)],
        d=cols,
        fields={n: {} for n in nodes},
        counts=np.stack([ran, ran], axis=2),
        d_iter=np.zeros(p, dtype=np.int64) if d_iter is None else np.asarray(d_iter, dtype=np.int64),
        d_shape=np.zeros(p, dtype=bool) if d_shape is None else np.asarray(d_shape, dtype=bool),
        d_struct=np.zeros(p, dtype=bool) if d_struct is None else np.asarray(d_struct, dtype=bool),
        traces_per_group=np.full(n_groups, 3, dtype=np.int64),
    )


def make_graph(edges: Sequence[tuple[str, str]], nodes: Sequence[str] = (),
               loop_body: Sequence[str] | None = None) -> PipelineGraph:
    """A graph over the edges' nodes (plus ``nodes``), untyped outputs."""
    names = list(dict.fromkeys([*nodes, *(n for e in edges for n in e)]))
    loop = LoopSpec(body=list(loop_body), k_max=5) if loop_body else None
    return PipelineGraph(nodes={n: NodeSpec() for n in names}, edges=list(edges), loop=loop)


def bootstrap(table: PairTable, resamples: int = 1000, seed: int = 0) -> GroupBootstrap:
    """The shared group resamples of a table."""
    return GroupBootstrap(table.group, len(table.groups), resamples=resamples, seed=seed)
