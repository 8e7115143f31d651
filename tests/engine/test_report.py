"""The analysis report and plots: what an engineer reads after ``quiver analyze``."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quiver._report import fmt, fmt_ci, fmt_est, graph_nodes, render_report, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _ratios(rng: np.random.Generator, n: int, low: float, high: float, tail: float) -> list[float]:
    """A bimodal ratio distribution: most pairs absorbed around ``low``, a tail around ``high``."""
    k = int(n * tail)
    body = rng.gamma(4.0, low / 4.0, n - k)
    spikes = rng.normal(high, high / 5, k).clip(0.0)
    return [round(float(x), 4) for x in np.concatenate([body, spikes])]


def _edge(source: str, target: str, n: int, sigma: float | None, cls: str, rng: np.random.Generator,
          lam: float | None = 0.3, above: int = 0, below: int = 0) -> dict[str, Any]:
    ratios = _ratios(rng, n, 0.6 * (sigma or 0), 3.0 * (sigma or 0), 0.2) if n and sigma else []
    def stat(f: Any) -> float | None:
        return round(float(f(np.array(ratios))), 3) if ratios else None
    return {
        "source": source, "target": target, "n": n,
        "sigma": sigma, "sigma_ci": [round(sigma * 0.9, 3), round(sigma * 1.1, 3)] if sigma is not None else None,
        "sigma_n": n,
        "sigma_median": stat(np.median), "frac_ratio_below_1": stat(lambda a: (a < 1).mean()),
        "frac_ratio_above_1_5": stat(lambda a: (a > 1.5).mean()), "ratio_max": stat(np.max),
        "lambda": lam, "lambda_ci": [max(-1.0, lam - 0.05), min(1.0, lam + 0.05)] if lam is not None else None,
        "lambda_n": above + below, "lambda_n_above": above, "lambda_n_below": below,
        "class": cls, "ratios": ratios,
    }


def realistic_profile() -> dict[str, Any]:
    """Six nodes, a planner/executor loop, every section, some nulls, two undefined edges."""
    rng = np.random.default_rng(7)
    fields = {"type": "text", "role": "context"}
    edges = [
        _edge("signal", "rewriter", 0, None, "undefined", rng, lam=None, above=0, below=400),
        _edge("signal", "planner", 0, None, "undefined", rng, lam=None, above=0, below=400),
        _edge("rewriter", "discovery", 266, 1.128, "amplifier", rng, lam=0.994, above=266, below=134),
        _edge("discovery", "planner", 267, 0.295, "absorber", rng, lam=0.27, above=267, below=133),
        _edge("planner", "executor", 943, 1.069, "amplifier", rng, lam=0.14, above=943, below=57),
        _edge("executor", "planner", 512, 0.952, "near-unity", rng, lam=0.05, above=512, below=488),
        _edge("executor", "composer", 940, 0.004, "insensitive", rng, lam=0.0, above=940, below=60),
        _edge("discovery", "composer", 267, 0.313, "absorber", rng, lam=0.04, above=267, below=133),
    ]
    edges[2].update(sigma_median=0.65, frac_ratio_below_1=0.6, frac_ratio_above_1_5=0.2, ratio_max=7.1)
    return {
        "traces": 1500, "failed_traces": 3, "groups": 200, "pairs": 24693, "epsilon": 0.01,
        "resamples": 1000, "seed": 0, "engine_version": "0.1.0",
        "graph": {
            "nodes": {
                "signal": {"fields": {"turn_type": {"type": "categorical", "role": "routing"},
                                      "is_small_talk": {"type": "bool", "role": "routing"},
                                      "sentiment": {"type": "categorical"}}, "output": None},
                "rewriter": {"fields": None, "output": fields},
                "discovery": {"fields": None, "output": {"type": "set", "role": "context"}},
                "planner": {"fields": {"task": {"type": "text", "role": "context"},
                                       "action": {"type": "categorical", "role": "routing"},
                                       "thought": {"type": "text", "role": "observability"}}, "output": None},
                "executor": {"fields": None, "output": {"type": "json"}},
                "composer": {"fields": None, "output": fields},
            },
            "edges": [[e["source"], e["target"]] for e in edges],
            "loop": {"body": ["planner", "executor"], "k_max": 5},
            "inferred": {"inferred_nodes": ["executor"], "inferred_fields": {"executor": {"output": "json"},
                                                                             "signal": {"sentiment": "categorical"}},
                         "inferred_edges": False},
        },
        "embedding": {"model": "all-MiniLM-L6-v2", "needed": 6000, "embedded": 5400, "cache_hits": 600,
                      "load_seconds": 3.14, "encode_seconds": 40.2},
        "edges": edges,
        "partials": [{"node": "planner", "parents": ["discovery", "executor"], "n": 300, "params": 4,
                      "coefficients": {"discovery": {"value": 0.41, "ci": [0.3, 0.52]},
                                       "executor": {"value": 0.22, "ci": [0.1, 0.35]},
                                       "discovery*executor": {"value": -0.05, "ci": None},
                                       "intercept": {"value": 0.0312, "ci": [0.01, 0.05]}}}],
        "nodes": [
            {"node": "signal", "noise_floor": 0.0, "noise_floor_ci": [0.0, 0.0], "noise_floor_n": 24693,
             "origin": "stable", "drift_rate": 0.0, "beta_shape": None, "beta_shape_n": 0,
             "beta_iter": None, "beta_iter_n": 0, "bifurcation_source": False},
            {"node": "rewriter", "noise_floor": 0.146, "noise_floor_ci": [0.13, 0.161], "noise_floor_n": 24693,
             "origin": "origin", "drift_rate": 0.62, "beta_shape": 0.031, "beta_shape_n": 88,
             "beta_iter": None, "beta_iter_n": 0, "bifurcation_source": True},
            {"node": "discovery", "noise_floor": 0.281, "noise_floor_ci": [0.25, 0.31], "noise_floor_n": 24693,
             "origin": "propagator", "drift_rate": 0.7, "beta_shape": 0.0, "beta_shape_n": 120,
             "beta_iter": 0.0, "beta_iter_n": 30, "bifurcation_source": False},
            {"node": "planner", "noise_floor": 0.1, "noise_floor_ci": [0.08, 0.12], "noise_floor_n": 900,
             "origin": "indeterminate", "drift_rate": 0.3, "drift_rate_ci": [0.25, 0.35], "drift_rate_n": 900,
             "beta_shape": 0.102, "beta_shape_n": 40, "beta_iter": None, "beta_iter_n": 0,
             "bifurcation_source": True},
            {"node": "executor", "noise_floor": 0.0005, "noise_floor_ci": None, "noise_floor_n": 812,
             "origin": None, "drift_rate": None, "beta_shape": None, "beta_shape_n": 0,
             "beta_iter": None, "beta_iter_n": 0, "bifurcation_source": None},
            {"node": "composer", "noise_floor": 0.178, "noise_floor_ci": [0.16, 0.2], "noise_floor_n": 24693,
             "origin": "propagator", "drift_rate": 0.9, "beta_shape": 0.0, "beta_shape_n": 12,
             "beta_iter": 0.0, "beta_iter_n": 12, "bifurcation_source": False, "unknown_extra": [1, 2]},
        ],
        "divergence": {"D_iter": 0.033, "D_iter_ci": [0.028, 0.039], "D_iter_n": 24693,
                       "D_shape": 0.129, "D_shape_ci": [0.11, 0.148], "D_shape_n": 24693,
                       "D_output": 0.924, "D_output_ci": [0.91, 0.94], "D_output_n": 24693,
                       "D_output_only": 0.763, "D_output_only_ci": None, "D_output_only_n": 24693,
                       "D_struct": 0.162, "D_struct_ci": [0.14, 0.18], "D_struct_n": 24693},
        "paths": [{"path": ["rewriter", "discovery", "planner", "executor", "composer"], "sigma": 0.0013,
                   "cascade": False},
                  {"path": ["rewriter", "discovery", "planner", "executor"], "sigma": 0.356, "cascade": False},
                  {"path": ["rewriter", "discovery", "composer"], "sigma": 0.353, "cascade": False},
                  {"path": ["signal", "planner", "executor"], "sigma": None, "cascade": None}]
                 + [{"path": ["p", f"q{i}", "r"], "sigma": 0.01 * i, "cascade": False} for i in range(10)],
        "critical_path": {"path": ["rewriter", "discovery", "planner", "executor"], "sigma": 0.356},
        "transitive": [{"source": "rewriter", "target": "planner", "sigma": 0.341, "sigma_ci": [0.3, 0.38],
                        "sigma_n": 266, "path_product": 0.333, "relative_difference": 0.024},
                       {"source": "rewriter", "target": "composer", "sigma": 0.5, "sigma_ci": [0.45, 0.55],
                        "sigma_n": 266, "path_product": 0.353, "relative_difference": 0.416}],
        "budgets": [{"source": "rewriter", "target": "discovery", "alpha": 0.5, "tau": 0.12, "status": "ok",
                     "probability": 0.55, "n": 40},
                    {"source": "discovery", "target": "planner", "alpha": 0.5, "tau": None, "status": "never",
                     "probability": 0.31, "n": 267},
                    {"source": "rewriter", "target": "discovery", "alpha": 0.9, "tau": None,
                     "status": "insufficient", "probability": None, "n": 7}],
        "impact_sets": [{"source": "rewriter", "alpha": 0.5,
                         "members": [{"node": "discovery", "reason": "sigma(rewriter->discovery) = 1.128 > 0.5"},
                                     {"node": "planner", "reason": "beta_shape(planner) = 0.102 < d = 0.3"}]},
                        {"source": "executor", "alpha": 0.5, "members": []}],
        "faithfulness": [{"node": "signal", "gap": 0.047, "n": 1500, "min_field": "sentiment",
                          "max_field": "turn_type",
                          "fields": {"turn_type": {"distance": 0.225, "n": 1500, "kl": 0.05},
                                     "is_small_talk": {"distance": 0.02, "n": 1500, "kl": 0.001},
                                     "sentiment": {"distance": 0.0, "n": 1500, "kl": None}}},
                         {"node": "composer", "gap": 0.696, "n": 1356, "min_field": None, "max_field": None,
                          "fields": {}}],
    }


MINIMAL: dict[str, Any] = {
    "traces": 4, "failed_traces": 0, "groups": 2, "pairs": 2, "epsilon": 0.01, "resamples": 1000, "seed": 0,
    "graph": {"nodes": {"only": {"output": {"type": "text"}}}, "edges": [], "loop": None},
    "edges": [], "nodes": [{"node": "only", "noise_floor": None, "noise_floor_ci": None, "noise_floor_n": 0}],
    "divergence": {"D_iter": 0.0, "D_iter_ci": [0.0, 0.0], "D_iter_n": 2},
    "paths": [], "critical_path": None,
}


@pytest.fixture(scope="module")
def report() -> str:
    return render_report(realistic_profile())


# --------------------------------------------------------------------------- formatting


def test_numbers_have_three_decimals_and_null_is_a_dash() -> None:
    assert fmt(1.1284) == "1.128"
    assert fmt(0) == "0.000"
    assert fmt(0.00012) == "0.00012"
    assert fmt(0.994, signed=True) == "+0.994"
    assert fmt(None) == fmt(float("nan")) == "—"
    assert fmt_ci([0.1, 0.25]) == "[0.100, 0.250]"
    assert fmt_ci(None) == ""
    assert fmt_est({"x": 0.5, "x_ci": None}, "x") == "0.500"
    assert fmt_est({"x": None}, "x") == "—"


def test_nodes_are_listed_parents_first_with_the_loop_feedback_broken() -> None:
    assert graph_nodes(realistic_profile()) == ["signal", "rewriter", "discovery", "planner", "executor", "composer"]


# --------------------------------------------------------------------------- the report


def test_header_states_the_corpus_and_the_bootstrap(report: str) -> None:
    assert report.startswith("# QUIVER analysis report\n")
    assert "**Corpus:** 1,500 traces (3 failed) in 200 input groups, 24,693 same-input pairs." in report
    assert "epsilon = 0.01" in report and "1,000 bootstrap resamples of input groups (seed 0)" in report
    assert "> 3 trace(s) failed and are left out of every estimate." in report


def test_every_section_explains_how_to_read_it(report: str) -> None:
    sections = [line for line in report.splitlines() if line.startswith("## ") and line != "## At a glance"]
    assert len(sections) == 11
    assert report.count("*How to read this:*") == len(sections)


def test_graph_lists_field_types_roles_and_what_was_inferred(report: str) -> None:
    assert ("| signal | — (source) | turn_type: categorical, routing; is_small_talk: bool, routing; "
            "sentiment: categorical, context *(inferred)* |") in report
    assert "| executor *(inferred)* | planner | output: json, context (whole output) |" in report
    assert "Loop: body planner → executor, at most k_max = 5 iterations." in report


def _table_rows(report: str, section: str) -> list[str]:
    """The table rows (not the header nor the rule) of the section whose title starts with ``section``."""
    text = report.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return rows[2:]


def test_edge_table_rows_are_sorted_by_sigma_with_undefined_last(report: str) -> None:
    rows = _table_rows(report, "Edge sensitivity")
    assert [r.split(" | ")[0] for r in rows] == [
        "| rewriter → discovery", "| planner → executor", "| executor → planner", "| discovery → composer",
        "| discovery → planner", "| executor → composer", "| signal → rewriter", "| signal → planner",
    ]
    assert rows[0] == ("| rewriter → discovery | 266 | 1.128 [1.015, 1.241] | 0.650 | 0.600 | 0.200 | 7.100 "
                       "| +0.994 [+0.944, +1.000] | 266 / 134 | amplifier |")
    assert rows[-1] == "| signal → planner | 0 | — | — | — | — | — | — | 0 / 400 | undefined |"


def test_summary_names_amplifiers_with_n_origins_and_bifurcation_sources(report: str) -> None:
    assert ("- Amplifying edges: 2 of 8: rewriter → discovery (1.128, n = 266), "
            "planner → executor (1.069, n = 943).") in report
    assert "- Noise origins: rewriter; bifurcation sources: rewriter, planner." in report


def test_node_table_shows_noise_floor_origin_and_betas_with_n(report: str) -> None:
    assert ("| planner | 0.100 [0.080, 0.120] | 900 | indeterminate | 0.300 [0.250, 0.350] (n = 900) | 0.102 | 40 "
            "| — | 0 | yes |") in report
    assert "| executor | 0.0005 | 812 | — | — | — | 0 | — | 0 | — |" in report


def test_divergence_rates_come_with_intervals_and_n(report: str) -> None:
    assert "| D_shape > 0 | 0.129 [0.110, 0.148] | 24,693 | the branch or action decisions taken |" in report
    assert "| D_output-only | 0.763 | 24,693 |" in report


def test_paths_show_the_top_ten_and_the_critical_path(report: str) -> None:
    assert ("**Critical amplification path:** rewriter → discovery → planner → executor, sigma(p) = 0.356, "
            "n = 266.") in report
    assert "Top 10 of 14 paths by sigma(p)." in report
    assert "| 1 | rewriter → discovery → planner → executor | 0.356 | no | 266 |" in report
    assert "signal → planner → executor" not in report  # the undefined path ranks last, beyond the top 10


def test_partials_transitive_budgets_impact_faithfulness_and_embedding(report: str) -> None:
    assert "| planner ← discovery, executor | discovery | 0.410 [0.300, 0.520] | 300 | 4 | — | ok |" in report
    assert "| planner ← discovery, executor | discovery × executor | -0.050 | 300 | 4 | — | ok |" in report
    assert "| rewriter → planner | 0.341 [0.300, 0.380] | 266 | 0.333 | 0.024 | yes |" in report
    assert "| rewriter → composer | 0.500 [0.450, 0.550] | 266 | 0.353 | 0.416 | no |" in report
    assert "### alpha = 0.500" in report and "### alpha = 0.900" in report
    assert "| rewriter → discovery | 0.120 | — | 0.550 | 40 | ok |" in report
    assert "| discovery → planner | never | — | 0.310 | 267 | never |" in report
    assert "| rewriter → discovery | insufficient data | — | — | 7 | insufficient |" in report
    assert ("- **rewriter**, alpha = 0.500: discovery (sigma(rewriter->discovery) = 1.128 > 0.5); "
            "planner (beta_shape(planner) = 0.102 < d = 0.3)") in report
    assert "- Nothing to re-evaluate at any alpha after a change at: executor." in report
    assert "| signal | 0.047 | 1,500 | sentiment (0.000) | turn_type (0.225) |" in report
    assert "| composer | 0.696 | 1,356 | — | — |" in report
    assert "| signal | turn_type | 0.225 | 1,500 | 0.050 |" in report
    assert ("Model all-MiniLM-L6-v2: 6,000 texts needed, 5,400 embedded, 600 cache hits; model load 3.1 s, "
            "encoding 40.2 s.") in report


def test_the_analyzer_spellings_of_partitions_partials_budgets_and_reasons_are_read() -> None:
    profile = realistic_profile()
    edge = profile["edges"][2]
    edge["n_above"], edge["n_below"] = edge.pop("lambda_n_above"), edge.pop("lambda_n_below")
    profile["partials"] = [{"target": "planner", "parents": ["discovery", "executor"], "status": "ok", "n": 300,
                            "n_params": 4, "r_squared": 0.62, "intercept": 0.03, "intercept_ci": [0.01, 0.05],
                            "intercept_n": 300, "alpha[discovery]": 0.41, "alpha[discovery]_ci": [0.3, 0.52],
                            "alpha[discovery]_n": 300, "gamma[discovery*executor]": None,
                            "gamma[discovery*executor]_ci": None, "gamma[discovery*executor]_n": 300}]
    profile["budgets"] = [{"source": "rewriter", "target": "discovery", "alpha": 0.5, "status": "ok", "tau": 0.1,
                           "noise_floor_target": 0.281, "probability": 0.63, "probability_ci": [0.51, 0.75],
                           "probability_n": 76}]
    profile["impact_sets"] = [{"source": "rewriter", "alpha": 0.5, "drift": None, "unassessed": ["composer"],
                               "members": [{"node": "discovery", "path": ["rewriter", "discovery"],
                                            "reasons": ["path rewriter -> discovery has sigma(p) = 1.13 > 0.5"]}]}]
    profile["divergence"]["n_pairs"] = 24693
    profile["nodes"][1]["n_clean_parents"] = 400
    text = render_report(profile)
    assert "| +0.994 [+0.944, +1.000] | 266 / 134 | amplifier |" in text
    assert "| planner ← discovery, executor | discovery | 0.410 [0.300, 0.520] | 300 | 4 | 0.620 | ok |" in text
    assert "| planner ← discovery, executor | discovery × executor | — | 300 | 4 | 0.620 | ok |" in text
    assert "| planner ← discovery, executor | intercept | 0.030 [0.010, 0.050] | 300 | 4 | 0.620 | ok |" in text
    assert "| rewriter → discovery | 0.100 | 0.281 | 0.630 [0.510, 0.750] | 76 | ok |" in text
    assert ("- **rewriter**, alpha = 0.500: discovery (path rewriter -> discovery has sigma(p) = 1.13 > 0.5); "
            "not assessed (every path has an undefined sigma): composer") in text
    assert "n_pairs" not in text
    assert "| rewriter | 0.146 [0.130, 0.161] | 24,693 | origin (400 clean-parent pairs) |" in text


def test_every_table_with_an_estimate_has_an_n_column(report: str) -> None:
    headers = [line for line in report.splitlines() if line.startswith("| ") and "[95% CI]" in line]
    assert headers
    for header in headers:
        assert "| n" in header, header


def test_a_minimal_profile_renders_without_optional_sections() -> None:
    text = render_report(MINIMAL)
    assert "No edge was estimated." in text
    assert "**Critical amplification path:** none" in text
    assert "| D_iter > 0 | 0.000 [0.000, 0.000] | 2 |" in text
    for absent in ("Drift budgets", "Distribution faithfulness", "Impact sets", "Text embeddings"):
        assert absent not in text
    assert render_report({}).startswith("# QUIVER analysis report")


def test_write_report_writes_report_md_with_plot_links(tmp_path: Path) -> None:
    path = write_report(MINIMAL, tmp_path / "out", images=[tmp_path / "out" / "graph.png"])
    assert path == tmp_path / "out" / "report.md"
    assert path.read_text(encoding="utf-8").endswith("![graph](graph.png)\n")


# --------------------------------------------------------------------------- plots


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_write_plots_writes_three_valid_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from quiver._report import write_plots

    paths = write_plots(realistic_profile(), tmp_path)
    assert [p.name for p in paths] == ["ratios.png", "sigma_matrix.png", "graph.png"]
    for path in paths:
        width, height = _png_size(path)
        assert 400 <= width <= 4000 and 300 <= height <= 4000, (path.name, width, height)
        assert 10_000 < path.stat().st_size < 3_000_000, path.name
    if os.environ.get("QUIVER_PLOTS_DIR"):  # to look at them: QUIVER_PLOTS_DIR=/tmp/quiver_plots pytest ...
        write_plots(realistic_profile(), Path(os.environ["QUIVER_PLOTS_DIR"]))


def test_write_plots_skips_the_ratio_grid_without_ratios(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from quiver._report import write_plots

    assert [p.name for p in write_plots(MINIMAL, tmp_path)] == ["sigma_matrix.png", "graph.png"]


def test_the_ratio_grid_falls_back_to_the_stored_histogram(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from quiver._report import write_plots

    profile = realistic_profile()
    bins = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, None]
    for edge in profile["edges"]:
        ratios = edge.pop("ratios")
        if ratios:
            counts = np.histogram(ratios, bins=[np.inf if b is None else b for b in bins])[0]
            edge["ratio_histogram"] = {"edges": bins, "counts": counts.tolist()}
    paths = write_plots(profile, tmp_path)
    assert paths[0].name == "ratios.png" and _png_size(paths[0])[0] >= 400


def test_write_plots_without_matplotlib_says_how_to_install_it(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from quiver._report import write_plots

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install "quiver-engine\[plots\]"'):
        write_plots(MINIMAL, tmp_path)


def test_importing_the_report_modules_does_not_import_matplotlib() -> None:
    code = "import sys, quiver._report, quiver._report; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- report.html


def test_the_excess_interval_combines_the_two_rates_intervals() -> None:
    """MOVER (Zou and Donner 2008): 0.5 [0.4, 0.6] minus 0.1 [0.05, 0.2] is 0.4 with
    0.4 - sqrt(0.1^2 + 0.1^2) and 0.4 + sqrt(0.1^2 + 0.05^2) as its ends."""
    from quiver._report.summary import excess
    from quiver._stats import Estimate

    e = excess(Estimate(0.5, (0.4, 0.6), 100), Estimate(0.1, (0.05, 0.2), 80))
    assert e.value == pytest.approx(0.4)
    assert e.lo == pytest.approx(0.4 - (0.1**2 + 0.1**2) ** 0.5)
    assert e.hi == pytest.approx(0.4 + (0.1**2 + 0.05**2) ** 0.5)
    assert excess(Estimate(0.5, (0.4, 0.6), 100), None).value is None
    assert excess(Estimate.empty(), Estimate(0.1, (0.05, 0.2), 80)).value is None


def _page(tmp_path: Path, profile: dict[str, Any]) -> str:
    import json

    from quiver._report import write_html

    (tmp_path / "profile.json").write_text(json.dumps(profile))
    return write_html(tmp_path).read_text()


def test_the_analysis_page_is_one_self_contained_file(tmp_path: Path) -> None:
    import re

    text = _page(tmp_path, realistic_profile())
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    assert all(r.startswith(("data:", "#", "url(#")) for r in refs), refs
    assert "<script" not in text and "<link" not in text and "@import" not in text
    for plot in ('data-plot="graph"', 'data-plot="sigma_matrix"'):
        assert plot in text
    assert text.count("<details>") >= 8  # every section of report.md folded
    assert 'id="rates"' in text and 'id="amplifiers"' in text and 'id="sources"' in text


def test_the_graph_marks_amplifiers_sources_and_each_inferred_edge(tmp_path: Path) -> None:
    profile = realistic_profile()
    nodes = graph_nodes(profile)
    first = profile["graph"]["edges"][0]
    profile["graph"]["inferred"] = {"inferred_nodes": [nodes[-1]], "inferred_fields": {}, "inferred_edges": True,
                                    "inferred_edge_list": [first]}
    profile["nodes"][0]["bifurcation_source"] = True
    text = _page(tmp_path, profile)
    assert text.count('data-inferred="true"') == 1
    import re

    inferred = re.findall(r'data-edge="([^"]*)" data-class="[^"]*" data-inferred="true"', text)
    assert inferred == [f"{first[0]}->{first[1]}"]
    assert "(inferred)" in text and "bifurcation source" in text
    amplifiers = [e for e in profile["edges"] if e["class"] == "amplifier"]
    assert text.count('data-class="amplifier"') == len(amplifiers) > 0
    # an inference record without the individual edges: every edge was inferred
    del profile["graph"]["inferred"]["inferred_edge_list"]
    text = _page(tmp_path, profile)
    assert text.count('data-inferred="true"') == text.count("data-edge=") == len(profile["graph"]["edges"])
