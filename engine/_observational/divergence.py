"""Divergence rates, observational bifurcation thresholds and noise origins.

The observational estimators of QUIVER.md §6-§8 (the paper's Definitions 7-10,
Appendix A.7-A.9, B.2, B.4) over a :class:`~quiver._stats.PairTable` of same-input
pairs. Rates and means carry the group-bootstrap interval of the shared
:class:`~quiver._stats.GroupBootstrap` (QUIVER.md §13). A pair where the node
distance a statistic needs is NaN (the node ran in neither trace) is left out of it.

Choices QUIVER.md leaves open, made here:

* D_output-only is D_output > 0 with D_shape = 0 and D_iter = 0; D_struct plays no part
  (§6 lists only those two).
* The interval of an observational beta is the percentile interval of the minimum
  over bootstrap resamples of groups (per-group minima, reduced per resample: the value
  ``boot.statistic`` would give, without a Python loop per resample). A resample can
  only lose pairs, so its minimum is never below the observed one: the interval is
  one-sided by construction and says how much the minimum rests on a few groups.
* Noise origins use ``graph.parents(node)``: every parent except the node itself, loop
  feedback included (a previous iteration's output is an input too). A parent whose
  distance is NaN in a pair (it ran in neither trace) counts as clean there. A node
  without parents is judged on all its pairs (its parents are vacuously clean).
* A node's own drift is read only from pairs where it ran in both traces. Where it ran
  in one only, its distance is 1 by the §6 convention, but its absence is the
  consequence of another node's decision (a gate upstream), not a change of its own
  output: such pairs count for the noise floor and the drift rate, never as evidence
  that the node originates noise or decides a path.
* A node that is deterministic given its inputs is never an origin
  (:func:`deterministic_nodes`): every two of its calls with the same input hash, and at
  least two exist, gave the same output. Its drift came in through its inputs,
  recorded parents or not, so it is a propagator.
* A bifurcation source is a node whose own output decides the path: beta_shape, the
  smallest distance of the node over pairs that diverged in shape and where it ran in
  both traces, exceeds eps, and the node can decide at all: it records decisions, or
  its output reaches a node that does along the graph's edges (:func:`deciding_nodes`).
  A node that runs in some traces only is no source by being absent; the node that
  decided it should not run is. A node downstream of every decision (a final reply
  that differs whenever the path did) is no source either: it follows the path.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from quiver._canonical import canonical_json
from quiver._graph import NodeSpec, PipelineGraph
from quiver._stats import Estimate, GroupBootstrap, PairTable, percentile_interval
from quiver._trace import Trace

from .sensitivity import DEFAULT_EPSILON, column

__all__ = [
    "DivergenceRates",
    "divergence_rates",
    "Thresholds",
    "bifurcation_thresholds",
    "NoiseVerdict",
    "NoiseOrigin",
    "noise_origin",
    "deterministic_nodes",
    "deciding_nodes",
    "ran_in_both",
    "group_minimum"
]

NoiseVerdict = Literal["origin", "propagator", "indeterminate", "stable"]


# --------------------------------------------------------------------------- rates


@dataclass(frozen=True)
class DivergenceRates:
    """Trajectory divergence rates over all pairs (QUIVER.md §6; Def. 7-9).

    Attributes:
        epsilon: The value-drift threshold of D_output.
        iter: P(D_iter > 0).
        shape: P(D_shape > 0).
        output: P(D_output > 0): some node distance exceeds eps.
        output_only: P(D_output > 0, D_shape = 0, D_iter = 0): value drift alone.
        struct: P(D_struct > 0): the sets of nodes that ran differ.
    """

    epsilon: float
    iter: Estimate
    shape: Estimate
    output: Estimate
    output_only: Estimate
    struct: Estimate

    @property
    def n_pairs(self) -> int:
        """The pairs every rate is over."""
        return self.iter.n

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: ``d_iter_rate``, ``d_iter_rate_ci``, ``d_iter_rate_n``, ..."""
        return {
            "epsilon": self.epsilon, "n_pairs": self.n_pairs,
            **self.iter.as_dict("d_iter_rate"), **self.shape.as_dict("d_shape_rate"),
            **self.output.as_dict("d_output_rate"), **self.output_only.as_dict("d_output_only_rate"),
            **self.struct.as_dict("d_struct_rate"),
        }


def divergence_rates(table: PairTable, boot: GroupBootstrap, epsilon: float = DEFAULT_EPSILON) -> DivergenceRates:
    """The rates of D_iter > 0, D_shape > 0, D_output > 0, D_output-only, D_struct > 0.

    QUIVER.md §6 (Def. 7-9, A.7): over all pairs, each with its group-bootstrap
    interval. D_output-only = D_output > 0 and D_shape = 0 and D_iter = 0. A strict
    chain with no branches gives D_iter = D_shape = D_struct = 0 exactly, and then
    D_output-only = D_output.
    """
    it = np.asarray(table.d_iter) > 0
    shape = np.asarray(table.d_shape, dtype=bool)
    output = table.d_output(epsilon)
    return DivergenceRates(
        epsilon=epsilon, iter=boot.rate(it), shape=boot.rate(shape), output=boot.rate(output),
        output_only=boot.rate(output & ~shape & ~it), struct=boot.rate(np.asarray(table.d_struct, dtype=bool)),
    )


