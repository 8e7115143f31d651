"""A node only an intervention reaches: the campaign's pairs and its estimates read one graph.

``tests/pipelines/escalation.py`` routes a ticket to ``escalate`` (a declared branch of
``route``) only when ``triage`` says it is urgent, which no recorded ticket is; the
override ``urgent: true`` at ``triage`` takes the branch on every billing and bug ticket
and not on thank-yous. So no baseline trace runs ``escalate`` and many replays do.

The campaign runs as a user runs it (``quiver run`` in a subprocess: the pipeline's
declarations are its own), once with the branch declared by the decorators
(``parents=["route"]``) and once by the spec's ``graph:`` file. In both, ``campaign.json``
lists ``escalate`` downstream of ``triage``, and its cascade rows are those computed here
by hand from ``pairs.jsonl``: a node that ran in the replay only is at distance 1, and
its pair has D_struct = 1. Every downstream mean of every perturbation, stratum and
control agrees with the rows it is the mean of. ``quiver gate`` with a ``triage``
template that writes URGENT measures ``escalate`` downstream too.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TESTS = Path(__file__).parents[1]
PIPELINE = TESTS / "pipelines" / "escalation.py"

TICKETS = ["billing charged twice", "bug app crashes on start", "thanks all sorted now",
           "billing refund for march", "bug login page blank", "thanks for the quick fix"]

SPEC = """\
pipeline: {pipeline}:pipeline
name: escalation
llm: simulator
inputs: {inputs}
repeats: 2
seed: 0
{graph}perturbations:
  - id: urgent
    node: triage
    op: override
    params: {{set: {{urgent: true}}}}
  - id: calm
    node: triage
    op: override
    params: {{set: {{urgent: false}}}}
replay: {{repeats: 2}}
gate: {{probes: 12, repeats: 2}}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {output}
"""

GRAPH = """\
nodes:
  triage:
    fields:
      urgent: {type: bool, role: routing}
      topic: {type: categorical, role: context, categories: [billing, bug, thanks]}
  route:
    output: {type: categorical, role: routing, categories: [answer, escalate]}
  escalate:
    fields:
      queue: {type: categorical, role: context}
      topic: {type: categorical, role: context}
  answer:
    fields:
      reply: {type: categorical, role: context}
