"""Drift budgets and impact sets: the regression-testing policy (QUIVER.md §9).

The paper's Principle 2 (Appendix A.11, B.2): a drift budget tau_ij@alpha says how far
v_i may drift before v_j leaves its noise floor with probability alpha; the impact set
I(v_i, alpha) says which nodes to re-evaluate when v_i changes.

Choices QUIVER.md leaves open, made here:

* The downstream event is d_j > max(D_noise(v_j), eps): the paper treats d > eps as
  the operative event throughout (A.4, B.2), so a node whose noise floor is below the
  kernel floor does not count float-level differences as leaving it.
* tau sweeps the distinct observed d_i values (0 included) ascending; a tau counts
  only when at least :data:`MIN_PAIRS_ABOVE` pairs have d_i > tau (§13). No such tau:
  ``insufficient``; the probability never reaching alpha at those: ``never``.
* tau has no interval (it would need the sweep re-run per resample); the probability
  at tau carries one when a :class:`~quiver._stats.GroupBootstrap` is passed.
* The impact set's path rule uses the best path product over paths whose edge sigmas
  are all defined; nodes reachable only through undefined edges are listed as
  ``unassessed``. Its loop rule skips betas <= eps: an observational beta of 0 says the
  loop bifurcates without that node drifting (not a bifurcation source, §7 [engine]),
  so it is no evidence that the change makes it bifurcate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from quiver._graph import PipelineGraph
from quiver._stats import Estimate, GroupBootstrap, PairTable, rounded

from .sensitivity import DEFAULT_EPSILON, Sigmas, column, reach

__all__ = [
    "MIN_PAIRS_ABOVE",
    "BudgetStatus",
    "DriftBudget",
    "drift_budget",
    "ImpactMember",
    "ImpactSet",
    "impact_set",
]

MIN_PAIRS_ABOVE = 10
"""Pairs with d_i above a budget that it needs (QUIVER.md §13)."""

BudgetStatus = Literal["ok", "never", "insufficient"]


# --------------------------------------------------------------------------- drift budgets


@dataclass(frozen=True)
class DriftBudget:
    """The drift budget tau_ij@alpha of one edge (QUIVER.md §9; Principle 2, A.11).

    Attributes:
        source: v_i.
        target: v_j.
        alpha: The probability level.
        noise_floor_target: D_noise(v_j).
        threshold: max(D_noise(v_j), eps), what d_j must exceed.
        status: ``ok`` (tau found), ``never`` (the probability stays below alpha at
            every tau with enough pairs above), ``insufficient`` (no tau has
            :data:`MIN_PAIRS_ABOVE` pairs above it).
        tau: The budget (None unless ``ok``).
        probability: P(d_j > threshold | d_i > tau) at tau, n = pairs above tau (for
            ``never``: at the tau where it is largest; value None when insufficient).
        n_pairs: Pairs with d_i and d_j defined.
        max_probability: The largest probability over the eligible taus.
    """

    source: str
    target: str
    alpha: float
    noise_floor_target: float
    threshold: float
    status: BudgetStatus
    tau: float | None
    probability: Estimate
    n_pairs: int
    max_probability: float | None

    @property
    def n_above(self) -> int:
        """Pairs with d_i above tau (or above the tau of ``probability``)."""
        return self.probability.n

    def to_json(self) -> dict[str, Any]:
        """Flat JSON; tau is None unless status is ``ok``."""
        return {
            "source": self.source, "target": self.target, "alpha": self.alpha, "status": self.status,
            "tau": rounded(self.tau), "noise_floor_target": rounded(self.noise_floor_target),
            "threshold": rounded(self.threshold), **self.probability.as_dict("probability"),
            "n_pairs": self.n_pairs, "max_probability": rounded(self.max_probability),
        }


def _sweep(x: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct x value tau ascending: pairs with x > tau, and hits among them."""
    order = np.argsort(x, kind="stable")
    xs, hs = x[order], hit[order].astype(np.int64)
    taus = np.unique(xs)
    first_above = np.searchsorted(xs, taus, side="right")
    suffix = np.r_[np.cumsum(hs[::-1])[::-1], 0]
    return taus, len(xs) - first_above, suffix[first_above]


