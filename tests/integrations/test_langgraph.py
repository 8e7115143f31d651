"""quiver.integrations.langgraph: real LangGraph graphs recorded and replayed without glue.

The bundled agent (``experiments/langgraph_agent``, plain ``ChatOpenAI`` and one
``instrument(...)`` line) is recorded 3 times over its inputs with ``quiver record``,
checked with ``quiver replay --check`` and perturbed by a tiny campaign with the five
perturbation classes; small graphs pin down parents through reducers, ``Send`` fan-out
identity under shuffled scheduling, async graphs, checkpointers and interrupts, and the
``ChatPromptTemplate`` swap.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import operator
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import yaml
from findings_claims import check_claims
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from spec_paths import absolute_checks

from quiver import Trace
from quiver.integrations.langgraph import from_json, instrument, register_prompt, to_json
from quiver.replay import Simulator, Template, TraceBuilder, template_overrides
from quiver.replay._instrument import current_builder

ROOT = Path(__file__).parents[2]
AGENT = ROOT / "experiments" / "langgraph_agent"
SPEC = ROOT / "experiments" / "specs" / "langgraph_agent.yaml"
LLM_NODES = {"router", "grade", "rewrite", "compose", "follow_up"}
TEMPLATES = {"router": "router_prompt", "grade": "grader_prompt", "rewrite": "rewrite_prompt",
             "compose": "compose_prompt", "follow_up": "compose_prompt"}


def _quiver() -> list[str]:
    import shutil

    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*_quiver(), *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def endpoint(simulator: Simulator) -> dict[str, str]:
    """The environment of an unmodified program pointed at the session simulator (with
    the agent's models registered), as ``quiver record`` points it at its own."""
    spec = importlib.util.spec_from_file_location("langgraph_agent_sim_models", AGENT / "sim_models.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return {**os.environ, "OPENAI_BASE_URL": simulator.url, "OPENAI_API_KEY": "sk-test"}


@pytest.fixture(scope="module")
def recorded_with_output(endpoint: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Trace], str]:
    out = tmp_path_factory.mktemp("lg") / "corpus"
    proc = _cli(["record", str(AGENT / "record.yaml"), "--output", str(out), "--quiet"], endpoint)
    return [Trace.model_validate_json(line) for line in (out / "traces.jsonl").read_text().splitlines()], proc.stdout


@pytest.fixture(scope="module")
def recorded(recorded_with_output: tuple[list[Trace], str]) -> list[Trace]:
    return recorded_with_output[0]


def test_every_llm_call_is_recorded_with_the_full_contract(recorded: list[Trace]) -> None:
    assert len(recorded) == 36 and all(t.status == "ok" for t in recorded)
    for trace in recorded:
        nodes = {c.node for c in trace.calls}
        assert {"router", "compose"} <= nodes
        for call in trace.calls:
            if call.node not in LLM_NODES:
                continue
            assert call.kind == "llm" and call.model is not None and call.model.name.startswith("lg-")
            # the template is the variable that holds it; follow_up renders the composer's again
            assert call.prompt is not None and call.prompt.template_id == TEMPLATES[call.node]
            assert call.prompt.assembled and call.prompt.fragments[0] == call.prompt.template_hash
            assert call.response is not None and call.response.usage
            assert call.response.content or call.response.finish_reason == "tool_calls"
        retrieves = [c for c in trace.calls if c.node == "retrieve"]
        assert all(c.kind == "retrieval" and c.loop == "retrieve" for c in retrieves)
        assert [c.iteration for c in retrieves] == list(range(len(retrieves)))
        assert trace.calls[1].decision["route_question"] in ("retrieve", "compose")


def test_quiver_record_counts_the_captured_llm_calls(recorded_with_output: tuple[list[Trace], str]) -> None:
    traces, stdout = recorded_with_output
    made = sum(c.response is not None for t in traces for c in t.calls)
    assert made > 36 and f"with {sum(len(t.calls) for t in traces)} node calls and {made} LLM calls" in stdout


def test_the_composer_calls_a_tool_that_a_tool_node_runs(recorded: list[Trace]) -> None:
    ticketed = [t for t in recorded if any(c.node == "tools" for c in t.calls)]
    assert {"lost-2fa", "restore-project"} <= {t.input_id for t in ticketed}  # an admin, the workspace owner
    ids_by_call: dict[str, set[str]] = {}
    for trace in ticketed:
        by_node = {c.node: c for c in trace.calls}
        compose, tools, follow_up = by_node["compose"], by_node["tools"], by_node["follow_up"]
        assert compose.response is not None and compose.response.finish_reason == "tool_calls"
        assert compose.decision == {"tools_condition": "tools"}
        (asked,) = compose.output["messages"][0]["tool_calls"]
        assert asked["name"] == "open_ticket" and asked["args"]["priority"] in ("normal", "high")
        wire = compose.tags["tool_calls"][0]
        assert wire["id"] == asked["id"] and json.loads(wire["function"]["arguments"]) == asked["args"]
        ids_by_call.setdefault(json.dumps(asked["args"], sort_keys=True), set()).add(asked["id"])
        assert tools.kind == "tool" and tools.parents and compose.call_id in tools.parents
        assert tools.tool is not None and tools.tool.name == "open_ticket" and tools.tool.args == asked["args"]
        (answer,) = tools.output["messages"]
        assert answer["role"] == "tool" and answer["tool_call_id"] == asked["id"]
        assert answer["content"] == tools.tool.response and answer["content"].startswith("Ticket T-")
        assert follow_up.prompt is not None
        assert [m.role for m in follow_up.prompt.assembled] == ["system", "user", "assistant", "tool"]
        assert follow_up.prompt.assembled[-1].content == answer["content"]
        ticket = answer["content"].split()[1]
        assert ticket in trace.output["answer"] and trace.output["tools"] == ["open_ticket"]
    assert len(ids_by_call) > len({t.input_id for t in ticketed})  # the priority is sampled
    assert all(len(ids) == 1 for ids in ids_by_call.values())  # same call, same id, whatever the repeat
    others = [c for t in recorded if t not in ticketed for c in t.calls if c.node == "compose"]
    assert others and all(c.decision == {"tools_condition": "__end__"} for c in others)


def test_repeats_differ_where_the_simulator_samples(recorded: list[Trace]) -> None:
    by_input: dict[str, set[str]] = {}
    for trace in recorded:
        by_input.setdefault(trace.input_id, set()).add(json.dumps(trace.output, sort_keys=True))
    assert sum(len(outputs) > 1 for outputs in by_input.values()) >= 3


def test_parents_come_from_channel_writes_and_triggers(recorded: list[Trace]) -> None:
    trace = next(t for t in recorded if sum(c.node == "retrieve" for c in t.calls) >= 2)
    ids = {c.call_id: c for c in trace.calls}
    second = [c for c in trace.calls if c.node == "retrieve"][1]
    names = {ids[p].node for p in second.parents}
    assert "rewrite" in names and "input" in names  # the trigger and the question's writer


def test_replay_check_reproduces_every_trace_without_llm_calls(
    recorded: list[Trace], endpoint: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "traces.jsonl"
    corpus.write_text("".join(t.model_dump_json() + "\n" for t in recorded))
    proc = _cli(["replay", str(corpus), "--spec", str(AGENT / "record.yaml"), "--check", "--out", str(tmp_path / "c")],
                endpoint)
    assert "36 of 36 traces reproduce exactly" in proc.stdout and "0 LLM calls made" in proc.stdout


def test_each_perturbation_class_gives_effective_pairs_with_counted_calls(
    recorded: list[Trace], endpoint: dict[str, str], tmp_path: Path
) -> None:
    corpus = tmp_path / "traces.jsonl"
    chosen = [t for t in recorded if t.input_id in ("lost-2fa", "vague-access", "calendar-sync")]
    assert any(c.node == "tools" for t in chosen for c in t.calls)
    corpus.write_text("".join(t.model_dump_json() + "\n" for t in chosen))
    spec = yaml.safe_load(SPEC.read_text())
    spec["pipeline"] = f"{AGENT / 'pipeline.py'}:run"
    absolute_checks(spec, SPEC.parent)
    spec["llm"]["simulator"]["models"] = [str(AGENT / "sim_models.py")]
    graph = yaml.safe_load((AGENT / "graph.yaml").read_text())
    for node in ("rewrite", "compose", "follow_up"):  # texts compared as labels: no embedding model to load here
        for fld in graph["nodes"][node]["fields"].values():
            if fld["type"] == "text":
                fld["type"] = "categorical"
    (tmp_path / "graph.yaml").write_text(yaml.safe_dump(graph))
    spec["graph"] = str(tmp_path / "graph.yaml")
    for p in spec["perturbations"]:
        if p["op"] == "prompt_swap":
            p["params"]["variant"] = str(AGENT / "prompts" / "compose_terse.txt")
    del spec["inputs"]
    spec.update(baseline=str(corpus), output=str(tmp_path / "camp"), replay={"downstream": "live", "controls": 0},
                analysis={"resamples": 100, "permutations": 100})
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    _cli(["run", str(tmp_path / "spec.yaml"), "--quiet"], endpoint)
    check_claims(json.loads((tmp_path / "camp" / "campaign.json").read_text()))  # no absence beyond the margin
    pairs = [json.loads(line) for line in (tmp_path / "camp" / "pairs.jsonl").read_text().splitlines()]
    by_op: dict[str, list[dict[str, Any]]] = {}
    for pair in pairs:
        by_op.setdefault(pair["op"], []).append(pair)
    assert set(by_op) == {"override", "categorical_flip", "list_edit", "param_change", "prompt_swap"}
    for op, rows in by_op.items():
        assert any(r["stratum"] == "effective" for r in rows), op
    baseline = {(t.input_id, t.repeat): t for t in chosen}
    for pair in pairs:
        calls = pair["llm_calls"]
        assert sum(calls.values()) >= 1 and set(calls) <= LLM_NODES
        if pair["op"] in ("param_change", "prompt_swap"):  # the target, upstream served; a ticket's follow-up
            assert calls.pop("compose") == 1 and calls in ({}, {"follow_up": 1})
        if pair["op"] == "override" and pair["stratum"] == "effective":  # grade forced to "yes": compose next
            assert calls.pop("compose") == 1 and calls in ({}, {"follow_up": 1})
        assert baseline[(pair["input_id"], pair["repeat"])] is not None


# --------------------------------------------------------------------------- small graphs


def _record(run: Any, inputs: dict[str, Any] | None = None) -> Trace:
    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0, inputs=inputs or {},
                           sample_key="k")
    token = current_builder.set(builder)
    try:
        output = run()
    finally:
        current_builder.reset(token)
    return builder.finish(output)


class Fan(TypedDict, total=False):
    items: list[str]
    results: Annotated[list[str], operator.add]
    total: str


def _fan_graph(delays: dict[str, float]) -> Any:
    def plan(state: Fan) -> dict[str, Any]:
        return {"items": ["alpha item", "beta item", "gamma item", "delta item"]}

    def fan(state: Fan) -> list[Send]:
        return [Send("work", {"item": it}) for it in state["items"]]

    async def work(arg: dict[str, str]) -> dict[str, Any]:
        await asyncio.sleep(delays[arg["item"]])
        return {"results": [arg["item"].upper()]}

    def join(state: Fan) -> dict[str, Any]:
        return {"total": "|".join(sorted(state["results"]))}

    g = StateGraph(Fan)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("join", join)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", fan, ["work"])
    g.add_edge("work", "join")
    g.add_edge("join", END)
    return instrument(g).compile()


def _shape(trace: Trace) -> list[tuple[Any, ...]]:
    ids = {c.call_id: c.call_path for c in trace.calls}
    return [(c.call_path, c.node, c.occurrence, sorted(ids[p] for p in c.parents), json.dumps(c.output))
            for c in trace.calls]


def test_send_fan_out_identity_does_not_depend_on_scheduling() -> None:
    rng = random.Random(7)
    shapes = []
    for _ in range(6):
        delays = {k: rng.random() / 200 for k in ("alpha item", "beta item", "gamma item", "delta item")}
        graph = _fan_graph(delays)
        shapes.append(_shape(_record(lambda g=graph: asyncio.run(g.ainvoke({"items": []})))))
    assert all(s == shapes[0] for s in shapes)
    works = [row for row in shapes[0] if row[1] == "work"]
    assert [row[0] for row in works] == [f"[0]/[s2:work.{i}]/work#0" for i in range(4)]
    plan_path = next(row[0] for row in shapes[0] if row[1] == "plan")
    assert all(row[3] == [plan_path] for row in works)  # each branch's parent is its sender
    join = next(row for row in shapes[0] if row[1] == "join")
    assert {p for p in join[3]} >= {row[0] for row in works}  # a reducer channel: every writer


class Loop(TypedDict, total=False):
    q: str
    docs: Annotated[list[str], operator.add]
    verdict: str


def _loop_graph() -> Any:
    def retrieve(state: Loop) -> dict[str, Any]:
        return {"docs": [f"doc {len(state.get('docs', []))} for {state['q']}"]}

    def grade(state: Loop) -> dict[str, Any]:
        return {"verdict": "good" if len(state["docs"]) >= 3 else "bad"}

    def rewrite(state: Loop) -> dict[str, Any]:
        return {"q": state["q"] + " again"}

    def after(state: Loop) -> str:
        return "end" if state["verdict"] == "good" else "rewrite"

    g = StateGraph(Loop)
    for f in (retrieve, grade, rewrite):
        g.add_node(f.__name__, f)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "grade")
    g.add_conditional_edges("grade", after, {"end": END, "rewrite": "rewrite"})
    g.add_edge("rewrite", "retrieve")
    return instrument(g.compile())


