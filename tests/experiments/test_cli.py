"""The quiver command as a user runs it: the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

QUIVER = shutil.which("quiver")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_console_script_is_installed() -> None:
    assert QUIVER is not None, "pip install must put the `quiver` console script on PATH"


def test_help_lists_every_command() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for command in ("record", "sim", "schema", "validate", "analyze", "replay", "run", "import", "export"):
        assert command in proc.stdout
    for command in ("record", "sim", "schema", "validate", "analyze", "replay", "run", "import", "export"):
        sub = run(command, "--help")
        assert sub.returncode == 0 and "usage: quiver " + command in sub.stdout


def test_schema_spec_is_json_schema_with_documented_fields() -> None:
    proc = run("schema", "record")
    schema = json.loads(proc.stdout)
    assert schema["properties"]["repeats"]["description"].startswith("How many times")
    assert set(schema["required"]) == {"pipeline", "llm", "inputs"}
    campaign = json.loads(run("schema", "spec").stdout)
    assert set(campaign["required"]) == {"pipeline", "llm"}  # `quiver localize` needs no perturbations
    assert campaign["properties"]["baseline"]["description"].startswith("An existing traces file")
    assert "ladder" in json.dumps(campaign["$defs"]["PerturbationSpec"])


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::"])
def test_sim_refuses_non_loopback_addresses(host: str) -> None:
    proc = run("sim", "--host", host, "--port", "0")
    assert proc.returncode == 2
    assert f"refuses to listen on '{host}'" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_validate_reports_bad_lines_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"schema_version": 3}\nnot json\n')
    proc = run("validate", str(path))
    assert proc.returncode == 1
    assert f"{path}:1: schema_version: unsupported version 3" in proc.stderr
    assert f"{path}:2: not valid JSON" in proc.stderr
    assert "0 trace(s) valid, 2 line(s) bad" in proc.stdout


def write_spec(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pipeline: p.py:run\nllm: simulator\ninputs: [{q: 1}]\nrepeat: 3\n",
         ":4: repeat: unknown key 'repeat' (did you mean 'repeats'?); valid keys here are: pipeline, name, llm, "
         "inputs, repeats,"),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  retry:\n    attempts: 0\ninputs: [{q: 1}]\n",
         ":5: llm.retry.attempts: Input should be an integer in [1, 100], got 0"),
        ("pipeline: p.py:run\nllm:\n  base_url: http://x\n  simulator: {}\ninputs: [{q: 1}]\n",
         ":2: llm: give exactly one of 'simulator'"),
        ("pipeline: p.py:run\ninputs: [{q: 1}]\n", ": llm: required field is missing"),
        ("pipeline: p.py:run\nllm: simulator\ninputs: [{q: 1}]\nconcurrency: many\n",
         ":4: concurrency: Input should be an integer in [1, 1024], got \"many\""),
        ("pipeline: [p.py\n", ":2: not valid YAML"),
    ],
)
def test_spec_errors_name_the_line_and_the_field(tmp_path: Path, text: str, expected: str) -> None:
    spec = write_spec(tmp_path, text)
    proc = run("record", str(spec), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"quiver record: error: {spec}")
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_missing_pipeline_file_and_bad_inputs_are_reported(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "pipeline: nowhere.py:run\nllm: simulator\ninputs: in.jsonl\n")
    (tmp_path / "in.jsonl").write_text('{"id": "a", "q": 1}\n{"id": "a", "q": 2}\n')
    proc = run("record", str(spec), cwd=tmp_path)
    assert proc.returncode == 2 and "input_id 'a' appears twice" in proc.stderr
    (tmp_path / "in.jsonl").write_text('{"id": "a", "q": 1}\n{"id": "b", q: 2}\n')
    proc = run("record", str(spec), cwd=tmp_path)
    assert proc.returncode == 2 and f"{tmp_path / 'in.jsonl'}:2: not valid JSON" in proc.stderr
    (tmp_path / "in.jsonl").write_text('{"id": "a", "q": 1}\n')
    proc = run("record", str(spec), cwd=tmp_path)
    assert proc.returncode == 2 and "nowhere.py does not exist" in proc.stderr


def test_pipeline_that_cannot_take_the_inputs_is_refused_before_running(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("def run(question, history):\n    return question\n")
    spec = write_spec(tmp_path, "pipeline: p.py:run\nllm: simulator\ninputs: [{q: 1}]\noutput: out\n")
    proc = run("record", str(spec), cwd=tmp_path)
    assert proc.returncode == 2
    assert "pipeline run(question, history) cannot take inputs {q}" in proc.stderr


def test_record_resume_keeps_what_an_interrupted_run_wrote(pipelines_dir: Path, tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        f"pipeline: {pipelines_dir / 'chatty.py'}:pipeline\nllm: simulator\n"
        "inputs: [{id: a, text: one}, {id: b, text: two}]\nrepeats: 2\noutput: out\n",
    )
    first = run("record", str(spec), "--quiet", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    complete = (tmp_path / "out" / "traces.jsonl").read_text().splitlines()
    # an interrupted run leaves its partial file behind: keep two traces of it
    partial = tmp_path / "out" / "traces.jsonl.partial"
    partial.write_text("\n".join(complete[:2]) + "\n")
    (tmp_path / "out" / "traces.jsonl").unlink()
    second = run("record", str(spec), "--resume", "--quiet", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "(4 ok, 0 failed, 2 resumed)" in second.stdout
    resumed = (tmp_path / "out" / "traces.jsonl").read_text().splitlines()
    assert len(resumed) == 4 and resumed[:2] == complete[:2]
    key = [(json.loads(line)["input_id"], json.loads(line)["repeat"]) for line in resumed]
    assert key == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert not partial.exists()
