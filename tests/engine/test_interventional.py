"""Known-answer tests of the interventional estimates of a campaign (QUIVER.md §6-§7, §11-§13).

The observational side is a real pair table: synthetic traces built call by call and
paired by ``build_pairs``, so node distances are exact (ten bool flags per output, two
outputs differing on k flags are at distance k / 10). The interventional side is pair
rows written by hand, each set built so that the quantity under test has a known value.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from quiver import NodeCall, PipelineGraph, Trace, campaign_estimates, interventional_report
from quiver._errors import QuiverError
from quiver._graph import infer_graph
from quiver._interventional import holm, permutation_test
from quiver._observational import analyze
from quiver._stats import PairTable, build_pairs, group_traces

FIELDS = 10
NODES = ("rewriter", "cs", "planner", "composer")


def flags(k: int) -> dict[str, bool]:
    """Ten bool fields, the first ``k`` set: two outputs are at distance |k - k'| / 10."""
    return {f"f{i}": i < k for i in range(FIELDS)}


def make_trace(input_id: str, r: int, plan: int, comp: int, route: str = "a") -> Trace:
    outputs = {"rewriter": flags(0), "cs": {"sufficient": True}, "planner": flags(plan), "composer": flags(comp)}
    calls = [NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source",
                      output={"q": input_id})]
    for i, node in enumerate(NODES, start=1):
        calls.append(NodeCall(
            call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0", kind="llm", parents=[f"c{i - 1}"],
            output=outputs[node], decision={"route": route} if node == "planner" else {},
        ))
    return Trace(trace_id=f"{input_id}/{r}", run_id="r", pipeline="p", input_id=input_id, repeat=r,
                 inputs={"q": input_id}, calls=calls, output=outputs["composer"])


def no_text(texts: Any) -> Any:
    def distance(a: str, b: str) -> float:  # pragma: no cover - no output here is text
        raise AssertionError("no text distance is needed")
    return distance


def pair_table(traces: list[Trace]) -> tuple[PairTable, PipelineGraph]:
    groups, _ = group_traces(traces)
    graph = infer_graph(traces)[0]
    return build_pairs(groups, graph, no_text), graph


@pytest.fixture(scope="module")
def corpus() -> tuple[PairTable, PipelineGraph]:
    """40 inputs x 3 repeats; planner and composer draw 0-3 flags, the route flips one time in four."""
    rng = random.Random(7)
    traces = [make_trace(f"g{g}", r, rng.randint(0, 3), rng.randint(0, 3), "a" if rng.random() < 0.75 else "b")
              for g in range(40) for r in range(3)]
    table, graph = pair_table(traces)
    # a loop feedback edge composer -> rewriter: it must not make rewriter downstream of cs
    graph = graph.model_copy(update={"edges": [*graph.edges, ("composer", "rewriter")]})
    return table, graph


def row(pid: str, input_id: str, stratum: str | None, magnitude: float | None = 0.0, *, step: int = 0,
        shape: bool = False, it: int = 0, output: bool = False, struct: bool = False,
        d: Mapping[str, float | None] | None = None, status: str = "ok", node: str = "cs") -> dict[str, Any]:
    return {
        "perturbation_id": pid, "trace_id": f"{input_id}/0", "input_id": input_id, "repeat": 0, "step": step,
        "status": status, "node": node, "op": "override", "params": {}, "magnitude": magnitude, "stratum": stratum,
        "D_iter": it, "D_shape": shape, "D_output": output, "D_struct": struct, "d": dict(d or {}),
    }


def perturbation(pid: str, node: str = "cs", op: str = "override", ladder: Any = None) -> dict[str, Any]:
    return {"id": pid, "node": node, "op": op, "params": {"set": {"sufficient": True}}, "ladder": ladder}


def estimate(corpus: tuple[PairTable, PipelineGraph], perts: list[dict[str, Any]], rows: list[dict[str, Any]],
             profile: Any = None, **kwargs: Any) -> dict[str, Any]:
    """The campaign's estimates as ``campaign.json`` holds them."""
    table, graph = corpus
    kwargs.setdefault("resamples", 400)
    kwargs.setdefault("permutations", 500)
    return campaign_estimates(perts, rows, table, profile, graph, **kwargs).to_json()


# --------------------------------------------------------------------------- strata


