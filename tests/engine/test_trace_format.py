"""The v1 trace format: schema, loading errors, streaming and byte-stable writing."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from quiver import (
    NodeCall,
    Trace,
    TraceFormatError,
    TraceWriter,
    iter_traces,
    load_traces,
    trace_json_schema,
    write_traces,
)

EXAMPLE = json.loads((Path(__file__).parent.parent / "data" / "trace_example.json").read_text())


def _trace(i: int) -> Trace:
    return Trace(
        trace_id=f"t{i}", run_id="r1", pipeline="p", input_id=f"q{i % 2}", repeat=i // 2,
        inputs={"query": f"question {i}"},
        calls=[NodeCall(call_id="c0", node="signal", occurrence=0, call_path="signal#0", kind="llm",
                        output={"turn_type": "question", "score": 0.25 * i}, started_at=0.0, ended_at=0.125)],
        output=f"answer {i}",
    )


def test_the_published_schema_validates_the_documented_example() -> None:
    jsonschema.Draft202012Validator.check_schema(trace_json_schema())
    jsonschema.validate(EXAMPLE, trace_json_schema())
    assert Trace.model_validate(EXAMPLE).calls[1].decision == {"route": "discovery"}


def test_quiver_schema_trace_prints_the_same_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "quiver.experiments._cli", "schema", "trace"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(out) == trace_json_schema()


def test_schema_rejects_a_wrong_kind_and_a_negative_occurrence() -> None:
    bad = json.loads(json.dumps(EXAMPLE))
    bad["calls"][1]["kind"] = "agent"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, trace_json_schema())
    bad["calls"][1]["kind"] = "llm"
    bad["calls"][1]["occurrence"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, trace_json_schema())


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_bad_lines_give_one_line_errors_and_the_rest_loads(tmp_path: Path) -> None:
    good = [json.dumps(_trace(i).model_dump(mode="json")) for i in range(4)]
    wrong_type = json.loads(good[1])
    wrong_type["calls"][0]["occurrence"] = "first"
    future = json.loads(good[2])
    future["schema_version"] = 2
    path = tmp_path / "corpus.jsonl"
    _write_lines(path, [good[0], '{"schema_version": 1, "trace_id": ', json.dumps(wrong_type),
                        json.dumps(future), "", good[3], "[1, 2]"])
    result = load_traces(path)
    assert [t.trace_id for t in result.traces] == ["t0", "t3"]
    messages = [str(e) for e in result.errors]
    assert messages == [
        f"{path}:2: not valid JSON: Expecting value at column 35",
        f"{path}:3: calls[0].occurrence: Input should be a valid integer, unable to parse string as an integer, "
        f"got \"first\"",
        f"{path}:4: schema_version: unsupported version 2; this engine reads version 1",
        f"{path}:7: expected a JSON object, got list",
    ]
    assert all("\n" not in m for m in messages)
    assert [(e.line, e.field) for e in result.errors] == [
        (2, None), (3, "calls[0].occurrence"), (4, "schema_version"), (7, None)
    ]


def test_missing_field_and_unknown_field_are_named(tmp_path: Path) -> None:
    data = _trace(0).model_dump(mode="json")
    del data["calls"][0]["node"]
    data["calls"][0]["nodes"] = "x"
    path = tmp_path / "c.jsonl"
    _write_lines(path, [json.dumps(data)])
    with pytest.raises(TraceFormatError) as info:
        list(iter_traces(path))
    assert info.value.field == "calls[0].node"
    assert str(info.value) == f"{path}:1: calls[0].node: Field required (and 1 more problem)"


def test_reading_streams_one_trace_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    write_traces(path, (_trace(i) for i in range(3)))
    stream = iter_traces(path)
    assert next(stream).trace_id == "t0"
    with path.open("a") as fh:  # a line appended after reading began is still read
        fh.write("not json\n")
    assert next(stream).trace_id == "t1"


def test_gzip_corpora_read_and_write(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl.gz"
    write_traces(path, [_trace(i) for i in range(3)])
    with gzip.open(path, "rt") as fh:
        assert len(fh.read().splitlines()) == 3
    assert [t.trace_id for t in iter_traces(path)] == ["t0", "t1", "t2"]


def test_write_read_write_is_byte_stable(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_traces(a, [_trace(i) for i in range(5)] + [Trace.model_validate(EXAMPLE)])
    write_traces(b, iter_traces(a))
    assert a.read_bytes() == b.read_bytes()


def test_writer_appends_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with TraceWriter(path) as w:
        w.write(_trace(0))
    with TraceWriter(path, append=True, fsync=True) as w:
        w.write(_trace(1))
        assert w.count == 1
    assert [t.trace_id for t in iter_traces(path)] == ["t0", "t1"]
