"""The README's first command: the bundled support_bot campaign recovers truth.yaml.

``quiver run experiments/specs/support_bot.yaml`` is run once, as a user would (a
subprocess, the bundled simulator with its backend noise), into a temporary folder:

* every no-op stratum passes the negative control;
* the three graph-changing overrides show what truth.yaml says they do: web_search
  inserted, the path collapsed to the first wave and smalltalk, the initial discovery
  skipped;
* the interventional beta_shape of the discovery remove ladder agrees with truth.yaml
  (within the +/-0.05 its header allows);
* no magnitude of the rewriter's prompt swaps below truth.yaml's threshold passes for one
  (the threshold itself is not asserted: the excess of its bins over their traces'
  control replays, about +0.06 each, is not significant at this campaign's size);
* every target has its control replays.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[2]
TRUTH = ROOT / "experiments" / "support_bot" / "truth.yaml"
FIRST_WAVE = {"input", "rewriter", "signal_analysis", "context_sufficiency", "route"}


@pytest.fixture(scope="module")
def run(support_bot_run: Path) -> Path:
    return support_bot_run


@pytest.fixture(scope="module")
def campaign(run: Path) -> dict[str, Any]:
    return json.loads((run / "campaign.json").read_text())


@pytest.fixture(scope="module")
def pairs(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "pairs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def truth() -> dict[str, Any]:
    return yaml.safe_load(TRUTH.read_text())


def _perturbation(campaign: Mapping[str, Any], pid: str) -> dict[str, Any]:
    return next(p for p in campaign["perturbations"] if p["id"] == pid)


def _effective(pairs: list[dict[str, Any]], pid: str) -> list[dict[str, Any]]:
    return [p for p in pairs if p["perturbation_id"] == pid and p["stratum"] == "effective"]


def _ran(row: Mapping[str, Any], side: int) -> set[str]:
    return {n for n, c in row["counts"].items() if c[side] > 0}


def test_the_five_classes_and_the_ladder_ran_completely(run: Path, campaign: dict[str, Any]) -> None:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] and summary["status"] == {"ok": summary["jobs"]}
    ops = {p["id"]: p["op"] for p in campaign["perturbations"]}
    assert ops == {
        "rewriter-swap": "prompt_swap", "turn-type-flip": "categorical_flip", "web-search-certain": "override",
        "small-talk": "override", "cs-override": "override", "fragments-drop": "list_edit",
    }
    assert "rewriter-swap" in (run / "report.md").read_text()


def test_every_noop_stratum_passes_the_negative_control(campaign: dict[str, Any]) -> None:
    with_noop = [p for p in campaign["perturbations"] if p["noop"] > 0]
    assert len(with_noop) >= 4
    for p in with_noop:
        assert p["negative_control"]["passed"] is True, (p["id"], p["negative_control"])


def test_web_search_hint_inserts_web_search(pairs: list[dict[str, Any]]) -> None:
    answering = [p for p in _effective(pairs, "web-search-certain") if "smalltalk" not in _ran(p, 0)]
    assert len(answering) >= 100
    assert all("web_search" not in _ran(p, 0) and "web_search" in _ran(p, 1) for p in answering)


def test_small_talk_collapses_the_path(pairs: list[dict[str, Any]]) -> None:
    effective = _effective(pairs, "small-talk")
    assert len(effective) >= 100
    assert all(_ran(p, 1) == FIRST_WAVE | {"smalltalk"} for p in effective)


def test_sufficient_true_removes_the_initial_discovery(pairs: list[dict[str, Any]], truth: dict[str, Any]) -> None:
    answering = [p for p in _effective(pairs, "cs-override") if "smalltalk" not in _ran(p, 0)]
    assert len(answering) >= 100
    assert all(p["decisions"]["perturbed"]["route#0"]["discovery"] == "skip" for p in answering)
    gone = [p for p in answering if "discovery" in _ran(p, 0) and "discovery" not in _ran(p, 1)]
    added = [p for p in answering if "account_api" in _ran(p, 1) and "account_api" not in _ran(p, 0)]
    stated = next(o for o in truth["overrides"] if o["set"]["field"] == "sufficient")
    assert stated["removes"] == ["discovery"] and stated["adds"] == ["account_api"]
    assert gone and added  # discovery leaves some traces; account_api joins some


def test_the_discovery_ladder_s_beta_agrees_with_truth(campaign: dict[str, Any], truth: dict[str, Any]) -> None:
    ladder = _perturbation(campaign, "fragments-drop")["beta_shape"]
    assert ladder["value"] == pytest.approx(truth["discovery_ladder"]["interventional_beta_shape"], abs=0.05)
    assert [b["step"] for b in ladder["bins"]] == [0, 1, 2, 3, 4]
    rates = [b["rate"] for b in ladder["bins"]]
    assert rates[0] < rates[2] < rates[4]  # more fragments removed, more bifurcations


def test_the_rewriter_s_beta_agrees_with_truth(campaign: dict[str, Any], truth: dict[str, Any]) -> None:
    swap = _perturbation(campaign, "rewriter-swap")
    beta = swap["beta_shape"]
    traces = 3 * sum(truth["paths"].values())
    assert swap["pairs"] == 3 * traces * 2 and beta["n"] == swap["effective"]  # 3 variants x traces x 2 repeats
    # the crossings truth.yaml states (d 0.094 and up) lie inside the measured range;
    # the raw minimum is pulled down by noise-driven bifurcations (QUIVER.md §7)
    stated = truth["rewriter"]["interventional_beta_shape"]
    assert beta["raw_min"] < stated < beta["max_non_bifurcating"]
    # every bin is held against the control replays of its own traces, and the bins are
    # tested step-down from the largest magnitude: the search stops at the first bin
    # without an excess, and what it found agrees with the stated threshold (the first
    # qualifying bin from below, against the no-op stratum, gave 0.010 on this seed)
    assert all(b["control"] == "control replays, same traces" for b in beta["bins"])
    assert beta["value"] == pytest.approx(stated, abs=0.05), beta["reason"]
    reached = len(beta["bins"])
    while reached and beta["bins"][reached - 1]["qualifies"]:
        reached -= 1  # the step-down: from the largest magnitude while the bins qualify
    assert reached < len(beta["bins"]) and beta["bins"][reached]["lo"] >= stated - 0.05


def test_every_target_has_its_control_replays(campaign: dict[str, Any]) -> None:
    """Two control replays per selected trace and target: served for the output operators,
    re-run unchanged for the prompt swap."""
    kinds = {c["id"]: c["kind"] for c in campaign["controls"]}
    assert kinds == {"control.rewriter.0.live": "live", "control.signal_analysis.0.served": "served",
                     "control.context_sufficiency.0.served": "served", "control.discovery.0.served": "served"}
    for p in campaign["perturbations"]:
        control = p["control_replays"]
        assert control["n"] == 2 * control["traces"] and control["traces"] >= 150, (p["id"], control)
        # the control replays are the downstream noise: about the observational rate, far below 1
        assert 0.05 < control["D_shape"] < 0.3


def _controls_of(campaign: Mapping[str, Any]) -> dict[str, str]:
    """Perturbation id -> the id of its control replays."""
    out = {}
    for control in campaign.get("controls") or []:
        for pid in control.get("perturbations") or []:
            out[pid] = control["id"]
    return out


def test_every_outcome_effect_equals_its_recomputation_from_the_replays(
        run: Path, campaign: dict[str, Any]) -> None:
    """The pass rate of each perturbation's effective replays minus that of its control
    replays of the same traces, read from replays.jsonl's traces (their outcomes) and
    pairs.jsonl's strata alone, agrees with campaign.json to 0.005."""
    from quiver import load_traces

    outcome = {t.trace_id: t.outcome.status for t in load_traces(run / "replays.jsonl").traces
               if t.outcome is not None}
    rows = [json.loads(line) for line in (run / "pairs.jsonl").read_text().splitlines()]
    of = {p["id"]: p for p in campaign["perturbations"]}
    controls = _controls_of(campaign)
    checked = 0
    for pid, p in of.items():
        if "outcome" not in p:
            continue
        effective = [r for r in rows if r["perturbation_id"] == pid and r.get("stratum") == "effective"
                     and r["status"] == "ok" and r.get("replay_id") is not None]
        mine = [outcome[f"{r['trace_id']}~{r['replay_id']}/{r['repeat']}"] for r in effective
                if f"{r['trace_id']}~{r['replay_id']}/{r['repeat']}" in outcome]
        traces = {r["trace_id"] for r in effective}
        theirs = [outcome[f"{r['trace_id']}~{r['replay_id']}/{r['repeat']}"] for r in rows
                  if r["perturbation_id"] == controls[pid] and r["status"] == "ok" and r["trace_id"] in traces
                  and f"{r['trace_id']}~{r['replay_id']}/{r['repeat']}" in outcome]
        rate = sum(s == "pass" for s in mine) / len(mine)
        control_rate = sum(s == "pass" for s in theirs) / len(theirs)
        got = p["outcome"]
        assert got["pass_rate"]["n"] == len(mine) and got["control_pass_rate"]["n"] == len(theirs), pid
        assert abs(got["difference"]["value"] - (rate - control_rate)) <= 0.005, (pid, got["difference"])
        lo, hi = got["difference"]["ci"]
        assert lo <= got["difference"]["value"] <= hi
        checked += 1
    assert checked == len(of)