def hand_made() -> list[dict[str, Any]]:
    p = "cs-override"
    return [
        row(p, "g0", "effective", 1.0, shape=True, it=1, output=True, struct=True,
            d={"planner": 0.4, "composer": 0.6, "rewriter": 0.0}),
        row(p, "g0", "effective", 1.0, shape=True, output=True, d={"planner": 0.2, "composer": None}),
        row(p, "g1", "effective", 1.0, output=True, d={"planner": 0.1, "composer": 0.2}),
        row(p, "g1", "effective", 1.0, d={"planner": None, "composer": 0.0}),
        row(p, "g2", "noop", 0.0, d={"planner": 0.0, "composer": 0.0}),
        row(p, "g3", "noop", 0.0, d={"planner": 0.1, "composer": 0.0}),
        row(p, "g4", None, None, shape=True),
        row(p, "g5", "effective", 1.0, shape=True, it=3, status="diverged"),
        row(p, "g6", None, None, status="failed"),
    ]


def test_strata_rates_counts_and_downstream_means_on_a_hand_made_set(corpus: Any) -> None:
    out = estimate(corpus, [perturbation("cs-override")], hand_made())
    p = out["perturbations"][0]
    assert (p["pairs"], p["effective"], p["noop"], p["unstratified"], p["diverged"], p["failed"]) == (9, 4, 2, 1, 1, 1)
    assert p["downstream"] == ["planner", "composer"]  # rewriter is upstream; the feedback edge is left out
    eff, noop = p["strata"]["effective"], p["strata"]["noop"]
    assert eff["n"] == 4 and noop["n"] == 2
    expected = {"D_iter": 0.25, "D_shape": 0.5, "D_output": 0.75, "D_output_only": 0.25, "D_struct": 0.25}
    for name, value in expected.items():
        assert eff[name] == value, name
        assert eff[f"{name}_n"] == 4
        lo, hi = eff[f"{name}_ci"]
        assert lo <= value <= hi
        assert noop[name] == 0.0 and noop[f"{name}_ci"] == [0.0, 0.0]
    assert eff["mean_d"] == {"planner": pytest.approx(0.7 / 3, abs=1e-6), "composer": pytest.approx(0.8 / 3, abs=1e-6)}
    assert eff["mean_d_n"] == {"planner": 3, "composer": 3}
    assert eff["mean_d_given_shape"] == {"planner": pytest.approx(0.3), "composer": pytest.approx(0.6)}
    assert eff["mean_d_given_shape_n"] == {"planner": 2, "composer": 1}
    assert noop["mean_d"] == {"planner": 0.05, "composer": 0.0}
    assert noop["mean_d_given_shape"] == {"planner": None, "composer": None}
    assert noop["mean_d_given_shape_n"] == {"planner": 0, "composer": 0}
    assert eff["magnitude"] == 1.0 and p["groups"] == 5


def test_observational_block_is_the_pair_table(corpus: Any) -> None:
    table, _ = corpus
    out = estimate(corpus, [perturbation("cs-override")], hand_made())
    obs = out["observational"]
    assert obs["n"] == table.n_pairs == 120
    assert obs["D_shape"] == pytest.approx(float(table.d_shape.mean()), abs=1e-6)
    assert obs["mean_d"]["planner"] == pytest.approx(float(np.nanmean(table.col("planner"))), abs=1e-6)


def test_rows_of_an_unknown_perturbation_are_refused(corpus: Any) -> None:
    with pytest.raises(QuiverError, match="perturbation_id 'nope' is not a perturbation of the campaign"):
        estimate(corpus, [perturbation("cs-override")], [row("nope", "g0", "noop")])
    with pytest.raises(QuiverError, match="target node 'ghost' is not in the graph"):
        estimate(corpus, [perturbation("x", node="ghost")], [])


# --------------------------------------------------------------------------- betas


