"""Interventional estimates of a perturbation campaign: ``campaign.json``.

A campaign replays recorded traces with one node perturbed and gives one pair row per
replay (``PairResult.to_json(traces=False)`` plus ``input_id`` and ``step``, read as a
:class:`~quiver._interventional.PairRow`). From those rows and the observational
same-input pairs of the baseline corpus this module computes a
:class:`~quiver._interventional.CampaignEstimates` (the typed objects of ``results``):
per perturbation (QUIVER.md §6, §7, §11, §13; the paper's Def. 7-10, §5.3-5.4, B.3,
Tables 3 and 4):

* counts of rows by status and stratum;
* per stratum (effective, no-op) the divergence rates D_iter > 0, D_shape > 0,
  D_output > 0, D_output-only, D_struct > 0 and the mean node distance of every node
  downstream of the target, also conditional on D_shape > 0 (the cascade signature);
* the interventional bifurcation thresholds beta_shape and beta_iter (§7);
* the negative control: the no-op stratum against the observational noise (§13);

and, across perturbations, observational against interventional sigma at every
targetable edge (§11, §13). Every rate and mean is an :class:`~quiver._stats.Estimate`
with the 95% percentile interval of a group bootstrap over ``input_id``.

Choices QUIVER.md leaves open, made here:

* **Which rows count.** Only ``status == "ok"`` rows enter estimates; ``diverged`` and
  ``failed`` rows are counted. ``effective`` and ``noop`` count ok rows of that stratum;
  ok rows without a stratum (no operator) are counted as ``unstratified`` and enter no
  stratum. ``pairs`` counts every row of the perturbation.
* **Resamples.** Each perturbation has one :class:`~quiver._stats.GroupBootstrap`
  over the sorted input ids of its ok rows, seeded with ``seed``; every estimate of the
  perturbation (both strata, every bin, the no-op control) reuses its draws, so a
  difference of two of them is the difference of their draws on shared resamples.
  Perturbations over the same inputs therefore get the same resamples. The
  observational pair table has its own bootstrap over its groups, seeded with a seed
  derived from ``seed`` (``SeedSequence([seed, 1])``), so that a bin rate minus the
  observational rate is a two-sample bootstrap of independent resamples.
* **Downstream nodes** are those reachable from the target along
  ``graph.dag_edges()`` (loop feedback left out, as for paths), in topological order.
  ``graph`` is the one the pairs were formed with (a campaign's
  :class:`~quiver._interventional.CampaignGraph`): it holds the nodes only replays ran
  (a branch only a perturbation takes), so every node a row gives a distance can be
  listed. A node absent from a row's ``d`` counts as None (ran in neither trace).
* **D_output-only** is D_output with D_shape = D_iter = 0, as observationally.
* **Betas** and their control rates: see :mod:`quiver._interventional`. An adaptive
  ladder's steps are its levels (one bin each); its dose-response curves, midpoint and
  onset: see :mod:`quiver._interventional.dose`.
* **Per input.** Per input group, the effective pairs' D_shape rate against the control
  replays' of the same traces, each trace a stratum, tested one-sided and exactly, Holm
  over Tarone's family of the groups at ``alpha`` (:mod:`quiver._interventional.inputs`):
  which inputs a perturbation moved, where an average over inputs would hide it. No
  control replays: none (``per_input`` left out).
* **Negative control.** Per downstream node present in the observational table, the
  one-sided permutation test of §13 against the observational same-input distances *of
  the inputs the no-op pairs came from* (all observational pairs when none of those
  inputs has one): a no-op stratum is often a particular kind of input (follow-ups whose
  context already sufficed), whose noise need not be the corpus average. Labels are
  permuted over pairs (not over input
  groups: pairs of one group are exchangeable under H0 only approximately, which makes
  the test somewhat liberal when groups differ much), statistic = mean(no-op) -
  mean(observational). A permutation
  counts when its statistic is >= the observed one minus 1e-12 (ties by round-off
  count). Seeds: ``default_rng([seed, crc32(perturbation id), crc32(node)])``, so a
  node's p-value does not depend on which other nodes are tested. Nodes without no-op
  or observational distances are reported with ``p_value: null`` and a reason and are
  left out of the Holm family. A node *rejects* when its Holm-adjusted p-value is
  <= alpha.
* **Validation.** Edges are ``graph.edges`` without self-loops (the edges the profile
  estimates sigma on) whose source is some perturbation's target. sigma_int pools the
  effective ok rows of every perturbation at that source; its bootstrap is over their
  input ids. sigma_obs is the profile's ``sigma`` with its ``sigma_ci`` and
  ``sigma_n`` (else ``n``); a profile edge with a sigma but no integer n is refused (an
  estimate is not reported without its n). ``agree`` compares the two intervals as
  ``campaign.json`` writes them and is None when either is missing.
* **Validation against the operating envelope.** A gap between the two sigmas is read
  as confounding only where the intervention moved d_i as far as natural runs do; beyond
  that it is a dormant risk outside the natural operating envelope (the paper, §3 and
  B.1). The *envelope* of an edge i -> j is ``[eps, max d_i]`` over the observational
  same-input pairs sigma_obs is computed from (``d_i > eps``, ``d_j`` defined: the
  profile's own pair table), written with their count ``n_envelope``. The *maximum*,
  not a quantile: a d_i that some natural pair reached lies inside the envelope by
  definition, and "beyond" then claims only what natural runs never showed; a quantile
  would call the top of the observed range "beyond" and move with n_obs. The price is
  that one outlying natural pair widens the envelope; the matched comparison then
  includes interventional pairs in a sparse top of the range, where an edge with a
  threshold can still disagree "inside" (``share_beyond`` and ``n_envelope`` show how
  much rests there). *Matched* pairs are sigma_int's pairs with ``d_i <= max``; their
  mean ratio ``sigma_matched`` has the interval of the same group bootstrap as sigma_int
  (resamples without a matched pair are left out of the percentiles). ``share_beyond``
  is the rate of ``d_i > max`` over sigma_int's pairs, on the same resamples. The
  *verdict*: with at least ``MIN_MATCHED_PAIRS`` (5) matched pairs over at least
  ``MIN_MATCHED_GROUPS`` (2) input groups (one group gives an interval of one point,
  the bootstrap resamples groups), "agree" or "disagree inside the envelope" as the
  matched interval overlaps sigma_obs's or not (None when sigma_obs has no interval);
  with fewer, "beyond the operating envelope" when some pair lies beyond it, else "too
  few interventional pairs". No envelope (the table lacks the source or target, or has
  no pair above eps: the profile was not built from it) leaves the envelope fields and
  the verdict None. The unmatched ``sigma_int`` and ``agree`` are kept as they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._observational import DEFAULT_EPSILON, DivergenceRates, Profile, divergence_rates
from quiver._stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Estimate, GroupBootstrap, PairTable

from .betas import MIN_BIN_PAIRS, QUANTILE_BINS, UPPER_BOUND_PAIRS, beta
from .columns import Columns
from .dose import adaptive_estimates
from .inputs import InputEffects, holm, input_effects
from .negative import negative_control, permutation_test
from .outcomes import outcome_effect
from .results import (
    NOT_APPLIED,
    RATES,
    STRATA,
    CampaignEstimates,
    ControlReplays,
    ObservationalEstimates,
    PerturbationEstimates,
    Rates,
    RowCounts,
    SkippedValidationRow,
    StratumEstimates,
    ValidationRow,
)
from .rows import STATUSES, PairRow

__all__ = [
    "campaign_estimates",
    "downstream_nodes",
    "holm",
    "permutation_test",
    "STATUSES",
    "STRATA",
    "RATES",
    "MIN_BIN_PAIRS",
    "QUANTILE_BINS",
    "UPPER_BOUND_PAIRS",
    "MIN_MATCHED_PAIRS",
    "MIN_MATCHED_GROUPS",
    "VERDICTS",
]


def _as_rows(pairs: Sequence[PairRow | Mapping[str, Any]]) -> list[PairRow]:
    """The pair rows as :class:`PairRow` (mappings read with ``PairRow.from_json``)."""
    return [
        r if isinstance(r, PairRow) else PairRow.from_json(
            r, where=f"pairs[{i}] (perturbation {r.get('perturbation_id')!r}, trace {r.get('trace_id')!r})")
        for i, r in enumerate(pairs)
    ]


def _check_perturbations(perturbations: Sequence[Mapping[str, Any]], graph: PipelineGraph,
                         control_ids: set[str]) -> None:
    """Each perturbation has a unique id, a target in the graph and a declared control."""
    seen: set[str] = set()
    for i, p in enumerate(perturbations):
        for key in ("id", "node"):
            if not p.get(key):
                raise QuiverError(f"perturbations[{i}]: no {key!r}; each perturbation has an id and a target node")
        if p["id"] in seen or p["id"] in control_ids:
            raise QuiverError(f"perturbations[{i}]: id {p['id']!r} is used twice; perturbation ids are unique")
        if p.get("control") is not None and p["control"] not in control_ids:
            raise QuiverError(f"perturbations[{i}] ({p['id']!r}): control {p['control']!r} is not among the controls")
        if p["node"] not in graph.nodes:
            raise QuiverError(
                f"perturbations[{i}] ({p['id']!r}): target node {p['node']!r} is not in the graph; "
                f"its nodes are {', '.join(graph.nodes)}"
            )
        seen.add(p["id"])


def _check_rows(perturbations: Sequence[Mapping[str, Any]], pairs: Sequence[PairRow],
                graph: PipelineGraph, controls: Sequence[Mapping[str, Any]] = ()) -> dict[str, list[PairRow]]:
    """Rows by perturbation (or control) id, after checking what the estimates rely on."""
    control_ids = set()
    for i, c in enumerate(controls):
        if not c.get("id"):
            raise QuiverError(f"controls[{i}]: no 'id'; each control has the id its rows carry as perturbation_id")
        control_ids.add(c["id"])
    _check_perturbations(perturbations, graph, control_ids)
    by_id: dict[str, list[PairRow]] = {p["id"]: [] for p in perturbations}
    for cid in control_ids:
        by_id[cid] = []
    for i, row in enumerate(pairs):
        pid = row.perturbation_id
        if pid not in by_id:
            raise QuiverError(
                f"pairs[{i}] (trace {row.trace_id!r}): perturbation_id {pid!r} is not a perturbation "
                f"of the campaign; its perturbations are {', '.join(map(repr, by_id)) or 'none'}"
            )
        if row.status not in STATUSES:
            raise QuiverError(
                f"pairs[{i}] (perturbation {pid!r}, trace {row.trace_id!r}): status {row.status!r}; "
                f"a pair's status is one of {', '.join(STATUSES)}"
            )
        if row.status == "ok" and row.input_id is None:
            raise QuiverError(
                f"pairs[{i}] (perturbation {pid!r}, trace {row.trace_id!r}): no input_id; an ok pair row "
                "carries its baseline's input_id (the bootstrap resamples input groups)"
            )
        by_id[pid].append(row)
    return by_id


def downstream_nodes(graph: PipelineGraph, node: str) -> list[str]:
    """Nodes reachable from ``node`` along ``graph.dag_edges()``, in topological order,
    and back along the edges of two nodes that call each other: an agent and its tools
    call each other turn after turn (agent -> tool -> agent), so what a tool returned
    reaches the agent's later turns, though at node level the edge closes a cycle. A
    longer cycle is a loop, declared or not, and its feedback edge (composer -> rewriter)
    stays out, as paths do (QUIVER.md §13); so do a 2-cycle inside the declared loop's body."""
    body = set(graph.loop.body) if graph.loop is not None else set()
    dag = set(graph.dag_edges())
    edges = set(graph.edges)
    children: dict[str, list[str]] = {}
    for a, b in graph.edges:
        mutual = (b, a) in edges and not (a in body and b in body)
        if a != b and ((a, b) in dag or mutual):
            children.setdefault(a, []).append(b)
    seen: set[str] = set()
    stack = [node]
    while stack:
        for kid in children.get(stack.pop(), []):
            if kid not in seen:
                seen.add(kid)
                stack.append(kid)
    return [n for n in graph.topological_order() if n in seen and n != node]


