"""Recorded call identities are exactly right and do not depend on scheduling.

The pipeline in tests/pipelines/structured.py has parallel intake on threads, a node
called twice in parallel on asyncio, a router, a top-level gate and a loop. It is
recorded 3 x over 5 inputs, 20 times, with different thread-pool sizes, recording
concurrency and sleep jitter; every trace must match the structure derived by hand from
its input, field by field, and survive a JSONL round trip byte for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from quiver import iter_traces, write_traces
from quiver.replay import InputItem, LLMClient, load_pipeline, record_corpus

INPUTS = [
    InputItem("u1", {"text": "URGENT: the export server is down", "rounds": 1}),
    InputItem("a1", {"text": "Question about my invoice total", "rounds": 1}),
    InputItem("a2", {"text": "Export button crashes the editor", "rounds": 2}),
    InputItem("a3", {"text": "Account locked after password reset", "rounds": 3}),
    InputItem("a4", {"text": "Cannot change billing address anywhere", "rounds": 9}),
]
K_MAX = 4
RUNS = 20


def expected_calls(item: InputItem) -> list[tuple[Any, ...]]:
    """(call_id, node, occurrence, call_path, kind, iteration, loop, parents, decision)."""
    rounds = item.inputs["rounds"]
    urgent = "urgent" in item.inputs["text"].lower()
    rows: list[tuple[str, str, str, int | None, str | None, list[str], dict[str, str]]] = [
        ("input", "input#0", "source", None, None, [], {}),
        ("normalize", "normalize#0", "transform", None, None, ["input#0"], {}),
        ("classify", "[0]/classify#0", "llm", None, None, ["normalize#0"], {}),
        ("keywords", "[1]/keywords#0", "transform", None, None, ["normalize#0"], {}),
        ("search", "[2]/search#0", "retrieval", None, None, ["normalize#0"], {}),
        ("search", "[3]/search#0", "retrieval", None, None, ["normalize#0"], {}),
        ("lookup", "lookup#0", "tool", None, None, ["[1]/keywords#0"], {}),
        ("lookup", "lookup#1", "tool", None, None, ["[1]/keywords#0"], {}),
        ("route", "route#0", "router", None, None, ["[0]/classify#0"],
         {"route": "escalate" if urgent else "answer"}),
        ("depth", "depth#0", "router", None, None, [], {"depth": "deep" if rounds > 2 else "shallow"}),
    ]
    if urgent:
        rows.append(("escalate", "escalate#0", "tool", None, None, ["normalize#0", "[0]/classify#0"], {}))
    else:
        for it in range(min(rounds, K_MAX)):
            sources = ["normalize#0", "[2]/search#0", "[3]/search#0", "lookup#0", "lookup#1"]
            rows.append(("draft", f"draft#{it}", "llm", it, "refine", sources, {}))
            verdict = "accept" if it >= rounds - 1 else "retry"
            rows.append(("check", f"check#{it}", "transform", it, "refine", [f"draft#{it}"], {"verdict": verdict}))
    ids = {row[1]: f"c{i}" for i, row in enumerate(rows)}
    seen: dict[str, int] = {}
    out = []
    for i, (node, path, kind, iteration, loop, parents, decision) in enumerate(rows):
        occurrence = seen.get(node, 0)
        seen[node] = occurrence + 1
        out.append((f"c{i}", node, occurrence, path, kind, iteration, loop, [ids[p] for p in parents], decision))
    return out


def observed_calls(trace: Any) -> list[tuple[Any, ...]]:
    return [
        (c.call_id, c.node, c.occurrence, c.call_path, c.kind, c.iteration, c.loop, c.parents, c.decision)
        for c in trace.calls
    ]


@pytest.fixture(scope="module")
def structured(request: pytest.FixtureRequest) -> Any:
    path = Path(__file__).parent.parent / "pipelines" / "structured.py"
    fn = load_pipeline(f"{path}:pipeline")
    return fn, sys.modules[fn.__module__]


def test_expected_structure_covers_every_feature() -> None:
    nodes = {row[1] for item in INPUTS for row in expected_calls(item)}
    assert {"classify", "search", "lookup", "route", "depth", "escalate", "draft", "check"} <= nodes
    lengths = {sum(row[1] == "draft" for row in expected_calls(item)) for item in INPUTS}
    assert lengths == {0, 1, 2, 3, 4}  # escalated, 1..3 rounds, and stopped at k_max


def test_twenty_runs_under_different_scheduling_give_exact_identities(
    structured: Any, llm_client: LLMClient, tmp_path: Path
) -> None:
    fn, module = structured
    expected = {item.input_id: expected_calls(item) for item in INPUTS}
    for run in range(RUNS):
        module.JITTER.seed(run)
        module.WORKERS = 1 + run % 4
        out = tmp_path / f"run{run}"
        result = record_corpus(
            fn, pipeline_name="structured", inputs=INPUTS, repeats=3, output_dir=out,
            llm=llm_client, concurrency=[1, 2, 5, 8][run % 4], seed=run, progress_stream=None,
        )
        assert result.traces == 15 and result.failed == 0
        traces = list(iter_traces(result.traces_path))
        assert [(t.input_id, t.repeat) for t in traces] == [
            (item.input_id, r) for item in INPUTS for r in range(3)
        ]
        for trace in traces:
            assert trace.status == "ok", trace.error
            assert observed_calls(trace) == expected[trace.input_id], (run, trace.trace_id)


def test_calls_record_the_replay_contract(structured: Any, llm_client: LLMClient, tmp_path: Path) -> None:
    fn, _ = structured
    result = record_corpus(
        fn, pipeline_name="structured", inputs=INPUTS[2:3], repeats=1, output_dir=tmp_path,
        llm=llm_client, progress_stream=None,
    )
    trace = next(iter_traces(result.traces_path))
    by_path = {c.call_path: c for c in trace.calls}
    classify = by_path["[0]/classify#0"]
    assert classify.model is not None and classify.model.name == "sim-json"
    assert classify.model.params["temperature"] == 0
    assert classify.prompt is not None and classify.prompt.template_id == "structured.classify"
    assert classify.prompt.assembled[1].content == "Ticket: export button crashes the editor"
    assert len(classify.prompt.fragments) == 2 and classify.prompt.template_hash == classify.prompt.fragments[0]
    assert classify.response is not None and classify.response.usage["total_tokens"] > 0
    assert classify.output == {"urgent": False, "category": classify.output["category"]}
    search = by_path["[2]/search#0"]
    assert [(d.doc_id, d.rank, d.score) for d in search.retrieval or []] == [("faq-0", 0, 1.0), ("faq-1", 1, 0.5)]
    assert all(d.content_hash.startswith("sha256:") for d in search.retrieval or [])
    lookup = by_path["lookup#0"]
    assert lookup.tool is not None and lookup.tool.name == "lookup"
    assert lookup.tool.args == {"term": "button"} and lookup.tool.response == {"term": "button", "hits": 6}
    assert trace.tags["loops"] == {"refine": {"k_max": 4, "iterations": [2]}}
    assert all(c.input_hash and c.input_hash.startswith("sha256:") for c in trace.calls[1:])


def test_jsonl_round_trip_is_byte_stable(structured: Any, llm_client: LLMClient, tmp_path: Path) -> None:
    fn, _ = structured
    result = record_corpus(
        fn, pipeline_name="structured", inputs=INPUTS, repeats=3, output_dir=tmp_path / "rec",
        llm=llm_client, progress_stream=None,
    )
    original = result.traces_path.read_bytes()
    again = tmp_path / "again.jsonl"
    write_traces(again, iter_traces(result.traces_path))
    assert again.read_bytes() == original
    gz = tmp_path / "again.jsonl.gz"
    write_traces(gz, iter_traces(again))
    third = tmp_path / "third.jsonl"
    write_traces(third, iter_traces(gz))
    assert third.read_bytes() == original


def test_same_seed_gives_same_outputs_and_different_seed_keys_differ(
    structured: Any, llm_client: LLMClient, tmp_path: Path
) -> None:
    fn, _ = structured

    def outputs(seed: int, name: str) -> list[Any]:
        result = record_corpus(
            fn, pipeline_name="structured", inputs=INPUTS, repeats=2, output_dir=tmp_path / name,
            llm=llm_client, seed=seed, progress_stream=None,
        )
        return [[(c.call_path, c.output) for c in t.calls] for t in iter_traces(result.traces_path)]

    assert outputs(7, "a") == outputs(7, "b")