def ladder_rows(pid: str, inputs: int, noise_at_step_1: bool = False, prefix: str = "g") -> list[dict[str, Any]]:
    """Steps 1-5 at magnitude 0.1 * step; D_shape from step 3 on; a no-op stratum.

    With ``noise_at_step_1``, two of the step-1 pairs and one no-op pair bifurcate too: step 1's
    rate (2 / inputs) exceeds the no-op rate (1 / inputs), but not beyond the noise. Inputs are
    named ``{prefix}{i}``: ``g`` are the corpus's inputs (with observational pairs), any other
    prefix has none."""
    rows = []
    for g in range(inputs):
        for step in range(1, 6):
            fired = step >= 3 or (noise_at_step_1 and step == 1 and g in (0, 1))
            rows.append(row(pid, f"{prefix}{g}", "effective", round(0.1 * step, 1), step=step, shape=fired,
                            d={"planner": 0.1, "composer": 0.1}))
        rows.append(row(pid, f"{prefix}{g}", "noop", 0.0, shape=noise_at_step_1 and g == 2,
                        d={"planner": 0.1, "composer": 0.1}))
    return rows


def input_rates(table: PairTable, inputs: list[str]) -> dict[str, float]:
    """The observational D_shape rate of each input over its same-input pairs."""
    shape = np.asarray(table.d_shape, dtype=float)
    return {g: float(shape[[table.groups[i] == g for i in table.group]].mean()) for g in inputs}


def test_a_ladder_that_bifurcates_from_step_3_has_its_threshold_there(corpus: Any) -> None:
    pert = perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    beta = estimate(corpus, [pert], ladder_rows("rw-ladder", 20))["perturbations"][0]["beta_shape"]
    assert beta["value"] == 0.3 and beta["raw_min"] == 0.3
    assert beta["max_non_bifurcating"] == 0.2
    assert beta["n"] == 100 and beta["n_events"] == 60 and beta["iqr"] == [0.3, 0.5]
    assert beta["n_below"] == 40 and beta["upper_bound"] is False
    # every bin is compared with the observational noise of its own 20 inputs
    noise = input_rates(corpus[0], [f"g{g}" for g in range(20)])
    assert beta["control"] == "observational, same inputs" and beta["control_n"] == 100
    assert beta["control_rate"] == pytest.approx(sum(noise.values()) / 20, abs=1e-6)
    assert beta["bin_rule"] == "ladder" and [b["step"] for b in beta["bins"]] == [1, 2, 3, 4, 5]
    assert all(b["control"] == "observational, same inputs" and b["control_n"] == 20 for b in beta["bins"])
    assert [b["qualifies"] for b in beta["bins"]] == [False, False, True, True, True]
    assert beta["bins"][2]["excess"] == pytest.approx(1 - beta["control_rate"], abs=1e-6)
    assert beta["bins"][0]["excess"] == pytest.approx(-beta["control_rate"], abs=1e-6) and beta["reason"] is None


def test_without_observational_pairs_the_no_op_stratum_is_the_control(corpus: Any) -> None:
    pert = perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    beta = estimate(corpus, [pert], ladder_rows("rw-ladder", 20, prefix="x"))["perturbations"][0]["beta_shape"]
    assert beta["control"] == "noop" and beta["control_rate"] == 0.0 and beta["control_n"] == 20
    assert all(b["control"] == "noop" for b in beta["bins"])
    assert beta["value"] == 0.3 and beta["bins"][2]["excess_ci"] == [1.0, 1.0]


def test_control_replays_are_the_noise_of_each_trace(corpus: Any) -> None:
    """Steps 1-5 on 20 traces; the first 4 traces bifurcate in every replay (noise: their
    control replays do too). Against their own control replays steps 1-2 show no excess;
    step 3, where every trace bifurcates, does."""
    pert = {**perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]}), "control": "ctl"}
    rows = []
    for g in range(20):
        noisy = g < 4
        for step in range(1, 6):
            rows.append(row("rw-ladder", f"x{g}", "effective", round(0.1 * step, 1), step=step,
                            shape=step >= 3 or noisy, d={"planner": 0.1, "composer": 0.1}))
        for r in range(2):
            rows.append({**row("ctl", f"x{g}", "noop", 0.0, shape=noisy, d={"planner": 0.1, "composer": 0.1}),
                         "repeat": r})
    out = estimate(corpus, [pert], rows, controls=[{"id": "ctl", "node": "cs", "kind": "served"}])
    [p] = out["perturbations"]
    beta = p["beta_shape"]
    assert p["control_replays"]["n"] == 40 and p["control_replays"]["traces"] == 20
    assert p["control_replays"]["D_shape"] == 0.2 and out["controls"][0]["id"] == "ctl"
    assert beta["control"] == "control replays, same traces" and beta["control_rate"] == 0.2
    assert [b["rate"] for b in beta["bins"]][:3] == [0.2, 0.2, 1.0]
    assert [b["excess"] for b in beta["bins"]][:3] == [0.0, 0.0, 0.8]
    assert [b["qualifies"] for b in beta["bins"]] == [False, False, True, True, True]
    assert beta["value"] == 0.3 and beta["raw_min"] == 0.1  # the noisy traces bifurcate at step 1 already
    assert p["pairs"] == 100  # the control's rows are its own
    # the input groups each bin's interval resamples, and those its excess rests on
    assert [b["inputs"] for b in beta["bins"]] == [20] * 5
    assert [b["inputs_above_control"] for b in beta["bins"]] == [0, 0, 16, 16, 16]