def _ok(rows: Sequence[PairRow]) -> list[PairRow]:
    return [r for r in rows if r.status == "ok"]


def _counts(rows: Sequence[PairRow]) -> RowCounts:
    ok = _ok(rows)
    return RowCounts(
        pairs=len(rows),
        effective=sum(r.stratum == "effective" for r in ok),
        noop=sum(r.stratum == "noop" for r in ok),
        unstratified=sum(r.stratum not in (*STRATA, NOT_APPLIED) for r in ok),
        diverged=sum(r.status == "diverged" for r in rows),
        failed=sum(r.status == "failed" for r in rows),
        not_applied=sum(r.stratum == NOT_APPLIED for r in ok),
    )


# --------------------------------------------------------------------------- strata


def _rates(cols: Columns, mask: np.ndarray, boot: GroupBootstrap) -> Rates:
    only = cols.d_output & ~cols.d_shape & ~cols.d_iter
    return Rates(d_iter=boot.rate(cols.d_iter, mask), d_shape=boot.rate(cols.d_shape, mask),
                 d_output=boot.rate(cols.d_output, mask), d_output_only=boot.rate(only, mask),
                 d_struct=boot.rate(cols.d_struct, mask))


def _node_means(d: Mapping[str, np.ndarray], nodes: Sequence[str], mask: np.ndarray,
                boot: GroupBootstrap) -> dict[str, Estimate]:
    """Per node, the mean of its distances over ``mask`` (NaN distances left out)."""
    return {node: boot.mean(d[node], mask & np.isfinite(d[node])) for node in nodes}