def test_cycles_are_numbered_loops_and_reducer_writers_are_parents() -> None:
    graph = _loop_graph()
    trace = _record(lambda: graph.invoke({"q": "where is my invoice"}), {"q": "where is my invoice"})
    calls = [c for c in trace.calls if c.kind != "source"]
    assert [(c.node, c.loop, c.iteration) for c in calls] == [
        ("retrieve", "retrieve", 0), ("grade", "retrieve", 0), ("rewrite", "retrieve", 0),
        ("retrieve", "retrieve", 1), ("grade", "retrieve", 1), ("rewrite", "retrieve", 1),
        ("retrieve", "retrieve", 2), ("grade", "retrieve", 2),
    ]
    assert trace.tags["loops"] == {"retrieve": {"k_max": None, "iterations": [3]}}
    ids = {c.call_id: c for c in trace.calls}
    last_grade = calls[-1]
    writers = [ids[p] for p in last_grade.parents if ids[p].node == "retrieve"]
    assert len(writers) == 3  # docs is Annotated[list, operator.add]: all three retrieves wrote it
    assert [c.decision for c in calls if c.node == "grade"] == [
        {"after": "rewrite"}, {"after": "rewrite"}, {"after": "__end__"}]


def test_outside_a_recording_the_graph_runs_unchanged() -> None:
    assert _loop_graph().invoke({"q": "x"})["verdict"] == "good"


