"""An async support desk on openai-agents, instrumented with one line, measured at a
counting front (tests/pipelines/instrumented_desk: a triage agent hands off to a billing agent
with ``lookup_invoice`` or a technical agent with ``check_service_status`` and
``open_ticket``; a chat completion summarises; 16 messages, 3 repeats).

What must hold: the recorded nodes are the agents' and the tools', with the conversation
as parents; a frozen check sends nothing; every effective pair of a handoff flip runs the
other agent, whose requests the front received for that message and whose calls the
replay names; an override of a tool's result is what the next turn reads; a parameter
change of one agent reaches that agent's requests only; streamed runs and the chat
completions model record and replay the same way; every count the engine prints equals
the front's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_front import (
    CAMPAIGN,
    KEY_ENV,
    SECONDS,
    campaign,
    check,
    llm_requests,
    message_of,
    printed_llm_calls,
    record,
    serving,
)
from counting_front import CountingFront
from fuzzing import run_cli

from quiver import load_traces

DESK = Path(__file__).parents[1] / "pipelines" / "instrumented_desk"
AGENTS = {"Billing agent": "idesk-billing", "Technical agent": "idesk-tech"}
TOOLS = {"Billing agent": {"lookup_invoice"}, "Technical agent": {"check_service_status", "open_ticket"}}
MESSAGES = {json.loads(line)["input_id"]: json.loads(line)["message"]
            for line in (DESK / "inputs.jsonl").read_text().splitlines()}

MODEL = "idesk-triage"
"""The model the spec names (the triage agent's; each agent names its own in the app)."""


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    with serving(DESK / "sim_models.py") as counting:
        yield counting


@pytest.fixture(scope="module")
def recorded(front: CountingFront, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], Any]:
    root = tmp_path_factory.mktemp("agent-desk")
    _, sent, done = record(front, DESK, root, function="run", model=MODEL, repeats=3)
    return root, sent, done


def test_recorded_nodes_are_the_agents_and_tools_with_the_conversation_as_parents(
        recorded: tuple[Path, list[dict[str, Any]], Any]) -> None:
    root, sent, done = recorded
    traces = load_traces(root / "rec" / "traces.jsonl").traces
    assert len(traces) == 48 and all(t.status == "ok" for t in traces)
    nodes = {c.node for t in traces for c in t.calls}
    assert nodes == {"input", "Triage agent", "Billing agent", "Technical agent", "lookup_invoice",
                     "check_service_status", "open_ticket", "summary"}
    for trace in traces:
        by_id = {c.call_id: c for c in trace.calls}
        triage = next(c for c in trace.calls if c.node == "Triage agent")
        agent = triage.decision["handoff"]
        assert agent in AGENTS and trace.output["agent"] == agent
        for call in trace.calls:
            if call.kind == "tool":
                assert call.node in TOOLS[agent] and [by_id[p].node for p in call.parents] == [agent]
            elif call.node == agent:
                parents = {by_id[p].node for p in call.parents}
                assert parents <= {agent, "Triage agent"} | TOOLS[agent] and parents
        assert {by_id[p].node for p in next(c for c in trace.calls if c.node == agent).parents} == {"Triage agent"}
    # every count the engine gives is the front's
    summary = json.loads((root / "rec" / "summary.json").read_text())
    assert summary["llm_calls"] == len(sent) == printed_llm_calls(done.stdout + done.stderr)
    by_model = Counter(r["model"] for r in sent)
    turns = Counter(AGENTS.get(c.node, "idesk-triage" if c.node == "Triage agent" else "idesk-summary")
                    for t in traces for c in t.calls if c.kind == "llm")
    assert by_model == turns


