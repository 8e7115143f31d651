"""OpenInference spans of LangGraph and DSPy programs imported as the integrations record them.

The span files in ``tests/data/traces/openinference_frameworks/`` were written by the real
instrumentors (``openinference-instrumentation-langchain`` / ``-dspy``) over the programs
of ``tests/oi_frameworks.py`` run against the simulator; one test runs them again, live.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from oi_frameworks import FIXTURES, dspy_spans, langgraph_spans

import quiver
from quiver import Trace
from quiver.replay import Simulator

LANGGRAPH = FIXTURES / "langgraph.jsonl"
DSPY = FIXTURES / "dspy.jsonl"
PROGRAM = FIXTURES / "dspy_program.json"
GRAPH_NODES = {"router", "retrieve", "grade", "rewrite", "compose"}


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _meta(span: dict[str, Any]) -> dict[str, Any]:
    return json.loads(span["attributes"].get("metadata", "{}"))


def _import(source: Any, **kwargs: Any) -> list[Trace]:
    result = quiver.import_traces("openinference", source, **kwargs)
    assert result.ok, [str(p) for p in result.problems]
    return result.traces


@pytest.fixture(scope="module")
def graph_traces() -> list[Trace]:
    return _import(LANGGRAPH)


@pytest.fixture(scope="module")
def dspy_traces() -> list[Trace]:
    return _import(DSPY, dspy_program=PROGRAM)


# --------------------------------------------------------------------------- LangGraph


def test_graph_nodes_are_calls_named_by_langgraph_node_with_their_llm_call(graph_traces: list[Trace]) -> None:
    spans = _spans(LANGGRAPH)
    llm_spans = {s["context"]["span_id"][2:]: s for s in spans if s["attributes"]["openinference.span.kind"] == "LLM"}
    for trace in graph_traces:
        assert trace.pipeline == "LangGraph" and trace.calls[0].output == trace.inputs
        assert {c.node for c in trace.calls[1:]} <= GRAPH_NODES
        for call in trace.calls[1:]:
            folded = [a for a in call.tags.get("otel.absorbed", []) if a["span_id"] in llm_spans]
            if call.node == "retrieve":
                assert call.kind == "retrieval" and call.model is None and not folded  # named as a retriever
                continue
            [llm] = folded  # the node's one ChatOpenAI span is its llm call
            attrs = llm_spans[llm["span_id"]]["attributes"]
            assert call.kind == "llm" and call.model is not None and call.response is not None
            assert call.model.name == attrs["llm.model_name"] == f"oi-{call.node}"
            assert call.response.content == attrs["llm.output_messages.0.message.content"]
            assert call.response.finish_reason == attrs["llm.finish_reason"] == "stop"
            assert call.response.usage["total_tokens"] == attrs["llm.token_count.total"]
            assert call.prompt is not None and call.prompt.assembled[-1].role == "user"
    composes = [c for t in graph_traces for c in t.calls if c.node == "compose"]
    assert composes and all(c.prompt is not None and c.prompt.template_hash for c in composes)
    # every span of the trace is either a call, the trace itself, or folded into a call
    for trace in graph_traces:
        folded = sum(len(c.tags.get("otel.absorbed", [])) for c in trace.calls)
        in_trace = [s for s in spans if s["context"]["trace_id"][2:] == trace.tags["import"]["trace_id"]]
        assert len(trace.calls) - 1 + 1 + folded == len(in_trace)


def test_an_llm_output_is_its_message_content_and_run_ids_stay_in_tags(graph_traces: list[Trace]) -> None:
    text = json.dumps([[c.output for c in t.calls] for t in graph_traces])
    assert "lc_run--" not in text and "chatcmpl-" not in text
    assert "lc_run--" in json.dumps([[c.tags for c in t.calls] for t in graph_traces])
    # an LLM span imported on its own (no graph around it): the content, the LangChain result in tags
    span = next(s for s in _spans(LANGGRAPH) if s["name"] == "ChatOpenAI")
    span = {**span, "parent_id": None, "attributes": {k: v for k, v in span["attributes"].items() if k != "metadata"}}
    [trace] = _import([span])
    call = trace.calls[1]
    assert call.output == span["attributes"]["llm.output_messages.0.message.content"]
    assert call.tags["otel"]["output.value"] == span["attributes"]["output.value"]
    assert call.response is not None and call.response.finish_reason == "stop"


def test_conditional_edges_are_decisions_of_their_source_node(graph_traces: list[Trace]) -> None:
    seen: Counter[str] = Counter()
    for trace in graph_traces:
        calls = trace.calls[1:]
        for i, call in enumerate(calls):
            gate = {"router": "after_router", "grade": "after_grade"}.get(call.node)
            if gate is None:
                assert call.decision == {}
                continue
            arm = call.decision[gate]
            assert arm == calls[i + 1].node  # the destination that ran next
            seen[f"{call.node}->{arm}"] += 1
    assert set(seen) >= {"router->retrieve", "grade->compose", "grade->rewrite"}


def test_parents_follow_the_steps_and_cycles_are_numbered_loops(graph_traces: list[Trace]) -> None:
    looped = 0
    for trace in graph_traces:
        calls = trace.calls[1:]
        assert calls[0].parents == ["c0"]
        for i, (before, call) in enumerate(zip(calls, calls[1:], strict=False)):
            earlier = calls[: i + 1]
            assert before.call_id in call.parents  # one node per step: the previous step's triggered it
            assert set(call.parents) <= {"c0", *(c.call_id for c in earlier)}
            assert calls[0].call_id in call.parents  # the router wrote the route every later node reads
            # docs accumulates (operator.add): every retrieve so far wrote the value read
            assert {c.call_id for c in earlier if c.node == "retrieve"} <= set(call.parents)
            # the question comes from the input until a rewrite writes it
            rewrites = [c.call_id for c in earlier if c.node == "rewrite"]
            assert ("c0" in call.parents) == (not rewrites)
            if rewrites:
                assert rewrites[-1] in call.parents and not set(rewrites[:-1]) & set(call.parents)
        retrieves = [c for c in calls if c.node == "retrieve"]
        if len(retrieves) < 2:
            assert all(c.loop is None for c in calls) and "loops" not in trace.tags
            continue
        looped += 1
        assert [c.iteration for c in retrieves] == list(range(len(retrieves)))
        assert trace.tags["loops"] == {"retrieve": {"k_max": None, "iterations": [len(retrieves)]}}
        for call in calls:
            if call.node in ("retrieve", "grade", "rewrite"):  # the passes through retrieve so far, less one
                passes = sum(1 for c in retrieves if int(c.call_id[1:]) <= int(call.call_id[1:]))
                assert call.loop == "retrieve" and call.iteration == passes - 1
            else:
                assert call.loop is None
    assert looped, "the fixture holds a trace that went round the cycle"


def test_the_steps_order_the_calls(graph_traces: list[Trace]) -> None:
    by_id = {s["context"]["span_id"][2:]: s for s in _spans(LANGGRAPH)}
    for trace in graph_traces:
        steps = []
        for call in trace.calls[1:]:
            spans = [by_id[a["span_id"]] for a in call.tags.get("otel.absorbed", []) if a["span_id"] in by_id]
            steps += [_meta(s)["langgraph_step"] for s in spans[:1]]
        assert steps == sorted(steps)


# --------------------------------------------------------------------------- DSPy


def test_a_predictors_nested_spans_are_one_llm_call_named_by_its_attribute_path(dspy_traces: list[Trace]) -> None:
    spans = _spans(DSPY)
    for trace in dspy_traces:
        in_trace = [s for s in spans if s["context"]["trace_id"][2:] == trace.tags["import"]["trace_id"]]
        lm_calls = [s for s in in_trace if s["name"] == "LM.__call__"]
        calls = trace.calls[1:]
        assert len(calls) == len(lm_calls)  # one llm call per predictor call, not four
        assert [c.node for c in calls] == _expected(calls[0].output["route"])
        assert all(c.kind == "llm" and c.model is not None and c.model.name == "oi-dspy" for c in calls)
        for call, lm in zip(calls, sorted(lm_calls, key=lambda s: s["start_time"]), strict=True):
            assert call.response is not None
            assert call.response.content == lm["attributes"]["llm.output_messages.0.message.content"]
            assert isinstance(call.output, dict)
            field = next(iter(call.output))  # the prediction's fields, parsed back from the adapter format
            assert f"[[ ## {field} ## ]]\n{call.output[field]}" in call.response.content
        assert trace.pipeline == "MultiHop.forward" and trace.output == json.loads(
            next(s for s in in_trace if s["parent_id"] is None)["attributes"]["output.value"])


def _expected(route: str, router: str = "router", hop: str = "hops.gen_query") -> list[str]:
    return [router, hop, hop, "answer"] if route == "hop" else [router, "answer"]


def test_dspy_routing_fields_are_decisions_and_module_calls_number_a_loop(dspy_traces: list[Trace]) -> None:
    routes = Counter()
    for trace in dspy_traces:
        router, *rest = trace.calls[1:]
        routes[router.output["route"]] += 1
        assert router.decision == {"route": router.output["route"]}
        assert [c.parents for c in trace.calls[1:]] == [[f"c{i}"] for i in range(len(trace.calls) - 1)]
        assert router.loop is None and rest[-1].loop is None
        if router.decision["route"] == "direct":
            assert len(rest) == 1 and "loops" not in trace.tags
            continue
        first, second, _ = rest
        assert (first.loop, first.iteration, second.loop, second.iteration) == ("hops", 0, "hops", 1)
        assert trace.tags["loops"] == {"hops": {"k_max": None, "iterations": [2]}}
    assert set(routes) == {"hop", "direct"}


def test_without_the_program_state_predictors_are_named_by_their_signature() -> None:
    for trace in _import(DSPY):
        route = trace.calls[1].output["route"]
        assert [c.node for c in trace.calls[1:]] == _expected(route, "Route", "query")
        assert trace.tags.get("loops", {}) == ({"Hop": {"k_max": None, "iterations": [2]}} if route == "hop" else {})


def test_a_program_state_that_does_not_match_is_reported_and_the_signature_names_the_node() -> None:
    state = json.loads(PROGRAM.read_text(encoding="utf-8"))
    state["router"]["signature"]["instructions"] = "Something else."
    result = quiver.import_traces("openinference", DSPY, dspy_program=state)
    assert {c.node for t in result.traces for c in t.calls[1:]} <= {"Route", "hops.gen_query", "answer"}
    assert "Route" in {t.calls[1].node for t in result.traces}
    assert len(result.problems) == len(result.traces)
    assert all("no predictor of the DSPy program has this span's signature (question -> route)" in p.what
               for p in result.problems)


def test_a_program_state_that_cannot_be_read_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(quiver.QuiverError, match="cannot be read"):
        quiver.import_traces("openinference", DSPY, dspy_program=tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(quiver.QuiverError, match="bad.json: not JSON"):
        quiver.import_traces("openinference", DSPY, dspy_program=tmp_path / "bad.json")
    with pytest.raises(quiver.QuiverError, match="no predictor in it"):
        quiver.import_traces("openinference", DSPY, dspy_program={"x": 1})


# --------------------------------------------------------------------------- live


def test_the_real_instrumentors_give_what_the_fixtures_hold(simulator: Simulator) -> None:
    graph = _import(langgraph_spans(simulator.url, ["who wrote the first program?"], 1))
    programs = _import(dspy_spans(simulator.url, ["who wrote the first program?"], 1), dspy_program=PROGRAM)
    [g], [d] = graph, programs
    assert {c.node for c in g.calls[1:]} <= GRAPH_NODES and g.calls[1].decision.keys() == {"after_router"}
    assert [c.node for c in d.calls[1:]] == _expected(d.calls[1].output["route"])
    for trace in (g, d):
        assert all(c.response is not None for c in trace.calls[1:] if c.kind == "llm")
        assert "lc_run--" not in json.dumps([c.output for c in trace.calls])