def test_a_bin_whose_excess_rests_on_few_inputs_says_so(corpus: Any) -> None:
    """Two of 20 inputs bifurcate at every step and their controls never do: the excess
    is 0.1, but the interval over inputs reaches 0 and the reason names the 2 inputs."""
    pert = {**perturbation("rw", op="text_edit", ladder={"strength": [1, 2]}), "control": "ctl"}
    rows = []
    for g in range(20):
        for step in (1, 2):
            rows.append(row("rw", f"x{g}", "effective", round(0.1 * step, 1), step=step, shape=g < 2,
                            d={"planner": 0.1, "composer": 0.1}))
        rows.append(row("ctl", f"x{g}", "noop", 0.0, shape=False, d={"planner": 0.1, "composer": 0.1}))
    out = estimate(corpus, [pert], rows, controls=[{"id": "ctl", "node": "cs", "kind": "served"}])
    beta = out["perturbations"][0]["beta_shape"]
    top = beta["bins"][-1]
    assert top["excess"] == pytest.approx(0.1) and top["excess_ci"][0] <= 0 and not top["qualifies"]
    assert top["inputs"] == 20 and top["inputs_above_control"] == 2
    assert beta["value"] is None and "2 of its 20 inputs bifurcated more often than their controls" in beta["reason"]


def test_a_control_that_is_not_declared_is_refused(corpus: Any) -> None:
    pert = {**perturbation("te", op="text_edit"), "control": "nope"}
    with pytest.raises(QuiverError, match="control 'nope' is not among the controls"):
        estimate(corpus, [pert], [row("te", "g0", "effective", 0.1)])


def step_rows(fired_by_step: dict[int, set[int]], inputs: int = 20) -> list[dict[str, Any]]:
    """A 5-step ladder on inputs x0.. (no observational pairs) with a quiet no-op stratum;
    step s bifurcates on the inputs in ``fired_by_step[s]``."""
    rows = [row("lad", f"x{g}", "effective", round(0.1 * s, 1), step=s, shape=g in fired_by_step.get(s, set()),
                d={"planner": 0.0}) for g in range(inputs) for s in range(1, 6)]
    return rows + [row("lad", f"x{g}", "noop", 0.0, d={"planner": 0.0}) for g in range(inputs)]


