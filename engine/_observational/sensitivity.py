"""Edge sensitivity, occurrence-lift, partial sensitivities and path products.

The observational estimators of QUIVER.md §3-§5 (the paper's Definitions 3, 4 and 6,
Appendix A.3-A.5 and B.1-B.2), computed from a :class:`~quiver._stats.PairTable` of
same-input pairs. Every number is an :class:`~quiver._stats.Estimate` whose interval
comes from the shared :class:`~quiver._stats.GroupBootstrap` (resamples of input
groups, QUIVER.md §13). A pair where a node distance the statistic needs is NaN (the
node ran in neither trace) is left out of that statistic.

Choices QUIVER.md leaves open, made here:

* lambda's interval is the percentile interval of the difference of the two
  conditional rates' draws on the shared resamples: the same number
  ``boot.statistic`` would give, at the cost of two matrix-vector products.
* ``to_json`` of an edge gives the ratio distribution as quantiles plus a histogram on
  fixed bin edges (:data:`RATIO_BIN_EDGES`, the same for every edge so edges compare),
  not the raw list; the raw ratios stay on the object for plots. The median, the two
  fractions and the max ratio describe the distribution: they carry sigma's n and no
  interval.
* The partial regression has an intercept: a node with intrinsic noise has d_j > 0
  with all parents clean, and forcing the fit through 0 would push that noise into the
  alphas. Its coefficients' intervals come from the group bootstrap of the normal
  equations (per-group X'X and X'y, summed with the resample weights; a resample whose
  X'X is singular gives no draw). n <= n_params is ``insufficient``; a design of lower
  rank than n_params (a parent that never drifts) is ``rank-deficient``; neither
  reports coefficients.
* Path products treat an edge absent from ``sigmas`` like one whose sigma is None: the
  path's product is undefined. The enumeration of source-to-sink paths stops at
  :data:`MAX_PATHS` and says so (``PathProducts.truncated``).
* A transitive comparison uses the best path product over the paths whose edges all
  have a sigma (found by dynamic programming over the DAG, so it is not capped), and
  reports how many paths had an undefined edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from typing import Any, Literal, TypeAlias

import numpy as np

from quiver._graph import PipelineGraph
from quiver._stats import Estimate, GroupBootstrap, PairTable, percentile_interval, rounded

__all__ = [
    "EdgeClass",
    "Sigmas",
    "EdgeSensitivity",
    "classify",
    "edge_sensitivity",
    "PartialSensitivities",
    "partial_sensitivities",
    "PathProduct",
    "PathProducts",
    "path_products",
    "critical_path",
    "Transitive",
    "transitive_sensitivity",
    "DEFAULT_EPSILON",
    "DEFAULT_DELTA",
    "MAX_PATHS",
    "RATIO_BIN_EDGES",
]

DEFAULT_EPSILON = 0.01
"""The drift threshold eps (QUIVER.md §3 [engine default])."""
DEFAULT_DELTA = 0.1
"""The near-unity band |sigma - 1| < delta (QUIVER.md §13)."""
MAX_PATHS = 10_000
"""The most source-to-sink paths :func:`path_products` enumerates."""
RATIO_BIN_EDGES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, float("inf"))
"""Bin edges of the ratio histogram in ``EdgeSensitivity.to_json`` (last bin open)."""
_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)

EdgeClass = Literal["amplifier", "absorber", "near-unity", "insensitive", "undefined"]
Sigmas: TypeAlias = Mapping[tuple[str, str], float | None]
"""Edge -> sigma (None: undefined)."""


def column(table: PairTable, node: str) -> np.ndarray:
    """The (P,) distances of ``node``, with an error that lists the table's nodes."""
    if node not in table.nodes:
        raise ValueError(f"node {node!r} is not in the pair table; its nodes are {', '.join(table.nodes)}")
    return table.col(node)


# --------------------------------------------------------------------------- sigma and lambda


