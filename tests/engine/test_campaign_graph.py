"""The one graph a campaign pairs with and estimates from (``CampaignGraph``).

Replays add the nodes no baseline trace ran, with their declared spec and the edges the
declaration (or, when it declares none, the replays' recorded parents) gives them;
they never add an edge between two nodes the baseline ran, so a campaign whose
baseline ran every node keeps the baseline's graph object and every number read from
it. A node taken in is listed downstream of the target that reaches it, and the pairs
formed with that graph give it distance 1 where the replay alone ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzzing import FUZZ, time_limit, tried
from hypothesis import given, settings, strategies as st

from quiver import NodeCall, PipelineGraph, Trace
from quiver._graph import FieldSpec, LoopSpec, NodeSpec, infer_graph
from quiver._interventional import CampaignGraph, downstream_nodes, pair_results
from quiver._trace import CallError

ChainCall = tuple[str, Any, Sequence[str]]
"""(node, output, parent nodes) of one call."""


def trace(trace_id: str, calls: Sequence[ChainCall], *, failed: bool = False) -> Trace:
    """A trace of one call per node, each call's parents the last calls of the named nodes."""
    made: list[NodeCall] = []
    last: dict[str, str] = {}
    for i, (node, output, parents) in enumerate(calls):
        made.append(NodeCall(call_id=f"c{i}", node=node, occurrence=0, call_path=f"{node}#0", kind="transform",
                             parents=[last[p] for p in parents if p in last], output=output))
        last[node] = f"c{i}"
    return Trace(trace_id=trace_id, run_id="r", pipeline="p", input_id=trace_id.split("/")[0], calls=made,
                 status="failed" if failed else "ok",
                 error=CallError(type="RuntimeError", message="boom") if failed else None)


@dataclass
class Replay:
    """A replay next to its recording (what ``pair_results`` and ``take_in`` read)."""

    baseline: Trace
    trace: Trace
    perturbation_id: str = "p"
    repeat: int = 0
    divergences: list[Any] = field(default_factory=list)
    target: Any = None
    llm_calls: dict[str, int] = field(default_factory=dict)


CALM = [("triage", {"urgent": False}, ()), ("route", "answer", ("triage",)), ("answer", {"reply": "re"}, ("route",))]
URGENT = [("triage", {"urgent": True}, ()), ("route", "escalate", ("triage",)),
          ("escalate", {"queue": "urgent"}, ("route",))]
DECLARED = PipelineGraph(
    nodes={"triage": NodeSpec(fields={"urgent": FieldSpec(type="bool", role="routing")}), "route": NodeSpec(),
           "answer": NodeSpec(), "escalate": NodeSpec(fields={"queue": FieldSpec(type="categorical")})},
    edges=[("triage", "route"), ("route", "answer"), ("route", "escalate")],
)


def baseline_graph(traces: Sequence[Trace], declared: PipelineGraph | None) -> PipelineGraph:
    """As a campaign builds it: the declared graph's part the baseline ran, completed."""
    from quiver._interventional import seen_part

    return infer_graph(traces, seen_part(declared, traces))[0]


def test_a_campaign_whose_baseline_ran_every_node_keeps_the_baseline_graph_itself() -> None:
    base = trace("a/0", CALM)
    graph = baseline_graph([base], DECLARED)
    reach = CampaignGraph(graph, DECLARED)
    assert reach.take_in([Replay(base, trace("a/0", CALM))]) is graph and reach.graph is graph
    assert reach.reached == []


def test_a_declared_branch_only_a_replay_ran_comes_with_its_declared_spec_and_edges() -> None:
    base = trace("a/0", CALM)
    reach = CampaignGraph(baseline_graph([base], DECLARED), DECLARED)
    graph = reach.take_in([Replay(base, trace("a/0", URGENT))])
    assert reach.reached == ["escalate"] and graph.nodes["escalate"] == DECLARED.nodes["escalate"]
    assert ("route", "escalate") in graph.edges
    assert downstream_nodes(graph, "triage") == ["route", "answer", "escalate"]


def no_text(texts: list[str]) -> Any:  # pragma: no cover - no output here is text
    raise AssertionError("no text needs a vector")


def test_pairs_formed_with_the_graph_give_the_branch_distance_one_and_d_struct(tmp_path: Path) -> None:
    base = trace("a/0", CALM)
    replays = [Replay(base, trace("a/0", URGENT)), Replay(base, trace("a/0", CALM), repeat=1)]
    graph = CampaignGraph(baseline_graph([base], DECLARED), DECLARED).take_in(replays)
    took, stayed = pair_results(replays, graph, embedder=no_text, cache_dir=tmp_path)
    assert took.d["escalate"] == 1.0 and took.d["answer"] == 1.0 and took.d_struct and took.d_iter == 2
    assert took.counts["escalate"] == [0, 1] and took.fields["escalate"] == {"queue": 1.0}
    assert stayed.d.get("escalate") is None and not stayed.d_struct


