"""The inferred graph is exactly the pipeline's: parents, roles, origins, sources.

Two recorded corpora, each through ``quiver.analyze``, against a graph written by hand:

* the bundled quickstart (experiments/quickstart, its record.yaml: 10 tickets x 3
  repeats, seed 0) recorded by ``quiver record``;
* tests/pipelines/triage_shapes.py (6 tickets x 4 repeats against the session
  simulator): short labels passed on, a deterministic tool on one arm only, a router
  deciding with ``quiver.decide``, a noisy LLM classifier.

Texts are embedded by a hash (distinct texts are far apart, equal ones at 0), so no
model is loaded and every text change counts as drift.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import quiver
from quiver import Profile
from quiver.replay import InputItem, LLMClient, load_pipeline, record_corpus

ROOT = Path(__file__).resolve().parents[2]


def hashed(texts: list[str]) -> np.ndarray:
    rows = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16)).normal(size=32)
            for t in texts]
    return np.array(rows).reshape(len(texts), 32)


def analyse(traces: Any, cache: Path, graph: Any = None) -> Profile:
    return quiver.analyze(traces, graph, embedder=quiver.FunctionEmbedder(hashed, name="sha256-normal"),
                          cache_dir=cache, resamples=200)


def edges(profile: Profile) -> set[tuple[str, str]]:
    return {(a, b) for a, b in profile.to_json()["graph"]["edges"]}


def roles(profile: Profile) -> dict[str, dict[str, str]]:
    out = {}
    for name, spec in profile.to_json()["graph"]["nodes"].items():
        fields = spec.get("fields") or {"output": spec["output"]}
        out[name] = {f: s["role"] for f, s in fields.items()}
    return out


def origins(profile: Profile) -> dict[str, str]:
    return {n["node"]: n["origin"] for n in profile.to_json()["nodes"]}


def sources(profile: Profile) -> set[str]:
    return {n["node"] for n in profile.to_json()["nodes"] if n["bifurcation_source"]}


# --------------------------------------------------------------------------- triage_shapes

SHAPES_EDGES = {
    ("input", "clean"), ("input", "lookup"),            # the ticket; the customer id, a short string
    ("clean", "classify"), ("clean", "retrieve"), ("clean", "answer"), ("clean", "escalate"),
    ("classify", "retrieve"), ("classify", "answer"),   # the topic, a short label
    ("classify", "route"), ("retrieve", "answer"),
    ("lookup", "escalate"),                             # the plan, a short label
    ("answer", "reply"), ("escalate", "reply"),
}
SHAPES_ROLES = {
    "input": {"ticket": "context", "customer": "context"},
    "clean": {"output": "context"},
    "classify": {"topic": "context", "urgent": "routing"},   # route reads urgent only
    "retrieve": {"output": "context"},
    "route": {"output": "routing"},
    "lookup": {"plan": "context", "region": "context"},
    "escalate": {"queue": "context", "note": "context"},
    "answer": {"output": "context"},
    "reply": {"output": "context"},
}
SHAPES_ORIGINS = {
    "input": "stable", "clean": "stable",
    "classify": "origin",                                   # the only sampled call
    "retrieve": "propagator", "route": "propagator",        # deterministic, fed by classify
    "lookup": "propagator",                                 # deterministic; only absent now and then
    "escalate": "propagator", "answer": "propagator", "reply": "propagator",
}


@pytest.fixture(scope="module")
def shapes_corpus(simulator: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    fn = load_pipeline(f"{ROOT / 'tests' / 'pipelines' / 'triage_shapes.py'}:pipeline")
    tickets = sys.modules[fn.__module__].TICKETS
    items = [InputItem(key, {"ticket": t, "customer": c}) for key, (t, c, _, _) in tickets.items()]
    out = tmp_path_factory.mktemp("shapes")
    client = LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-test")
    try:
        result = record_corpus(fn, pipeline_name="triage_shapes", inputs=items, repeats=4, output_dir=out,
                               llm=client, seed=0, progress_stream=None)
    finally:
        client.close()
    assert result.failed == 0
    return result.traces_path


@pytest.fixture(scope="module")
def shapes(shapes_corpus: Path) -> Profile:
    return analyse(shapes_corpus, shapes_corpus.parent / "cache")


def test_shapes_edges_are_exactly_the_data_flow(shapes: Profile) -> None:
    assert edges(shapes) == SHAPES_EDGES
    inferred = shapes.to_json()["graph"]["inferred"]
    assert {tuple(e) for e in inferred["inferred_edge_list"]} == SHAPES_EDGES and inferred["inferred_edges"]
    assert set(inferred["inferred_nodes"]) == set(SHAPES_ROLES)


def test_shapes_roles_put_routing_on_the_router_and_the_field_it_reads(shapes: Profile) -> None:
    assert roles(shapes) == SHAPES_ROLES
    assert shapes.to_json()["graph"]["inferred"]["inferred_roles"] == {
        "classify": {"urgent": "routing"}, "route": {"output": "routing"}}


def test_shapes_origins_and_bifurcation_sources(shapes: Profile) -> None:
    assert origins(shapes) == SHAPES_ORIGINS
    # the classifier's urgency and the router's arm decide the path; the tool on the
    # escalate arm is absent, not deciding, and the reply follows whichever arm ran
    assert sources(shapes) == {"classify", "route"}
    deterministic = {n["node"] for n in shapes.to_json()["nodes"] if n["deterministic"]}
    assert deterministic == {"clean", "retrieve", "route", "lookup", "escalate", "answer", "reply"}
    lookup = shapes.node("lookup")
    assert lookup["n_drift"] > 0 and lookup["n_clean_parents_drift"] == 0  # it drifted only by being absent


def test_the_input_node_is_connected_in_the_plot_data(shapes: Profile) -> None:
    plotted = {(e["source"], e["target"]) for e in shapes.plot_data()["edges"]}
    assert {("input", "clean"), ("input", "lookup")} <= plotted
    assert plotted == SHAPES_EDGES


GRAPH_YAML = """\
nodes:
  classify:
    fields:
      topic: {type: categorical, role: routing}
  route: {}
  reply: {}