@dataclass(frozen=True)
class EdgeSensitivity:
    """The sensitivity and occurrence-lift of one edge v_i -> v_j (Def. 3 and 4).

    Attributes:
        source: v_i.
        target: v_j.
        epsilon: The drift threshold eps.
        delta: The near-unity band.
        edge_class: amplifier, absorber, near-unity, insensitive, or undefined (n = 0).
        sigma: E[d_j / d_i] over pairs with d_i > eps and d_j defined (value None when n = 0).
        n: The number of those pairs.
        sigma_median: The median ratio.
        frac_ratio_below_1: The fraction of ratios < 1.
        frac_ratio_above_1_5: The fraction of ratios > 1.5.
        ratio_max: The largest ratio.
        ratios: The ratios themselves (for plots; summarised in ``to_json``).
        lift: lambda = P(d_j > eps | d_i > eps) - P(d_j > eps | d_i <= eps), None when a
            partition is empty; its n is n_above + n_below.
        p_drift_above: P(d_j > eps | d_i > eps), with n = n_above.
        p_drift_below: P(d_j > eps | d_i <= eps), with n = n_below.
    """

    source: str
    target: str
    epsilon: float
    delta: float
    edge_class: EdgeClass
    sigma: Estimate
    n: int
    sigma_median: float | None
    frac_ratio_below_1: float | None
    frac_ratio_above_1_5: float | None
    ratio_max: float | None
    ratios: np.ndarray = field(repr=False, compare=False)
    lift: Estimate
    p_drift_above: Estimate
    p_drift_below: Estimate

    @property
    def n_above(self) -> int:
        """Pairs with d_i > eps (and d_j defined): lambda's first partition."""
        return self.p_drift_above.n

    @property
    def n_below(self) -> int:
        """Pairs with d_i <= eps (and d_j defined): lambda's second partition."""
        return self.p_drift_below.n

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: estimates as value / _ci / _n, the ratios as quantiles and a histogram."""
        return {
            "source": self.source, "target": self.target, "class": self.edge_class,
            "epsilon": self.epsilon, "delta": self.delta,
            **self.sigma.as_dict("sigma"), "n": self.n,
            "sigma_median": rounded(self.sigma_median),
            "frac_ratio_below_1": rounded(self.frac_ratio_below_1),
            "frac_ratio_above_1_5": rounded(self.frac_ratio_above_1_5),
            "ratio_max": rounded(self.ratio_max),
            "ratio_quantiles": _quantiles(self.ratios),
            "ratio_histogram": _histogram(self.ratios),
            **self.lift.as_dict("lambda"), "n_above": self.n_above, "n_below": self.n_below,
            **self.p_drift_above.as_dict("p_drift_above"), **self.p_drift_below.as_dict("p_drift_below"),
        }


def _quantiles(ratios: np.ndarray) -> dict[str, float | None] | None:
    if ratios.size == 0:
        return None
    values = np.quantile(ratios, _QUANTILES)
    return {f"q{round(q * 100):02d}": rounded(float(v)) for q, v in zip(_QUANTILES, values, strict=True)}


def _histogram(ratios: np.ndarray) -> dict[str, list[Any]]:
    counts, _ = np.histogram(ratios, bins=np.array(RATIO_BIN_EDGES))
    edges = [e if np.isfinite(e) else None for e in RATIO_BIN_EDGES]
    return {"edges": edges, "counts": counts.tolist()}


def classify(sigma: float | None, epsilon: float = DEFAULT_EPSILON, delta: float = DEFAULT_DELTA) -> EdgeClass:
    """The class of an edge from its sigma (QUIVER.md §3, §13; Def. 3).

    None -> undefined; sigma < eps -> insensitive; |sigma - 1| < delta -> near-unity;
    sigma > 1 -> amplifier; else absorber. The checks run in that order.
    """
    if sigma is None:
        return "undefined"
    if sigma < epsilon:
        return "insensitive"
    if abs(sigma - 1.0) < delta:
        return "near-unity"
    return "amplifier" if sigma > 1.0 else "absorber"


def difference(a: Estimate, b: Estimate) -> Estimate:
    """a - b on shared resamples: the interval of the draws' differences; n = a.n + b.n."""
    if a.value is None or b.value is None or a.draws is None or b.draws is None:
        return Estimate(None, None, a.n + b.n)
    draws = a.draws - b.draws
    return Estimate(a.value - b.value, percentile_interval(draws), a.n + b.n, draws)


