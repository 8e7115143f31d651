"""The negative control of a campaign (QUIVER.md §13): the no-op stratum of a
perturbation against the observational noise, per downstream node, one-sided permutation
tests with Holm's correction. The choices (which observational pairs, the seeds, ties)
are in :mod:`quiver._interventional.estimates` ("Negative control")."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from quiver._stats import PairTable, rounded

from .columns import TIE, Columns
from .inputs import holm
from .results import NegativeControl, NodeTest

__all__ = ["permutation_test", "negative_control"]


def permutation_test(x: np.ndarray, y: np.ndarray, permutations: int, rng: np.random.Generator) -> tuple[float, float]:
    """One-sided two-sample permutation test of H1: mean(x) > mean(y) (QUIVER.md §13).

    The statistic is mean(x) - mean(y); each permutation relabels a uniformly random
    subset of len(x) of the pooled values as x (the len(x) smallest of iid uniform
    keys). p = (#{permuted >= observed} + 1) / (permutations + 1). Vectorised in
    chunks of at most ~2e6 keys.

    Returns:
        (statistic, p-value).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    pooled = np.concatenate([x, y])
    nx, ny, total = x.size, y.size, float(pooled.sum())
    observed = float(x.sum()) / nx - (total - float(x.sum())) / ny
    chunk = max(1, min(permutations, 2_000_000 // pooled.size))
    count, done = 0, 0
    while done < permutations:
        c = min(chunk, permutations - done)
        pick = np.argpartition(rng.random((c, pooled.size)), nx - 1, axis=1)[:, :nx]
        sx = pooled[pick].sum(axis=1)
        stat = sx / nx - (total - sx) / ny
        count += int((stat >= observed - TIE).sum())
        done += c
    return observed, (count + 1) / (permutations + 1)


def _not_run(reason: str, nodes: Mapping[str, NodeTest]) -> NegativeControl:
    return NegativeControl(passed=None, reason=reason, alpha=None, permutations=None, statistic=None, p_value=None,
                           rejected=(), nodes=nodes)


def _same_inputs(cols: Columns, noop: np.ndarray, table: PairTable) -> np.ndarray:
    """The observational pairs of the inputs the no-op pairs came from (all of them when
    none of those inputs has one): a no-op stratum is often a particular kind of input,
    e.g. follow-ups whose context already sufficed, whose noise differs from the corpus
    average."""
    noop_inputs = {cols.groups[g] for g in np.unique(cols.group[noop])}
    same_inputs = np.array([table.groups[g] in noop_inputs for g in table.group], dtype=bool)
    return same_inputs if same_inputs.any() else np.ones(table.n_pairs, dtype=bool)


def _node_test(pid: str, node: str, x: np.ndarray, y: np.ndarray, in_table: bool, *, permutations: int,
               seed: int) -> tuple[NodeTest, float | None]:
    """The node's row before Holm correction, and its raw p-value (None: not tested)."""
    row = NodeTest(statistic=None, p_value=None, p_holm=None, n_noop=int(x.size), n_obs=int(y.size),
                   mean_noop=rounded(float(x.mean())) if x.size else None,
                   mean_obs=rounded(float(y.mean())) if y.size else None, rejects=None)
    if not in_table:
        return replace(row, reason="not in the observational pair table"), None
    if x.size == 0 or y.size == 0:
        return replace(row, reason="no no-op distances" if x.size == 0 else "no observational distances"), None
    rng = np.random.default_rng([seed, zlib.crc32(pid.encode()), zlib.crc32(node.encode())])
    stat, p = permutation_test(x, y, permutations, rng)
    return replace(row, statistic=rounded(stat)), p


def negative_control(pid: str, cols: Columns, nodes: Sequence[str], table: PairTable, *,
                      permutations: int, alpha: float, seed: int) -> NegativeControl:
    """The no-op stratum against the observational noise, per downstream node (§13)."""
    noop = cols.stratum == "noop"
    if not noop.any():
        return _not_run("no no-op pairs: the stratum that serves as negative control is empty", {})
    same_inputs = _same_inputs(cols, noop, table)
    rows: dict[str, NodeTest] = {}
    raw: dict[str, float] = {}
    for node in nodes:
        x = cols.d[node][noop]
        y = table.col(node)[same_inputs] if node in table.nodes else np.zeros(0)
        rows[node], p = _node_test(pid, node, x[np.isfinite(x)], y[np.isfinite(y)], node in table.nodes,
                                   permutations=permutations, seed=seed)
        if p is not None:
            raw[node] = p
    if not raw:
        return _not_run("no downstream node has both no-op and observational distances", rows)
    for node, adj in zip(raw, holm(list(raw.values())), strict=True):
        rows[node] = replace(rows[node], p_value=rounded(raw[node]), p_holm=rounded(adj), rejects=adj <= alpha)
    tested = [rows[n] for n in raw]
    return NegativeControl(
        passed=not any(t.rejects for t in tested), reason=None, alpha=alpha, permutations=permutations,
        statistic=max(t.statistic for t in tested if t.statistic is not None),
        p_value=min(t.p_holm for t in tested if t.p_holm is not None),
        rejected=tuple(n for n in raw if rows[n].rejects), nodes=rows,
    )
