"""The statistics and the verdict of ``quiver gate`` (QUIVER.md §9, the paper's
Principle 2 protocol): from the pairs of the two arms of replays (the candidate template,
and the current one: the changed node's own noise floor), what moved, whether the
change crosses a bifurcation threshold, what must be re-evaluated, and which inputs
moved. The replays themselves are run by :mod:`quiver.experiments._gate`.

4. **Measures**, from each replay's pair with its recorded baseline: d_i, the node
   distance of the changed node (and each of its fields' distances, which show what
   the change moved, e.g. only an observability field, whose role weight is 0); the
   D_shape and D_iter > 0 indicators; the distance of every downstream node. Per arm
   the mean (rate) over probes with the 95% interval of a
   bootstrap over probe inputs; and candidate minus current, the difference of the
   means over the same resamples (paired replay by replay when both arms measured every
   slot; a node only some replays reach is measured in different slots by each arm).
   **Per input** (:mod:`quiver._interventional.inputs`): for each probed input, the
   replays whose path changed (D_shape or D_iter > 0) in each arm, tested candidate
   against current on the same probes (the exact one-sided test, stratified by probe),
   Holm over Tarone's family of the inputs.
5. **Verdict** ``fail`` when any of these tests rejects; the familywise level alpha
   (``gate.familywise``, 0.05 by default) bounds the chance that a candidate that changes
   nothing fails, by a Bonferroni split (the union bound: the false-fail rate is at most
   the sum of the parts' levels, whatever their dependence):
   * **the average level, alpha / 2**, shared by three one-sided tests at alpha / 6 each
     (the lower end of the two-sided 1 - alpha / 3 percentile interval of the
     difference's bootstrap draws above 0; a level as nominal as the percentile
     bootstrap over probe inputs is):
     - the D_shape rate rises over the current template's;
     - the D_iter rate rises;
     - d_i beyond beta_shape: the candidate's d_i (its mean) exceeds the changed node's
       beta_shape *and* rises above the current template's d_i. beta_shape is the
       interventional ``value`` of the last campaign (the smallest over that node's
       perturbations with one), else the observational beta_shape when the node is a
       bifurcation source (§7), else no threshold applies (said in the report). The rise
       is asked because a node whose own noise already lies beyond its threshold would
       otherwise fail every candidate, an unchanged one included;
   * **the per-input family, alpha / 2**: an input whose path changes in the candidate
     beyond its current-template rate (Holm-adjusted p <= alpha / 2; exact tests).
   Measured on a 16-input router (``tests/experiments/test_gate_per_input.py``): a
   template identical to the current one failed at none of 20 seeds; one that reroutes
   one input in every replay failed at the per-input level alone.
   A change spread thinly over every input shows at the average level; one confined to a
   few inputs shows in the family. Otherwise ``pass``, with the nodes to re-evaluate, and
   the inputs the probes could not test named: those not probed (a probe budget below
   the inputs), and those outside the family whose candidate replays changed the path
   more often than the current template's.
6. **Re-evaluate** (the impact set, §9), an engine choice where the paper is open: when
   the candidate's d_i does not exceed the current template's by more than the analysis'
   epsilon (the lower end of the interval of the difference is not above epsilon, the
   smallest distance the engine counts as a change, QUIVER.md §13) the change is within
   the node's own noise and nothing is listed; otherwise every node of the profile's impact set at ``alpha``
   (a path with sigma(p) > alpha), every direct successor whose drift budget
   tau_ij@alpha is below d_i, and every loop-body node whose beta_shape is below d_i.
   Downstream nodes whose measured distance rose (interval of the difference above
   epsilon) are listed too, as measured. Without the epsilon margin, a rewording whose
   rewrites move by 0.003 on average (+0.0026 [+0.0008, +0.0045] over 100 pairs) was
   "out of noise" and listed the rewriter's whole impact set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quiver._graph import PipelineGraph
from quiver._stats import Estimate, GroupBootstrap, fmt, percentile_interval
from quiver._trace import Trace

from .columns import TIE
from .estimates import downstream_nodes
from .gate_outcome import outcome_criterion
from .inputs import InputEffect, InputEffects, exact_p, input_effects, replays_needed
from .pairing import PairResult
from .results import CampaignEstimates

__all__ = ["GateProfile", "GateCandidate", "judge_candidate", "PATH_EVENT", "gate_levels"]

PATH_EVENT = "D_shape or D_iter"
"""The event the per-input tests count: the replay's path changed from its recording."""


