"""Interventional estimates of a perturbation campaign: ``campaign.json``.

A campaign replays recorded traces with one node perturbed and gives one pair row per
replay (``PairResult.to_json(traces=False)`` plus ``input_id`` and ``step``). From
those rows and the observational same-input pairs of the baseline corpus this module
computes, per perturbation (QUIVER.md §6, §7, §11, §13; the paper's Def. 7-10, §5.3-5.4,
B.3, Tables 3 and 4):

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
  A node absent from a row's ``d`` counts as None (ran in neither trace).
* **D_output-only** is D_output with D_shape = D_iter = 0, as observationally.
* **Betas** and their control rates: see :mod:`quiver._interventional`.
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
  input ids. ``agree`` is None when either interval is missing.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from quiver._observational import Profile
from quiver._observational import DivergenceRates, divergence_rates
from quiver._errors import QuiverError
from quiver._stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Estimate, GroupBootstrap, rounded
from quiver._graph import PipelineGraph
from quiver._stats import PairTable
from quiver._observational import DEFAULT_EPSILON
from .betas import MIN_BIN_PAIRS, QUANTILE_BINS, UPPER_BOUND_PAIRS, beta
from .columns import TIE, Columns

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
]

STATUSES = ("ok", "diverged", "failed")
"""Pair row statuses; only ``ok`` rows enter estimates."""
STRATA = ("effective", "noop")
"""The strata of §11/§13."""
RATES = ("D_iter", "D_shape", "D_output", "D_output_only", "D_struct")
"""The divergence rates reported per stratum (QUIVER.md §6)."""


def _check_rows(perturbations: Sequence[Mapping[str, Any]], pairs: Sequence[Mapping[str, Any]],
                graph: PipelineGraph, controls: Sequence[Mapping[str, Any]] = ()) -> dict[str, list[Mapping[str, Any]]]:
    """Rows by perturbation (or control) id, after checking what the estimates rely on."""
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    control_ids = set()
    for i, c in enumerate(controls):
        if not c.get("id"):
            raise QuiverError(f"controls[{i}]: no 'id'; each control has the id its rows carry as perturbation_id")
        control_ids.add(c["id"])
    for i, p in enumerate(perturbations):
        for key in ("id", "node"):
            if not p.get(key):
                raise QuiverError(f"perturbations[{i}]: no {key!r}; each perturbation has an id and a target node")
        if p["id"] in by_id or p["id"] in control_ids:
            raise QuiverError(f"perturbations[{i}]: id {p['id']!r} is used twice; perturbation ids are unique")
        if p.get("control") is not None and p["control"] not in control_ids:
            raise QuiverError(f"perturbations[{i}] ({p['id']!r}): control {p['control']!r} is not among the controls")
        if p["node"] not in graph.nodes:
            raise QuiverError(
                f"perturbations[{i}] ({p['id']!r}): target node {p['node']!r} is not in the graph; "
                f"its nodes are {', '.join(graph.nodes)}"
            )
        by_id[p["id"]] = []
    for cid in control_ids:
        by_id[cid] = []
    for i, row in enumerate(pairs):
        pid = row.get("perturbation_id")
        if pid not in by_id:
            raise QuiverError(
                f"pairs[{i}] (trace {row.get('trace_id')!r}): perturbation_id {pid!r} is not a perturbation "
                f"of the campaign; its perturbations are {', '.join(map(repr, by_id)) or 'none'}"
            )
        status = row.get("status")
        if status not in STATUSES:
            raise QuiverError(
                f"pairs[{i}] (perturbation {pid!r}, trace {row.get('trace_id')!r}): status {status!r}; "
                f"a pair's status is one of {', '.join(STATUSES)}"
            )
        if status == "ok" and row.get("input_id") is None:
            raise QuiverError(
                f"pairs[{i}] (perturbation {pid!r}, trace {row.get('trace_id')!r}): no input_id; an ok pair row "
                "carries its baseline's input_id (the bootstrap resamples input groups)"
            )
        by_id[pid].append(row)
    return by_id


def downstream_nodes(graph: PipelineGraph, node: str) -> list[str]:
    """Nodes reachable from ``node`` along ``graph.dag_edges()``, in topological order."""
    children: dict[str, list[str]] = {}
    for a, b in graph.dag_edges():
        children.setdefault(a, []).append(b)
    seen: set[str] = set()
    stack = [node]
    while stack:
        for kid in children.get(stack.pop(), []):
            if kid not in seen:
                seen.add(kid)
                stack.append(kid)
    return [n for n in graph.topological_order() if n in seen and n != node]


def _counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    ok = [r for r in rows if r.get("status") == "ok"]
    return {
        "pairs": len(rows),
        "effective": sum(r.get("stratum") == "effective" for r in ok),
        "noop": sum(r.get("stratum") == "noop" for r in ok),
        "unstratified": sum(r.get("stratum") not in STRATA for r in ok),
        "diverged": sum(r.get("status") == "diverged" for r in rows),
        "failed": sum(r.get("status") == "failed" for r in rows),
    }


# --------------------------------------------------------------------------- strata


def _rate_estimates(cols: Columns, mask: np.ndarray, boot: GroupBootstrap) -> dict[str, Estimate]:
    only = cols.d_output & ~cols.d_shape & ~cols.d_iter
    events = {"D_iter": cols.d_iter, "D_shape": cols.d_shape, "D_output": cols.d_output,
              "D_output_only": only, "D_struct": cols.d_struct}
    return {name: boot.rate(events[name], mask) for name in RATES}


def _node_means(d: Mapping[str, np.ndarray], nodes: Sequence[str], mask: np.ndarray,
                boot: GroupBootstrap, prefix: str) -> dict[str, Any]:
    """``{prefix: {node: v}, prefix_ci: {node: [lo, hi]}, prefix_n: {node: n}}``."""
    out: dict[str, dict[str, Any]] = {prefix: {}, f"{prefix}_ci": {}, f"{prefix}_n": {}}
    for node in nodes:
        est = boot.mean(d[node], mask & np.isfinite(d[node])).as_dict("x")
        out[prefix][node], out[f"{prefix}_ci"][node], out[f"{prefix}_n"][node] = est["x"], est["x_ci"], est["x_n"]
    return out


def _stratum(cols: Columns, name: str, nodes: Sequence[str], boot: GroupBootstrap) -> dict[str, Any]:
    mask = cols.stratum == name
    out: dict[str, Any] = {"n": int(mask.sum())}
    for rate, est in _rate_estimates(cols, mask, boot).items():
        out.update(est.as_dict(rate))
    out.update(boot.mean(cols.magnitude, mask & np.isfinite(cols.magnitude)).as_dict("magnitude"))
    out.update(_node_means(cols.d, nodes, mask, boot, "mean_d"))
    out.update(_node_means(cols.d, nodes, mask & cols.d_shape, boot, "mean_d_given_shape"))
    return out


def _observational(table: PairTable, boot: GroupBootstrap, rates: DivergenceRates) -> dict[str, Any]:
    out: dict[str, Any] = {"n": table.n_pairs}
    for name, est in zip(RATES, (rates.iter, rates.shape, rates.output, rates.output_only, rates.struct)):
        out.update(est.as_dict(name))
    d = {n: table.col(n) for n in table.nodes}
    out.update(_node_means(d, table.nodes, np.ones(table.n_pairs, dtype=bool), boot, "mean_d"))
    return out


# --------------------------------------------------------------------------- negative control


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


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the order given.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of
    min(1, (m - j + 1) p_(j)). Rejecting where adjusted <= alpha is Holm's procedure.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def _negative_control(pid: str, cols: Columns, nodes: Sequence[str], table: PairTable, *,
                      permutations: int, alpha: float, seed: int) -> dict[str, Any]:
    """The no-op stratum against the observational noise, per downstream node (§13)."""
    noop = cols.stratum == "noop"
    if not noop.any():
        return {"passed": None, "reason": "no no-op pairs: the stratum that serves as negative control is empty",
                "statistic": None, "p_value": None, "rejected": [], "nodes": {}}
    rows: dict[str, dict[str, Any]] = {}
    # the same inputs on both sides: observational pairs of the inputs the no-op pairs
    # came from (a no-op stratum is often a particular kind of input, e.g. follow-ups
    # whose context already sufficed, whose noise differs from the corpus average)
    noop_inputs = {cols.groups[g] for g in np.unique(cols.group[noop])}
    same_inputs = np.array([table.groups[g] in noop_inputs for g in table.group], dtype=bool)
    if not same_inputs.any():
        same_inputs = np.ones(table.n_pairs, dtype=bool)
    for node in nodes:
        x = cols.d[node][noop]
        x = x[np.isfinite(x)]
        y = table.col(node)[same_inputs] if node in table.nodes else np.zeros(0)
        y = y[np.isfinite(y)]
        row: dict[str, Any] = {"statistic": None, "p_value": None, "p_holm": None, "n_noop": int(x.size),
                               "n_obs": int(y.size), "mean_noop": rounded(float(x.mean())) if x.size else None,
                               "mean_obs": rounded(float(y.mean())) if y.size else None, "rejects": None}
        if node not in table.nodes:
            row["reason"] = "not in the observational pair table"
        elif x.size == 0 or y.size == 0:
            row["reason"] = "no no-op distances" if x.size == 0 else "no observational distances"
        else:
            rng = np.random.default_rng([seed, zlib.crc32(pid.encode()), zlib.crc32(node.encode())])
            stat, p = permutation_test(x, y, permutations, rng)
            row["statistic"], row["p_value"] = rounded(stat), p
        rows[node] = row
    tested = [n for n, r in rows.items() if r["p_value"] is not None]
    if not tested:
        return {"passed": None, "reason": "no downstream node has both no-op and observational distances",
                "statistic": None, "p_value": None, "rejected": [], "nodes": rows}
    for node, adj in zip(tested, holm([rows[n]["p_value"] for n in tested])):
        rows[node]["p_holm"] = rounded(adj)
        rows[node]["p_value"] = rounded(rows[node]["p_value"])
        rows[node]["rejects"] = adj <= alpha
    rejected = [n for n in tested if rows[n]["rejects"]]
    return {
        "passed": not rejected, "alpha": alpha, "permutations": permutations,
        "statistic": max(rows[n]["statistic"] for n in tested),
        "p_value": min(rows[n]["p_holm"] for n in tested), "rejected": rejected, "nodes": rows,
    }


# --------------------------------------------------------------------------- validation


def _profile_edges(profile: Mapping[str, Any] | Profile | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    data = profile.data if isinstance(profile, Profile) else profile
    if data is None:
        return {}
    return {(str(r.get("source")), str(r.get("target"))): r for r in data.get("edges") or [] if isinstance(r, Mapping)}


def _overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> bool | None:
    if not a or not b or None in a or None in b:
        return None
    return bool(a[0] <= b[1] and b[0] <= a[1])


def _validation(perturbations: Sequence[Mapping[str, Any]], by_id: Mapping[str, list[Mapping[str, Any]]],
                profile: Mapping[str, Any] | Profile | None, graph: PipelineGraph, *, epsilon: float,
                resamples: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Observational against interventional sigma at targetable edges (§11, §13)."""
    obs = _profile_edges(profile)
    sources: dict[str, list[str]] = {}
    for p in perturbations:
        sources.setdefault(p["node"], []).append(p["id"])
    rows, skipped = [], []
    for a, b in graph.edges:
        if a == b or a not in sources:
            continue
        edge = {"source": a, "target": b, "perturbations": sources[a]}
        prof = obs.get((a, b))
        if prof is None or prof.get("sigma") is None:
            why = ("no profile given" if profile is None else "the profile has no row for this edge"
                   if prof is None else "the observational sigma is undefined (n = 0)")
            skipped.append({**edge, "reason": why})
            continue
        ok = [r for pid in sources[a] for r in by_id[pid]
              if r.get("status") == "ok" and r.get("stratum") == "effective"]
        cols = Columns.of(ok, [a, b])
        mask = np.isfinite(cols.d[b]) & (np.nan_to_num(cols.d[a], nan=0.0) > epsilon)
        if not mask.any():
            skipped.append({**edge, "reason": f"no effective ok pair with d[{a}] > epsilon and d[{b}] defined"})
            continue
        ratio = np.divide(cols.d[b], cols.d[a], out=np.zeros_like(cols.d[b]), where=mask)
        sigma = cols.bootstrap(resamples, seed).mean(ratio, mask)
        sigma_int = sigma.as_dict("sigma_int")
        rows.append({
            **edge, "sigma_obs": prof.get("sigma"), "sigma_obs_ci": prof.get("sigma_ci"),
            "n_obs": prof.get("sigma_n", prof.get("n")), "sigma_int": sigma_int["sigma_int"],
            "sigma_int_ci": sigma_int["sigma_int_ci"], "n_int": sigma.n,
            "agree": _overlap(prof.get("sigma_ci"), sigma_int["sigma_int_ci"]),
        })
    return rows, skipped