class Ask(TypedDict, total=False):
    q: str
    a: str


def test_checkpointer_and_interrupt_keep_working() -> None:
    def ask(state: Ask) -> dict[str, Any]:
        return {"a": interrupt(f"approve {state['q']}?")}

    g = StateGraph(Ask)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    graph = instrument(g).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "1"}}

    def run() -> Any:
        first = graph.invoke({"q": "refund"}, config)
        assert "__interrupt__" in first
        return graph.invoke(Command(resume="yes"), config)

    trace = _record(run)
    asks = [c for c in trace.calls if c.node == "ask"]
    assert trace.output == {"q": "refund", "a": "yes"}
    assert asks[0].error is not None and asks[0].error.message == "interrupted: ['approve refund?']"
    assert asks[1].output == {"a": "yes"} and asks[1].call_path == "[1]/[s1:ask]/ask#0"


PROMPT = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "Q: {question}")])


def test_a_chat_prompt_template_is_a_quiver_template_a_replay_can_swap() -> None:
    seen: list[list[Any]] = []

    class S(TypedDict, total=False):
        question: str
        n: int

    def answer(state: S) -> dict[str, Any]:
        seen.append(PROMPT.format_messages(question=state["question"]))
        return {"n": len(seen)}

    g = StateGraph(S)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    graph = instrument(g.compile())
    tid = register_prompt(PROMPT, "unused")
    assert tid == "prompt"  # the variable that holds it, found when the graph was instrumented
    _record(lambda: graph.invoke({"question": "why"}))
    with template_overrides({tid: Template(tid, (("system", "Be long."), ("user", "Question: {question}")))}):
        _record(lambda: graph.invoke({"question": "why"}))
    assert [m.content for m in seen[0]] == ["Be brief.", "Q: why"]
    assert [m.content for m in seen[1]] == ["Be long.", "Question: why"]
    assert PROMPT.format_messages(question="x")[1].content == "Q: x"  # outside a node: LangChain's own