def _stratum(cols: Columns, name: str, nodes: Sequence[str], boot: GroupBootstrap) -> StratumEstimates:
    mask = cols.stratum == name
    return StratumEstimates(
        n=int(mask.sum()), rates=_rates(cols, mask, boot),
        magnitude=boot.mean(cols.magnitude, mask & np.isfinite(cols.magnitude)),
        mean_d=_node_means(cols.d, nodes, mask, boot),
        mean_d_given_shape=_node_means(cols.d, nodes, mask & cols.d_shape, boot),
    )


def _observational(table: PairTable, boot: GroupBootstrap, rates: DivergenceRates) -> ObservationalEstimates:
    d = {n: table.col(n) for n in table.nodes}
    return ObservationalEstimates(
        n=table.n_pairs,
        rates=Rates(d_iter=rates.iter, d_shape=rates.shape, d_output=rates.output, d_output_only=rates.output_only,
                    d_struct=rates.struct),
        mean_d=_node_means(d, table.nodes, np.ones(table.n_pairs, dtype=bool), boot),
    )


# --------------------------------------------------------------------------- validation

MIN_MATCHED_PAIRS = 5
"""Matched pairs a verdict inside the envelope needs (module docstring, "Validation against the
operating envelope")."""
MIN_MATCHED_GROUPS = 2
"""Input groups those pairs must come from: one group's bootstrap interval is a point."""
AGREE = "agree"
DISAGREE_INSIDE = "disagree inside the envelope"
BEYOND = "beyond the operating envelope"
TOO_FEW = "too few interventional pairs"
VERDICTS = (AGREE, DISAGREE_INSIDE, BEYOND, TOO_FEW)
"""The verdicts of a validation row (None: it cannot be decided)."""


