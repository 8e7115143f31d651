"""The OpenInference spans of an instrumented program, imported, say what its recording says.

Each program runs once per input and repeat inside ``record_corpus`` with its quiver
integration (``instrument(...)``) and the OpenInference instrumentor both on, so the
recorded corpus and the imported spans come from the same executions. The imported
corpus must name the same nodes, hold the decisions and loops, and show no false noise
origin: each node's noise floor (``quiver.analyze``) lies within the bootstrap interval
of the recorded corpus's, and no node is an origin in the import that is not one in the
recording.

DSPy: the bundled example ``experiments/dspy_multihop`` (its first 6 questions x 3).
LangGraph: the bundled example ``experiments/langgraph_agent`` (6 of its questions x 3, every
path: the rewrite cycle once and twice, the ``ToolNode`` after ``tools_condition`` and without
it, small talk), instrumented by its own ``instrument(...)`` line; its imported calls must also
have the recorded kinds, parents (from the channels each node read) and tool steps.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oi_frameworks import traced

import quiver
from quiver import Trace
from quiver.replay import InputItem, Simulator, record_corpus

ROOT = Path(__file__).parents[2]
DSPY_EXAMPLE = ROOT / "experiments" / "dspy_multihop"
GRAPH_EXAMPLE = ROOT / "experiments" / "langgraph_agent"
GRAPH_INPUTS = ("reset-password", "lost-2fa", "restore-project", "vague-slow", "export-broken", "greeting")
"""Inputs of the LangGraph example that take every path: the rewrite cycle once and twice, the
tool call after it and without it, the composer's answer at once, small talk straight to it."""


def _embed(texts: list[str]) -> Any:
    """Character-trigram hashing vectors: a cheap embedder, the same for both corpora."""
    out = np.zeros((len(texts), 64))
    for i, text in enumerate(texts):
        for j in range(max(len(text) - 2, 1)):
            out[i, int(hashlib.sha256(text[j:j + 3].encode()).hexdigest()[:4], 16) % 64] += 1.0
        out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
    return out


def _both(run: Callable[..., Any], inputs: list[InputItem], instrumentor: Any, tmp: Path,
          **import_options: Any) -> tuple[list[Trace], list[Trace]]:
    with traced(instrumentor) as exporter:
        result = record_corpus(run, pipeline_name="p", inputs=inputs, repeats=3, output_dir=tmp, concurrency=2,
                               progress_stream=None)
        spans = [json.loads(s.to_json()) for s in exporter.get_finished_spans()]
    assert result.failed == 0
    recorded = quiver.load_traces(result.traces_path).traces
    imported = quiver.import_traces("openinference", spans, **import_options)
    assert imported.ok, [str(p) for p in imported.problems]
    return recorded, imported.traces


def _nodes(traces: list[Trace]) -> set[str]:
    return {c.node for t in traces for c in t.calls if c.kind != "source"}


def _profile(traces: list[Trace], tmp: Path) -> dict[str, dict[str, Any]]:
    profile = quiver.analyze(traces, embedder=_embed, cache_dir=tmp / "embed", resamples=400)
    return {n["node"]: n for n in profile.data["nodes"]}


def _assert_same_noise(recorded: list[Trace], imported: list[Trace], tmp: Path) -> None:
    ours, theirs = _profile(recorded, tmp), _profile(imported, tmp)
    for node, row in theirs.items():
        mine = ours[node]
        lo, hi = mine["noise_floor_ci"] or (mine["noise_floor"], mine["noise_floor"])
        assert lo - 1e-9 <= row["noise_floor"] <= hi + 1e-9, (node, row["noise_floor"], (lo, hi))
        if row["origin"] == "origin":
            assert mine["origin"] == "origin", (node, mine["origin"])
    assert set(theirs) == set(ours)