# --------------------------------------------------------------------------- campaign


def _control_replays(cid: str | None, rows: Sequence[Mapping[str, Any]], nodes: Sequence[str], *,
                     resamples: int, seed: int) -> tuple[Columns | None, dict[str, Any] | None]:
    """The ok control rows as columns, and their summary: counts and event rates."""
    if cid is None:
        return None, None
    ok = [r for r in rows if r.get("status") == "ok"]
    cols = Columns.of(ok, nodes)
    boot = cols.bootstrap(resamples, seed)
    out: dict[str, Any] = {"id": cid, "pairs": len(rows), "n": len(ok), "traces": len(set(cols.trace))}
    for rate, est in _rate_estimates(cols, np.ones(len(ok), dtype=bool), boot).items():
        out.update(est.as_dict(rate))
    out.update(_node_means(cols.d, nodes, np.ones(len(ok), dtype=bool), boot, "mean_d"))
    return cols, out


def _perturbation(p: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], graph: PipelineGraph,
                  table: PairTable, obs_rates: Mapping[str, Estimate], *, resamples: int, seed: int,
                  alpha: float, permutations: int, control_rows: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    nodes = downstream_nodes(graph, p["node"])
    cols = Columns.of([r for r in rows if r.get("status") == "ok"], nodes)
    boot = cols.bootstrap(resamples, seed)
    ladder = bool(p.get("ladder"))
    control, control_summary = _control_replays(p.get("control"), control_rows, nodes, resamples=resamples,
                                                seed=seed)
    return {
        "id": p["id"], "node": p["node"], "op": p.get("op"), "params": p.get("params"),
        "ladder": p.get("ladder"), **_counts(rows), "groups": len(cols.groups), "downstream": nodes,
        "strata": {s: _stratum(cols, s, nodes, boot) for s in STRATA},
        "control_replays": control_summary,
        "negative_control": _negative_control(p["id"], cols, nodes, table, permutations=permutations,
                                              alpha=alpha, seed=seed),
        "beta_shape": beta(cols, boot, "D_shape", ladder, obs_rates["D_shape"], table, control),
        "beta_iter": beta(cols, boot, "D_iter", ladder, obs_rates["D_iter"], table, control),
    }