def test_a_low_bin_alone_is_not_taken_for_a_threshold(corpus: Any) -> None:
    """Step 1 bifurcates on 8 of 20 inputs, nothing above it does: not a threshold response;
    the step-down test stops at step 5 and gives no value."""
    pert = perturbation("lad", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    beta = estimate(corpus, [pert], step_rows({1: set(range(8))}))["perturbations"][0]["beta_shape"]
    assert beta["bins"][0]["qualifies"] is True and not any(b["qualifies"] for b in beta["bins"][1:])
    assert beta["value"] is None and beta["raw_min"] == 0.1
    assert "step-down test stops at the largest-magnitude bin (bin 4" in beta["reason"]
    assert "smaller bins that qualified on their own (0)" in beta["reason"]


def test_the_threshold_is_the_bottom_of_the_run_of_bins_from_the_top(corpus: Any) -> None:
    """Steps 4-5 bifurcate everywhere, step 2 on 10 inputs, step 3 on none: the run from the
    top ends at step 4, so the value is 0.4, not 0.2."""
    pert = perturbation("lad", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    every = set(range(20))
    estimates = estimate(corpus, [pert], step_rows({2: set(range(10)), 4: every, 5: every}))
    beta = estimates["perturbations"][0]["beta_shape"]
    assert [b["qualifies"] for b in beta["bins"]] == [False, True, False, True, True]
    assert beta["value"] == 0.4 and beta["raw_min"] == 0.2 and beta["n_below"] == 60


def test_a_threshold_probed_by_few_pairs_below_it_is_an_upper_bound(corpus: Any) -> None:
    pert = perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    beta = estimate(corpus, [pert], ladder_rows("rw-ladder", 4))["perturbations"][0]["beta_shape"]
    assert beta["value"] == 0.3 and beta["n_below"] == 8 and beta["upper_bound"] is True


def test_noise_bifurcations_pull_raw_min_down_but_not_the_threshold(corpus: Any) -> None:
    pert = perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    for prefix in ("g", "x"):  # against the inputs' own noise, and against the no-op stratum
        out = estimate(corpus, [pert], ladder_rows("rw-ladder", 20, noise_at_step_1=True, prefix=prefix))
        beta = out["perturbations"][0]["beta_shape"]
        assert beta["raw_min"] == 0.1  # two noise-driven bifurcations at step 1 ...
        assert beta["value"] == 0.3  # ... are not clearly above the control's own noise
        assert beta["bins"][0]["rate"] == 0.1 and beta["bins"][0]["qualifies"] is False
        assert beta["bins"][0]["excess_ci"][0] < 0
        assert beta["max_non_bifurcating"] == 0.2
    assert beta["control"] == "noop" and beta["control_rate"] == 0.05  # 1 of the 20 no-op pairs


def test_the_noise_of_other_inputs_does_not_pass_for_an_effect(corpus: Any) -> None:
    """A no-op stratum of quiet inputs against small effective changes on noisy inputs.

    The perturbation changes nothing that matters, but its no-op pairs come from the 10
    corpus inputs whose observational D_shape rate is lowest and its effective pairs from the
    10 noisiest, which bifurcate at their own observational rate. Against the no-op stratum
    the smallest bin would pass for a threshold; against its own inputs' noise it does not."""
    table, _ = corpus
    rates = input_rates(table, [f"g{g}" for g in range(40)])
    ranked = sorted(rates, key=lambda g: (rates[g], g))
    quiet, noisy = ranked[:10], ranked[-10:]
    assert max(rates[g] for g in quiet) < min(rates[g] for g in noisy)
    rows = [row("te", g, "noop", 0.0, shape=False, d={"planner": 0.0}) for g in quiet for _ in range(3)]
    for i, g in enumerate(noisy):
        for r in range(6):  # fires in a share of its pairs at most its observational rate
            fired = r < int(6 * rates[g])
            rows.append(row("te", g, "effective", round(0.01 * (1 + (i * 6 + r) % 60), 2), shape=fired,
                            d={"planner": 0.0}))
    beta = estimate(corpus, [perturbation("te", op="text_edit")], rows)["perturbations"][0]["beta_shape"]
    assert beta["control"] == "observational, same inputs" and beta["control_n"] == 60
    assert beta["value"] is None and "step-down test stops" in beta["reason"]
    assert all(b["control_rate"] >= 0.3 and not b["qualifies"] for b in beta["bins"])
    assert beta["bins"][0]["rate"] > 0.3  # the no-op stratum's rate is 0: it would have taken bin 0


def test_quantile_bins_and_the_observational_control_without_a_ladder(corpus: Any) -> None:
    table, _ = corpus
    mags = np.round(np.arange(1, 51) * 0.01, 2)
    rows = [row("te", f"x{i}", "effective", float(m), shape=m >= 0.31, d={"planner": 0.0}) for i, m in enumerate(mags)]
    beta = estimate(corpus, [perturbation("te", op="text_edit")], rows)["perturbations"][0]["beta_shape"]
    assert beta["control"] == "observational"  # no input with observational pairs, no no-op stratum
    assert beta["control_rate"] == pytest.approx(float(table.d_shape.mean()), abs=1e-6) and beta["control_n"] == 120
    assert beta["bin_rule"] == "quantile" and [b["n"] for b in beta["bins"]] == [10] * 5
    assert [(b["lo"], b["hi"]) for b in beta["bins"]][3] == (0.31, 0.4)
    assert beta["value"] == 0.31 == beta["raw_min"] and beta["upper_bound"] is False
    assert beta["max_non_bifurcating"] == 0.3


def test_beta_iter_without_any_iteration_change_says_why(corpus: Any) -> None:
    pert = perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})
    beta = estimate(corpus, [pert], ladder_rows("rw-ladder", 5))["perturbations"][0]["beta_iter"]
    assert beta["value"] is None and beta["raw_min"] is None and beta["n"] == 25
    assert beta["reason"] == "no effective pair had D_iter > 0"


