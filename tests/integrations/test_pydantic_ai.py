"""A support desk on pydantic-ai, instrumented with one line, measured at a counting front
(tests/pipelines/pydantic_desk: a ``support`` agent with ``lookup_invoice``,
``check_service`` and ``escalate``, which delegates to an ``escalation`` agent answering
a structured ``Ticket`` through pydantic-ai's output tool; 7 messages, 2 repeats).

What must hold: the recorded nodes are the agents' and the tools', with the conversation
as parents and the delegated agent's turns under the tool's call; a frozen check sends
nothing; every pair of a flip of the tool chosen runs the tool the flip names, whose
result the next turn's request carries at the front; an override of a tool's result is
what the next turn reads; a parameter change of the delegated agent reaches its requests
only; streamed runs record and replay the same way; every count the engine prints equals
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
    campaign,
    check,
    check_conversation,
    check_override_read,
    check_tool_flips,
    message_of,
    printed_llm_calls,
    record,
    serving,
    tool_called,
    tool_result_says,
    turns,
)
from counting_front import CountingFront

from quiver import InstrumentationError, load_traces

PIPELINES = Path(__file__).parents[1] / "pipelines"
DESK = PIPELINES / "pydantic_desk"
TOOLS = {"lookup_invoice", "check_service", "escalate"}
MODELS = {"support": "pa-support", "escalation": "pa-escalation"}
MESSAGES = {json.loads(line)["input_id"]: json.loads(line)["message"]
            for line in (DESK / "inputs.jsonl").read_text().splitlines()}


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    with serving(PIPELINES / "desk_models.py") as counting:
        yield counting


@pytest.fixture(scope="module")
def recorded(front: CountingFront, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, Path, list[dict[str, Any]], Any]:
    root = tmp_path_factory.mktemp("pydantic-desk")
    spec, sent, done = record(front, DESK, root, function="run", model="pa-support", repeats=2)
    return root, spec, sent, done


def test_recorded_nodes_are_the_agents_and_tools_with_the_conversation_as_parents(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any]) -> None:
    root, _, sent, done = recorded
    traces = load_traces(root / "rec" / "traces.jsonl").traces
    assert len(traces) == 14 and all(t.status == "ok" for t in traces)
    assert {c.node for t in traces for c in t.calls} == {"input", "support", "escalation", *TOOLS}
    for trace in traces:
        _, _, tools = check_conversation(trace, "support")
        for inner in turns(trace, "escalation"):  # the delegated agent: under the tool's call, its parent
            (escalate,) = [c for c in tools if c.node == "escalate"]
            assert inner.call_path.startswith(escalate.call_path + "/") and inner.parents == [escalate.call_id]
            assert set(inner.output["output"]) == {"team", "severity"} and inner.output["tool_calls"] == []
            assert escalate.output == inner.output["output"]
    assert {t.input_id for t in traces if turns(t, "escalation")} == {"api-urgent", "angry-1003"}
    # every count the engine gives is the front's
    summary = json.loads((root / "rec" / "summary.json").read_text())
    assert summary["llm_calls"] == len(sent) == printed_llm_calls(done.stdout + done.stderr)
    made = Counter(MODELS[c.node] for t in traces for c in t.calls if c.kind == "llm")
    assert Counter(r["model"] for r in sent) == made


def test_a_frozen_check_sends_nothing(recorded: tuple[Path, Path, list[dict[str, Any]], Any],
                                      front: CountingFront) -> None:
    root, spec, _, _ = recorded
    sent, done = check(front, spec, root / "rec" / "traces.jsonl")
    assert "14 of 14 traces reproduce exactly" in done.stdout + done.stderr
    assert sent == []


def test_every_flip_of_the_tool_chosen_runs_that_tool_live(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _, _ = recorded
    out, sent, done = campaign(front, DESK, root, "flip", "  - {id: flip, node: support, op: categorical_flip, "
                                                         "params: {field: tool}}",
                               function="run", model="pa-support", controls=0)
    named, replays = check_tool_flips(out, root / "rec" / "traces.jsonl", "support", TOOLS, MESSAGES)
    assert len(replays) == 14
    escalations = sum(len(turns(r, "escalation")) for r in replays)
    assert escalations > 0
    # the front received the next turns' requests carrying the flipped tool's call, for that message, as many as the
    # replays name; the flipped turn was served (no request); the delegated agent ran live where escalate was chosen
    at_front = Counter((tool_called(r), message_of(r)) for r in sent if r["model"] == "pa-support")
    assert at_front == named
    assert Counter(r["model"] for r in sent)["pa-escalation"] == escalations
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)


def test_a_tool_override_feeds_the_next_turn_and_execution_changes_reach_one_agent(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _, _ = recorded
    perturbations = ("  - {id: invoice-paid, node: lookup_invoice, op: override, params: {set: {status: paid}}}\n"
                     "  - {id: escalation-hot, node: escalation, op: param_change, params: {temperature: 1.9}}\n"
                     "  - {id: escalate-all, node: support, op: prompt_swap, "
                     f"params: {{message: {{role: system}}, variant: {DESK / 'escalate_all.txt'}}}}}")
    out, sent, done = campaign(front, DESK, root, "tools", perturbations, function="run", model="pa-support",
                               controls=1)
    rows = {p["id"]: p for p in json.loads((out / "campaign.json").read_text())["perturbations"]}
    assert rows["invoice-paid"]["effective"] > 0 and rows["invoice-paid"]["not_applied"] == 0
    assert rows["escalation-hot"]["not_applied"] == 0 and rows["escalation-hot"]["failed"] == 0
    replays = [r for r in load_traces(out / "replays.jsonl").traces if "control" not in r.trace_id]
    paid = check_override_read(replays, "invoice-paid", "support", "invoice-1002")
    assert paid > 0
    # at the front: the next turn of the overridden 1002 lookups read "paid"; the hot requests are the escalation
    # agent's, one per escalation turn of the parameter change's replays
    overridden = [r for r in sent if r["model"] == "pa-support" and message_of(r) == MESSAGES["invoice-1002"]
                  and tool_result_says(r, '"paid"')]
    assert len(overridden) == paid
    hot = [r for r in sent if (r["body"] or {}).get("temperature") == 1.9]
    hot_turns = sum(len(turns(r, "escalation")) for r in replays if "~escalation-hot/" in r.trace_id)
    assert hot and {r["model"] for r in hot} == {"pa-escalation"} and len(hot) == hot_turns
    # the support agent's swapped instructions: its first turn's request carries them (the front has one such
    # request per replay) and escalates; the turns after it are sent with the agent's own instructions
    swapped = [r for r in replays if "~escalate-all/" in r.trace_id]
    assert swapped and rows["escalate-all"]["failed"] == 0
    assert all(turns(r, "support")[0].output["tool"] == "escalate" for r in swapped)
    with_variant = [r for r in sent if "Escalate every case" in json.dumps(r["body"]["messages"])]
    assert {r["model"] for r in with_variant} == {"pa-support"} and len(with_variant) == len(swapped)
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)


def test_streamed_runs_record_and_replay_alike(front: CountingFront, tmp_path: Path) -> None:
    spec, sent, _ = record(front, DESK, tmp_path, function="run_streamed", model="pa-support", repeats=1)
    traces = load_traces(tmp_path / "rec" / "traces.jsonl").traces
    turns = [c for t in traces for c in t.calls if c.kind == "llm"]
    assert {c.node for t in traces for c in t.calls} == {"input", "support", "escalation", *TOOLS}
    assert all(c.model is not None and c.model.name == MODELS[c.node] for c in turns) and len(turns) == len(sent)
    resent, done = check(front, spec, tmp_path / "rec" / "traces.jsonl")
    assert "7 of 7 traces reproduce exactly" in done.stdout + done.stderr and resent == []


def test_instrument_names_agents_and_refuses_what_it_cannot_record() -> None:
    from pydantic_ai import Agent

    from quiver.integrations.pydantic_ai import instrument, node_names

    unnamed = Agent("test")
    assert instrument(unnamed) is unnamed and node_names(unnamed) == ["agent"]
    with pytest.raises(InstrumentationError, match="takes pydantic-ai Agent objects; got str"):
        instrument("support")
    with pytest.raises(InstrumentationError, match="needs the app's agent"):
        instrument()
    with pytest.raises(InstrumentationError, match="both recorded as node 'agent'"):
        instrument(Agent("test"), Agent("test"))
