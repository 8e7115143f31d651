"""Observational estimators (QUIVER.md §3-§9) on synthetic pair tables with known answers.

Each table is built in code so that sigma, lambda, beta, the divergence rates, the noise
verdicts, the drift budgets and the path products are known in closed form (SALib-style
known-answer tests), with negative controls: shuffled pairs lose their lift, a node
unrelated to a gate is not a bifurcation source.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest

from quiver._observational import (
    PathProduct,
    bifurcation_thresholds,
    critical_path,
    divergence_rates,
    drift_budget,
    edge_sensitivity,
    impact_set,
    noise_origin,
    partial_sensitivities,
    path_products,
    transitive_sensitivity,
)
from quiver._stats import Estimate

_spec = importlib.util.spec_from_file_location("_quiver_tests_synthetic", Path(__file__).with_name("_synthetic.py"))
assert _spec is not None and _spec.loader is not None
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)
make_table, make_graph, bootstrap = synthetic.make_table, synthetic.make_graph, synthetic.bootstrap

EPS = 0.01


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def contains(est: Estimate, x: float) -> bool:
    assert est.ci is not None, "the estimate has no interval"
    return est.ci[0] - 1e-12 <= x <= est.ci[1] + 1e-12


def json_roundtrip(obj: object) -> dict:
    out = obj.to_json()  # type: ignore[attr-defined]
    return json.loads(json.dumps(out, allow_nan=False))


# --------------------------------------------------------------------------- sigma (Def. 3)


def test_linear_amplifier_recovers_sigma_two_exactly() -> None:
    d_i = rng().uniform(0.05, 0.5, 300)
    table = make_table({"a": d_i, "b": 2 * d_i})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.sigma.value == 2.0 and e.n == 300 and e.sigma.n == 300
    assert e.edge_class == "amplifier"
    assert contains(e.sigma, 2.0)
    assert (e.sigma_median, e.frac_ratio_below_1, e.frac_ratio_above_1_5, e.ratio_max) == (2.0, 0.0, 1.0, 2.0)


def test_noisy_amplifier_interval_contains_true_sigma() -> None:
    r = rng(1)
    d_i = r.uniform(0.05, 0.5, 600)
    table = make_table({"a": d_i, "b": 2 * d_i * r.uniform(0.8, 1.2, 600)})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.sigma.value == pytest.approx(2.0, abs=0.03)
    assert contains(e.sigma, 2.0) and e.sigma.ci[1] - e.sigma.ci[0] < 0.1  # type: ignore[index]


def test_constant_child_is_insensitive() -> None:
    table = make_table({"a": rng().uniform(0.05, 0.5, 90), "b": np.zeros(90)})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.sigma.value == 0.0 and e.edge_class == "insensitive"


def test_halving_child_is_an_absorber() -> None:
    d_i = rng().uniform(0.05, 0.5, 90)
    table = make_table({"a": d_i, "b": 0.5 * d_i})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.sigma.value == pytest.approx(0.5) and e.edge_class == "absorber"
    assert contains(e.sigma, 0.5)


def test_near_unity_band_takes_precedence_over_amplifier() -> None:
    d_i = rng().uniform(0.05, 0.5, 90)
    table = make_table({"a": d_i, "b": 1.05 * d_i})
    assert edge_sensitivity(table, "a", "b", bootstrap(table)).edge_class == "near-unity"
    assert edge_sensitivity(table, "a", "b", bootstrap(table), delta=0.01).edge_class == "amplifier"


def test_bimodal_threshold_edge_has_mean_near_one_and_median_well_below() -> None:
    r = rng(2)
    d_i = r.uniform(0.05, 0.5, 1000)
    fires = np.arange(1000) % 5 < 2  # 40% of pairs pass the drift on at 2.5x, the rest absorb it
    table = make_table({"a": d_i, "b": np.where(fires, 2.5 * d_i, 0.0)})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.sigma.value == pytest.approx(1.0)
    assert e.sigma_median == 0.0
    assert (e.frac_ratio_below_1, e.frac_ratio_above_1_5) == (pytest.approx(0.6), pytest.approx(0.4))
    hist = e.to_json()["ratio_histogram"]
    assert sum(hist["counts"]) == 1000 and hist["counts"][0] == 600


def test_edge_with_no_drifting_parent_is_undefined() -> None:
    table = make_table({"a": np.zeros(30), "b": rng().uniform(0, 1, 30)})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.n == 0 and e.sigma.value is None and e.edge_class == "undefined"
    assert e.sigma_median is None and e.ratio_max is None
    out = json_roundtrip(e)
    assert out["sigma"] is None and out["class"] == "undefined" and out["ratio_quantiles"] is None


def test_pairs_where_a_node_did_not_run_are_left_out() -> None:
    d_i = np.full(60, 0.2)
    d_j = np.where(np.arange(60) < 20, np.nan, 0.4)
    table = make_table({"a": d_i, "b": d_j})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.n == 40 and e.sigma.value == pytest.approx(2.0)
    assert e.n_above + e.n_below == 40


# --------------------------------------------------------------------------- lambda (Def. 4)


def coupled_table(seed: int = 3, n: int = 600):
    r = rng(seed)
    drifts = r.random(n) < 0.5
    d_i = np.where(drifts, r.uniform(0.1, 0.5, n), 0.0)
    d_j = np.where(drifts, r.uniform(0.1, 0.5, n), 0.0)
    return make_table({"a": d_i, "b": d_j})


def test_child_that_drifts_iff_parent_drifts_has_lift_one() -> None:
    table = coupled_table()
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.lift.value == 1.0 and contains(e.lift, 1.0)
    assert e.p_drift_above.value == 1.0 and e.p_drift_below.value == 0.0
    assert e.n_above + e.n_below == 600 and e.lift.n == 600


def test_independent_child_has_lift_near_zero() -> None:
    r = rng(4)
    table = make_table({"a": np.where(r.random(900) < 0.5, 0.3, 0.0), "b": np.where(r.random(900) < 0.5, 0.3, 0.0)})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert abs(e.lift.value) < 0.1 and contains(e.lift, 0.0)  # type: ignore[arg-type]


def test_shuffled_pairs_lose_their_lift() -> None:
    table = coupled_table()
    coupled = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert coupled.lift.ci[0] > 0.9  # type: ignore[index]
    shuffled = make_table({"a": table.col("a"), "b": rng(5).permutation(table.col("b"))})
    placebo = edge_sensitivity(shuffled, "a", "b", bootstrap(shuffled))
    assert abs(placebo.lift.value) < 0.1 and contains(placebo.lift, 0.0)  # type: ignore[arg-type]


def test_lift_is_undefined_when_a_partition_is_empty() -> None:
    d_i = rng().uniform(0.1, 0.5, 30)
    table = make_table({"a": d_i, "b": d_i})
    e = edge_sensitivity(table, "a", "b", bootstrap(table))
    assert e.n_below == 0 and e.lift.value is None and e.lift.ci is None
    assert json_roundtrip(e)["lambda"] is None


def test_lift_interval_is_the_group_bootstrap_of_the_difference() -> None:
    r = rng(6)
    d_i = np.where(r.random(120) < 0.5, 0.3, 0.0)
    d_j = np.where(r.random(120) < 0.3 + 0.4 * (d_i > 0), 0.2, 0.0)
    table = make_table({"a": d_i, "b": d_j})
    boot = bootstrap(table, resamples=200)

    def lift(w: np.ndarray) -> float | None:
        up, down, hit = w * (d_i > EPS), w * (d_i <= EPS), d_j > EPS
        if up.sum() == 0 or down.sum() == 0:
            return None
        return float((up * hit).sum() / up.sum() - (down * hit).sum() / down.sum())

    direct = boot.statistic(lift)
    fast = edge_sensitivity(table, "a", "b", boot).lift
    assert fast.value == pytest.approx(direct.value)
    np.testing.assert_allclose(fast.draws, direct.draws)  # type: ignore[arg-type]
    assert fast.ci == pytest.approx(direct.ci)


# --------------------------------------------------------------------------- partial sensitivities


def test_partial_regression_recovers_main_effects_and_interaction() -> None:
    r = rng(7)
    n = 2000
    d1, d2 = r.uniform(0, 0.6, n), r.uniform(0, 0.6, n)
    d_j = 0.02 + 0.8 * d1 + 0.3 * d2 + 1.5 * d1 * d2 + r.normal(0, 0.005, n)
    table = make_table({"p1": d1, "p2": d2, "j": d_j})
    fit = partial_sensitivities(table, "j", ["p1", "p2"], bootstrap(table))
    assert fit.status == "ok" and fit.n == n and fit.n_params == 4
    for est, truth in [(fit.intercept, 0.02), (fit.alpha["p1"], 0.8), (fit.alpha["p2"], 0.3),
                       (fit.gamma[("p1", "p2")], 1.5)]:
        assert est.value == pytest.approx(truth, abs=0.02)
        assert contains(est, truth)
    assert fit.r_squared is not None and fit.r_squared > 0.99
    out = json_roundtrip(fit)
    assert {"alpha[p1]", "alpha[p2]", "gamma[p1*p2]", "intercept_ci"} <= set(out)


def test_partial_regression_with_too_few_pairs_is_insufficient() -> None:
    r = rng(8)
    table = make_table({"p1": r.random(4), "p2": r.random(4), "j": r.random(4)})
    fit = partial_sensitivities(table, "j", ["p1", "p2"], bootstrap(table))
    assert fit.status == "insufficient" and fit.n == 4 and fit.n_params == 4
    assert fit.alpha["p1"].value is None and fit.intercept.value is None


def test_partial_regression_with_a_parent_that_never_drifts_is_rank_deficient() -> None:
    r = rng(9)
    table = make_table({"p1": r.random(50), "p2": np.zeros(50), "j": r.random(50)})
    fit = partial_sensitivities(table, "j", ["p1", "p2"], bootstrap(table))
    assert fit.status == "rank-deficient" and fit.gamma[("p1", "p2")].value is None


# --------------------------------------------------------------------------- paths (Def. 6)


def chain_table(n: int = 300):
    d_a = rng(10).uniform(0.05, 0.5, n)
    return make_table({"a": d_a, "b": 2 * d_a, "c": d_a})  # a -> b doubles, b -> c halves


def test_chain_path_product_of_two_and_a_half_is_one_and_transitive_agrees() -> None:
    table, graph = chain_table(), make_graph([("a", "b"), ("b", "c")])
    boot = bootstrap(table)
    sigmas = {e: edge_sensitivity(table, *e, boot).sigma.value for e in graph.dag_edges()}
    assert sigmas == {("a", "b"): pytest.approx(2.0), ("b", "c"): pytest.approx(0.5)}
    paths = path_products(graph, sigmas)
    assert len(paths) == 1 and not paths.truncated
    assert paths[0].nodes == ("a", "b", "c") and paths[0].product == pytest.approx(1.0)
    assert paths[0].cascade is False
    (t,) = transitive_sensitivity(table, graph, sigmas, boot)
    assert (t.source, t.target, t.n_paths, t.best_path) == ("a", "c", 1, ("a", "b", "c"))
    assert t.measured.value == pytest.approx(1.0) and t.path_max == pytest.approx(1.0)
    assert t.relative_difference == pytest.approx(0.0, abs=1e-12)
    assert contains(t.measured, 1.0)


def test_diamond_paths_critical_path_and_undefined_edges() -> None:
    graph = make_graph([("s", "x"), ("s", "y"), ("x", "t"), ("y", "t")])
    paths = path_products(graph, {("s", "x"): 3.0, ("x", "t"): 0.5, ("s", "y"): 1.2, ("y", "t"): None})
    assert [p.nodes for p in paths] == [("s", "x", "t"), ("s", "y", "t")]
    assert paths[1].product is None and paths[1].cascade is None
    crit = critical_path(paths)
    assert crit is not None and crit.nodes == ("s", "x", "t") and crit.product == pytest.approx(1.5)
    assert crit.cascade is True
    assert critical_path([PathProduct.of(["s", "y", "t"], {})]) is None
    assert json_roundtrip(paths)["critical"]["sigma"] == 1.5


def test_path_enumeration_stops_at_the_limit_and_says_so() -> None:
    graph = make_graph([("s", "x"), ("s", "y"), ("x", "t"), ("y", "t")])
    paths = path_products(graph, {}, limit=1)
    assert len(paths) == 1 and paths.truncated


def test_path_products_leave_out_loop_feedback() -> None:
    graph = make_graph([("a", "p"), ("p", "e"), ("e", "p"), ("e", "c")], loop_body=["p", "e"])
    paths = path_products(graph, {("a", "p"): 1.0, ("p", "e"): 2.0, ("e", "c"): 1.0, ("e", "p"): 9.0})
    assert [p.nodes for p in paths] == [("a", "p", "e", "c")] and paths[0].product == 2.0


# --------------------------------------------------------------------------- divergence (Def. 7-9)


def test_chain_pipeline_has_no_structural_divergence() -> None:
    table = chain_table()
    rates = divergence_rates(table, bootstrap(table))
    for est in (rates.iter, rates.shape, rates.struct):
        assert est.value == 0.0 and est.ci == (0.0, 0.0) and est.n == 300
    assert rates.output.value == 1.0 and rates.output_only.value == rates.output.value
    assert rates.output_only.ci == rates.output.ci


def test_known_iteration_divergence_rate() -> None:
    n = 400
    k = np.arange(n)
    d_iter = np.where(k % 4 == 0, 2, 0)  # one pair in four, evenly in every group of four
    d_shape = k % 4 == 1
    table = make_table({"a": np.where(k % 2 == 0, 0.3, 0.0)}, group=k // 4, d_iter=d_iter, d_shape=d_shape)
    rates = divergence_rates(table, bootstrap(table))
    assert rates.iter.value == 0.25 and rates.iter.ci == pytest.approx((0.25, 0.25))
    assert rates.shape.value == 0.25 and rates.output.value == 0.5
    assert rates.output_only.value == 0.25  # the k % 4 == 2 pairs: value drift alone
    out = json_roundtrip(rates)
    assert out["d_iter_rate"] == 0.25 and out["d_iter_rate_n"] == n


# --------------------------------------------------------------------------- thresholds (Def. 10)


def gate_table(seed: int = 11, n: int = 600, b: float = 0.3):
    r = rng(seed)
    d_gate = r.uniform(0.0, 0.6, n)
    d_other = np.where(r.random(n) < 0.3, 0.0, r.uniform(0.05, 0.5, n))
    return make_table({"gate": d_gate, "other": d_other}, d_shape=d_gate > b), d_gate


def test_gate_threshold_is_the_smallest_bifurcating_drift_and_a_source() -> None:
    table, d_gate = gate_table()
    th = bifurcation_thresholds(table, "gate", bootstrap(table))
    assert th.beta_shape.value == d_gate[d_gate > 0.3].min()
    assert th.beta_shape.n == int((d_gate > 0.3).sum())
    assert th.bifurcation_source
    assert contains(th.beta_shape, th.beta_shape.value)  # type: ignore[arg-type]
    assert th.beta_iter.value is None and th.beta_iter.n == 0


def test_node_unrelated_to_the_gate_has_beta_zero_and_is_not_a_source() -> None:
    table, _ = gate_table()
    th = bifurcation_thresholds(table, "other", bootstrap(table))
    assert th.beta_shape.value == 0.0 and not th.bifurcation_source
    assert json_roundtrip(th)["bifurcation_source"] is False


def test_beta_interval_is_the_group_bootstrap_of_the_minimum() -> None:
    table, d_gate = gate_table(n=90)
    boot = bootstrap(table, resamples=200)
    sel = d_gate > 0.3

    def weighted_min(w: np.ndarray) -> float | None:
        keep = (w > 0) & sel
        return float(d_gate[keep].min()) if keep.any() else None

    direct = boot.statistic(weighted_min)
    fast = bifurcation_thresholds(table, "gate", boot).beta_shape
    np.testing.assert_array_equal(fast.draws, direct.draws)  # type: ignore[arg-type]
    assert fast.ci == direct.ci


# --------------------------------------------------------------------------- noise origins (§8)


def noisy_chain(n: int = 600):
    """a (source, drifts) -> b (intrinsic noise: drifts on its own) -> c (copies b) -> d (stable)."""
    r = rng(12)
    d_a = np.where(r.random(n) < 0.3, 0.2, 0.0)
    d_b = np.where(r.random(n) < 0.4, r.uniform(0.05, 0.3, n), 0.0)
    return make_table({"a": d_a, "b": d_b, "c": d_b.copy(), "d": np.zeros(n)}), \
        make_graph([("a", "b"), ("b", "c"), ("c", "d")])


def test_node_with_intrinsic_noise_is_an_origin_and_its_child_a_propagator() -> None:
    table, graph = noisy_chain()
    boot = bootstrap(table)
    b = noise_origin(table, graph, "b", boot)
    assert b.verdict == "origin" and b.n_clean_parents_drift > 0
    assert b.noise_floor.value == pytest.approx(table.col("b").mean())
    c = noise_origin(table, graph, "c", boot)
    assert c.verdict == "propagator" and c.n_clean_parents > 0 and c.n_clean_parents_drift == 0
    assert c.n_drift == b.n_drift
    assert noise_origin(table, graph, "a", boot).verdict == "origin"  # no parents, drifts
    d = noise_origin(table, graph, "d", boot)
    assert d.verdict == "stable" and d.noise_floor.value == 0.0


def test_always_upstream_dirty_node_is_indeterminate_with_its_drift_rate() -> None:
    n = 60
    k = np.arange(n)
    table = make_table({"a": np.full(n, 0.5), "b": np.where(k % 3 == 0, 0.2, 0.0)})
    v = noise_origin(table, make_graph([("a", "b")]), "b", bootstrap(table))
    assert v.verdict == "indeterminate" and v.n_clean_parents == 0
    assert v.drift_rate.value == pytest.approx(1 / 3) and contains(v.drift_rate, 1 / 3)
    assert json_roundtrip(v)["verdict"] == "indeterminate"


def test_parent_that_did_not_run_counts_as_clean() -> None:
    n = 30
    table = make_table({"a": np.full(n, np.nan), "b": np.full(n, 0.2)})
    v = noise_origin(table, make_graph([("a", "b")]), "b", bootstrap(table))
    assert v.verdict == "origin" and v.n_clean_parents == n


# --------------------------------------------------------------------------- drift budgets (§9)


def budget_table():
    d_i = np.arange(100) / 100  # 0.00 .. 0.99, distinct
    d_j = np.where(d_i > 0.5, 0.4, 0.0)  # v_j leaves its noise floor iff d_i > 0.5
    return make_table({"i": d_i, "j": d_j}), d_i


def test_drift_budget_has_the_known_tau() -> None:
    table, _ = budget_table()
    # P(d_j > floor | d_i > k/100) = 49 / (99 - k) for k <= 50: first >= 0.9 at k = 45
    b = drift_budget(table, "i", "j", alpha=0.9, noise_floor_target=0.05, boot=bootstrap(table))
    assert b.status == "ok" and b.tau == pytest.approx(0.45)
    assert b.n_above == 54 and b.probability.value == pytest.approx(49 / 54)
    assert b.probability.ci is not None
    strict = drift_budget(table, "i", "j", alpha=1.0, noise_floor_target=0.05)
    assert strict.tau == pytest.approx(0.5) and strict.n_above == 49 and strict.probability.value == 1.0


def test_drift_budget_is_never_when_the_probability_never_reaches_alpha() -> None:
    d_i = np.arange(100) / 100
    table = make_table({"i": d_i, "j": np.where(d_i > 0.94, 0.4, 0.0)})  # only 5 pairs above the floor
    b = drift_budget(table, "i", "j", alpha=0.9, noise_floor_target=0.05)
    assert b.status == "never" and b.tau is None
    assert b.max_probability == pytest.approx(0.5) and b.n_above == 10  # the best tau with 10 pairs above
    assert json_roundtrip(b)["status"] == "never"


def test_drift_budget_below_ten_pairs_is_insufficient() -> None:
    table = make_table({"i": np.linspace(0.1, 0.9, 9), "j": np.full(9, 0.5)})
    b = drift_budget(table, "i", "j", alpha=0.5, noise_floor_target=0.0)
    assert b.status == "insufficient" and b.tau is None and b.probability.value is None


def test_drift_budget_does_not_count_drift_below_the_kernel_floor() -> None:
    d_i = np.arange(100) / 100
    table = make_table({"i": d_i, "j": np.full(100, 1e-6)})  # float-level noise at a deterministic node
    b = drift_budget(table, "i", "j", alpha=0.5, noise_floor_target=0.0)
    assert b.threshold == EPS and b.status == "never"


# --------------------------------------------------------------------------- impact sets (§9)


def test_impact_set_follows_path_products_above_alpha() -> None:
    graph = make_graph([("a", "b"), ("b", "c"), ("c", "d")])
    sigmas = {("a", "b"): 2.0, ("b", "c"): 0.5, ("c", "d"): 3.0}
    assert impact_set(graph, "a", 0.9, sigmas).nodes == ["b", "c", "d"]
    strict = impact_set(graph, "a", 1.5, sigmas)
    assert strict.nodes == ["b", "d"]  # c's only path has sigma 1.0
    assert strict.members[1].path == ("a", "b", "c", "d") and strict.members[1].path_sigma == pytest.approx(3.0)


def test_impact_set_adds_loop_nodes_whose_beta_is_below_the_drift() -> None:
    graph = make_graph([("a", "p"), ("p", "e"), ("e", "p"), ("e", "c")], loop_body=["p", "e"])
    sigmas = {("a", "p"): 0.2, ("p", "e"): 0.2, ("e", "c"): 0.2}
    betas: dict[str, float | None] = {"p": 0.15, "e": 0.0, "c": 0.05}
    s = impact_set(graph, "a", 0.5, sigmas, betas=betas, drift=0.3)
    assert s.nodes == ["p"]  # e's beta 0 is no bifurcation source; c is not in the loop
    assert s.members[0].beta_shape == 0.15 and s.members[0].path is None
    assert "loop-body" in s.members[0].reasons[0]
    assert impact_set(graph, "a", 0.5, sigmas, betas=betas, drift=0.1).nodes == []


def test_impact_set_lists_nodes_behind_undefined_edges_as_unassessed() -> None:
    graph = make_graph([("a", "b"), ("b", "c")])
    s = impact_set(graph, "a", 0.5, {("a", "b"): 2.0, ("b", "c"): None})
    assert s.nodes == ["b"] and s.unassessed == ("c",)
    assert json_roundtrip(s)["unassessed"] == ["c"]


# --------------------------------------------------------------------------- scale


def test_all_estimators_on_a_24000_pair_table() -> None:
    """24,000 pairs, 200 groups, 6 nodes, 8 edges, 1,000 resamples (timing printed with -s)."""
    r = rng(13)
    n, groups = 24_000, 200
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("b", "e"), ("d", "e"), ("d", "f"), ("e", "f")]
    graph = make_graph(edges)
    d: dict[str, np.ndarray] = {"a": np.where(r.random(n) < 0.6, r.uniform(0, 0.5, n), 0.0)}
    for node in graph.topological_order()[1:]:
        parents = graph.parents(node)
        base = sum(d[p] for p in parents) / len(parents)
        d[node] = np.clip(base * r.uniform(0.3, 2.0, n) + np.where(r.random(n) < 0.1, 0.05, 0.0), 0, 1)
    d_shape = d["d"] > 0.4
    table = make_table(d, group=np.repeat(np.arange(groups), n // groups), d_shape=d_shape,
                       d_iter=np.where(d["e"] > 0.5, 1, 0), d_struct=d_shape)
    start = time.perf_counter()
    boot = bootstrap(table)
    results: list[object] = []
    es = {e: edge_sensitivity(table, *e, boot) for e in edges}
    sigmas = {e: s.sigma.value for e, s in es.items()}
    results += es.values()
    results += [
        partial_sensitivities(table, v, graph.parents(v), boot) for v in graph.nodes if len(graph.parents(v)) > 1
    ]
    results.append(path_products(graph, sigmas))
    results += transitive_sensitivity(table, graph, sigmas, boot)
    results.append(divergence_rates(table, boot))
    noise = {v: noise_origin(table, graph, v, boot) for v in graph.nodes}
    results += noise.values()
    betas = {v: bifurcation_thresholds(table, v, boot) for v in graph.nodes}
    results += betas.values()
    results += [drift_budget(table, i, j, 0.5, noise[j].noise_floor.value or 0.0, boot=boot) for i, j in edges]
    results.append(impact_set(graph, "a", 0.5, sigmas, {v: t.beta_shape.value for v, t in betas.items()}, 0.3))
    elapsed = time.perf_counter() - start
    print(f"\n24,000 pairs x 6 nodes x 8 edges, 1,000 resamples: all estimators in {elapsed:.2f} s")
    for obj in results:
        json_roundtrip(obj)
    assert all(s.sigma.ci is not None for s in es.values())
    assert betas["d"].bifurcation_source
