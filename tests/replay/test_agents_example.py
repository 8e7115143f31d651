"""The bundled openai-agents order desk (experiments/agents_example): an agent with a
function tool on the Responses API, recorded with ``quiver record`` at concurrency 4
(the SDK's one shared client, in the event loop quiver shares), reproduced by
``quiver replay --check`` with no LLM call, and perturbed by its campaign
(experiments/specs/agents_example.yaml): a prompt swap of the agent's inline
instructions, an override of what its tool returned and a parameter change, each with
effective pairs, on the local executor and on Ray.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from findings_claims import check_claims

from quiver.experiments._campaign import run_campaign

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "experiments" / "agents_example"
SPEC = ROOT / "experiments" / "specs" / "agents_example.yaml"
PERTURBATIONS = ("desk-apologise", "order-shipped", "desk-hot")


def _quiver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quiver.experiments._cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agents") / "record"
    proc = _quiver("record", str(EXAMPLE / "record.yaml"), "--output", str(out), "--repeats", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_the_agent_records_at_concurrency_4_with_every_call_on_the_responses_api(recording: Path) -> None:
    traces = [json.loads(line) for line in (recording / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 8 and all(t["status"] == "ok" for t in traces)
    for trace in traces:
        agent_calls = [c for c in trace["calls"] if c["node"] in ("desk", "llm") and c["model"]]
        assert [c["tags"]["wire"]["format"] for c in agent_calls] == ["responses", "responses"]
        assert [c["node"] for c in trace["calls"] if c["kind"] == "tool"] == ["lookup_order"]
    summary = json.loads((recording / "summary.json").read_text())
    assert summary.get("llm_calls", 24) == 24


def test_replay_check_reproduces_every_trace_with_no_llm_call(recording: Path) -> None:
    proc = _quiver("replay", "--spec", str(EXAMPLE / "record.yaml"), "--check", str(recording / "traces.jsonl"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 of 8 traces reproduce exactly" in proc.stdout + proc.stderr
    assert "0 LLM calls made" in proc.stdout + proc.stderr


def _effective(out: Path) -> dict[str, Any]:
    campaign = json.loads((out / "campaign.json").read_text())
    return {p["id"]: p for p in campaign["perturbations"]}


def _check_campaign(result: Any, out: Path) -> None:
    assert result.complete and not result.status.get("failed")
    check_claims(json.loads((out / "campaign.json").read_text()))  # no absence beyond the margin
    rows = _effective(out)
    for pid in PERTURBATIONS:
        row = rows[pid]
        assert row["effective"] > 0 and row["failed"] == 0 and row["not_applied"] == 0, (pid, row)


def test_the_campaign_gives_effective_pairs_for_each_perturbation(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    result = run_campaign(SPEC, output=out, progress_stream=None)
    _check_campaign(result, out)


def test_the_campaign_runs_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "campaign-ray"
    result = run_campaign(SPEC, output=out, executor="ray", progress_stream=None)
    _check_campaign(result, out)