# --------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class Thresholds:
    """Observational bifurcation thresholds of one node (QUIVER.md §7; Def. 10, A.8).

    Attributes:
        node: v_i.
        epsilon: The threshold of ``bifurcation_source``.
        beta_shape: min d_i over pairs with D_shape > 0 where v_i ran in both traces;
            n = those pairs; value None when there are none.
        beta_iter: Likewise with D_iter > 0.
        bifurcation_source: beta_shape > eps (§7 [engine]): structural divergence
            never happens unless this node drifted; and the node records decisions
            or feeds one that does (see the module docstring).
    """

    node: str
    epsilon: float
    beta_shape: Estimate
    beta_iter: Estimate
    bifurcation_source: bool

    def to_json(self) -> dict[str, Any]:
        """Flat JSON."""
        return {"node": self.node, **self.beta_shape.as_dict("beta_shape"),
                **self.beta_iter.as_dict("beta_iter"), "bifurcation_source": self.bifurcation_source}


def group_minimum(values: np.ndarray, mask: np.ndarray, boot: GroupBootstrap) -> Estimate:
    """The minimum of ``values`` over ``mask``, bootstrapped by group.

    Per-group minima, then per resample the minimum over the groups it draws at least
    once: the same draws as ``boot.statistic`` with a weighted minimum.
    """
    m = np.asarray(mask, dtype=bool)
    n = int(m.sum())
    if n == 0:
        return Estimate.empty()
    per_group = np.full(boot.n_groups, np.inf)
    np.minimum.at(per_group, boot.group[m], values[m])
    draws = np.where(boot.weights > 0, per_group, np.inf).min(axis=1)
    draws[~np.isfinite(draws)] = np.nan
    return Estimate(float(values[m].min()), percentile_interval(draws), n, draws)


def bifurcation_thresholds(table: PairTable, node: str, boot: GroupBootstrap,
                           epsilon: float = DEFAULT_EPSILON, *, can_decide: bool = True) -> Thresholds:
    """Observational beta_shape and beta_iter of ``node`` (QUIVER.md §7; Def. 10, A.8, B.3).

    beta_shape = min d_i over same-input pairs with D_shape > 0 where the node ran in
    both traces: 0 when such a pair has d_i = 0, i.e. structural divergence happens
    without this node drifting. beta_iter likewise with D_iter > 0. The node is a
    bifurcation source when beta_shape > eps (§7 [engine]) and ``can_decide`` (it
    records decisions or feeds a node that does): its own output decides the path
    (pairs where it ran in one trace only say nothing of its output; see the module
    docstring). The interval is the bootstrap of the minimum (one-sided by
    construction).
    """
    d = column(table, node)
    defined = np.isfinite(d) & ran_in_both(table, node)
    beta_shape = group_minimum(d, defined & np.asarray(table.d_shape, dtype=bool), boot)
    beta_iter = group_minimum(d, defined & (np.asarray(table.d_iter) > 0), boot)
    source = can_decide and beta_shape.value is not None and beta_shape.value > epsilon
    return Thresholds(node, epsilon, beta_shape, beta_iter, source)


# --------------------------------------------------------------------------- noise origins


@dataclass(frozen=True)
class NoiseOrigin:
    """Noise floor and noise-origin verdict of one node (QUIVER.md §8; A.9, B.2).

    Attributes:
        node: v_i.
        parents: Its graph parents (self-loops left out).
        epsilon: The drift threshold.
        verdict: ``origin``: d_i > eps in some pair with every parent clean;
            ``propagator``: pairs with every parent clean exist and d_i <= eps in all
            of them, yet d_i > eps elsewhere; ``indeterminate``: d_i > eps somewhere
            but no pair has every parent clean; ``stable``: d_i never exceeds eps.
        noise_floor: D_noise = E[d_i] over the pairs where d_i is defined.
        drift_rate: P(d_i > eps) over those pairs.
        clean_parent_drift_rate: P(d_i > eps | every parent clean): intrinsic drift.
        n_pairs: Pairs with d_i defined.
        n_drift: Of those, pairs with d_i > eps.
        n_clean_parents: Pairs where v_i ran in both traces and every parent is clean.
        n_clean_parents_drift: Of those, pairs with d_i > eps.
        deterministic: The node gave one output per input hash (never an origin).
    """

    node: str
    parents: tuple[str, ...]
    epsilon: float
    verdict: NoiseVerdict
    noise_floor: Estimate
    drift_rate: Estimate
    clean_parent_drift_rate: Estimate
    n_pairs: int
    n_drift: int
    n_clean_parents: int
    n_clean_parents_drift: int
    deterministic: bool = False

    def to_json(self) -> dict[str, Any]:
        """Flat JSON."""
        return {
            "node": self.node, "parents": list(self.parents), "verdict": self.verdict,
            **self.noise_floor.as_dict("d_noise"), **self.drift_rate.as_dict("drift_rate"),
            **self.clean_parent_drift_rate.as_dict("clean_parent_drift_rate"),
            "n_pairs": self.n_pairs, "n_drift": self.n_drift, "n_clean_parents": self.n_clean_parents,
            "n_clean_parents_drift": self.n_clean_parents_drift, "deterministic": self.deterministic,
        }