def campaign_estimates(
    perturbations: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, Any]],
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
) -> dict[str, Any]:
    """The interventional estimates of a perturbation campaign (``campaign.json``).

    QUIVER.md §6-§7 and §11-§13 (the paper's Def. 7-10, §5.3-5.4, B.3): per
    perturbation the row counts, the strata's divergence rates and downstream mean
    distances (Table 3), the negative control and beta_shape / beta_iter; across
    perturbations, observational against interventional sigma at targetable edges.
    The choices behind each number are in the module docstring.

    Args:
        perturbations: ``{"id", "node", "op", "params", "ladder"}`` each.
        pairs: Pair rows of every perturbation (``PairResult.to_json(traces=False)``
            plus ``input_id`` and ``step``).
        observational: Same-input pairs of the baseline corpus.
        profile: ``profile.json`` of that corpus (or the :class:`Profile`), for the
            observational sigmas; None leaves validation empty.
        graph: The pipeline graph (which nodes lie downstream of a target).
        epsilon: The drift threshold (validation's d_source > eps).
        resamples: Bootstrap resamples of input groups.
        seed: Seed of the resamples and permutations.
        alpha: Level of the negative control after Holm correction.
        permutations: Label permutations per negative-control test.
        controls: The campaign's control replays, ``{"id", "node", ...}`` each; their rows
            carry the control's id as ``perturbation_id``, and a perturbation names
            its control under ``"control"``.

    Raises:
        QuiverError: A perturbation without id or node, a target not in the graph,
            a row of an unknown perturbation, an unknown status, an ok row without
            input_id.
    """
    for name, value, low in (("resamples", resamples, 1), ("permutations", permutations, 1)):
        if not isinstance(value, int) or value < low:
            raise QuiverError(f"campaign_estimates: {name} must be an int >= {low}; got {value!r}")
    if not 0 < alpha < 1:
        raise QuiverError(f"campaign_estimates: alpha must lie in (0, 1); got {alpha!r}")
    by_id = _check_rows(perturbations, pairs, graph, controls)
    obs_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
    obs_boot = GroupBootstrap(observational.group, len(observational.groups), resamples=resamples, seed=obs_seed)
    rates = divergence_rates(observational, obs_boot, epsilon)
    obs_rates = {"D_shape": rates.shape, "D_iter": rates.iter}
    validation, skipped = _validation(perturbations, by_id, profile, graph, epsilon=epsilon,
                                      resamples=resamples, seed=seed)
    return {
        "epsilon": epsilon, "alpha": alpha, "resamples": resamples, "seed": seed, "permutations": permutations,
        "pairs": len(pairs),
        "observational": _observational(observational, obs_boot, rates),
        "perturbations": [
            _perturbation(p, by_id[p["id"]], graph, observational, obs_rates, resamples=resamples, seed=seed,
                          alpha=alpha, permutations=permutations,
                          control_rows=by_id[p["control"]] if p.get("control") else ())
            for p in perturbations
        ],
        "validation": validation,
        "validation_skipped": skipped,
        "controls": [dict(c) for c in controls],
    }
