"""The bundled openai-agents order desk (experiments/agents_example): a triage agent that
hands off to an order desk or a refunds desk, each with a function tool, on the Responses
API, instrumented with ``instrument(TRIAGE)``. Recorded with ``quiver record`` at
concurrency 4 (the SDK's one shared client, in the event loop quiver shares), reproduced
by ``quiver replay --check`` with no LLM call, and perturbed by its campaign
(experiments/specs/agents_example.yaml): the handoff flipped (the other desk runs), a tool
result overridden, the order desk's inline instructions swapped and its model heated,
each with effective pairs, on the local executor and on Ray. The gate fails a triage
instructions change that sends late orders to the refunds desk, naming both late-order
inputs, and passes the unchanged instructions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from findings_claims import check_claims

from quiver import load_traces
from quiver.experiments._campaign import run_campaign

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "experiments" / "agents_example"
SPEC = ROOT / "experiments" / "specs" / "agents_example.yaml"
PERTURBATIONS = ("handoff-flip", "order-shipped", "desk-apologise", "desk-hot")
DESKS = {"Order desk": "lookup_order", "Refunds desk": "open_refund"}


def _quiver(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quiver.experiments._cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agents") / "record"
    proc = _quiver("record", str(EXAMPLE / "record.yaml"), "--output", str(out), "--repeats", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_agents_and_tools_are_the_recorded_nodes(recording: Path) -> None:
    traces = load_traces(recording / "traces.jsonl").traces
    assert len(traces) == 16 and all(t.status == "ok" for t in traces)
    for trace in traces:
        triage = [c for c in trace.calls if c.node == "Triage"]
        assert len(triage) == 1 and triage[0].kind == "llm"
        desk = triage[0].decision["handoff"]
        assert desk in DESKS and triage[0].output["handoff"] == desk
        turns = [c for c in trace.calls if c.node == desk]
        assert [c.kind for c in turns] == ["llm", "llm"]  # the tool call, then the answer
        assert all(c.tags["wire"]["format"] == "responses" for c in [*triage, *turns])
        tools = [c for c in trace.calls if c.kind == "tool"]
        assert [c.node for c in tools] == [DESKS[desk]] and tools[0].tool is not None
        # the graph of the conversation: triage -> desk turn -> tool -> next desk turn
        by_id = {c.call_id: c for c in trace.calls}
        assert [by_id[p].node for p in turns[0].parents] == ["Triage"]
        assert [by_id[p].node for p in tools[0].parents] == [desk]
        assert sorted(by_id[p].node for p in turns[1].parents) == sorted([desk, DESKS[desk]])
        assert trace.output["desk"] == desk
    summary = json.loads((recording / "summary.json").read_text())
    assert summary["llm_calls"] == 16 * 4  # intake, triage, the desk's two turns


def test_replay_check_reproduces_every_trace_with_no_llm_call(recording: Path) -> None:
    proc = _quiver("replay", "--spec", str(EXAMPLE / "record.yaml"), "--check", str(recording / "traces.jsonl"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "16 of 16 traces reproduce exactly" in proc.stdout + proc.stderr
    assert "0 LLM calls made" in proc.stdout + proc.stderr


def _rows(out: Path) -> dict[str, Any]:
    campaign = json.loads((out / "campaign.json").read_text())
    return {p["id"]: p for p in campaign["perturbations"]}


def _check_campaign(result: Any, out: Path) -> None:
    assert result.complete and not result.status.get("failed")
    check_claims(json.loads((out / "campaign.json").read_text()))  # no absence beyond the margin
    rows = _rows(out)
    for pid in PERTURBATIONS:
        row = rows[pid]
        assert row["effective"] > 0 and row["failed"] == 0 and row["not_applied"] == 0, (pid, row)
    baselines = {t.trace_id: t for t in load_traces(out / "baseline" / "traces.jsonl").traces}
    flips = [t for t in load_traces(out / "replays.jsonl").traces if "~handoff-flip/" in t.trace_id]
    assert len(flips) == rows["handoff-flip"]["effective"] > 0
    for replay in flips:
        recorded = next(c for c in baselines[replay.trace_id.split("~")[0]].calls if c.node == "Triage")
        flipped = next(c for c in replay.calls if c.node == "Triage")
        other = next(d for d in DESKS if d != recorded.decision["handoff"])
        assert flipped.decision["handoff"] == other
        # the other desk ran, live, with its own tool; the recorded desk did not
        assert [c.node for c in replay.calls if c.node in DESKS] == [other, other]
        assert any(c.node == DESKS[other] for c in replay.calls)
        assert replay.output["desk"] == other


def test_the_campaign_gives_effective_pairs_for_each_perturbation(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    result = run_campaign(SPEC, output=out, progress_stream=None)
    _check_campaign(result, out)


def test_the_campaign_runs_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "campaign-ray"
    result = run_campaign(SPEC, output=out, executor="ray", progress_stream=None)
    _check_campaign(result, out)


def _gate(candidate: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = _quiver("gate", str(SPEC), "--candidate", f"Triage/system={candidate}", "--output", str(out), "--quiet")
    assert (out / "gate.json").is_file(), proc.stderr[-3000:]
    return proc, json.loads((out / "gate.json").read_text())


def test_the_gate_fails_late_orders_sent_to_refunds_and_names_both_inputs(tmp_path: Path) -> None:
    """Two of the eight messages are about late orders: the candidate hands them to the
    refunds desk in every replay, where the current instructions hand them to the order
    desk. The path-change rate over all inputs cannot tell (n = 48 per arm); the per-input
    tests name both, and the answers they get fail the outcome check."""
    proc, data = _gate(EXAMPLE / "prompts" / "triage_late_to_refunds.txt", tmp_path / "late")
    assert proc.returncode == 1 and data["verdict"] == "fail", proc.stdout[-3000:]
    [c] = data["candidates"]
    assert c["node"] == "Triage" and c["per_input"]["moved"] == ["late-1042", "late-2077"]
    assert c["outcome"]["per_input"]["moved"] == ["late-1042", "late-2077"]
    assert {g["input_id"] for g in c["per_input"]["inputs"] if g["moved"]} == {"late-1042", "late-2077"}
    assert any("late-1042" in f for f in c["failures"]) and any("late-2077" in f for f in c["failures"])
    assert "`late-1042`" in proc.stdout and "`late-2077`" in proc.stdout


def test_the_gate_passes_the_unchanged_triage_instructions(tmp_path: Path) -> None:
    import ast

    module = ast.parse((EXAMPLE / "pipeline.py").read_text())
    [text] = [ast.literal_eval(n.value) for n in module.body if isinstance(n, ast.Assign)
              and [getattr(t, "id", "") for t in n.targets] == ["TRIAGE_INSTRUCTIONS"]]
    same = tmp_path / "same.txt"
    same.write_text(text + "\n")
    proc, data = _gate(same, tmp_path / "same")
    assert proc.returncode == 0 and data["verdict"] == "pass", proc.stdout[-3000:]
    [c] = data["candidates"]
    assert c["per_input"]["moved"] == [] and c["outcome"]["decision"] == "non-inferior"