def test_messages_round_trip_without_volatile_ids() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    update = {"messages": [HumanMessage("hi", id="u-1"), AIMessage("hello", id="lc_run--abc")], "n": 2}
    data = to_json(update)
    assert data == {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "n": 2}
    back = from_json(data)
    assert [type(m).__name__ for m in back["messages"]] == ["HumanMessage", "AIMessage"]
    assert [m.content for m in back["messages"]] == ["hi", "hello"]


def test_instrument_refuses_what_it_cannot_wrap() -> None:
    from quiver import InstrumentationError

    with pytest.raises(InstrumentationError, match="takes a langgraph StateGraph"):
        instrument(object())
    with pytest.raises(InstrumentationError, match="has no node 'nope'"):
        instrument(StateGraph(Ask), kinds={"nope": "retrieval"})


# --------------------------------------------------------------------------- kinds without kinds=


class Rag(TypedDict, total=False):
    question: str
    docs: list[Any]
    context: str
    answer: str


def _rag_graph(base_url: str, kinds: dict[str, str] | None = None) -> Any:
    """A plain-Python retriever (LangChain ``Document``s), a plain-Python formatter and a
    ``ChatOpenAI`` answer: only the last makes an LLM call."""
    from langchain_core.documents import Document
    from langchain_openai import ChatOpenAI

    def retrieve(state: Rag) -> dict[str, Any]:
        words = state["question"].split()
        return {"docs": [Document(page_content=f"note on {w}", metadata={"id": f"kb-{w}"}) for w in words[:2]]}

    def format_docs(state: Rag) -> dict[str, Any]:
        return {"context": "\n".join(d.page_content for d in state["docs"])}

    def answer(state: Rag) -> dict[str, Any]:
        llm = ChatOpenAI(model="sim-echo", base_url=base_url, api_key="sk-test", temperature=1.0)  # type: ignore[arg-type]
        reply = llm.invoke(f"{state['context']}\nQ: {state['question']}")
        return {"answer": str(reply.content)}

    g = StateGraph(Rag)
    for f in (retrieve, format_docs, answer):
        g.add_node(f.__name__, f)
    g.add_edge(START, "retrieve")
    g.add_edge("retrieve", "format_docs")
    g.add_edge("format_docs", "answer")
    g.add_edge("answer", END)
    return instrument(g.compile(), kinds=kinds)