@pytest.fixture(scope="module")
def dspy_corpora(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Trace], list[Trace]]:
    from openinference.instrumentation.dspy import DSPyInstrumentor

    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_BASE_URL", simulator.url)
    patch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        importlib.import_module("quiver.experiments.dspy_multihop.sim_models")
        pipeline = importlib.import_module("quiver.experiments.dspy_multihop.pipeline")
        lines = (DSPY_EXAMPLE / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:6]
        inputs = [InputItem(row["input_id"], row["inputs"]) for row in map(json.loads, lines)]
        return _both(pipeline.run, inputs, DSPyInstrumentor(), tmp_path_factory.mktemp("dspy"),
                     dspy_program=pipeline.program)
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def graph_corpora(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Trace], list[Trace]]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_BASE_URL", simulator.url)
    patch.setenv("OPENAI_API_KEY", "sk-test")
    try:
        importlib.import_module("quiver.experiments.langgraph_agent.sim_models")
        pipeline = importlib.import_module("quiver.experiments.langgraph_agent.pipeline")
        rows = [json.loads(line) for line in (GRAPH_EXAMPLE / "inputs.jsonl").read_text(encoding="utf-8").splitlines()]
        inputs = [InputItem(row["input_id"], {"question": row["question"]}) for row in rows
                  if row["input_id"] in GRAPH_INPUTS]
        return _both(pipeline.run, inputs, LangChainInstrumentor(), tmp_path_factory.mktemp("graph"))
    finally:
        patch.undo()


@pytest.mark.parametrize("which", ["dspy_corpora", "graph_corpora"])
def test_imported_spans_name_the_recorded_nodes_with_decisions_and_loops(which: str,
                                                                         request: pytest.FixtureRequest) -> None:
    recorded, imported = request.getfixturevalue(which)
    assert _nodes(imported) == _nodes(recorded)
    assert len(imported) == len(recorded)
    gates = {g for t in recorded for c in t.calls for g in c.decision}
    assert gates and gates == {g for t in imported for c in t.calls for g in c.decision}
    loops = {c.loop for t in recorded for c in t.calls if c.loop and c.iteration}  # loops that went round
    assert loops and loops <= {c.loop for t in imported for c in t.calls if c.loop}
    for trace in imported:
        assert all(c.response is not None for c in trace.calls if c.kind == "llm")
        assert "lc_run--" not in json.dumps([c.output for c in trace.calls])


def _shape(trace: Trace) -> tuple[Any, ...]:
    """What the trace's calls did, without their values: node, kind, decision, parents, tool step, documents;
    loop and iteration when the trace went round a cycle (spans show a cycle only where it repeats)."""
    round_ = any(c.iteration for c in trace.calls)
    return tuple((c.node, c.kind, json.dumps(c.decision, sort_keys=True), c.loop if round_ else None,
                  c.iteration if round_ else None, tuple(c.parents),
                  c.tool.model_dump_json() if c.tool else None,
                  tuple(d.doc_id for d in c.retrieval) if c.retrieval is not None else None) for c in trace.calls)


def test_imported_langgraph_calls_have_the_recorded_kinds_parents_and_tool_steps(
        graph_corpora: tuple[list[Trace], list[Trace]]) -> None:
    """Per question, the imported traces take the recorded paths: the retrieval node, the ToolNode's
    tool step, parents from the channels each node read (a reducer's every write), the loop's iterations."""
    recorded, imported = graph_corpora

    def shapes(traces: list[Trace]) -> dict[str, list[tuple[Any, ...]]]:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for trace in traces:
            out.setdefault(str(next(iter(trace.inputs.values()))), []).append(_shape(trace))
        return {q: sorted(v, key=repr) for q, v in out.items()}

    ours, theirs = shapes(recorded), shapes(imported)
    assert theirs == ours
    kinds = {c.kind for t in imported for c in t.calls}
    assert {"retrieval", "tool", "llm"} <= kinds
    assert any(len(c.parents) > 1 for t in imported for c in t.calls if c.node == "follow_up")


@pytest.mark.parametrize("which", ["dspy_corpora", "graph_corpora"])
def test_imported_spans_show_no_false_noise_origin(which: str, request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    recorded, imported = request.getfixturevalue(which)
    _assert_same_noise(recorded, imported, tmp_path)