# --------------------------------------------------------------------------- negative control


def noop_rows(pid: str, corpus: Any, shift: float) -> list[dict[str, Any]]:
    table, _ = corpus
    rng = np.random.default_rng(3)
    plan = rng.choice(table.col("planner"), 60)
    comp = rng.choice(table.col("composer"), 60)
    return [row(pid, f"g{i % 30}", "noop", 0.0, d={"planner": float(plan[i]) + shift, "composer": float(comp[i])})
            for i in range(60)]


def test_a_noop_stratum_at_the_noise_floor_passes_the_negative_control(corpus: Any) -> None:
    out = estimate(corpus, [perturbation("flip")], noop_rows("flip", corpus, 0.0))
    nc = out["perturbations"][0]["negative_control"]
    assert nc["passed"] is True and nc["rejected"] == []
    assert set(nc["nodes"]) == {"planner", "composer"}
    # compared with the observational pairs of the same 30 inputs: 30 x C(3, 2) pairs
    assert all(r["p_holm"] > 0.05 and r["n_noop"] == 60 and r["n_obs"] == 90 for r in nc["nodes"].values())


def test_the_negative_control_compares_the_no_op_inputs_with_themselves(corpus: Any) -> None:
    table, _ = corpus
    planner = table.col("planner")
    by_input = {g: planner[table.group == i] for i, g in enumerate(table.groups)}
    noisy = sorted(by_input, key=lambda g: -float(np.nanmean(by_input[g])))[:5]
    rows = [row("flip", g, "noop", 0.0, d={"planner": float(v), "composer": 0.0})
            for g in noisy for v in by_input[g] for _ in range(4)]
    nc = estimate(corpus, [perturbation("flip")], rows)["perturbations"][0]["negative_control"]
    # the noisiest inputs, at their own noise floor: no drift against themselves
    assert nc["nodes"]["planner"]["n_obs"] == 15 and nc["nodes"]["planner"]["rejects"] is False
    assert nc["nodes"]["planner"]["mean_noop"] > float(np.nanmean(planner))


def test_a_noop_stratum_shifted_by_0_3_fails_and_names_the_node(corpus: Any) -> None:
    nc = estimate(corpus, [perturbation("flip")], noop_rows("flip", corpus, 0.3),
                  permutations=999)["perturbations"][0]["negative_control"]
    assert nc["passed"] is False and nc["rejected"] == ["planner"]
    planner, composer = nc["nodes"]["planner"], nc["nodes"]["composer"]
    assert planner["p_value"] == pytest.approx(1 / 1000, abs=1e-6)  # no permutation reaches the shift
    assert planner["statistic"] == pytest.approx(planner["mean_noop"] - planner["mean_obs"], abs=1e-5)
    assert planner["statistic"] > 0.25 and nc["statistic"] == planner["statistic"]
    # Holm by hand over the two nodes
    low, high = sorted([planner["p_value"], composer["p_value"]])
    holm_low = min(1.0, 2 * low)
    holm_high = max(holm_low, min(1.0, high))
    assert planner["p_holm"] == pytest.approx(holm_low, abs=1e-6)
    assert composer["p_holm"] == pytest.approx(holm_high, abs=1e-6)
    assert nc["p_value"] == planner["p_holm"]


def test_holm_adjusts_step_down() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])


def test_the_permutation_p_value_matches_the_exact_one() -> None:
    # x = [1] among y = [0, 0, 0]: one relabelling in four puts the 1 in x
    stat, p = permutation_test(np.array([1.0]), np.zeros(3), 20000, np.random.default_rng(0))
    assert stat == 1.0 and p == pytest.approx(0.25, abs=0.01)