def _record_traced(graph: Any, question: str, repeat: int = 0) -> Trace:
    """One trace recorded as ``quiver record`` records it (transport capture on)."""
    import logging

    from quiver.replay import trace_sample_key
    from quiver.replay._pipeline import run_traced

    inputs = {"question": question}
    builder = TraceBuilder(trace_id=f"t{repeat}", run_id="r", pipeline="rag", input_id=question, repeat=repeat,
                           inputs=inputs, sample_key=trace_sample_key(0, question, repeat))
    return run_traced(builder, lambda question: graph.invoke({"question": question}), inputs, None,
                      log=logging.getLogger("quiver.test"))


def test_without_kinds_a_node_is_typed_by_what_its_calls_did(simulator: Simulator) -> None:
    from quiver import infer_graph
    from quiver.replay import Replayer, unseen_llm_nodes, unseen_llm_warning

    graph = _rag_graph(simulator.url)

    def pipeline(question: str) -> Any:
        return graph.invoke({"question": question})

    traces = [_record_traced(graph, q) for q in ("refund my invoice", "reset password")]
    for trace in traces:
        kinds = {c.node: c.kind for c in trace.calls if c.kind != "source"}
        assert kinds == {"retrieve": "retrieval", "format_docs": "transform", "answer": "llm"}
        by_node = {c.node: c for c in trace.calls}
        assert by_node["answer"].model is not None and by_node["answer"].response is not None
        retrieval = by_node["retrieve"].retrieval
        assert retrieval is not None and [d.doc_id for d in retrieval][0].startswith("kb-")
    assert unseen_llm_nodes(traces) == [] and unseen_llm_warning(unseen_llm_nodes(traces), "warning") is None
    inferred, _ = infer_graph(traces)
    assert {("retrieve", "format_docs"), ("format_docs", "answer")} <= set(inferred.edges)
    requests = simulator.stats().get("requests", 0)
    results = [Replayer(pipeline).replay(t) for t in traces]
    assert [r.divergences for r in results if not r.reproduced] == []
    assert simulator.stats().get("requests", 0) == requests


def test_explicit_kinds_win_over_what_the_calls_did(simulator: Simulator) -> None:
    graph = _rag_graph(simulator.url, kinds={"retrieve": "transform", "format_docs": "tool"})
    trace = _record_traced(graph, "where is my invoice")
    kinds = {c.node: c.kind for c in trace.calls if c.kind != "source"}
    assert kinds == {"retrieve": "transform", "format_docs": "tool", "answer": "llm"}