def test_a_frozen_check_sends_nothing(recorded: tuple[Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _ = recorded
    sent, done = check(front, root / "record.yaml", root / "rec" / "traces.jsonl")
    assert "48 of 48 traces reproduce exactly" in done.stdout + done.stderr
    assert sent == []


def _campaign(root: Path, front: CountingFront, name: str, perturbations: str, controls: int
              ) -> tuple[Path, list[dict[str, Any]], Any]:
    return campaign(front, DESK, root, name, perturbations, function="run", model=MODEL, controls=controls)


def test_every_effective_handoff_flip_runs_the_other_agent_live(
        recorded: tuple[Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _ = recorded
    out, sent, done = _campaign(root, front, "flip", "  - {id: flip, node: Triage agent, op: categorical_flip, "
                                                     "params: {field: handoff}}", controls=0)
    row = json.loads((out / "campaign.json").read_text())["perturbations"][0]
    assert row["effective"] == 48 and row["not_applied"] == 0 and row["failed"] == 0
    baselines = {t.trace_id: t for t in load_traces(root / "rec" / "traces.jsonl").traces}
    replays = load_traces(out / "replays.jsonl").traces
    named: Counter[tuple[str, str]] = Counter()
    for replay in replays:
        baseline = baselines[replay.trace_id.split("~")[0]]
        before = next(c for c in baseline.calls if c.node == "Triage agent").decision["handoff"]
        after = next(c for c in replay.calls if c.node == "Triage agent")
        other = next(a for a in AGENTS if a != before)
        assert after.decision["handoff"] == other and after.output["handoff"] == other
        assert not any(c.node == before for c in replay.calls)  # the recorded agent did not run
        turns = [c for c in replay.calls if c.node == other]
        assert turns and replay.output["agent"] == other
        named[(AGENTS[other], MESSAGES[replay.input_id])] += len(turns)
    # the front received the other agent's requests, for that message, as many as the replays name;
    # the triage turn was served (no request), the summary ran live
    at_front = Counter((r["model"], message_of(r)) for r in sent if r["model"] in AGENTS.values())
    assert at_front == named
    assert Counter(r["model"] for r in sent)["idesk-triage"] == 0
    assert Counter(r["model"] for r in sent)["idesk-summary"] == 48
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)


def test_a_tool_override_feeds_the_next_turn_and_a_parameter_change_reaches_one_agent(
        recorded: tuple[Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _ = recorded
    perturbations = ("  - {id: invoice-paid, node: lookup_invoice, op: override, params: {set: {status: paid}}}\n"
                     "  - {id: tech-hot, node: Technical agent, occurrence: 1, op: param_change, "
                     "params: {temperature: 1.9}}")
    out, sent, done = _campaign(root, front, "tools", perturbations, controls=1)
    campaign = json.loads((out / "campaign.json").read_text())
    rows = {p["id"]: p for p in campaign["perturbations"]}
    assert rows["invoice-paid"]["effective"] > 0 and rows["invoice-paid"]["not_applied"] == 0
    for replay in load_traces(out / "replays.jsonl").traces:
        if "~invoice-paid/" in replay.trace_id and "control" not in replay.trace_id:
            tool = next(c for c in replay.calls if c.node == "lookup_invoice")
            answer = [c for c in replay.calls if c.node == "Billing agent"][-1]
            assert tool.output["status"] == "paid" and "paid" in answer.output["text"]
    hot = [r for r in sent if (r["body"] or {}).get("temperature") == 1.9]
    assert hot and {r["model"] for r in hot} == {"idesk-tech"}
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)
    # the graph inside the agents: the override's cascade (its downstream nodes' distances) and its
    # negative control are measured
    row = rows["invoice-paid"]
    assert {"Billing agent", "summary"} <= set(row["downstream"]), row["downstream"]
    assert row["strata"]["effective"]["mean_d"]["Billing agent"] > 0, row["strata"]["effective"]
    assert row["negative_control"]["passed"] is not None, row["negative_control"]


@pytest.mark.parametrize("function", ["run_streamed", "run_chat"])
def test_streamed_runs_and_the_chat_completions_model_record_and_replay_alike(
        function: str, front: CountingFront, tmp_path: Path) -> None:
    spec, _, _ = record(front, DESK, tmp_path, function=function, model=MODEL, repeats=1)
    traces = load_traces(tmp_path / "rec" / "traces.jsonl").traces
    assert {c.node for t in traces for c in t.calls} >= {"Triage agent", "Billing agent", "Technical agent",
                                                         "lookup_invoice", "check_service_status"}
    sent, done = check(front, spec, tmp_path / "rec" / "traces.jsonl")
    assert "16 of 16 traces reproduce exactly" in done.stdout + done.stderr, done.stderr
    assert sent == []


def _gate(root: Path, front: CountingFront, name: str, candidate: Path) -> tuple[dict[str, Any], int, Any]:
    """``quiver gate`` of a triage-instructions candidate over the recorded desk: gate.json,
    the LLM requests the front received, the command's result."""
    spec = root / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(app=DESK, function="run", url=front.url, model=MODEL, key=KEY_ENV,
                                    baseline=root / "rec" / "traces.jsonl",
                                    perturbations="  - {id: flip, node: Triage agent, op: categorical_flip, "
                                                  "params: {field: handoff}}",
                                    controls=0, cache=root / "embeddings", out=root / f"{name}-run"))
    mark = front.mark()
    done = run_cli(["gate", str(spec), "--candidate", f"Triage agent/system={candidate}", "--out",
                    str(root / name)], seconds=SECONDS)
    assert done.code in (0, 1), done.stderr
    return json.loads((root / name / "gate.json").read_text()), len(llm_requests(front.requests()[mark:])), done


def test_the_gate_fails_a_candidate_that_hands_every_thanks_to_billing_and_names_the_input(
        recorded: tuple[Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _ = recorded
    data, sent, done = _gate(root, front, "gate-thanks", DESK / "thanks_to_billing.txt")
    [c] = data["candidates"]
    assert done.code == 1 and data["verdict"] == "fail", done.stdout[-3000:]
    per = c["per_input"]
    assert per["moved"] == ["thanks"] and per["enough_replays"], per
    thanks = next(g for g in per["inputs"] if g["input_id"] == "thanks")
    # the candidate hands every thanks to billing: whichever agent the recording took, the arms differ
    assert thanks["p_holm"] <= data["familywise"] / 2
    assert [f for f in c["failures"] if "input thanks" in f] == c["failures"]
    assert "`thanks`" in done.stdout and "## quiver gate: FAIL" in done.stdout
    assert data["llm_calls"] == sent == printed_llm_calls(done.stdout + done.stderr)