def test_without_noop_pairs_the_negative_control_is_not_run(corpus: Any) -> None:
    nc = estimate(corpus, [perturbation("cs-override")], [row("cs-override", "g0", "effective", 1.0)])
    nc = nc["perturbations"][0]["negative_control"]
    assert nc["passed"] is None and "no no-op pairs" in nc["reason"]


# --------------------------------------------------------------------------- validation


def doubling_rows(pid: str) -> list[dict[str, Any]]:
    """30 effective pairs with d_composer = 2 d_planner, and two that sigma leaves out:
    one with d_planner <= epsilon, one where composer ran in neither trace."""
    rows = [row(pid, f"g{g}", "effective", 0.1 * k, d={"planner": 0.1 * k, "composer": 0.2 * k}, node="planner")
            for g in range(10) for k in (1, 2, 3)]
    return rows + [row(pid, "g0", "effective", 0.005, d={"planner": 0.005, "composer": 0.4}, node="planner"),
                   row(pid, "g1", "effective", 0.2, d={"planner": 0.2, "composer": None}, node="planner")]


def profile_row(ci: list[float]) -> dict[str, Any]:
    return {"edges": [{"source": "planner", "target": "composer", "sigma": sum(ci) / 2, "sigma_ci": ci,
                       "sigma_n": 80, "n": 80}]}


@pytest.mark.parametrize(("ci", "agree"), [([1.8, 2.3], True), ([2.2, 2.6], False), ([1.0, 1.9], False)])
def test_interventional_sigma_of_a_doubling_edge_against_the_observational_one(corpus: Any, ci: list[float],
                                                                                agree: bool) -> None:
    out = estimate(corpus, [perturbation("pl", node="planner", op="categorical_flip")], doubling_rows("pl"),
                   profile=profile_row(ci))
    (v,) = out["validation"]
    assert (v["source"], v["target"], v["perturbations"]) == ("planner", "composer", ["pl"])
    assert v["sigma_int"] == 2.0 and v["sigma_int_ci"] == [2.0, 2.0] and v["n_int"] == 30
    assert v["sigma_obs_ci"] == ci and v["n_obs"] == 80
    assert v["agree"] is agree
    # every pair lies inside the natural range of d_planner: the matched comparison is the same
    assert v["envelope"][0] == 0.01 and v["envelope"][1] >= 0.3 and v["n_envelope"] > 0
    assert (v["sigma_matched"], v["n_matched"], v["groups_matched"], v["share_beyond"]) == (2.0, 30, 10, 0.0)
    assert v["verdict"] == ("agree" if agree else "disagree inside the envelope")
    # the feedback edge composer -> rewriter has no perturbed source: not listed at all
    assert out["validation_skipped"] == []


def envelope_top(corpus: Any) -> float:
    """The largest d_planner of the observational pairs with d_planner > eps and d_composer defined."""
    table, _ = corpus
    d, c = table.col("planner"), table.col("composer")
    return float(d[(d > 0.01) & np.isfinite(c)].max())


@pytest.mark.parametrize(("inside", "groups", "beyond", "verdict"), [
    (0, 0, 20, "beyond the operating envelope"),
    (4, 4, 20, "beyond the operating envelope"),  # fewer than 5 matched pairs
    (6, 1, 20, "beyond the operating envelope"),  # one input group gives no interval
    (5, 2, 20, "disagree inside the envelope"),
    (3, 3, 0, "too few interventional pairs"),
])
def test_the_verdict_reads_a_gap_by_where_the_pairs_lie(corpus: Any, inside: int, groups: int, beyond: int,
                                                         verdict: str) -> None:
    top = envelope_top(corpus)
    rows = [row("pl", f"g{k % groups}", "effective", top, d={"planner": top, "composer": 2 * top}, node="planner")
            for k in range(inside)]
    rows += [row("pl", f"g{10 + k % 10}", "effective", 1.0, d={"planner": 1.0, "composer": 2.0}, node="planner")
             for k in range(beyond)]
    out = estimate(corpus, [perturbation("pl", node="planner")], rows, profile=profile_row([1.0, 1.9]))
    (v,) = out["validation"]
    assert v["verdict"] == verdict and v["agree"] is False  # sigma_int = 2 against [1.0, 1.9] in every case
    assert v["envelope"] == [0.01, round(top, 6)] and v["n_matched"] == inside
    assert v["share_beyond"] == pytest.approx(beyond / (inside + beyond)) and v["share_beyond_n"] == inside + beyond
    assert v["sigma_matched"] == (2.0 if inside else None) and v["groups_matched"] == groups