def test_the_outcome_follows_truth_for_the_overrides(campaign: dict[str, Any], truth: dict[str, Any]) -> None:
    """Forcing small talk answers no question as it should (truth: 0 of 70 effective inputs
    pass at the argmax): its effective replays' pass rate is 0; web_search_hint=true moves
    nothing the check reads (64 of 65 both ways): its effect lies inside the margin."""
    stated = truth["outcome"]["overrides"]
    small = _perturbation(campaign, "small-talk")["outcome"]
    assert stated["signal_analysis.is_small_talk=true"]["pass"] == 0
    assert small["pass_rate"]["value"] == 0.0 and small["difference"]["ci"][1] < -0.5
    web = _perturbation(campaign, "web-search-certain")["outcome"]
    hint = stated["signal_analysis.web_search_hint=true"]
    assert hint["pass"] == hint["pass_without"]
    assert -0.05 <= web["difference"]["ci"][0] and web["difference"]["ci"][1] <= 0.05


def test_derive_truth_computes_the_outcome_truth_yaml_states(truth: dict[str, Any]) -> None:
    import contextlib
    import io

    from quiver.experiments.support_bot.derive_truth import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--outcome"]) == 0
    derived = json.loads(out.getvalue())["outcome"]
    stated = truth["outcome"]
    assert derived["argmax_pass"] == stated["argmax_pass"] and derived["argmax_failing"] == stated["argmax_failing"]
    assert derived["overrides"] == stated["overrides"]