edges: [[classify, route], [route, reply]]
"""


def test_declared_edges_add_to_the_inferred_ones(shapes_corpus: Path, tmp_path: Path) -> None:
    graph = tmp_path / "graph.yaml"
    graph.write_text(GRAPH_YAML)
    profile = analyse(shapes_corpus, shapes_corpus.parent / "cache", graph)
    assert profile.graph.edges[:2] == [("classify", "route"), ("route", "reply")]  # declared first
    assert edges(profile) == SHAPES_EDGES | {("route", "reply")}
    inferred = profile.to_json()["graph"]["inferred"]
    assert {tuple(e) for e in inferred["inferred_edge_list"]} == SHAPES_EDGES - {("classify", "route")}
    assert set(inferred["inferred_nodes"]) == set(SHAPES_ROLES) - {"classify"}  # route's spec came from values
    # the declared role stays; the field the file leaves out is inferred, as routing
    assert roles(profile)["classify"] == {"topic": "routing", "urgent": "routing"}
    assert inferred["inferred_roles"]["classify"] == {"urgent": "routing"}


def test_infer_false_keeps_the_declared_edges_alone(shapes_corpus: Path, tmp_path: Path) -> None:
    graph = tmp_path / "graph.yaml"
    graph.write_text(GRAPH_YAML + "infer: false\n")
    profile = analyse(shapes_corpus, shapes_corpus.parent / "cache", graph)
    assert profile.graph.edges == [("classify", "route"), ("route", "reply")]
    inferred = profile.to_json()["graph"]["inferred"]
    assert inferred["inferred_edge_list"] == [] and inferred["inferred_edges"] is False
    assert profile.to_json()["graph"]["infer"] is False


# --------------------------------------------------------------------------- quickstart

QUICKSTART_EDGES = {
    ("input", "normalize"),
    ("normalize", "classify"), ("normalize", "retrieve"), ("normalize", "draft"), ("normalize", "review"),
    ("normalize", "ticket"), ("normalize", "chitchat"),
    ("classify", "route"), ("retrieve", "route"),
    ("classify", "ticket"),                                  # declared, and the category label
    ("classify", "draft"), ("retrieve", "draft"), ("review", "draft"),   # declared (review: loop feedback)
    ("retrieve", "review"), ("draft", "review"),
}
QUICKSTART_ROLES = {
    "input": {"ticket": "context"},
    "normalize": {"output": "context"},
    "classify": {"category": "routing", "urgent": "routing", "sentiment": "routing"},  # route reads all three
    "retrieve": {"output": "context"},
    "route": {"output": "routing"},
    "draft": {"output": "context"},
    "review": {"output": "routing"},                         # its verdict is its decision
    "ticket": {"ticket_id": "context", "queue": "context"},
    "chitchat": {"output": "context"},
}
QUICKSTART_ORIGINS = {
    "input": "stable", "normalize": "stable", "retrieve": "stable",   # deterministic, fed by the ticket only
    "classify": "origin", "chitchat": "origin", "draft": "origin",    # sampled LLM calls
    "route": "propagator", "ticket": "propagator",                    # deterministic
    "review": "indeterminate",                               # its draft always differs: never upstream-clean
}


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    out = tmp_path_factory.mktemp("quickstart")
    found = shutil.which("quiver")
    command = [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]
    proc = subprocess.run([*command, "record", str(ROOT / "experiments" / "quickstart" / "record.yaml"),
                           "--output", str(out / "rec"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return analyse(out / "rec" / "traces.jsonl", out / "cache")


def test_quickstart_graph_is_exactly_the_pipeline(quickstart: Profile) -> None:
    assert edges(quickstart) == QUICKSTART_EDGES
    assert roles(quickstart) == QUICKSTART_ROLES


def test_quickstart_origins_and_bifurcation_sources(quickstart: Profile) -> None:
    assert origins(quickstart) == QUICKSTART_ORIGINS
    # the review's verdict ends the loop, and it reads the draft's citations; route's arm
    # and the classifier also decide, but some bifurcating pair leaves each unchanged
    # (a verdict turned over with the same arm); ticket and chitchat run on one arm only
    assert sources(quickstart) == {"draft", "review"}