def test_validation_reads_a_real_profile(corpus: Any, tmp_path: Any) -> None:
    rng = random.Random(2)
    traces = []
    for g in range(30):
        for r in range(3):
            k = rng.randint(0, 4)
            traces.append(make_trace(f"g{g}", r, k, 2 * k))  # composer = 2 x planner, exactly
    table, graph = pair_table(traces)
    profile = analyze(traces, embedder=lambda texts: np.ones((len(texts), 2)), cache_dir=tmp_path, resamples=200)
    assert profile.edge("planner", "composer")["sigma_ci"] == [2.0, 2.0]
    out = campaign_estimates([perturbation("pl", node="planner")], doubling_rows("pl"), table, profile.to_json(),
                             graph, resamples=200, permutations=200).to_json()
    (v,) = out["validation"]
    assert v["sigma_obs"] == 2.0 and v["sigma_int"] == 2.0 and v["agree"] is True


def test_edges_without_interventional_pairs_are_listed_as_skipped(corpus: Any) -> None:
    rows = [row("pl", "g0", "effective", 0.5, d={"planner": 0.5, "composer": None}, node="planner")]
    out = estimate(corpus, [perturbation("pl", node="planner")], rows, profile=profile_row([1.8, 2.3]))
    assert out["validation"] == []
    (s,) = out["validation_skipped"]
    assert (s["source"], s["target"]) == ("planner", "composer") and "no effective ok pair" in s["reason"]


# --------------------------------------------------------------------------- determinism and report


def campaign(corpus: Any, seed: int) -> dict[str, Any]:
    perts = [perturbation("cs-override"), perturbation("pl", node="planner"),
             perturbation("rw-ladder", op="text_edit", ladder={"strength": [1, 2, 3, 4, 5]})]
    rows = hand_made() + doubling_rows("pl") + noop_rows("pl", corpus, 0.0) + ladder_rows("rw-ladder", 6)
    return estimate(corpus, perts, rows, profile=profile_row([1.8, 2.3]), seed=seed)


def test_the_same_seed_gives_the_same_campaign(corpus: Any) -> None:
    first, second = campaign(corpus, 11), campaign(corpus, 11)
    assert first == second
    other = campaign(corpus, 12)
    assert [p["strata"] for p in other["perturbations"]][0]["effective"]["D_shape"] == 0.5  # the data, not the seed
    assert other != first  # the intervals and permutation p-values move with the seed


def test_the_report_renders_every_perturbation_and_the_validation_table(corpus: Any) -> None:
    text = interventional_report(campaign(corpus, 0))
    for pid in ("cs-override", "pl", "rw-ladder"):
        assert f"### `{pid}`" in text
    assert "## Cascades across perturbations (Table 4)" in text
    assert ("| planner → composer | 2.050 [1.800, 2.300] | 80 | 2.000 [2.000, 2.000] | 30 | yes | "
            f"[0.010, {envelope_top(corpus):.3f}] (n 95) | 2.000 [2.000, 2.000] | 30 | 0.000 [0.000, 0.000] | agree |"
            ) in text
    assert "| D_shape > 0 |" in text and "mean d(composer) given D_shape > 0" in text
    assert "## Bifurcation thresholds" in text and "## Negative controls" in text
    assert text.endswith("\n") and "None" not in text


@pytest.mark.parametrize("n", [20, 21, 39, 41, 57, 80, 99])
def test_quantile_bins_hold_every_pair_once_when_the_last_bin_joins_the_one_before(n: int) -> None:
    """Ties make bins uneven; a last bin under MIN_BIN_PAIRS joins the bin before it (it
    once overwrote the bin before that instead, or raised with two bins)."""
    from quiver._interventional.betas import MIN_BIN_PAIRS, _quantile_bins

    magnitude = np.array([round(i / 7, 0) / 10 for i in range(n)], dtype=np.float64)  # runs of ties
    bins = _quantile_bins(magnitude)
    joined = np.sort(np.concatenate(bins))
    assert joined.tolist() == list(range(n))
    assert all(len(b) >= MIN_BIN_PAIRS for b in bins) or len(bins) == 1
