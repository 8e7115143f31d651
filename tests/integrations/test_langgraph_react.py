"""A support desk on LangGraph's prebuilt ReAct agent (``create_react_agent``), instrumented
with one line, measured at a counting front (tests/pipelines/react_desk: an agent named
``desk`` with ``lookup_invoice`` and ``check_service``, then a ``summary`` chat call;
6 messages, 2 repeats).

What must hold: the recorded nodes are the agent's (named by the graph) and the tools',
not the graph's ``agent`` and ``tools``, with the conversation as parents; a frozen check
sends nothing; every pair of a flip of the tool chosen runs the tool the flip names,
whose result the next turn's request carries at the front; an override of a tool's
result is what the next turn reads; a parameter change of the agent reaches its
requests only; ``ainvoke`` records and replays the same way; every count the engine
prints equals the front's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

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

from quiver import load_traces

PIPELINES = Path(__file__).parents[1] / "pipelines"
DESK = PIPELINES / "react_desk"
TOOLS = {"lookup_invoice", "check_service"}
MODELS = {"desk": "lg-react", "summary": "lg-summary"}
MESSAGES = {json.loads(line)["input_id"]: json.loads(line)["message"]
            for line in (DESK / "inputs.jsonl").read_text().splitlines()}


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    with serving(PIPELINES / "desk_models.py") as counting:
        yield counting


@pytest.fixture(scope="module")
def recorded(front: CountingFront, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, Path, list[dict[str, Any]], Any]:
    root = tmp_path_factory.mktemp("react-desk")
    spec, sent, done = record(front, DESK, root, function="run", model="lg-react", repeats=2)
    return root, spec, sent, done


def test_recorded_nodes_are_the_agent_and_its_tools_with_the_conversation_as_parents(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any]) -> None:
    root, _, sent, done = recorded
    traces = load_traces(root / "rec" / "traces.jsonl").traces
    assert len(traces) == 12 and all(t.status == "ok" for t in traces)
    assert {c.node for t in traces for c in t.calls} == {"input", "desk", "summary", *TOOLS}
    for trace in traces:
        first, rest, tools = check_conversation(trace, "desk")
        assert len(rest) == len(tools)  # a turn that calls a tool, then one that answers
        assert [first, *rest][-1].output["text"] == trace.output["answer"]
        (summary,) = turns(trace, "summary")
        assert [c.node for c in trace.calls if c.call_id in summary.parents] == ["desk"]  # it reads the answer
    summary_json = json.loads((root / "rec" / "summary.json").read_text())
    assert summary_json["llm_calls"] == len(sent) == printed_llm_calls(done.stdout + done.stderr)
    made = Counter(MODELS[c.node] for t in traces for c in t.calls if c.kind == "llm")
    assert Counter(r["model"] for r in sent) == made


def test_a_frozen_check_sends_nothing(recorded: tuple[Path, Path, list[dict[str, Any]], Any],
                                      front: CountingFront) -> None:
    root, spec, _, _ = recorded
    sent, done = check(front, spec, root / "rec" / "traces.jsonl")
    assert "12 of 12 traces reproduce exactly" in done.stdout + done.stderr
    assert sent == []


def test_every_flip_of_the_tool_chosen_runs_that_tool_live(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _, _ = recorded
    out, sent, done = campaign(front, DESK, root, "flip", "  - {id: flip, node: desk, op: categorical_flip, "
                                                         "params: {field: tool}}",
                               function="run", model="lg-react", controls=0)
    named, replays = check_tool_flips(out, root / "rec" / "traces.jsonl", "desk", TOOLS, MESSAGES)
    assert len(replays) == 12 and all(turns(r, "desk")[-1].output["text"] == r.output["answer"] for r in replays)
    # the next turns' requests carry the flipped tool's call, for that message, as many as the replays name; the
    # flipped turn was served (no request); the summary ran live on every replay
    at_front = Counter((tool_called(r), message_of(r)) for r in sent if r["model"] == "lg-react")
    assert at_front == named
    assert Counter(r["model"] for r in sent)["lg-summary"] == 12
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)


def test_a_tool_override_feeds_the_next_turn_and_a_parameter_change_reaches_the_agent_only(
        recorded: tuple[Path, Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _, _ = recorded
    perturbations = ("  - {id: invoice-paid, node: lookup_invoice, op: override, params: {set: {status: paid}}}\n"
                     "  - {id: desk-hot, node: desk, op: param_change, params: {temperature: 1.9}}")
    out, sent, done = campaign(front, DESK, root, "tools", perturbations, function="run", model="lg-react",
                               controls=1)
    rows = {p["id"]: p for p in json.loads((out / "campaign.json").read_text())["perturbations"]}
    assert rows["invoice-paid"]["effective"] > 0 and rows["invoice-paid"]["not_applied"] == 0
    assert rows["desk-hot"]["not_applied"] == 0 and rows["desk-hot"]["failed"] == 0
    replays = [r for r in load_traces(out / "replays.jsonl").traces if "control" not in r.trace_id]
    paid = check_override_read(replays, "invoice-paid", "desk", "invoice-1002")
    assert paid > 0
    overridden = [r for r in sent if r["model"] == "lg-react" and message_of(r) == MESSAGES["invoice-1002"]
                  and tool_result_says(r, '"paid"')]
    assert len(overridden) == paid
    # one hot request per replay of the parameter change (its target turn's), all the agent's: never the summary's
    hot = [r for r in sent if (r["body"] or {}).get("temperature") == 1.9]
    assert {r["model"] for r in hot} == {"lg-react"}
    assert len(hot) == sum("~desk-hot/" in r.trace_id for r in replays)
    assert printed_llm_calls(done.stdout + done.stderr) == len(sent)


def test_ainvoke_records_and_replays_alike(front: CountingFront, tmp_path: Path) -> None:
    spec, sent, _ = record(front, DESK, tmp_path, function="run_async", model="lg-react", repeats=1)
    traces = load_traces(tmp_path / "rec" / "traces.jsonl").traces
    assert {c.node for t in traces for c in t.calls} == {"input", "desk", "summary", *TOOLS}
    turns = [c for t in traces for c in t.calls if c.kind == "llm"]
    assert all(c.model is not None and c.model.name == MODELS[c.node] for c in turns) and len(turns) == len(sent)
    resent, done = check(front, spec, tmp_path / "rec" / "traces.jsonl")
    assert "6 of 6 traces reproduce exactly" in done.stdout + done.stderr and resent == []


@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_only_a_graph_create_react_agent_built_is_recorded_as_an_agent() -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import create_react_agent

    from quiver.integrations.langgraph.react import react_agent

    @tool
    def ping(query: str) -> str:
        """Ping."""
        return query

    model = ChatOpenAI(model="lg-react", api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    named = react_agent(create_react_agent(model, [ping], name="desk"))
    unnamed = react_agent(create_react_agent(model, [ping]))
    assert named is not None and named.name == "desk" and named.names.tools == ("ping",)
    assert unnamed is not None and unnamed.name == "agent"

    class State(TypedDict):
        x: int

    builder = StateGraph(State)
    builder.add_node("agent", lambda s: {"x": s["x"] + 1})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    assert react_agent(builder.compile()) is None  # a node called agent is not an agent
