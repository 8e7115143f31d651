"""quiver import and quiver export as a user runs them: files in, a corpus out, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import quiver

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
QUIVER = shutil.which("quiver")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_help_documents_every_option() -> None:
    proc = run("import", "--help")
    assert proc.returncode == 0
    for text in ("openinference", "otel-genai", "langfuse", "--out", "--group-by", "--node-name", "--summary",
                 "--dspy-program"):
        assert text in proc.stdout
    proc = run("export", "--help")
    assert proc.returncode == 0 and "--otlp" in proc.stdout and "--out" in proc.stdout


def test_langfuse_exports_import_into_a_valid_corpus(tmp_path: Path) -> None:
    files = sorted((DATA / "langfuse").glob("*.json"))
    out, summary = tmp_path / "traces.jsonl", tmp_path / "summary.json"
    proc = run("import", "langfuse", *map(str, files), "--out", str(out), "--summary", str(summary))
    assert proc.returncode == 0, proc.stderr
    observations = sum(len(json.loads(f.read_text())["observations"]) for f in files)
    assert f"imported {observations} span(s) from {len(files)} file(s) into {len(files)} trace(s)" in proc.stdout
    assert "kept in tags: " in proc.stdout and f"corpus: {out}" in proc.stdout
    data = json.loads(summary.read_text())
    assert data["spans_read"] == data["calls"] == observations and data["problems"] == []
    assert data["attributes"]["mapped"]["type"] == observations
    rec = data["reconciliation"]  # every observation counted by kind, and what it became
    assert sum(rec["spans"].values()) == rec["records"] == observations and rec["dropped"] == {}
    assert sum(rec["calls"].values()) == observations and rec["calls"]["llm"] == rec["spans"]["llm"]
    assert f"reconciliation: {rec['spans']['llm']} LLM -> {rec['spans']['llm']} llm call(s);" in proc.stdout
    assert run("validate", str(out)).returncode == 0
    assert len(quiver.load_traces(out).traces) == len(files)


def test_problems_are_listed_with_their_span_and_exit_1(tmp_path: Path) -> None:
    spans = json.loads((DATA / "retrieval" / "retriever_span.json").read_text())
    spans.append(dict(spans[1]))  # the same span id again, identical
    broken = tmp_path / "spans.jsonl"
    lines = [json.dumps(s) for s in spans]
    cut = lines[0].index("span_id") + 40  # a last line cut after its span id
    broken.write_text("\n".join(lines) + "\n" + lines[0][:cut] + "\n", encoding="utf-8")
    proc = run("import", "openinference", str(broken), "--out", str(tmp_path / "t.jsonl"), "--group-by", "session")
    assert proc.returncode == 1, proc.stderr
    span_id = spans[1]["context"]["span_id"][2:]
    assert f"{broken}:4: span {span_id}: duplicate of the identical span at {broken}:2; dropped" in proc.stderr
    assert f"{broken}:5: span {spans[0]['context']['span_id'][2:]}: not valid JSON" in proc.stderr
    assert "2 problem(s) found" in proc.stderr
    [trace] = quiver.load_traces(tmp_path / "t.jsonl").traces
    assert len(trace.calls) == 1 + 3 and trace.input_id == "session-42"


@pytest.mark.parametrize("args, expected", [
    (["openinference", "missing.json"], "missing.json: no such file"),
    (["openinference", "FILE", "--group-by", "colour"], "group_by must be input, session, trace"),
    (["openinference", "FILE", "--node-name", "shape"], "node_name must be name, kind+name"),
])
def test_what_cannot_run_exits_2_with_one_line(args: list[str], expected: str, tmp_path: Path) -> None:
    args = [str(DATA / "retrieval" / "retriever_span.json") if a == "FILE" else a for a in args]
    proc = run("import", *args, "--out", str(tmp_path / "t.jsonl"))
    assert proc.returncode == 2 and proc.stderr.startswith("quiver import: error: ")
    assert expected in proc.stderr and proc.stderr.count("\n") == 1


def test_export_then_import_gives_the_corpus_back(tmp_path: Path) -> None:
    source = tmp_path / "source.jsonl"
    assert run("import", "openinference", str(DATA / "retrieval" / "retriever_span.json"),
               "--out", str(source)).returncode == 0
    spans = tmp_path / "spans.json"
    proc = run("export", "openinference", str(source), "--out", str(spans), "--otlp")
    assert proc.returncode == 0 and "exported 1 trace(s) as 4 OpenInference span(s)" in proc.stdout
    back = tmp_path / "back.jsonl"
    proc = run("import", "openinference", str(spans), "--out", str(back))
    assert proc.returncode == 0 and "0 kept in tags" in proc.stdout
    [before], [after] = quiver.load_traces(source).traces, quiver.load_traces(back).traces
    assert after.model_dump(exclude={"tags"}) == before.model_dump(exclude={"tags"})
    kept = {k: v for k, v in after.tags.items() if k != "import"}
    assert kept == {k: v for k, v in before.tags.items() if k != "import"}


FRAMEWORKS = DATA / "openinference_frameworks"


def _nodes(path: Path) -> list[list[str]]:
    return [[c.node for c in t.calls] for t in quiver.load_traces(path).traces]


def test_dspy_program_names_predictors_by_attribute_path_as_the_python_api(tmp_path: Path) -> None:
    spans, state = FRAMEWORKS / "dspy.jsonl", FRAMEWORKS / "dspy_program.json"
    named, plain = tmp_path / "named.jsonl", tmp_path / "plain.jsonl"
    proc = run("import", "openinference", str(spans), "--out", str(named), "--dspy-program", str(state))
    assert proc.returncode == 0, proc.stderr
    assert run("import", "openinference", str(spans), "--out", str(plain)).returncode == 0
    api = quiver.import_traces("openinference", spans, dspy_program=state)
    assert _nodes(named) == [[c.node for c in t.calls] for t in api.traces]
    assert {n for t in _nodes(named) for n in t} == {"input", "router", "hops.gen_query", "answer"}
    assert {n for t in _nodes(plain) for n in t} == {"input", "Route", "query", "answer"}  # by signature
    assert [len(t) for t in _nodes(named)] == [len(t) for t in _nodes(plain)]


def test_a_dspy_program_that_has_none_of_the_spans_predictors_is_a_problem_each(tmp_path: Path) -> None:
    state = json.loads((FRAMEWORKS / "dspy_program.json").read_text())
    for entry in state.values():
        if isinstance(entry, dict) and "signature" in entry:
            entry["signature"]["instructions"] = "Another program's instructions."
    other = tmp_path / "other.json"
    other.write_text(json.dumps(state), encoding="utf-8")
    out = tmp_path / "t.jsonl"
    proc = run("import", "openinference", str(FRAMEWORKS / "dspy.jsonl"), "--out", str(out),
               "--dspy-program", str(other))
    assert proc.returncode == 1
    assert "no predictor of the DSPy program has this span's signature" in proc.stderr
    assert {n for t in _nodes(out) for n in t} == {"input", "Route", "query", "answer"}  # named by signature


@pytest.mark.parametrize("content, expected", [
    (None, "cannot be read"),
    ("{\"router\": ", "not JSON"),
    ("[1, 2]", "a JSON list, not an object of predictors"),
    ("{\"metadata\": {}}", "no predictor in it"),
])
def test_a_dspy_program_file_that_is_not_a_saved_program_exits_2_with_one_line(content: str | None, expected: str,
                                                                              tmp_path: Path) -> None:
    state = tmp_path / "program.json"
    if content is not None:
        state.write_text(content, encoding="utf-8")
    proc = run("import", "openinference", str(FRAMEWORKS / "dspy.jsonl"), "--out", str(tmp_path / "t.jsonl"),
               "--dspy-program", str(state))
    assert proc.returncode == 2 and proc.stderr.startswith(f"quiver import: error: {state}: ")
    assert expected in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "t.jsonl").exists()


def test_dspy_program_with_another_format_exits_2(tmp_path: Path) -> None:
    proc = run("import", "langfuse", str(next((DATA / "langfuse").glob("*.json"))), "--out", str(tmp_path / "t.jsonl"),
               "--dspy-program", str(FRAMEWORKS / "dspy_program.json"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--dspy-program names DSPy predictors in openinference spans, not in langfuse spans" in proc.stderr