@dataclass(frozen=True)
class GateProfile:
    """The numbers a gate's verdict rests on.

    Attributes:
        data: The observational profile (``profile.json``): impact sets, drift budgets,
            node thresholds.
        campaign: The last campaign's interventional estimates, when there is one.
        source: Where the numbers come from, for the report.
    """

    data: Mapping[str, Any]
    campaign: CampaignEstimates | None
    source: str


@dataclass(frozen=True)
class GateCandidate:
    """One candidate template and the replays that judge it.

    Attributes:
        template: The template id.
        path: The candidate template file.
        node: The changed node (the one whose calls render the template).
        probes: The probe traces, each replayed ``repeats`` times per arm.
        repeats: Replays per probe and arm.
        unprobed: Inputs whose traces ran the node but got no probe (the probe budget
            was below the inputs).
    """

    template: str
    path: Path
    node: str
    probes: Sequence[Trace]
    repeats: int
    unprobed: tuple[str, ...] = ()


def gate_levels(familywise: float, outcome: bool = False) -> dict[str, float]:
    """The Bonferroni split of the familywise level (module docstring, 5): the average
    level, each of its three tests (four with outcome checks: the pass rate's
    non-inferiority, :mod:`.gate_outcome`), and each per-input family (the paths', and
    the outcome's with outcome checks)."""
    tests, families = (4, 2) if outcome else (3, 1)
    return {"familywise": familywise, "average": familywise / 2, "average_each": familywise / (2 * tests),
            "inputs": familywise / (2 * families)}


def _est(e: Estimate) -> dict[str, Any]:
    d = e.as_dict("value")
    return {"value": d["value"], "ci": d["value_ci"], "n": d["value_n"]}


def _above(e: Estimate, margin: float = 0.0) -> bool:
    """The lower end of ``e``'s interval is above ``margin`` (beyond round-off)."""
    return e.value is not None and e.ci is not None and e.ci[0] > margin + 1e-12


def _difference(cand: Estimate, curr: Estimate) -> Estimate:
    """``cand`` - ``curr``: the difference of the two means, its interval from the
    differences of their draws over the same resamples of probe inputs; n is the smaller
    arm's. With every slot measured in both arms this is the mean of the paired
    differences, replay by replay. A node only some replays reach (NaN in the other
    slots) is not measured in the same slots by both arms: a difference over the slots
    both measured would leave out exactly the replays where the candidate took another
    path (means of 0.438 and 0.182 with a difference of +0.000 [+0.000, +0.000])."""
    if cand.value is None or curr.value is None or cand.draws is None or curr.draws is None:
        return Estimate.empty()
    return Estimate(cand.value - curr.value, percentile_interval(cand.draws - curr.draws), min(cand.n, curr.n),
                    cand.draws - curr.draws)


def _arms(boot: GroupBootstrap, cand: np.ndarray, curr: np.ndarray) -> tuple[Estimate, Estimate, Estimate]:
    """Per arm the mean (NaN slots left out), and candidate - current (:func:`_difference`)."""
    c, k = boot.mean(cand, np.isfinite(cand)), boot.mean(curr, np.isfinite(curr))
    return c, k, _difference(c, k)


def _compare(boot: GroupBootstrap, cand: np.ndarray, curr: np.ndarray, margin: float = 0.0) -> dict[str, Any]:
    """Per arm the mean, and candidate - current (:func:`_arms`); ``rises`` when the
    difference's 95% interval lies above ``margin``."""
    c, k, diff = _arms(boot, cand, curr)
    return {"candidate": _est(c), "current": _est(k), "difference": _est(diff), "rises": _above(diff, margin)}


def _test_interval(diff: Estimate, each: float) -> list[float] | None:
    """The two-sided 1 - 2 * ``each`` percentile interval of the difference's draws: its
    lower end above 0 rejects at the one-sided level ``each``."""
    draws = diff.draws[np.isfinite(diff.draws)] if diff.draws is not None else np.zeros(0)
    if diff.value is None or draws.size == 0:
        return None
    lo, hi = np.percentile(draws, [100 * each, 100 * (1 - each)])
    return [round(float(lo), 6), round(float(hi), 6)]