def test_without_declared_edges_the_recorded_parents_give_edges_to_new_nodes_only() -> None:
    base = trace("a/0", CALM)
    rewired = [("triage", {"urgent": True}, ()), ("route", "escalate", ("triage",)),
               ("escalate", {"queue": "urgent"}, ("route", "triage")), ("answer", {"reply": "x"}, ("triage",))]
    reach = CampaignGraph(baseline_graph([base], None))
    before = list(reach.graph.edges)
    graph = reach.take_in([Replay(base, trace("a/0", rewired))])
    assert graph.nodes["escalate"] == NodeSpec()  # left to pairing to infer from the values
    assert graph.edges == [*before, ("route", "escalate"), ("triage", "escalate")]
    assert ("triage", "answer") not in graph.edges  # between two baseline nodes: never added


def test_failed_replays_add_nothing() -> None:
    base = trace("a/0", CALM)
    graph = baseline_graph([base], DECLARED)
    reach = CampaignGraph(graph, DECLARED)
    assert reach.take_in([Replay(base, trace("a/0", URGENT, failed=True))]) is graph


def test_a_declared_loop_body_takes_in_its_node() -> None:
    base = trace("a/0", CALM)
    declared = DECLARED.model_copy(update={"loop": LoopSpec(body=["route", "escalate"], k_max=3)})
    reach = CampaignGraph(baseline_graph([base], declared), declared)
    assert reach.graph.loop == LoopSpec(body=["route"], k_max=3)
    assert reach.take_in([Replay(base, trace("a/0", URGENT))]).loop == LoopSpec(body=["route", "escalate"], k_max=3)


# --------------------------------------------------------------------------- fuzz

NODES = [f"n{i}" for i in range(6)]


@st.composite
def chains(draw: st.DrawFn) -> list[ChainCall]:
    """A trace's calls: a sample of the nodes in order, each fed by some earlier ones."""
    names = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=6, unique=True))
    return [(n, {"v": draw(st.integers(0, 2))}, draw(st.lists(st.sampled_from(names[:i]), max_size=2, unique=True))
             if i else ()) for i, n in enumerate(names)]


@settings(parent=FUZZ, max_examples=300)
@given(base=st.lists(chains(), min_size=1, max_size=3), replays=st.lists(chains(), min_size=1, max_size=8),
       block=st.integers(1, 4), declare=st.booleans(), declared_edges=st.lists(
           st.tuples(st.sampled_from(NODES), st.sampled_from(NODES)), max_size=8, unique=True))
def test_replays_add_nodes_never_paths_between_baseline_nodes_and_blocks_do_not_matter(
        base: list[list[ChainCall]], replays: list[list[ChainCall]], block: int, declare: bool,
        declared_edges: list[tuple[str, str]]) -> None:
    tried("campaign_graph")
    with time_limit():
        declared = PipelineGraph(nodes={n: NodeSpec() for n in NODES}, edges=declared_edges) if declare else None
        baseline = [trace(f"b{i}/0", c) for i, c in enumerate(base)]
        graph = baseline_graph(baseline, declared)
        results = [Replay(baseline[i % len(baseline)], trace(f"r{i}/0", c)) for i, c in enumerate(replays)]
        whole = CampaignGraph(graph, declared)
        whole.take_in(results)
        blocks = CampaignGraph(graph, declared)
        for k in range(0, len(results), block):
            blocks.take_in(results[k:k + block])
        ran = {c.node for r in results for c in r.trace.calls} | set(graph.nodes)
        assert set(whole.graph.nodes) == ran
        assert list(whole.graph.nodes) == list(blocks.graph.nodes)  # the order of first call
        assert set(whole.graph.edges) == set(blocks.graph.edges)
        assert whole.graph.edges[:len(graph.edges)] == graph.edges
        added = whole.graph.edges[len(graph.edges):]
        assert all(not {a, b} <= set(graph.nodes) for a, b in added)
        # between the baseline's nodes the same edges are paths, the same are loop feedback
        inside = {(a, b) for a, b in whole.graph.dag_edges() if a in graph.nodes and b in graph.nodes}
        assert inside == set(graph.dag_edges())
        for node in graph.nodes:
            assert downstream_nodes(whole.graph, node) == downstream_nodes(blocks.graph, node)
            # what the baseline graph reaches stays reached
            assert set(downstream_nodes(graph, node)) <= set(downstream_nodes(whole.graph, node))