def drift_budget(table: PairTable, source: str, target: str, alpha: float, noise_floor_target: float,
                 epsilon: float = DEFAULT_EPSILON, *, boot: GroupBootstrap | None = None) -> DriftBudget:
    """tau_ij@alpha = min { tau : P(d_j > D_noise(v_j) | d_i > tau) >= alpha }.

    QUIVER.md §9 (Principle 2, A.11, B.2): sweeps tau over the observed d_i values
    ascending, over pairs where d_i and d_j are defined, counting a tau only when at
    least 10 pairs have d_i > tau (§13). The event is d_j > max(D_noise(v_j), eps)
    (module docstring). With ``boot``, the probability at tau has its interval.

    Args:
        table: The same-input pairs.
        source: v_i.
        target: v_j.
        alpha: The probability level, in (0, 1].
        noise_floor_target: D_noise(v_j), e.g. ``noise_origin(...).noise_floor.value``.
        epsilon: The kernel floor eps.
        boot: Group resamples over ``table.group``, for the probability's interval.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"drift_budget: alpha must be in (0, 1]; got {alpha!r}")
    d_i, d_j = column(table, source), column(table, target)
    both = np.isfinite(d_i) & np.isfinite(d_j)
    threshold = max(float(noise_floor_target), epsilon)
    hit = np.nan_to_num(d_j, nan=0.0) > threshold
    taus, n_above, hits = _sweep(d_i[both], hit[both])
    eligible = n_above >= MIN_PAIRS_ABOVE
    prob = np.divide(hits, n_above, out=np.zeros(len(taus)), where=n_above > 0)
    reached = eligible & (hits >= alpha * n_above - 1e-9)
    status: BudgetStatus = "ok" if reached.any() else "never" if eligible.any() else "insufficient"
    tau, estimate, max_prob = None, Estimate.empty(), None
    if status != "insufficient":
        k = int(np.argmax(reached)) if status == "ok" else int(np.argmax(np.where(eligible, prob, -1.0)))
        tau = float(taus[k]) if status == "ok" else None
        above = both & (np.nan_to_num(d_i, nan=0.0) > taus[k])
        estimate = boot.rate(hit, above) if boot is not None else Estimate(float(prob[k]), None, int(n_above[k]))
        max_prob = float(prob[eligible].max())
    return DriftBudget(
        source=source, target=target, alpha=alpha, noise_floor_target=float(noise_floor_target),
        threshold=threshold, status=status, tau=tau, probability=estimate, n_pairs=int(both.sum()),
        max_probability=max_prob,
    )


# --------------------------------------------------------------------------- impact sets


@dataclass(frozen=True)
class ImpactMember:
    """One node of an impact set and why it is in.

    Attributes:
        node: v_j.
        path: The path of largest sigma(p) from the source (None when it is in by the
            loop rule only).
        path_sigma: That path's product (> alpha when ``path`` is the reason).
        beta_shape: Its beta_shape when the loop rule put it in.
        reasons: One sentence per rule that put it in.
    """

    node: str
    path: tuple[str, ...] | None
    path_sigma: float | None
    beta_shape: float | None
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON."""
        return {"node": self.node, "path": list(self.path) if self.path else None,
                "path_sigma": rounded(self.path_sigma), "beta_shape": rounded(self.beta_shape),
                "reasons": list(self.reasons)}


@dataclass(frozen=True)
class ImpactSet:
    """I(v_i, alpha): the nodes to re-evaluate when v_i changes (QUIVER.md §9; A.11).

    Attributes:
        source: v_i.
        alpha: The path-sensitivity level.
        drift: The measured drift d_i of the change (None: loop rule not applied).
        members: The nodes in the set, in topological order, with their reasons.
        unassessed: Nodes reachable from v_i whose every path has an undefined
            sigma and that are not members.
    """

    source: str
    alpha: float
    drift: float | None
    members: tuple[ImpactMember, ...]
    unassessed: tuple[str, ...]

    @property
    def nodes(self) -> list[str]:
        """The members' names."""
        return [m.node for m in self.members]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON."""
        return {"source": self.source, "alpha": self.alpha, "drift": rounded(self.drift),
                "members": [m.to_json() for m in self.members], "unassessed": list(self.unassessed)}


def impact_set(graph: PipelineGraph, source: str, alpha: float, path_sigmas: Sigmas,
               betas: dict[str, float | None] | None = None, drift: float | None = None,
               *, epsilon: float = DEFAULT_EPSILON) -> ImpactSet:
    """I(v_i, alpha) = {v_j : sigma(p) > alpha for some path p: v_i -> v_j} (§9; A.11).

    ``path_sigmas`` maps each DAG edge to its sigma; path products are formed from it
    (the best defined product to each node, by dynamic programming). When ``drift``
    and ``betas`` are given, loop-body nodes (``graph.loop.body``) whose beta_shape is
    below ``drift`` join too, except betas <= eps (not a bifurcation source, §7).
    """
    if source not in graph.nodes:
        raise ValueError(f"impact_set: unknown node {source!r}; known nodes: {', '.join(graph.nodes)}")
    r = reach(graph, source, path_sigmas)
    loop_body = set(graph.loop.body) if graph.loop else set()
    members: list[ImpactMember] = []
    unassessed: list[str] = []
    for node in graph.topological_order():
        reasons: list[str] = []
        best = r.best.get(node) if node != source else None
        if best and best[0] > alpha:
            reasons.append(f"path {' -> '.join(best[1])} has sigma(p) = {best[0]:.4g} > alpha = {alpha:g}")
        beta = (betas or {}).get(node)
        loop_hit = node in loop_body and drift is not None and beta is not None and epsilon < beta < drift
        if loop_hit:
            reasons.append(f"loop-body node with beta_shape = {beta:.4g} below the drift {drift:.4g}")
        if reasons:
            via_path = best is not None and best[0] > alpha
            members.append(ImpactMember(node, best[1] if best and via_path else None,
                                        best[0] if best and via_path else None,
                                        beta if loop_hit else None, tuple(reasons)))
        elif node != source and r.n_paths[node] > 0 and r.n_defined[node] == 0:
            unassessed.append(node)
    return ImpactSet(source, alpha, drift, tuple(members), tuple(unassessed))