def _tested(boot: GroupBootstrap, cand: np.ndarray, curr: np.ndarray, each: float) -> dict[str, Any]:
    """:func:`_compare` of a rate, whose ``rises`` is its one-sided test at ``each``: the
    lower end of ``test_ci`` (level ``test_level``) above 0."""
    c, k, diff = _arms(boot, cand, curr)
    ci = _test_interval(diff, each)
    return {"candidate": _est(c), "current": _est(k), "difference": _est(diff), "test_level": round(1 - 2 * each, 6),
            "test_ci": ci, "rises": ci is not None and ci[0] > TIE}


def _beta(node: str, profile: GateProfile) -> dict[str, Any]:
    value = profile.campaign.beta_shape_at(node) if profile.campaign is not None else None
    if value is not None:
        return {"value": value, "source": "interventional (campaign.json)"}
    row: dict[str, Any] = next((n for n in profile.data.get("nodes") or [] if n.get("node") == node), {})
    if row.get("bifurcation_source") and row.get("beta_shape") is not None:
        return {"value": row["beta_shape"], "source": "observational (profile.json; no interventional value)"}
    why = "no interventional value at this node" if profile.campaign else "no campaign profile"
    return {"value": None, "source": f"none: {why}, and the node is not an observational bifurcation source"}


def _impact(node: str, d_i: float | None, drifts: bool, profile: GateProfile, alpha: float,
            graph: PipelineGraph) -> list[dict[str, Any]]:
    if not drifts or d_i is None:
        return []
    members: dict[str, list[str]] = {}
    for row in profile.data.get("impact_sets") or []:
        if row.get("source") == node and abs(float(row.get("alpha", -1)) - alpha) < 1e-9:
            for m in row.get("members") or []:
                members.setdefault(m["node"], []).extend(m.get("reasons") or [])
    for b in profile.data.get("budgets") or []:
        if (b.get("source") == node and abs(float(b.get("alpha", -1)) - alpha) < 1e-9 and b.get("status") == "ok"
                and b.get("tau") is not None and d_i > float(b["tau"])):
            members.setdefault(b["target"], []).append(
                f"d_i = {fmt(d_i)} exceeds the drift budget tau@{alpha:g} = {fmt(b['tau'])} on {node} -> {b['target']}")
    if graph.loop is not None and node in graph.loop.body:
        for row in profile.data.get("nodes") or []:
            other, beta = row.get("node"), row.get("beta_shape")
            if other in graph.loop.body and other != node and beta is not None and beta > 0 and d_i > beta:
                members.setdefault(other, []).append(f"loop-body node with beta_shape {fmt(beta)} below d_i")
    order = graph.topological_order()
    return [{"node": n, "reasons": members[n]} for n in sorted(members, key=lambda n: (order.index(n)
                                                                                      if n in order else 1e9, n))]


def _col(rows: Sequence[Any], f: Any) -> np.ndarray:
    return np.array([np.nan if (v := f(r)) is None else float(v) for r in rows], dtype=np.float64)


def _per_input(candidate: GateCandidate, pairs: Sequence[PairResult], level: float) -> tuple[InputEffects,
                                                                                           dict[str, Any]]:
    """The per-input tests (candidate arm against current, stratified by probe) and their
    ``gate.json`` block: the tests; the inputs moved; the replays per probe and arm a
    complete change needs with every probed input in the family and whether the gate had
    them; the inputs it could not test though their candidate replays changed the path
    more often (:func:`_untestable`), with the replays per arm that would test changes of
    their rates; and the inputs not probed."""
    probes, repeats = candidate.probes, candidate.repeats
    group = [t.input_id for t in probes for _ in range(repeats)] * 2
    stratum = [t.trace_id for t in probes for _ in range(repeats)] * 2
    changed = np.arange(len(pairs)) < len(probes) * repeats
    event = np.array([p.d_shape or p.d_iter > 0 for p in pairs], dtype=bool)
    effects = input_effects(group, stratum, changed, event, alpha=level, event_name=PATH_EVENT)
    per = Counter(t.input_id for t in probes)
    fewest = min(per.values()) if per else 1
    need = replays_needed(len(per), level, strata=fewest)
    untested = _untestable(effects, level, repeats >= need)
    return effects, {**effects.to_json(), "probes_per_input": fewest, "replays_needed": need,
                     "enough_replays": repeats >= need, "untestable": [g.input_id for g in untested],
                     "replays_to_test": {g.input_id: replays_to_test(g, level / max(len(per), 1)) for g in untested},
                     "unprobed": list(candidate.unprobed)}


