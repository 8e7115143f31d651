"""The interventional estimates as typed objects: accessors, JSON round trips, pair rows.

A campaign of three perturbations on a chain cs -> planner -> composer, built from pair
rows written by hand against a small observational pair table: two ladders at planner
whose thresholds are known (0.3 and 0.4: steps from which every input bifurcates, a
quiet no-op stratum as the control), an override at cs with a control, a diverged, a
failed and an unstratified row, and a profile edge for the validation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from quiver._errors import QuiverError
from quiver._graph import NodeSpec, PipelineGraph
from quiver._interventional import (
    CampaignEstimates,
    CampaignFormatError,
    ControlReplays,
    NegativeControl,
    NodeTest,
    ObservationalEstimates,
    PairResult,
    PairRow,
    PerturbationEstimates,
    Rates,
    RowCounts,
    SkippedValidationRow,
    StratumEstimates,
    Threshold,
    ThresholdBin,
    UnknownPerturbationError,
    ValidationRow,
    campaign_estimates,
)
from quiver._report import interventional_report
from quiver._stats import Estimate, PairTable

NODES = ("cs", "planner", "composer")
GROUPS = 20


def pair_table() -> PairTable:
    """Same-input pairs of 20 inputs (3 pairs each) with seeded distances; D_shape in one pair of ten."""
    rng = np.random.default_rng(5)
    p = 3 * GROUPS
    d = rng.uniform(0.0, 0.2, size=(p, len(NODES)))
    ran = np.ones((p, len(NODES), 2), dtype=np.int64)
    return PairTable(
        nodes=list(NODES), groups=[f"g{g}" for g in range(GROUPS)], group=np.arange(p) // 3,
        trace_ids=[(f"t{k}a", f"t{k}b") for k in range(p)], d=d, fields={n: {} for n in NODES}, counts=ran,
        d_iter=np.zeros(p, dtype=np.int64), d_shape=np.arange(p) % 10 == 0, d_struct=np.zeros(p, dtype=bool),
        traces_per_group=np.full(GROUPS, 3, dtype=np.int64),
    )


GRAPH = PipelineGraph(nodes={n: NodeSpec() for n in ("input", *NODES)},
                      edges=[("input", "cs"), ("cs", "planner"), ("planner", "composer")])
PROFILE = {"edges": [{"source": "planner", "target": "composer", "sigma": 1.5, "sigma_ci": [1.2, 1.8],
                      "sigma_n": 60, "n": 60}]}


def row(pid: str, input_id: str, stratum: str | None, magnitude: float | None, *, step: int = 0,
        shape: bool = False, status: str = "ok", d: dict[str, float | None] | None = None) -> dict[str, Any]:
    """A campaign row as ``pairs.jsonl`` holds it (the pair result plus the campaign's keys)."""
    return {
        "perturbation_id": pid, "trace_id": f"{input_id}/0", "input_id": input_id, "repeat": 0, "status": status,
        "node": "planner", "occurrence": 0, "op": "text_edit", "params": {"strength": step}, "magnitude": magnitude,
        "stratum": stratum, "noop_by_value": None, "D_iter": 0, "D_shape": shape, "D_output": bool(magnitude),
        "D_struct": False, "d": d if d is not None else {"cs": 0.0, "planner": magnitude, "composer": 0.1},
        "fields": {}, "counts": {}, "decisions": {"baseline": {}, "perturbed": {}}, "first_divergent_call": None,
        "replay_divergences": [], "llm_calls": {"planner": 1}, "job_id": f"{pid}/{input_id}/{step}",
        "replay_id": f"{pid}#{step}", "step": step, "retries": {},
    }


def ladder(pid: str, from_step: int) -> list[dict[str, Any]]:
    """Steps 1-5 at magnitude 0.1 * step on inputs x0..x19 (no observational pairs), every
    input bifurcating from ``from_step`` on, and a quiet no-op stratum."""
    rows = [row(pid, f"x{g}", "effective", round(0.1 * s, 1), step=s, shape=s >= from_step,
                d={"planner": round(0.1 * s, 1), "composer": 0.2 * s})
            for g in range(GROUPS) for s in range(1, 6)]
    return rows + [row(pid, f"x{g}", "noop", 0.0, d={"planner": 0.0, "composer": 0.0}) for g in range(GROUPS)]


def override_rows() -> list[dict[str, Any]]:
    """An override at cs over the corpus's inputs: effective rows that never change the path,
    no-op rows, one row of each other kind, and two control replays per input."""
    rows = [row("cs-set", f"g{g}", "effective" if g % 2 else "noop", 1.0 if g % 2 else 0.0, shape=g % 4 == 0,
                d={"cs": 1.0 if g % 2 else 0.0, "planner": 0.05 * (g % 3), "composer": 0.1}) for g in range(GROUPS)]
    rows.append({**row("cs-set", "g0", "effective", 1.0), "status": "diverged", "replay_divergences": []})
    rows.append({**row("cs-set", "g1", None, None), "op": None, "params": None})
    rows.append({"job_id": "cs-set/g2/1", "perturbation_id": "cs-set", "replay_id": "cs-set#0", "step": 0,
                 "trace_id": "g2/0", "input_id": "g2", "repeat": 1, "status": "failed", "node": "cs", "op": "override",
                 "params": {"set": True}, "error": "LLMUnavailable: retries exhausted"})
    rows += [{**row("ctl", f"g{g}", "noop", 0.0, shape=g == 3, d={"cs": 0.0, "planner": 0.02, "composer": 0.05}),
              "repeat": r} for g in range(GROUPS) for r in range(2)]
    return rows


PERTURBATIONS: list[dict[str, Any]] = [
    {"id": "pl-a", "node": "planner", "op": "text_edit", "params": {}, "ladder": {"strength": [1, 2, 3, 4, 5]}},
    {"id": "pl-b", "node": "planner", "op": "text_edit", "params": {}, "ladder": {"strength": [1, 2, 3, 4, 5]}},
    {"id": "cs-set", "node": "cs", "op": "override", "params": {"set": {"sufficient": True}}, "ladder": None,
     "control": "ctl"},
]
CONTROLS: list[dict[str, Any]] = [{"id": "ctl", "node": "cs", "occurrence": 0, "kind": "served", "op": "identity",
             "perturbations": ["cs-set"]}]


def rows() -> list[dict[str, Any]]:
    return ladder("pl-a", 3) + ladder("pl-b", 4) + override_rows()


def estimate(pairs: Sequence[PairRow | Mapping[str, Any]] | None = None) -> CampaignEstimates:
    return campaign_estimates(PERTURBATIONS, rows() if pairs is None else pairs, pair_table(), PROFILE, GRAPH,
                              resamples=200, permutations=200, controls=CONTROLS)


@pytest.fixture(scope="module")
def campaign() -> CampaignEstimates:
    return estimate()


# --------------------------------------------------------------------------- accessors


def test_the_campaign_is_typed_at_every_level(campaign: CampaignEstimates) -> None:
    assert isinstance(campaign, CampaignEstimates) and isinstance(campaign.perturbations, tuple)
    assert [p.id for p in campaign.perturbations] == ["pl-a", "pl-b", "cs-set"]
    p = campaign.perturbation("cs-set")
    assert isinstance(p, PerturbationEstimates) and p.node == "cs" and p.downstream == ("planner", "composer")
    assert p.counts == RowCounts(pairs=23, effective=10, noop=10, unstratified=1, diverged=1, failed=1)
    assert isinstance(p.stratum("effective"), StratumEstimates) and p.stratum("noop").n == 10
    assert isinstance(p.negative_control, NegativeControl) and p.negative_control.passed in (True, False)
    assert all(isinstance(t, NodeTest) for t in p.negative_control.nodes.values())
    assert isinstance(p.control_replays, ControlReplays) and p.control_replays.n == 40
    assert p.control_replays.rates.d_shape.value == pytest.approx(0.05)
    assert isinstance(campaign.observational, ObservationalEstimates) and campaign.observational.n == 60
    (v,) = campaign.validation
    assert isinstance(v, ValidationRow) and (v.source, v.target, v.perturbations) == ("planner", "composer",
                                                                                     ("pl-a", "pl-b"))
    assert v.sigma_obs == Estimate(1.5, (1.2, 1.8), 60) and v.sigma_int.value == pytest.approx(2.0)
    assert all(isinstance(s, SkippedValidationRow) for s in campaign.validation_skipped)


def test_estimates_are_estimate_objects_with_their_draws(campaign: CampaignEstimates) -> None:
    eff = campaign.perturbation("pl-a").stratum("effective")
    assert isinstance(eff.rates, Rates) and eff.rates.d_shape.value == pytest.approx(0.6)
    assert eff.rates.d_shape.n == 100 and eff.rates.d_shape.draws is not None
    assert eff.mean_d["composer"].value == pytest.approx(0.6) and eff.mean_d["composer"].n == 100


def test_thresholds_and_their_bins(campaign: CampaignEstimates) -> None:
    beta = campaign.perturbation("pl-a").beta_shape
    assert isinstance(beta, Threshold) and all(isinstance(b, ThresholdBin) for b in beta.bins)
    assert beta.value == 0.3 and beta.raw_min.value == 0.3 and beta.control == "noop"
    assert [b.qualifies for b in beta.bins] == [False, False, True, True, True]
    assert campaign.perturbation("pl-b").beta_shape.value == 0.4


def test_beta_shape_at_a_node_is_the_smallest_interventional_value(campaign: CampaignEstimates) -> None:
    assert campaign.beta_shape_at("planner") == 0.3  # pl-a's 0.3 and pl-b's 0.4
    assert campaign.perturbation("cs-set").beta_shape.reason == "no effective pair had D_shape > 0"
    assert campaign.beta_shape_at("cs") is None  # targeted, without a threshold
    assert campaign.beta_shape_at("composer") is None  # not targeted


def test_an_unknown_perturbation_is_named_with_the_known_ones(campaign: CampaignEstimates) -> None:
    with pytest.raises(UnknownPerturbationError, match="no perturbation 'nope'; its perturbations are 'pl-a'"):
        campaign.perturbation("nope")
    assert issubclass(UnknownPerturbationError, QuiverError)


# --------------------------------------------------------------------------- JSON


def test_campaign_json_reads_back_to_the_same_json(campaign: CampaignEstimates) -> None:
    data = campaign.to_json()
    text = json.dumps(data, indent=2) + "\n"
    back = CampaignEstimates.from_json(json.loads(text))
    assert back.to_json() == data and json.dumps(back.to_json(), indent=2) + "\n" == text
    assert CampaignEstimates.from_json(back.to_json()) == back
    est = back.perturbation("pl-a").stratum("effective").rates.d_shape
    assert est.draws is None and est.value == 0.6 and est.n == 100


def test_campaign_json_keeps_its_keys_and_their_order(campaign: CampaignEstimates) -> None:
    data = campaign.to_json()
    assert list(data) == ["epsilon", "alpha", "resamples", "seed", "permutations", "pairs", "observational",
                          "perturbations", "validation", "validation_skipped", "controls",
                          "equivalence_margin", "loop"]  # the keys added later come last
    p = data["perturbations"][2]
    assert list(p)[:19] == ["id", "node", "op", "params", "ladder", "pairs", "effective", "noop", "unstratified",
                            "diverged", "failed", "not_applied", "groups", "downstream", "strata", "control_replays",
                            "negative_control", "beta_shape", "beta_iter"]
    assert list(p)[19:] == (["per_input"] if p["control_replays"] is not None else [])
    assert list(p["strata"]["effective"])[:4] == ["n", "D_iter", "D_iter_ci", "D_iter_n"]
    assert list(p["beta_shape"])[-4:] == ["control_rate", "control_rate_ci", "control_n", "bins"]
    assert list(data["validation"][0])[3:6] == ["sigma_obs", "sigma_obs_ci", "n_obs"]
    assert data["controls"] == CONTROLS and data["pairs"] == len(rows())


@pytest.mark.parametrize("level", ["perturbation", "stratum", "observational", "control_replays", "negative_control",
                                   "node_test", "threshold", "bin", "validation", "skipped", "rates"])
def test_every_level_reads_back_its_own_json(campaign: CampaignEstimates, level: str) -> None:
    p = campaign.perturbation("cs-set")
    assert p.control_replays is not None
    objects: dict[str, Any] = {
        "perturbation": p, "stratum": p.stratum("effective"), "observational": campaign.observational,
        "control_replays": p.control_replays, "negative_control": p.negative_control,
        "node_test": p.negative_control.nodes["planner"], "threshold": campaign.perturbation("pl-a").beta_shape,
        "bin": campaign.perturbation("pl-a").beta_shape.bins[0], "validation": campaign.validation[0],
        "skipped": campaign.validation_skipped[0], "rates": p.stratum("noop").rates,
    }
    obj = objects[level]
    data = json.loads(json.dumps(obj.to_json()))
    assert type(obj).from_json(data).to_json() == data


OLD_ROW = {"source": "planner", "target": "composer", "perturbations": ["pl"], "sigma_obs": 1.5,
           "sigma_obs_ci": [1.2, 1.8], "n_obs": 60, "sigma_int": 2.0, "sigma_int_ci": [1.9, 2.1], "n_int": 30,
           "agree": False}


def test_a_validation_row_written_before_the_envelope_reads_and_writes_back_as_it_was(
        campaign: CampaignEstimates) -> None:
    row = ValidationRow.from_json(OLD_ROW)
    assert (row.envelope, row.n_envelope, row.sigma_matched, row.groups_matched, row.share_beyond,
            row.verdict) == (None,) * 6
    assert row.to_json() == OLD_ROW
    old = {**campaign.to_json(), "validation": [OLD_ROW]}
    assert CampaignEstimates.from_json(old).to_json() == old
    text = interventional_report(old)
    assert "| planner → composer | 1.500 [1.200, 1.800] | 60 | 2.000 [1.900, 2.100] | 30 | no | — | — | — | — | — |" \
        in text


def test_a_validation_row_with_its_envelope_reads_back_every_field(campaign: CampaignEstimates) -> None:
    data = campaign.validation[0].to_json()
    assert list(data)[10:] == ["envelope", "n_envelope", "sigma_matched", "sigma_matched_ci", "n_matched",
                               "groups_matched", "share_beyond", "share_beyond_ci", "share_beyond_n", "verdict"]
    back = ValidationRow.from_json(json.loads(json.dumps(data)))
    assert back.envelope == (0.01, data["envelope"][1]) and back.n_envelope == data["n_envelope"]
    assert back.sigma_matched == Estimate(data["sigma_matched"], tuple(data["sigma_matched_ci"]), data["n_matched"])
    assert back.verdict == data["verdict"]
    with pytest.raises(CampaignFormatError, match=r"validation: 'envelope' must be null or a list of two numbers"):
        ValidationRow.from_json({**data, "envelope": [0.01]})
    with pytest.raises(CampaignFormatError, match=r"validation: no 'n_matched'"):
        ValidationRow.from_json({k: v for k, v in data.items() if k != "n_matched"})


def test_a_negative_control_that_did_not_run_keeps_its_shape() -> None:
    nc = NegativeControl(passed=None, reason="no no-op pairs", alpha=None, permutations=None, statistic=None,
                         p_value=None, rejected=(), nodes={})
    data = nc.to_json()
    assert data == {"passed": None, "reason": "no no-op pairs", "statistic": None, "p_value": None, "rejected": [],
                    "nodes": {}}
    assert NegativeControl.from_json(data) == nc


def test_a_missing_key_is_named_with_its_place(campaign: CampaignEstimates) -> None:
    data = campaign.to_json()
    del data["perturbations"][0]["beta_shape"]["bins"][1]["excess_ci"]
    with pytest.raises(CampaignFormatError, match=r"campaign.json: perturbations\[0\].beta_shape.bins\[1\]: "
                                                  r"no 'excess_ci'"):
        CampaignEstimates.from_json(data)
    data = campaign.to_json()
    data["perturbations"][2]["negative_control"]["nodes"]["planner"]["n_obs"] = "many"
    with pytest.raises(CampaignFormatError, match="negative_control.nodes.planner: 'n_obs' must be an integer"):
        CampaignEstimates.from_json(data)


def test_the_report_of_the_object_and_of_its_json_are_the_same(campaign: CampaignEstimates) -> None:
    text = interventional_report(campaign)
    assert interventional_report(json.loads(json.dumps(campaign.to_json()))) == text
    assert "### `cs-set`: override at cs" in text and "| planner → composer |" in text
    assert "`pl-a` beta_shape bins (ladder):" in text and "None" not in text


# --------------------------------------------------------------------------- pair rows


def test_a_campaign_row_reads_back_to_the_same_json() -> None:
    data = row("pl-a", "x1", "effective", 0.3, step=3, shape=True)
    data["first_divergent_call"] = {"node": "composer", "occurrence": 0, "call_path": "composer#0",
                                    "reason": "differs", "diff": []}
    r = PairRow.from_json(json.loads(json.dumps(data, sort_keys=True)))
    assert r.to_json() == data and PairRow.from_json(r.to_json()) == r
    assert (r.perturbation_id, r.input_id, r.step, r.stratum, r.magnitude) == ("pl-a", "x1", 3, "effective", 0.3)
    assert r.d_shape is True and r.d_iter == 0 and r.d["planner"] == 0.3 and r.measured and r.retries == {}


def test_a_failed_replay_row_has_no_metrics() -> None:
    data = {"job_id": "cs-set/g2/1", "perturbation_id": "cs-set", "replay_id": "cs-set#0", "step": 0,
            "trace_id": "g2/0", "input_id": "g2", "repeat": 1, "status": "failed", "node": "cs", "op": "override",
            "params": {"set": True}, "error": "LLMUnavailable: retries exhausted"}
    r = PairRow.from_json(data)
    assert not r.measured and r.error == "LLMUnavailable: retries exhausted" and r.retries is None
    assert r.to_json() == data


def test_a_pair_result_reads_back_to_its_own_json() -> None:
    pair = PairResult(perturbation_id="p", trace_id="t", repeat=2, status="ok", target=None, magnitude=0.25,
                      stratum="effective", d={"a": 0.25, "b": None}, d_iter=1, d_shape=True,
                      llm_calls={"b": 2})
    data = pair.to_json(traces=False)
    r = PairRow.from_json(data)
    assert r.to_json() == data and r.job_id is None and r.step is None
    assert (r.d_iter, r.d_shape, r.d["b"], r.llm_calls) == (1, True, None, {"b": 2})


def test_a_row_with_a_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(CampaignFormatError, match=r"pairs.jsonl:4: 'D_shape' must be true or false; got 'yes'"):
        PairRow.from_json({**row("p", "x", "effective", 0.1), "D_shape": "yes"}, where="pairs.jsonl:4")
    with pytest.raises(CampaignFormatError, match="status 'done'; a pair's status is one of ok, diverged, failed"):
        PairRow.from_json({**row("p", "x", "effective", 0.1), "status": "done"})
    with pytest.raises(CampaignFormatError, match="pairs.jsonl:4: d: 'planner' must be a number"):
        PairRow.from_json({**row("p", "x", "effective", 0.1), "d": {"planner": "far"}}, where="pairs.jsonl:4")


def test_pair_rows_and_mappings_give_the_same_campaign(campaign: CampaignEstimates) -> None:
    as_rows = [PairRow.from_json(r) for r in rows()]
    assert estimate(as_rows).to_json() == campaign.to_json()
    mixed = [r if i % 2 else PairRow.from_json(r) for i, r in enumerate(rows())]
    assert estimate(mixed).to_json() == campaign.to_json()


def test_a_bad_row_is_named_by_its_index() -> None:
    bad = rows()
    bad[5] = {**bad[5], "magnitude": "big"}
    with pytest.raises(CampaignFormatError, match=r"pairs\[5\] \(perturbation 'pl-a', trace 'x1/0'\): 'magnitude'"):
        estimate(bad)
