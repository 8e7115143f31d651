"""A recorded corpus exported to OpenInference and imported back is the same corpus.

The support_bot demo is recorded once for the module (``quiver record``, 2 repeats, the
bundled simulator), exported with :func:`quiver.write_openinference` (JSON Lines and
OTLP/JSON) and imported with :func:`quiver.import_traces`. What round-trips: every
field of every trace and every call (ids, node names, occurrences, call paths, loops,
parents, kinds, input hashes, outputs, decisions, models, prompts, responses,
retrieval sets, tool steps, tags, times, errors), except the trace's
``tags["import"]``, which records the import itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import quiver
from quiver import Trace

ROOT = Path(__file__).resolve().parents[2]
SUPPORT_BOT = ROOT / "experiments" / "support_bot"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("quiver")
    command = [exe] if exe else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[Trace]:
    out = tmp_path_factory.mktemp("support_bot")
    proc = _cli("record", str(SUPPORT_BOT / "record.yaml"), "--output", str(out), "--repeats", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return list(quiver.iter_traces(out / "traces.jsonl"))


@pytest.fixture(scope="module")
def spans_file(recorded: list[Trace], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "spans.jsonl"
    quiver.write_openinference(path, recorded)
    return path


@pytest.fixture(scope="module")
def imported(spans_file: Path) -> quiver.ImportResult:
    return quiver.import_traces("openinference", spans_file)


def _without_import_note(trace: Trace) -> dict[str, Any]:
    data = trace.model_dump(mode="json")
    data["tags"].pop("import")
    return data


def test_the_corpus_exercises_every_replay_contract_field(recorded: list[Trace]) -> None:
    calls = [c for t in recorded for c in t.calls]
    assert {c.kind for c in calls} == {"source", "llm", "retrieval", "router", "tool"}
    assert any(c.decision for c in calls) and any(c.iteration is not None for c in calls)
    assert any(c.tool for c in calls) and any(c.retrieval for c in calls) and any(c.retrieval == [] for c in calls)
    assert any("[" in c.call_path for c in calls) and any(t.tags.get("loops") for t in recorded)


def test_imported_traces_equal_the_recorded_ones(recorded: list[Trace], imported: quiver.ImportResult) -> None:
    assert imported.ok, [str(p) for p in imported.problems]
    assert [t.trace_id for t in imported.traces] == [t.trace_id for t in recorded]
    for before, after in zip(recorded, imported.traces, strict=True):
        assert _without_import_note(after) == before.model_dump(mode="json"), before.trace_id


def test_node_calls_round_trip_field_by_field(recorded: list[Trace], imported: quiver.ImportResult) -> None:
    fields = ("call_id", "node", "occurrence", "call_path", "iteration", "loop", "parents", "kind", "input_hash",
              "output", "decision", "model", "prompt", "response", "retrieval", "tool", "tags", "error")
    for before, after in zip(recorded, imported.traces, strict=True):
        assert (after.input_id, after.repeat, after.inputs, after.output) == (
            before.input_id, before.repeat, before.inputs, before.output)
        for a, b in zip(before.calls, after.calls, strict=True):
            for name in fields:
                assert getattr(b, name) == getattr(a, name), (before.trace_id, a.call_id, name)


def test_every_attribute_of_an_export_is_mapped(imported: quiver.ImportResult) -> None:
    summary = imported.summary()
    assert summary["attributes"]["kept_in_tags"] == {}
    assert summary["spans_read"] == summary["traces"] + summary["calls"]  # one trace span per trace
    assert summary["groups"] == len({t.input_id for t in imported.traces})


def test_otlp_json_export_round_trips_too(recorded: list[Trace], tmp_path: Path) -> None:
    path = tmp_path / "spans.otlp.json"
    quiver.write_openinference(path, recorded, otlp=True)
    doc = json.loads(path.read_text())
    assert {kv["key"] for kv in doc["resourceSpans"][0]["resource"]["attributes"]} >= {"service.name"}
    result = quiver.import_traces("openinference", path)
    assert result.ok
    assert [_without_import_note(t) for t in result.traces] == [t.model_dump(mode="json") for t in recorded]


def test_exported_spans_speak_openinference(recorded: list[Trace], spans_file: Path) -> None:
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    by_id = {s["context"]["span_id"]: s for s in spans}
    trace = recorded[0]
    mine = [s for s in spans if s["attributes"].get("quiver.trace_id") == trace.trace_id
            or (s["parent_id"] and by_id[s["parent_id"]]["attributes"].get("quiver.trace_id") == trace.trace_id)]
    root = next(s for s in mine if s["parent_id"] is None)
    assert root["name"] == trace.pipeline and root["attributes"]["openinference.span.kind"] == "CHAIN"
    assert json.loads(root["attributes"]["input.value"]) == trace.inputs
    kinds = {"llm": "LLM", "retrieval": "RETRIEVER", "tool": "TOOL", "router": "CHAIN"}
    for call in trace.calls[1:]:
        span = next(s for s in mine if s["attributes"].get("quiver.call_id") == call.call_id)
        assert span["name"] == call.node
        assert span["attributes"]["openinference.span.kind"] == kinds[call.kind]
        if call.model is not None:
            assert span["attributes"]["llm.model_name"] == call.model.name
            assert json.loads(span["attributes"]["llm.invocation_parameters"]) == call.model.params
            assert span["attributes"]["llm.input_messages.0.message.content"] == call.prompt.assembled[0].content


def test_analysis_of_the_imported_corpus_is_the_analysis_of_the_recorded_one(
    recorded: list[Trace], imported: quiver.ImportResult, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.mktemp("embeddings")
    graph = SUPPORT_BOT / "graph.yaml"
    before = quiver.analyze(recorded, graph=graph, cache_dir=cache, resamples=300).to_json()
    after = quiver.analyze(imported.traces, graph=graph, cache_dir=cache, resamples=300).to_json()
    assert after["embedding"]["embedded"] == 0  # every text it needed, the first analysis embedded
    for profile in (before, after):  # wall-clock and cache counters differ by nature
        profile.pop("seconds")
        for key in ("embedded", "cache_hits", "load_seconds", "encode_seconds"):
            profile["embedding"].pop(key)
    assert after == before