def _untestable(effects: InputEffects, level: float, enough: bool) -> list[InputEffect]:
    """Inputs outside the family whose candidate replays changed the path more often: all
    of them when the replays are too few for any complete change to be tested; else
    those whose own p-value (unadjusted) is at most ``level``, where a change may hide
    behind the current template's noise."""
    return sorted((g for g in effects.untestable_higher()
                   if not enough or (g.p_value is not None and g.p_value <= level)),
                  key=lambda g: (g.p_value if g.p_value is not None else 1.0, -g.excess, g.input_id))


def replays_to_test(g: InputEffect, level: float, most: int = 50) -> int | None:
    """About how many replays per arm (one probe) would make a change of ``g``'s rates
    reach ``level``: the fewest multiple of its replays whose counts, scaled, give an
    exact p at most ``level`` (None: none up to ``most`` times as many)."""
    rate, control = g.rate or 0.0, g.control_rate or 0.0
    for m in range(2, most + 1):
        n = g.n * m
        p = exact_p([(n, round(rate * n), n, round(control * n))])
        if p is not None and p <= level:
            return n
    return None


def _input_failure(g: InputEffect, level: float, family: int) -> str:
    return (f"input {g.input_id}: the path changes in {g.events} of {g.n} candidate replays against "
            f"{g.control_events} of {g.control_n} with the current template (exact p = {g.p_value:.3g}, "
            f"Holm-adjusted {g.p_holm:.3g} ≤ {level:.3g} over {family} testable input(s))")


def _rate_failure(name: str, row: Mapping[str, Any], node: str) -> str:
    diff, ci = row["difference"], row["test_ci"]
    return (f"the {name} rate rises by {fmt(diff['value'], signed=True)} [{fmt(ci[0], signed=True)}, "
            f"{fmt(ci[1], signed=True)}] ({100 * row['test_level']:.4g}% interval) over the current template "
            f"({fmt(row['candidate']['value'])} against {fmt(row['current']['value'])}, n = {diff['n']}): "
            f"decisions at or downstream of {node} change")


