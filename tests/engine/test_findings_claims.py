"""A campaign's findings say an effect is absent only inside the equivalence margin, and name the
inputs an effect is concentrated in.

Three perturbations of a target ``t`` before a router ``r``, each held against control
replays of the same traces, built from pair rows written here:

* ``steady``: 40 inputs, 10 effective pairs and 10 control replays each, the path
  changing in exactly one of ten of both: an excess of 0 with an interval inside ±0.05,
  so "leaves the path as its control replays do", with the margin said;
* ``scarce``: 4 inputs, 2 pairs each, the path changing in 3 of 8 pairs against 1 of 8
  control replays: an interval far wider than the margin, so "not distinguishable from
  control at n = 8", and 4x the replays (n = 32) to halve it;
* ``one-input``: 16 inputs, 6 pairs and 6 control replays each; the path changes in every
  effective pair of input ``thanks`` and nowhere else: the average (+0.062) does not
  show it, the per-input test names ``thanks``.

The pipeline has no loop and no call counts differ: no finding speaks of loop
iterations or call counts; with a loop declared, D_iter is the loop iterations.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from quiver._graph import LoopSpec, NodeSpec, PipelineGraph
from quiver._interventional import CampaignEstimates, campaign_estimates
from quiver._report import campaign_findings, interventional_report
from quiver._stats import PairTable

sys.path.insert(0, str(Path(__file__).parents[1]))
from findings_claims import check_claims  # noqa: E402

GRAPH = PipelineGraph(nodes={n: NodeSpec() for n in ("input", "t", "r")}, edges=[("input", "t"), ("t", "r")])


def _row(pid: str, input_id: str, k: int, shape: bool, *, control: bool = False) -> dict[str, Any]:
    stratum = "noop" if control else "effective"
    return {
        "perturbation_id": pid, "trace_id": f"{input_id}/0", "input_id": input_id, "repeat": k, "status": "ok",
        "node": "t", "occurrence": 0, "op": None if control else "override", "params": {},
        "magnitude": 0.0 if control else 1.0, "stratum": stratum, "noop_by_value": None, "D_iter": 0,
        "D_shape": shape, "D_output": not control or shape, "D_struct": False,
        "d": {"t": 0.0 if control else 1.0, "r": 1.0 if shape else 0.0}, "fields": {}, "counts": {},
        "decisions": {"baseline": {}, "perturbed": {}}, "first_divergent_call": None, "replay_divergences": [],
        "llm_calls": {"t": 1}, "job_id": f"{pid}/{input_id}/{k}", "replay_id": f"{pid}#0", "step": 0, "retries": {},
    }


def _rows(pid: str, inputs: int, per: int, shape: Any, control_shape: Any) -> list[dict[str, Any]]:
    names = [f"{pid}-{g:02d}" if pid != "one-input" or g else "thanks" for g in range(inputs)]
    return ([_row(pid, name, k, shape(g, k)) for g, name in enumerate(names) for k in range(per)]
            + [_row(f"ctl-{pid}", name, k, control_shape(g, k), control=True)
               for g, name in enumerate(names) for k in range(per)])


def _table() -> PairTable:
    import numpy as np

    p = 20
    return PairTable(nodes=["t", "r"], groups=[f"o{g}" for g in range(10)], group=np.arange(p) // 2,
                     trace_ids=[(f"o{k}a", f"o{k}b") for k in range(p)], d=np.zeros((p, 2)),
                     fields={"t": {}, "r": {}}, counts=np.ones((p, 2, 2), dtype=np.int64),
                     d_iter=np.zeros(p, dtype=np.int64), d_shape=np.zeros(p, dtype=bool),
                     d_struct=np.zeros(p, dtype=bool), traces_per_group=np.full(10, 2, dtype=np.int64))


def _campaign(graph: PipelineGraph = GRAPH) -> CampaignEstimates:
    ids = ("steady", "scarce", "one-input")
    rows = (_rows("steady", 40, 10, lambda g, k: k == 0, lambda g, k: k == 5)
            + _rows("scarce", 4, 2, lambda g, k: g < 3 and k == 0, lambda g, k: g == 0 and k == 1)
            + _rows("one-input", 16, 6, lambda g, k: g == 0, lambda g, k: False))
    perturbations = [{"id": pid, "node": "t", "op": "override", "params": {}, "ladder": None, "control": f"ctl-{pid}"}
                     for pid in ids]
    controls = [{"id": f"ctl-{pid}", "node": "t", "occurrence": 0, "kind": "served", "op": "identity",
                 "perturbations": [pid]} for pid in ids]
    return campaign_estimates(perturbations, rows, _table(), None, graph, resamples=400, seed=1, controls=controls)


@pytest.fixture(scope="module")
def findings() -> dict[str, str]:
    raw = _campaign().to_json()
    check_claims(raw)
    return {str(f.data.get("perturbation")): f.text() for f in campaign_findings(raw) if f.kind == "effect"}


def test_an_interval_inside_the_margin_says_the_path_is_left_as_under_control(findings: dict[str, str]) -> None:
    text = findings["steady"]
    assert "leaves the path as its control replays do (+0.000 [+0.000, +0.000], inside the equivalence margin ±0.05)"\
        in text, text


def test_a_wide_interval_says_not_distinguishable_with_its_n_and_the_replays_to_halve_it(
        findings: dict[str, str]) -> None:
    text = findings["scarce"]
    assert "as its control replays do" not in text and "values only" not in text
    assert "on the path it is not distinguishable from control at n = 8 effective pairs (+0.250 [" in text, text
    assert "wider than the equivalence margin ±0.05; 4x the replays, n = 32, would halve the interval" in text


def test_an_effect_confined_to_one_input_names_it(findings: dict[str, str]) -> None:
    raw = _campaign().to_json()
    p = next(x for x in raw["perturbations"] if x["id"] == "one-input")
    assert p["per_input"]["moved"] == ["thanks"] and p["per_input"]["concentrated"]
    text = findings["one-input"]
    assert "not distinguishable from control" in text
    assert "the path moved most at 1 of 16 inputs: thanks (6 of 6 effective pairs against 0 of 6 control replays, " \
           "Holm p = " in text, text


def test_no_loop_and_no_call_counts_differing_leaves_d_iter_out(findings: dict[str, str]) -> None:
    report = interventional_report(_campaign())
    assert all("loop iterations" not in t and "call counts" not in t for t in findings.values())
    assert "D_iter" not in report and "beta_iter" not in report


def test_with_a_loop_d_iter_is_the_loop_iterations() -> None:
    looped = PipelineGraph(nodes=GRAPH.nodes, edges=GRAPH.edges, loop=LoopSpec(body=["t", "r"], k_max=3))
    raw = _campaign(looped).to_json()
    assert raw["loop"] == ["t", "r"]
    assert "D_iter [95% CI]" in interventional_report(CampaignEstimates.from_json(raw))


def test_a_file_written_before_the_margin_reads_with_the_default(tmp_path: Path) -> None:
    raw = _campaign().to_json()
    for key in ("equivalence_margin", "loop"):
        del raw[key]
    for p in raw["perturbations"]:
        del p["per_input"]
    back = CampaignEstimates.from_json(json.loads(json.dumps(raw)))
    assert back.equivalence_margin is None and back.to_json() == raw
    assert any("±0.05" in t for t in check_claims(raw))
