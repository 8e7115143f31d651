"""The pipeline graph: the YAML contract, inference from traces, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver import NodeCall, SpecError, Trace
from quiver._graph import FieldSpec, PipelineGraph, infer_field, infer_graph, load_graph

GRAPH_YAML = """\
nodes:
  signal:
    fields:
      turn_type: {type: categorical, role: routing,
                  categories: [question, followup, complaint, smalltalk]}
      is_small_talk: {type: bool, role: routing}
      sentiment: {type: categorical, role: context}
  discovery:
    output: {type: set}          # a whole output of one type
  planner:
  executor:
edges: [[signal, planner], [discovery, planner], [planner, executor], [executor, planner]]
loop: {body: [planner, executor], k_max: 5}   # optional
"""


def _call(i: int, node: str, output: object, parents: list[str] | None = None) -> NodeCall:
    return NodeCall(call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0", kind="transform",
                    parents=parents or [], output=output)


def _trace(tid: str, calls: list[NodeCall]) -> Trace:
    return Trace(trace_id=tid, run_id="r", pipeline="p", input_id="q", calls=calls)


def test_the_documented_yaml_loads(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH_YAML)
    graph = load_graph(path)
    signal = graph.nodes["signal"].fields or {}
    assert signal["turn_type"].role == "routing" and signal["turn_type"].effective_weight == 2.0
    assert signal["sentiment"].effective_weight == 1.0
    assert graph.nodes["discovery"].output == FieldSpec(type="set")
    assert graph.loop is not None and graph.loop.k_max == 5
    assert graph.parents("planner") == ["signal", "discovery", "executor"]
    # the loop feedback edge executor -> planner is left out of the DAG
    assert ("executor", "planner") not in graph.dag_edges()
    assert graph.topological_order().index("signal") < graph.topological_order().index("planner")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: {a: {}}\nedges: [[a, b]]\n", "g.yaml:1: edges[0]: unknown node 'b'; known nodes: a"),
        ("nodes:\n  a:\n    output: {type: vector}\n",
         "g.yaml:3: nodes.a.output.type: unknown field type 'vector'; the registered types are categorical, bool, "
         "numeric, set, list, text, mapping, json (a new one registers with quiver.register_kernel"),
        ("nodes:\n  a:\n    fields: {x: {type: bool, role: routng}}\n", "nodes.a.fields.x.role: Input should be"),
        ("nodes:\n  a:\n    fieldz: {}\n",
         "g.yaml:3: nodes.a.fieldz: unknown key 'fieldz' (did you mean 'fields'?); valid keys here are: "
         "fields, output"),
        ("- a\n- b\n", "a graph file is a mapping"),
    ],
)
def test_bad_graph_files_give_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_graph(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_types_are_inferred_from_values() -> None:
    assert infer_field([True, False, None]).type == "bool"
    assert infer_field([1, 2.5]).type == "numeric"
    assert infer_field(["question", "complaint", "question"]).type == "categorical"
    assert infer_field([f"a long free text answer number {i} with many words" for i in range(3)]).type == "text"
    assert infer_field([[1, 2], ["x"]]).type == "list"
    assert infer_field([[{"doc": 1}]]).type == "json"
    assert infer_field([f"label{i}" for i in range(20)]).type == "text"


def test_infer_graph_fills_what_the_yaml_leaves_out() -> None:
    traces = [
        _trace(f"t{i}", [
            _call(0, "input", {"q": "x"}),
            _call(1, "signal", {"turn_type": "question", "is_small_talk": False, "extra": 0.5 * i}, ["c0"]),
            _call(2, "planner", f"plan number {i} with several words in it", ["c1"]),
        ])
        for i in range(3)
    ]
    base = PipelineGraph(nodes={"signal": {"fields": {"turn_type": {"type": "categorical", "role": "routing"}}}})
    graph, report = infer_graph(traces, base)
    signal = graph.nodes["signal"].fields or {}
    assert signal["turn_type"].role == "routing"
    assert (signal["is_small_talk"].type, signal["extra"].type) == ("bool", "numeric")
    assert graph.nodes["planner"].output is not None and graph.nodes["planner"].output.type == "text"
    assert graph.edges == [("input", "signal"), ("signal", "planner")]
    assert report.inferred_edges and report.inferred_nodes == ["input", "planner"]
    assert report.inferred_fields["signal"] == {"is_small_talk": "bool", "extra": "numeric"}


def test_a_graph_node_that_never_ran_is_an_error() -> None:
    traces = [_trace("t", [_call(0, "input", {}), _call(1, "signal", {"a": 1}, ["c0"])])]
    base = PipelineGraph(nodes={"signl": {}})
    with pytest.raises(SpecError,
                       match="node\\(s\\) signl of the graph never ran in the traces; recorded nodes: input, signal"):
        infer_graph(traces, base)