def edge_sensitivity(table: PairTable, source: str, target: str, boot: GroupBootstrap,
                     epsilon: float = DEFAULT_EPSILON, delta: float = DEFAULT_DELTA) -> EdgeSensitivity:
    """Edge sensitivity sigma_ij and occurrence-lift lambda_ij (QUIVER.md §3-§4; Def. 3, 4).

    sigma_ij = E[d_j / d_i] over the pairs with d_i > eps and d_j defined (B.1 step 3),
    with the median ratio, the fractions of ratios < 1 and > 1.5, the max ratio and the
    ratios. lambda_ij = P(d_j > eps | d_i > eps) - P(d_j > eps | d_i <= eps) over pairs
    where both are defined (B.2); None when either partition is empty. The interval of
    lambda is that of the difference of the two rates' draws on the shared resamples.

    Args:
        table: The same-input pairs.
        source: v_i.
        target: v_j.
        boot: Group resamples built over ``table.group``.
        epsilon: The drift threshold eps.
        delta: The near-unity band (QUIVER.md §13).
    """
    d_i, d_j = column(table, source), column(table, target)
    both = np.isfinite(d_i) & np.isfinite(d_j)
    above = both & (d_i > epsilon)
    ratio = np.divide(d_j, d_i, out=np.zeros_like(d_j), where=above)
    sigma = boot.mean(ratio, above)
    ratios = ratio[above]
    drifts = np.where(both, d_j, 0.0) > epsilon
    p_above = boot.rate(drifts, above)
    p_below = boot.rate(drifts, both & ~above)
    return EdgeSensitivity(
        source=source, target=target, epsilon=epsilon, delta=delta,
        edge_class=classify(sigma.value, epsilon, delta), sigma=sigma, n=int(ratios.size),
        sigma_median=float(np.median(ratios)) if ratios.size else None,
        frac_ratio_below_1=float(np.mean(ratios < 1.0)) if ratios.size else None,
        frac_ratio_above_1_5=float(np.mean(ratios > 1.5)) if ratios.size else None,
        ratio_max=float(ratios.max()) if ratios.size else None,
        ratios=ratios, lift=difference(p_above, p_below), p_drift_above=p_above, p_drift_below=p_below,
    )


# --------------------------------------------------------------------------- partial regression


@dataclass(frozen=True)
class PartialSensitivities:
    """The multi-parent regression of one node (QUIVER.md §3; B.1 step 4).

    d_j = intercept + sum_i alpha_i d_i + sum_{i<k} gamma_ik d_i d_k + e, least squares
    over the pairs where the target and every parent are defined.

    Attributes:
        target: v_j.
        parents: The regressors' nodes, in the order given.
        status: ``ok``; ``insufficient`` when n <= n_params; ``rank-deficient`` when
            the design has fewer independent columns than parameters (a parent that
            never drifts, two parents that always drift together). The coefficients
            are undefined (value None) unless ``ok``.
        n: Pairs used.
        n_params: 1 + k + k(k-1)/2 for k parents (the intercept counted).
        intercept: The fitted d_j with every parent clean.
        alpha: parent -> its main-effect coefficient.
        gamma: (parent, parent) -> their interaction coefficient, i before k in ``parents``.
        r_squared: The fit's coefficient of determination (None unless ``ok``).
    """

    target: str
    parents: tuple[str, ...]
    status: Literal["ok", "insufficient", "rank-deficient"]
    n: int
    n_params: int
    intercept: Estimate
    alpha: Mapping[str, Estimate]
    gamma: Mapping[tuple[str, str], Estimate]
    r_squared: float | None

    def to_json(self) -> dict[str, Any]:
        """Flat JSON; interaction keys read ``gamma[a*b]``."""
        out: dict[str, Any] = {
            "target": self.target, "parents": list(self.parents), "status": self.status,
            "n": self.n, "n_params": self.n_params, "r_squared": rounded(self.r_squared),
            **self.intercept.as_dict("intercept"),
        }
        for p, est in self.alpha.items():
            out.update(est.as_dict(f"alpha[{p}]"))
        for (a, b), est in self.gamma.items():
            out.update(est.as_dict(f"gamma[{a}*{b}]"))
        return out