def _verdict(n_drift: int, n_clean: int, n_clean_drift: int, deterministic: bool) -> NoiseVerdict:
    if n_drift == 0:
        return "stable"
    if n_clean_drift > 0 and not deterministic:
        return "origin"
    return "propagator" if n_clean > 0 or deterministic else "indeterminate"


def ran_in_both(table: PairTable, node: str) -> np.ndarray:
    """(P,) bool: the node ran at least once in each trace of the pair."""
    counts = table.counts[:, table.nodes.index(node), :]
    return np.asarray((counts > 0).all(axis=1), dtype=bool)


def noise_origin(table: PairTable, graph: PipelineGraph, node: str, boot: GroupBootstrap,
                 epsilon: float = DEFAULT_EPSILON, *, deterministic: bool = False) -> NoiseOrigin:
    """The noise floor D_noise(v_i) and whether v_i originates or propagates drift.

    QUIVER.md §8 (A.9, B.2, B.4): D_noise = E[d_i] over same-input pairs. Verdicts, in
    order: ``stable`` (d_i never > eps), ``origin`` (d_i > eps in a pair where the node
    ran in both traces and every parent has d <= eps or NaN; a node without parents
    that drifts is an origin; a ``deterministic`` node never is), ``propagator``
    (all-clean-parent pairs exist and d_i <= eps in every one, or the node is
    deterministic), else ``indeterminate`` (always upstream-dirty: read
    ``drift_rate``). The clean-parent counts are over pairs where the node ran in both
    traces (see the module docstring); the counts behind the verdict are reported.
    """
    d = column(table, node)
    parents = tuple(graph.parents(node))
    defined = np.isfinite(d)
    clean = defined & ran_in_both(table, node)
    for p in parents:
        clean &= ~(np.nan_to_num(column(table, p), nan=0.0) > epsilon)
    drift = defined & (np.nan_to_num(d, nan=0.0) > epsilon)
    n_drift, n_clean, n_clean_drift = int(drift.sum()), int(clean.sum()), int((drift & clean).sum())
    return NoiseOrigin(
        node=node, parents=parents, epsilon=epsilon, verdict=_verdict(n_drift, n_clean, n_clean_drift, deterministic),
        noise_floor=boot.mean(d, defined), drift_rate=boot.rate(drift, defined),
        clean_parent_drift_rate=boot.rate(drift, clean), n_pairs=int(defined.sum()),
        n_drift=n_drift, n_clean_parents=n_clean, n_clean_parents_drift=n_clean_drift,
        deterministic=deterministic,
    )


def deterministic_nodes(traces: Iterable[Trace], graph: PipelineGraph) -> set[str]:
    """Nodes whose output is a function of their inputs in the recorded traces.

    A node is deterministic when at least two of its calls (anywhere in the traces)
    have the same input hash and every such group of calls gave one output, compared
    on the fields that weigh something (observability fields, weight 0, are left out,
    as the node distance leaves them out). Calls without an input hash (the trace's
    input) or with an error are not evidence either way. d = 0 whenever the input
    hashes agree, and some pair of calls shows it.
    """
    outputs: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    calls: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for trace in traces:
        for call in trace.calls:
            if call.input_hash is None or call.error is not None or call.node not in graph.nodes:
                continue
            outputs[call.node][call.input_hash].add(_weighed(call.output, graph.nodes[call.node]))
            calls[call.node][call.input_hash] += 1
    return {
        node for node, by_hash in outputs.items()
        if any(n >= 2 for n in calls[node].values()) and all(len(v) == 1 for v in by_hash.values())
    }


def _weighed(output: Any, spec: NodeSpec) -> str:
    """The output's canonical JSON without its zero-weight fields."""
    if spec.fields is not None and isinstance(output, dict):
        output = {k: v for k, v in output.items() if k not in spec.fields or spec.fields[k].effective_weight > 0}
    return canonical_json(output)


def deciding_nodes(traces: Iterable[Trace], graph: PipelineGraph) -> set[str]:
    """Nodes whose output can decide a path: those that record a decision
    (``quiver.decide``) in some call, and every node with a path to one of them along
    the graph's edges, loop feedback included."""
    found = {c.node for t in traces for c in t.calls if c.decision}
    pending = list(found)
    while pending:
        node = pending.pop()
        for parent in graph.parents(node):
            if parent not in found:
                found.add(parent)
                pending.append(parent)
    return found