edges: [[triage, route], [route, escalate], [route, answer]]
"""


def _spec(tmp: Path, declared_by: str) -> Path:
    graph = ""
    if declared_by == "graph file":
        (tmp / "graph.yaml").write_text(GRAPH, encoding="utf-8")
        graph = f"graph: {tmp / 'graph.yaml'}\n"
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(pipeline=PIPELINE, inputs=json.dumps([{"text": t} for t in TICKETS]), graph=graph,
                                cache=tmp / "emb", output=tmp / "run"), encoding="utf-8")
    return path


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module", params=["decorators", "graph file"])
def campaign(request: pytest.FixtureRequest, quiver_cli: list[str],
             tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """The campaign's spec, its ``campaign.json`` and its pair rows."""
    tmp = tmp_path_factory.mktemp(request.param.replace(" ", "_"))
    spec = _spec(tmp, request.param)
    proc = subprocess.run([*quiver_cli, "run", str(spec), "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    assert summary["complete"] and summary["status"] == {"ok": summary["jobs"]}, summary
    return spec, json.loads((tmp / "run" / "campaign.json").read_text()), _rows(tmp / "run")


def _perturbation(data: dict[str, Any], pid: str) -> dict[str, Any]:
    return next(p for p in data["perturbations"] if p["id"] == pid)


def _estimate(block: dict[str, Any], key: str, node: str) -> tuple[Any, Any, Any]:
    """(value, ci, n) of a node's estimate as ``campaign.json`` writes it: ``KEY``, ``KEY_ci``, ``KEY_n``."""
    return block[key][node], block[f"{key}_ci"][node], block[f"{key}_n"][node]


def _mean(rows: list[dict[str, Any]], node: str) -> tuple[float | None, int]:
    """By hand: the mean of the node's distances over the rows that give one, and their count."""
    values = [r["d"][node] for r in rows if r["d"].get(node) is not None]
    return (float(np.mean(values)) if values else None), len(values)


def test_no_baseline_trace_runs_the_branch_and_the_override_takes_it(
        campaign: tuple[Path, dict[str, Any], list[dict[str, Any]]]) -> None:
    _, _, rows = campaign
    urgent = [r for r in rows if r["perturbation_id"] == "urgent"]
    assert len(urgent) == len(TICKETS) * 2 * 2 and all(r["status"] == "ok" for r in urgent)
    assert all(r["counts"].get("escalate", [0, 0])[0] == 0 for r in rows)  # never in a baseline
    took = [r for r in urgent if "escalate" in r["counts"]]
    assert len(took) == 16  # billing and bug tickets: 4 inputs x 2 recorded repeats x 2 replay repeats
    for r in took:
        assert r["counts"]["escalate"] == [0, 1] and r["counts"]["answer"] == [1, 0]
        assert r["d"]["escalate"] == 1.0 and r["d"]["answer"] == 1.0 and r["D_struct"] and r["D_shape"]
        assert r["D_iter"] == 2 and set(r["fields"]["escalate"]) == {"queue", "topic"}
        assert set(r["fields"]["escalate"].values()) == {1.0}
    for r in urgent:
        if "escalate" not in r["counts"]:
            assert r["d"].get("escalate") is None and not r["D_struct"] and not r["D_shape"]
    assert {r["trace_id"] for r in took}.isdisjoint({r["trace_id"] for r in urgent if r not in took})


def test_campaign_lists_the_branch_downstream_with_its_cascade_from_the_pairs(
        campaign: tuple[Path, dict[str, Any], list[dict[str, Any]]]) -> None:
    _, data, rows = campaign
    urgent = _perturbation(data, "urgent")
    downstream = urgent["downstream"]
    assert "escalate" in downstream and set(downstream) == {"route", "answer", "escalate"}
    assert downstream.index("route") < downstream.index("escalate")
    effective = [r for r in rows if r["perturbation_id"] == "urgent" and r["stratum"] == "effective"]
    stratum = urgent["strata"]["effective"]
    assert stratum["n"] == len(effective) == 24 and urgent["effective"] == 24 and urgent["noop"] == 0
    value, n = _mean(effective, "escalate")
    assert (value, n) == (1.0, 16)
    assert _estimate(stratum, "mean_d", "escalate") == (1.0, [1.0, 1.0], 16)
    assert _estimate(stratum, "mean_d_given_shape", "escalate") == (1.0, [1.0, 1.0], 16)
    struct = sum(r["D_struct"] for r in effective) / len(effective)
    assert struct == pytest.approx(16 / 24)
    assert stratum["D_struct"] == pytest.approx(struct, abs=1e-6) and stratum["D_struct_n"] == 24
    assert stratum["D_shape"] == pytest.approx(16 / 24, abs=1e-6)
    test = urgent["negative_control"]["nodes"]
    assert test == {} or test["escalate"]["reason"] == "not in the observational pair table"


def test_every_downstream_mean_agrees_with_the_pair_rows(
        campaign: tuple[Path, dict[str, Any], list[dict[str, Any]]]) -> None:
    _, data, rows = campaign
    ok = [r for r in rows if r["status"] == "ok"]
    for p in data["perturbations"]:
        mine = [r for r in ok if r["perturbation_id"] == p["id"]]
        measured = {n for r in mine for n, v in r["d"].items() if v is not None} - {p["node"], "input"}
        assert measured <= set(p["downstream"]), (p["id"], measured)
        for name, stratum in p["strata"].items():
            chosen = [r for r in mine if r["stratum"] == name]
            for node in p["downstream"]:
                value, n = _mean(chosen, node)
                got, _, got_n = _estimate(stratum, "mean_d", node)
                assert got_n == n and (got is None) == (value is None), (p["id"], name, node)
                if value is not None:
                    assert got == pytest.approx(value, abs=1e-6), (p["id"], name, node)
        control = p["control_replays"]
        chosen = [r for r in ok if r["perturbation_id"] == control["id"]]
        for node in p["downstream"]:
            assert control["mean_d_n"][node] == _mean(chosen, node)[1]
    calm = _perturbation(data, "calm")
    assert "escalate" in calm["downstream"] and calm["noop"] == 24
    assert _estimate(calm["strata"]["noop"], "mean_d", "escalate") == (None, None, 0)


def test_gate_measures_the_branch_its_candidate_reaches(
        campaign: tuple[Path, dict[str, Any], list[dict[str, Any]]], quiver_cli: list[str]) -> None:
    spec, _, _ = campaign
    template = spec.parent / "triage_urgent.txt"
    template.write_text(textwrap.dedent("""\
        [user]
        URGENT ticket: {text}
        """), encoding="utf-8")
    out = spec.parent / "gate"
    proc = subprocess.run([*quiver_cli, "gate", str(spec), "--candidate", f"triage={template}", "--output", str(out),
                           "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    [c] = json.loads((out / "gate.json").read_text())["candidates"]
    assert c["node"] == "triage" and set(c["downstream"]) == {"route", "answer", "escalate"}
    escalate = c["downstream"]["escalate"]
    assert escalate["current"]["n"] == 0 and escalate["difference"]["n"] == 0
    assert escalate["candidate"] == {"value": 1.0, "ci": [1.0, 1.0], "n": 16}  # 8 billing and bug probes x 2