def judge_candidate(candidate: GateCandidate, pairs: Sequence[PairResult], graph: PipelineGraph,
                    profile: GateProfile, *, alpha: float, resamples: int, seed: int,
                    epsilon: float, familywise: float = 0.05, outcome_margin: float = 0.05) -> dict[str, Any]:
    """The gate's row for one candidate (a ``gate.json`` candidate): per measure the arms'
    means and their paired difference, the threshold, the per-input tests, the failures,
    the verdict and the nodes to re-evaluate (see the module docstring).

    Args:
        candidate: The candidate and its probes.
        pairs: Its pairs: the candidate arm's (probe by probe, repeat by repeat), then the
            current arm's, in the same order.
        graph: The pipeline graph (the changed node's downstream nodes, the loop): the
            one ``pairs`` were formed with, so a node only the replays reached (a
            :class:`~quiver._interventional.CampaignGraph`) is measured downstream.
        profile: The numbers the verdict rests on.
        alpha: The level of the impact sets and drift budgets.
        resamples: Bootstrap resamples of probe inputs.
        seed: The bootstrap's seed.
        epsilon: The smallest distance counted as a change.
        familywise: The familywise level of the verdict's tests (module docstring, 5).
        outcome_margin: The non-inferiority margin of the pass rate (:mod:`.gate_outcome`).
    """
    template, path, node = candidate.template, candidate.path, candidate.node
    probes, repeats = candidate.probes, candidate.repeats
    outcomes = any(p.perturbed is not None and p.perturbed.outcome is not None for p in pairs)
    levels = gate_levels(familywise, outcomes)
    n = len(probes) * repeats
    cand, curr = pairs[:n], pairs[n:]
    inputs = sorted({p.input_id for p in probes})
    index = {g: i for i, g in enumerate(inputs)}
    group = np.array([index[t.input_id] for t in probes for _ in range(repeats)], dtype=np.int64)
    boot = GroupBootstrap(group, len(inputs), resamples=resamples, seed=seed)

    def arms(f: Any) -> tuple[np.ndarray, np.ndarray]:
        """``f`` of each pair: the candidate arm's, the current arm's."""
        return _col(cand, f), _col(curr, f)

    each = levels["average_each"]
    d_i = _compare(boot, *arms(lambda p: p.d.get(node)), epsilon)
    rates = {"D_shape": _tested(boot, *arms(lambda p: float(p.d_shape)), each),
             "D_iter": _tested(boot, *arms(lambda p: float(p.d_iter > 0)), each)}
    downstream = {v: _compare(boot, *arms(lambda p, v=v: p.d.get(v)), epsilon) for v in downstream_nodes(graph, node)}
    fields = {f: _compare(boot, *arms(lambda p, f=f: (p.fields.get(node) or {}).get(f)), epsilon)
              for f in sorted({f for p in pairs for f in (p.fields.get(node) or {})})}
    beta = _beta(node, profile)
    d_i["beyond_beta"] = _beyond_beta(d_i, _test_interval(_arms(boot, *arms(lambda p: p.d.get(node)))[2], each),
                                      beta, each)
    failures = _beta_failure(d_i, beta, node)
    failures += [_rate_failure(name, row, node) for name, row in rates.items() if row["rises"]]
    effects, per_input = _per_input(candidate, pairs, levels["inputs"])
    failures += [_input_failure(g, levels["inputs"], effects.family) for g in effects.moved()]
    outcome = outcome_criterion(pairs, n, [t.input_id for t in probes for _ in range(repeats)] * 2,
                                [t.trace_id for t in probes for _ in range(repeats)] * 2, boot,
                                margin=outcome_margin, each=each, inputs_level=levels["inputs"],
                                tested=_tested) if outcomes else None
    failures += outcome["failures"] if outcome is not None else []
    verdict = "fail" if failures else "re-evaluate" if outcome is not None and outcome["undecided"] else "pass"
    return {
        "template": template, "path": str(path), "node": node, "probes": len(probes), "repeats": repeats,
        "inputs": len(inputs), "pairs": {"candidate": len(cand), "current": len(curr)},
        "d_i": d_i, "fields": fields, "rates": rates, "beta_shape": beta, "downstream": downstream,
        "per_input": per_input, "levels": levels, "loop": graph.loop is not None,
        # calls per node that differed with the same nodes run: what D_iter says beyond the path
        "call_counts_differ": any(p.d_iter > 0 and not p.d_struct for p in pairs),
        **({"outcome": outcome} if outcome is not None else {}),
        "verdict": verdict, "failures": failures,
        "re_evaluate_because": [outcome["undecided"]] if verdict == "re-evaluate" and outcome is not None else [],
        "within_noise": not d_i["rises"], "epsilon": epsilon,
        "re_evaluate": _impact(node, d_i["candidate"]["value"], d_i["rises"], profile, alpha, graph),
        "moved": [v for v, row in downstream.items() if row["rises"]],
        # failing on the rates or the inputs alone while the node itself did not drift:
        # possibly a false alarm (reported as such, the verdict stands)
        "rates_only_within_noise": bool(failures) and not d_i["rises"] and not d_i["beyond_beta"]["fails"],
    }


def _beyond_beta(d_i: Mapping[str, Any], test_ci: list[float] | None, beta: Mapping[str, Any],
                 each: float) -> dict[str, Any]:
    """The test of d_i beyond beta_shape (module docstring, 5): the candidate's d_i above
    the threshold and its difference from the current template's above 0 at ``each``."""
    drift = d_i["candidate"]["value"]
    rises = test_ci is not None and test_ci[0] > TIE
    beyond = beta["value"] is not None and drift is not None and drift > beta["value"]
    return {"test_level": round(1 - 2 * each, 6), "test_ci": test_ci, "rises": rises, "fails": beyond and rises}


def _beta_failure(d_i: Mapping[str, Any], beta: Mapping[str, Any], node: str) -> list[str]:
    if not d_i["beyond_beta"]["fails"]:
        return []
    return [f"d_i = {fmt(d_i['candidate']['value'])} at {node} exceeds its beta_shape {fmt(beta['value'])} "
            f"({beta['source']}) and rises over the current template's ({fmt(d_i['current']['value'])})"]