def _design(columns: list[np.ndarray], n: int) -> np.ndarray:
    """[1, d_1..d_k, d_i d_k for i < k] as an (n, p) matrix."""
    inter = [a * b for a, b in combinations(columns, 2)]
    return np.column_stack([np.ones(n), *columns, *inter])


def _group_normal_equations(x: np.ndarray, y: np.ndarray, group: np.ndarray,
                            n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-group X'X (G, p*p) and X'y (G, p)."""
    p = x.shape[1]
    gram = np.zeros((n_groups, p * p))
    xty = np.zeros((n_groups, p))
    if len(y) == 0:
        return gram, xty
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    xs, ys = x[order], y[order]
    outer = (xs[:, :, None] * xs[:, None, :]).reshape(len(ys), p * p)
    gram[g[starts]] = np.add.reduceat(outer, starts, axis=0)
    xty[g[starts]] = np.add.reduceat(xs * ys[:, None], starts, axis=0)
    return gram, xty


def _bootstrap_coefficients(x: np.ndarray, y: np.ndarray, group: np.ndarray,
                            boot: GroupBootstrap) -> np.ndarray:
    """(B, p) coefficients of each resample (NaN rows where its X'X is singular)."""
    p = x.shape[1]
    gram, xty = _group_normal_equations(x, y, group, boot.n_groups)
    a = (boot.weights @ gram).reshape(-1, p, p)
    b = boot.weights @ xty
    draws = np.full((len(a), p), np.nan)
    ok = np.linalg.matrix_rank(a) == p
    if ok.any():
        draws[ok] = np.linalg.solve(a[ok], b[ok][:, :, None])[:, :, 0]
    return draws


def partial_sensitivities(table: PairTable, target: str, parents: Sequence[str],
                          boot: GroupBootstrap) -> PartialSensitivities:
    """Partial sensitivities of a multi-parent node (QUIVER.md §3; B.1 step 4, Def. 3).

    Fits d_j = intercept + sum_i alpha_i d_i + sum_{i<k} gamma_ik d_i d_k + e by least
    squares over every pair where the target and all parents are defined (clean pairs
    included: they pin the intercept, the target's own noise with clean parents).
    Coefficient intervals: the group bootstrap of the normal equations. Fewer pairs
    than parameters plus one (n <= n_params) gives ``insufficient``.

    Args:
        table: The same-input pairs.
        target: v_j.
        parents: Its parents (one is allowed: then it is d_j = c + alpha d_i).
        boot: Group resamples built over ``table.group``.
    """
    names = tuple(parents)
    cols = [column(table, p) for p in names]
    y_all = column(table, target)
    mask = np.isfinite(y_all)
    for c in cols:
        mask &= np.isfinite(c)
    x = _design([c[mask] for c in cols], int(mask.sum()))
    y = y_all[mask]
    n, p = x.shape
    pairs = list(combinations(names, 2))
    status: Literal["ok", "insufficient", "rank-deficient"] = "ok"
    coef, r2, draws = np.full(p, np.nan), None, np.full((boot.resamples, p), np.nan)
    if n <= p:
        status = "insufficient"
    else:
        fit, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
        if rank < p:
            status = "rank-deficient"
        else:
            coef = fit
            tss = float(((y - y.mean()) ** 2).sum())
            r2 = 1.0 - float(((y - x @ fit) ** 2).sum()) / tss if tss > 0 else None
            draws = _bootstrap_coefficients(x, y, boot.group[mask], boot)
    ests = [_coefficient(coef[k], draws[:, k], n, status) for k in range(p)]
    k = len(names)
    return PartialSensitivities(
        target=target, parents=names, status=status, n=n, n_params=p, intercept=ests[0],
        alpha=dict(zip(names, ests[1:1 + k], strict=True)), gamma=dict(zip(pairs, ests[1 + k:], strict=True)),
        r_squared=r2,
    )


def _coefficient(value: float, draws: np.ndarray, n: int, status: str) -> Estimate:
    if status != "ok":
        return Estimate(None, None, n)
    return Estimate(float(value), percentile_interval(draws), n, draws)


# --------------------------------------------------------------------------- paths


@dataclass(frozen=True)
class PathProduct:
    """One directed path and its sensitivity product sigma(p) (Def. 6, A.5).

    Attributes:
        nodes: The path's nodes, source first.
        edge_sigmas: sigma of each edge along it (None: undefined or not given).
        product: The product of the edge sigmas; None when any is undefined.
        cascade: product > 1 (a cascade amplifier); None when undefined.
    """

    nodes: tuple[str, ...]
    edge_sigmas: tuple[float | None, ...]
    product: float | None
    cascade: bool | None

    @classmethod
    def of(cls, nodes: Sequence[str], sigmas: Sigmas) -> PathProduct:
        """The product along ``nodes`` with edge sigmas from ``sigmas``."""
        edge = tuple(sigmas.get((a, b)) for a, b in pairwise(nodes))
        product = None if any(s is None for s in edge) else float(np.prod([float(s) for s in edge if s is not None]))
        return cls(tuple(nodes), edge, product, None if product is None else product > 1.0)

    def to_json(self) -> dict[str, Any]:
        """The path, its edge sigmas, product and cascade flag."""
        return {"path": list(self.nodes), "edge_sigmas": [rounded(s) for s in self.edge_sigmas],
                "sigma": rounded(self.product), "cascade": self.cascade}


class PathProducts(list[PathProduct]):
    """Source-to-sink path products, with whether the enumeration was cut short.

    Attributes:
        truncated: True when more than ``limit`` paths exist and only the first
            ``limit`` (depth-first, in edge order) are listed.
        limit: The enumeration cap.
    """

    def __init__(self, paths: Iterable[PathProduct] = (), *, truncated: bool = False,
                 limit: int = MAX_PATHS) -> None:
        super().__init__(paths)
        self.truncated = truncated
        self.limit = limit

    def to_json(self) -> dict[str, Any]:
        """The paths, the critical path, and the truncation flag."""
        crit = critical_path(self)
        return {"paths": [p.to_json() for p in self], "critical": crit.to_json() if crit else None,
                "truncated": self.truncated, "limit": self.limit}


INPUT_NODE = "input"
"""The trace's inputs (the source call ``c0``): the same in both traces of every
same-input pair, so its distance is always 0 and no path product can start there."""


def _dag(graph: PipelineGraph) -> dict[str, list[str]]:
    children: dict[str, list[str]] = {n: [] for n in graph.topological_order() if n != INPUT_NODE}
    for a, b in graph.dag_edges():
        if INPUT_NODE not in (a, b):
            children[a].append(b)
    return children


def path_products(graph: PipelineGraph, sigmas: Sigmas, *, limit: int = MAX_PATHS) -> PathProducts:
    """sigma(p) for every source-to-sink path of the DAG (QUIVER.md §5; Def. 6, A.5).

    Paths run over ``graph.dag_edges()`` (loop feedback left out, §13) from each node
    without an incoming DAG edge to each node without an outgoing one; isolated nodes
    give no path. The trace's ``input`` node and its edges are left out: it never
    differs within a same-input pair, so every product through it would be undefined
    (paths start at the nodes it feeds). An edge whose sigma is None or missing from ``sigmas`` makes the
    path's product undefined. At most ``limit`` paths are listed (``truncated`` says
    when there were more).
    """
    children = _dag(graph)
    has_parent = {b for kids in children.values() for b in kids}
    out: list[PathProduct] = []
    truncated = False

    def walk(path: list[str]) -> None:
        nonlocal truncated
        kids = children[path[-1]]
        if not kids:
            out.append(PathProduct.of(path, sigmas))
            return
        for kid in kids:
            if len(out) >= limit:
                truncated = True
                return
            walk([*path, kid])

    for node, kids in children.items():
        if node not in has_parent and kids and not truncated:
            walk([node])
    return PathProducts(out, truncated=truncated, limit=limit)


def critical_path(paths: Iterable[PathProduct]) -> PathProduct | None:
    """The critical amplification path: the largest defined product (first on ties)."""
    best: PathProduct | None = None
    for p in paths:
        if p.product is not None and (best is None or best.product is None or p.product > best.product):
            best = p
    return best


# --------------------------------------------------------------------------- transitive


@dataclass(frozen=True)
class Transitive:
    """Measured transitive sensitivity against the path-product approximation (§5, A.5).

    Attributes:
        source: v_i.
        target: v_j, reachable from v_i in the DAG without a direct edge.
        measured: E[d_j / d_i] over pairs with d_i > eps and d_j defined.
        path_max: max sigma(p) over paths i -> j whose edges all have a sigma.
        best_path: That path's nodes.
        n_paths: Paths i -> j in the DAG.
        n_paths_undefined: Those with an undefined edge (left out of ``path_max``).
        relative_difference: (path_max - measured) / measured, the approximation's
            relative error; None when either is undefined or measured is 0.
    """

    source: str
    target: str
    measured: Estimate
    path_max: float | None
    best_path: tuple[str, ...] | None
    n_paths: int
    n_paths_undefined: int
    relative_difference: float | None

    def to_json(self) -> dict[str, Any]:
        """Flat JSON."""
        return {
            "source": self.source, "target": self.target, **self.measured.as_dict("sigma_measured"),
            "sigma_path_max": rounded(self.path_max), "best_path": list(self.best_path) if self.best_path else None,
            "n_paths": self.n_paths, "n_paths_undefined": self.n_paths_undefined,
            "relative_difference": rounded(self.relative_difference),
        }


@dataclass
class _Reach:
    """Paths from one source to every node: counts and the best defined product."""

    n_paths: dict[str, int]
    n_defined: dict[str, int]
    best: dict[str, tuple[float, tuple[str, ...]]]


def reach(graph: PipelineGraph, source: str, sigmas: Sigmas) -> _Reach:
    """Dynamic programming over the DAG from ``source`` (sigmas are >= 0, so the best
    product to a node extends the best product to one of its parents)."""
    children = _dag(graph)
    order = list(children)
    n_paths = {n: 0 for n in graph.topological_order()}
    n_defined = dict(n_paths)
    best: dict[str, tuple[float, tuple[str, ...]]] = {source: (1.0, (source,))}
    n_paths[source] = n_defined[source] = 1
    if source not in children:  # the trace's input: no path starts there
        return _Reach(n_paths, n_defined, best)
    for node in order[order.index(source):]:
        for kid in children[node]:
            n_paths[kid] += n_paths[node]
            s = sigmas.get((node, kid))
            if s is None:
                continue
            n_defined[kid] += n_defined[node]
            if node in best:
                cand = best[node][0] * float(s)
                if kid not in best or cand > best[kid][0]:
                    best[kid] = (cand, (*best[node][1], kid))
    return _Reach(n_paths, n_defined, best)


def transitive_sensitivity(table: PairTable, graph: PipelineGraph, sigmas: Sigmas, boot: GroupBootstrap,
                           epsilon: float = DEFAULT_EPSILON) -> list[Transitive]:
    """Transitive sigma(i, j) for every non-adjacent reachable pair (QUIVER.md §5; Def. 6).

    For each (i, j) with j reachable from i along ``graph.dag_edges()`` and no DAG edge
    i -> j: the measured E[d_j / d_i] over pairs with d_i > eps (an Estimate), the best
    path product over the paths whose edge sigmas are all defined, and the relative
    difference. Pairs are listed in topological order of i, then j.
    """
    adjacent = set(graph.dag_edges())
    order = list(_dag(graph))  # the topological order without the trace's input (see path_products)
    out: list[Transitive] = []
    for i in order:
        r = reach(graph, i, sigmas)
        for j in order:
            if j == i or r.n_paths[j] == 0 or (i, j) in adjacent:
                continue
            measured = _ratio_mean(table, i, j, boot, epsilon)
            best = r.best.get(j)
            path_max = best[0] if best else None
            rel = None
            if path_max is not None and measured.value:
                rel = (path_max - measured.value) / measured.value
            out.append(Transitive(i, j, measured, path_max, best[1] if best else None,
                                  r.n_paths[j], r.n_paths[j] - r.n_defined[j], rel))
    return out


def _ratio_mean(table: PairTable, source: str, target: str, boot: GroupBootstrap, epsilon: float) -> Estimate:
    d_i, d_j = column(table, source), column(table, target)
    mask = np.isfinite(d_j) & (np.nan_to_num(d_i, nan=0.0) > epsilon)
    ratio = np.divide(d_j, d_i, out=np.zeros_like(d_j), where=mask)
    return boot.mean(ratio, mask)