def _profile_edges(profile: Mapping[str, Any] | Profile | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    data = profile.data if isinstance(profile, Profile) else profile
    if data is None:
        return {}
    return {(str(r.get("source")), str(r.get("target"))): r for r in data.get("edges") or [] if isinstance(r, Mapping)}


def _overlap(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool | None:
    if not a or not b or None in a or None in b:
        return None
    return bool(a[0] <= b[1] and b[0] <= a[1])


def _profile_sigma(prof: Mapping[str, Any], edge: str) -> Estimate:
    """The profile's sigma of an edge, with its interval and n (``sigma_n``, else ``n``)."""
    ci, n = prof.get("sigma_ci"), prof.get("sigma_n", prof.get("n"))
    if not isinstance(n, int) or (ci is not None and (not isinstance(ci, Sequence) or len(ci) != 2)):
        raise QuiverError(
            f"profile: edge {edge}: sigma {prof.get('sigma')!r} comes with sigma_ci {ci!r} and n {n!r}; a profile "
            "edge with a sigma has sigma_ci [lo, hi] (or null) and an integer sigma_n"
        )
    return Estimate(prof.get("sigma"), None if ci is None else (ci[0], ci[1]), n)


def _envelope(table: PairTable, a: str, b: str, epsilon: float) -> tuple[tuple[float, float], int] | None:
    """The natural operating envelope of d_a: (eps, max d_a) over the observational pairs
    sigma_obs rests on (d_a > eps, d_b defined), with their count; None without any."""
    if a not in table.nodes or b not in table.nodes:
        return None
    d_a, d_b = table.col(a), table.col(b)
    above = np.isfinite(d_a) & np.isfinite(d_b) & (np.nan_to_num(d_a, nan=0.0) > epsilon)
    if not above.any():
        return None
    return (epsilon, float(d_a[above].max())), int(above.sum())


def _verdict(matched: Estimate, groups: int, beyond: int, agree: bool | None) -> str | None:
    """The verdict of a row with an envelope (see the module docstring, "Validation")."""
    if matched.n < MIN_MATCHED_PAIRS or groups < MIN_MATCHED_GROUPS:
        return BEYOND if beyond else TOO_FEW
    if agree is None:
        return None
    return AGREE if agree else DISAGREE_INSIDE


def _matched(row: ValidationRow, cols: Columns, mask: np.ndarray, ratio: np.ndarray, boot: GroupBootstrap,
             table: PairTable, epsilon: float) -> ValidationRow:
    """``row`` with its envelope, the sigma of its matched pairs, the share beyond and the verdict."""
    found = _envelope(table, row.source, row.target, epsilon)
    if found is None:
        return row
    (lo, hi), n_envelope = found
    d_a = np.nan_to_num(cols.d[row.source], nan=0.0)
    inside, beyond = mask & (d_a <= hi), mask & (d_a > hi)
    matched = boot.mean(ratio, inside)
    groups = len(set(cols.group[inside].tolist()))
    agree = _overlap(row.sigma_obs.ci, matched.as_dict("s")["s_ci"])
    return replace(row, envelope=(lo, hi), n_envelope=n_envelope, sigma_matched=matched, groups_matched=groups,
                   share_beyond=boot.rate(beyond, mask),
                   verdict=_verdict(matched, groups, int(beyond.sum()), agree))


def _validation(perturbations: Sequence[Mapping[str, Any]], by_id: Mapping[str, list[PairRow]],
                profile: Mapping[str, Any] | Profile | None, graph: PipelineGraph, table: PairTable, *,
                epsilon: float, resamples: int, seed: int) -> tuple[list[ValidationRow], list[SkippedValidationRow]]:
    """Observational against interventional sigma at targetable edges, unmatched and
    matched to the natural operating envelope of the source (§11, §13)."""
    obs = _profile_edges(profile)
    sources: dict[str, list[str]] = {}
    for p in perturbations:
        sources.setdefault(p["node"], []).append(p["id"])
    rows, skipped = [], []
    for a, b in graph.edges:
        if a == b or a not in sources:
            continue
        ids = tuple(sources[a])
        prof = obs.get((a, b))
        if prof is None or prof.get("sigma") is None:
            why = ("no profile given" if profile is None else "the profile has no row for this edge"
                   if prof is None else "the observational sigma is undefined (n = 0)")
            skipped.append(SkippedValidationRow(a, b, ids, why))
            continue
        ok = [r for pid in ids for r in by_id[pid] if r.status == "ok" and r.stratum == "effective"]
        cols = Columns.of(ok, [a, b])
        mask = np.isfinite(cols.d[b]) & (np.nan_to_num(cols.d[a], nan=0.0) > epsilon)
        if not mask.any():
            why = f"no effective ok pair with d[{a}] > epsilon and d[{b}] defined"
            skipped.append(SkippedValidationRow(a, b, ids, why))
            continue
        ratio = np.divide(cols.d[b], cols.d[a], out=np.zeros_like(cols.d[b]), where=mask)
        boot = cols.bootstrap(resamples, seed)
        sigma = boot.mean(ratio, mask)
        sigma_obs = _profile_sigma(prof, f"{a} -> {b}")
        row = ValidationRow(a, b, ids, sigma_obs, sigma,
                            agree=_overlap(prof.get("sigma_ci"), sigma.as_dict("s")["s_ci"]))
        rows.append(_matched(row, cols, mask, ratio, boot, table, epsilon))
    return rows, skipped


# --------------------------------------------------------------------------- campaign


def _control_replays(cid: str | None, rows: Sequence[PairRow], nodes: Sequence[str], *,
                     resamples: int, seed: int) -> tuple[Columns | None, ControlReplays | None]:
    """The ok control rows as columns, and their summary: counts and event rates."""
    if cid is None:
        return None, None
    ok = _ok(rows)
    cols = Columns.of(ok, nodes)
    boot = cols.bootstrap(resamples, seed)
    every = np.ones(len(ok), dtype=bool)
    return cols, ControlReplays(id=cid, pairs=len(rows), n=len(ok), traces=len(set(cols.trace)),
                                rates=_rates(cols, every, boot), mean_d=_node_means(cols.d, nodes, every, boot))


def _per_input(rows: Sequence[PairRow], control_rows: Sequence[PairRow], alpha: float) -> InputEffects | None:
    """Per input group, the effective pairs' D_shape against the control replays' of the
    same traces (module docstring, "Per input"); None without control replays."""
    units = [r for r in _ok(rows) if r.stratum == "effective"] + _ok(control_rows)
    n_effective = len(units) - len(_ok(control_rows))
    if not n_effective or n_effective == len(units):
        return None
    changed = np.arange(len(units)) < n_effective
    return input_effects([str(r.input_id) for r in units], [str(r.trace_id) for r in units], changed,
                         np.array([r.d_shape for r in units], dtype=bool), alpha=alpha, event_name="D_shape")


def _perturbation(p: Mapping[str, Any], rows: Sequence[PairRow], graph: PipelineGraph,
                  table: PairTable, obs_rates: Mapping[str, Estimate], *, resamples: int, seed: int,
                  alpha: float, permutations: int, control_rows: Sequence[PairRow] = (),
                  margin: float = 0.05) -> PerturbationEstimates:
    nodes = downstream_nodes(graph, p["node"])
    cols = Columns.of(_ok(rows), nodes)
    boot = cols.bootstrap(resamples, seed)
    ladder = bool(p.get("ladder"))
    control, control_summary = _control_replays(p.get("control"), control_rows, nodes, resamples=resamples,
                                                seed=seed)
    return PerturbationEstimates(
        id=p["id"], node=p["node"], op=p.get("op"), params=p.get("params"), ladder=p.get("ladder"),
        counts=_counts(rows), groups=len(cols.groups), downstream=tuple(nodes),
        strata={s: _stratum(cols, s, nodes, boot) for s in STRATA},
        control_replays=control_summary,
        negative_control=negative_control(p["id"], cols, nodes, table, permutations=permutations,
                                           alpha=alpha, seed=seed),
        beta_shape=beta(cols, boot, "D_shape", ladder, obs_rates["D_shape"], table, control),
        beta_iter=beta(cols, boot, "D_iter", ladder, obs_rates["D_iter"], table, control),
        adaptive=adaptive_estimates(p["adaptive"], cols, boot, table, control) if p.get("adaptive") else None,
        per_input=_per_input(rows, control_rows, alpha),
        outcome=outcome_effect(rows, control_rows, resamples=resamples, seed=seed, alpha=alpha, margin=margin),
    )


def campaign_estimates(
    perturbations: Sequence[Mapping[str, Any]],
    pairs: Sequence[PairRow | Mapping[str, Any]],
    observational: PairTable,
    profile: Mapping[str, Any] | Profile | None,
    graph: PipelineGraph,
    *,
    epsilon: float = DEFAULT_EPSILON,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = 0.05,
    permutations: int = 2000,
    controls: Sequence[Mapping[str, Any]] = (),
    equivalence_margin: float = 0.05,
) -> CampaignEstimates:
    """The interventional estimates of a perturbation campaign (``campaign.json``).

    QUIVER.md §6-§7 and §11-§13 (the paper's Def. 7-10, §5.3-5.4, B.3): per
    perturbation the row counts, the strata's divergence rates and downstream mean
    distances (Table 3), the negative control and beta_shape / beta_iter; across
    perturbations, observational against interventional sigma at targetable edges.
    The choices behind each number are in the module docstring.

    Args:
        perturbations: ``{"id", "node", "op", "params", "ladder"}`` each; an adaptive
            ladder's also ``"adaptive": {"settings", "levels", "rounds"}`` (its dose-response
            curves, :func:`~quiver._interventional.adaptive_estimates`).
        pairs: Pair rows of every perturbation, as :class:`PairRow` or as mappings
            (``PairResult.to_json(traces=False)`` plus ``input_id`` and ``step``, read
            with ``PairRow.from_json``).
        observational: Same-input pairs of the baseline corpus.
        profile: ``profile.json`` of that corpus (or the :class:`Profile`), for the
            observational sigmas; None leaves validation empty.
        graph: The pipeline graph (which nodes lie downstream of a target): the one
            the pairs were formed with, nodes only replays ran included.
        epsilon: The drift threshold (validation's d_source > eps).
        resamples: Bootstrap resamples of input groups.
        seed: Seed of the resamples and permutations.
        alpha: Level of the negative control after Holm correction.
        permutations: Label permutations per negative-control test.
        controls: The campaign's control replays, ``{"id", "node", ...}`` each; their rows
            carry the control's id as ``perturbation_id``, and a perturbation names
            its control under ``"control"``.
        equivalence_margin: The margin inside which a difference of rates counts as
            none (written for the findings).

    Returns:
        The estimates; ``json.dumps(result.to_json(), indent=2)`` is ``campaign.json``.

    Raises:
        QuiverError: A perturbation without id or node, a target not in the graph,
            a row of an unknown perturbation, an unknown status, an ok row without
            input_id, a profile edge with a sigma but no integer n; a mapping that
            is not a pair row (:class:`CampaignFormatError`).
    """
    for name, value, low in (("resamples", resamples, 1), ("permutations", permutations, 1)):
        if not isinstance(value, int) or value < low:
            raise QuiverError(f"campaign_estimates: {name} must be an int >= {low}; got {value!r}")
    if not 0 < alpha < 1:
        raise QuiverError(f"campaign_estimates: alpha must lie in (0, 1); got {alpha!r}")
    by_id = _check_rows(perturbations, _as_rows(pairs), graph, controls)
    obs_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
    obs_boot = GroupBootstrap(observational.group, len(observational.groups), resamples=resamples, seed=obs_seed)
    rates = divergence_rates(observational, obs_boot, epsilon)
    obs_rates = {"D_shape": rates.shape, "D_iter": rates.iter}
    validation, skipped = _validation(perturbations, by_id, profile, graph, observational, epsilon=epsilon,
                                      resamples=resamples, seed=seed)
    return CampaignEstimates(
        epsilon=epsilon, alpha=alpha, resamples=resamples, seed=seed, permutations=permutations, pairs=len(pairs),
        observational=_observational(observational, obs_boot, rates),
        perturbations=tuple(
            _perturbation(p, by_id[p["id"]], graph, observational, obs_rates, resamples=resamples, seed=seed,
                          alpha=alpha, permutations=permutations,
                          control_rows=by_id[p["control"]] if p.get("control") else (), margin=equivalence_margin)
            for p in perturbations
        ),
        validation=tuple(validation),
        validation_skipped=tuple(skipped),
        controls=tuple(dict(c) for c in controls),
        equivalence_margin=equivalence_margin,
        loop=tuple(graph.loop.body) if graph.loop is not None else (),
    )
