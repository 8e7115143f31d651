"""quiver analyze as a user runs it: the bundled example end to end, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUIVER = shutil.which("quiver")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec")
    proc = run("record", str(ROOT / "experiments" / "quickstart" / "record.yaml"), "--output", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out / "traces.jsonl"


def test_the_bundled_corpus_analyses_end_to_end(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "analysis"
    proc = run("analyze", str(corpus), "--out", str(out), "--cache", str(tmp_path / "cache"), "--resamples", "300")
    assert proc.returncode == 0, proc.stderr
    assert "analysed 30 traces in 10 input groups: 30 pairs" in proc.stdout
    assert "analyze: embedding" in proc.stderr  # progress while embedding and pairing
    data = json.loads((out / "profile.json").read_text())
    assert data["pairs"] == 30 and data["divergence"]["D_shape"] > 0
    assert {n["node"] for n in data["nodes"]} >= {"classify", "retrieve", "route", "draft", "review"}
    report = (out / "report.md").read_text()
    assert "## Edge sensitivity" in report and "| classify → route |" in report
    for name in ("ratios.png", "sigma_matrix.png", "graph.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = run("analyze", str(corpus), "--out", str(tmp_path / "again"), "--cache", str(tmp_path / "cache"),
                "--resamples", "300", "--quiet")
    assert again.returncode == 0 and "texts embedded 0 of" in again.stdout


def analyze_quietly(*args: str) -> subprocess.CompletedProcess[str]:
    return run("analyze", *args, "--quiet")


def _one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("quiver analyze: error: ")
    assert expected in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_an_unknown_node_in_the_graph(corpus: Path, tmp_path: Path) -> None:
    graph = tmp_path / "g.yaml"
    graph.write_text("nodes:\n  classify: {}\n  route: {}\nedges: [[classify, rout]]\n")
    _one_line_error(analyze_quietly(str(corpus), "--out", str(tmp_path / "o"), "--graph", str(graph)),
                    "edges[0]: unknown node 'rout'; known nodes: classify, route")
    graph.write_text("nodes:\n  clasify: {output: {type: json}}\n")
    _one_line_error(analyze_quietly(str(corpus), "--out", str(tmp_path / "o"), "--graph", str(graph)),
                    "node(s) clasify of the graph never ran in the traces; recorded nodes:")


def test_a_field_type_that_does_not_match_the_values(corpus: Path, tmp_path: Path) -> None:
    graph = tmp_path / "g.yaml"
    graph.write_text("nodes:\n  classify:\n    fields:\n      category: {type: numeric, role: routing}\n")
    _one_line_error(analyze_quietly(str(corpus), "--out", str(tmp_path / "o"), "--graph", str(graph),
                        "--cache", str(tmp_path / "cache")),
                    "node 'classify': field 'category': declared numeric, but the value is a str")


def test_traces_with_no_same_input_group(corpus: Path, tmp_path: Path) -> None:
    lines = corpus.read_text().splitlines()
    single = tmp_path / "single.jsonl"
    single.write_text("\n".join(lines[::3]) + "\n")  # one repeat per input
    _one_line_error(analyze_quietly(str(single), "--out", str(tmp_path / "o")),
                    "no input group has two traces (10 trace(s) in 10 group(s) of size 1)")


def test_an_empty_file_and_a_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _one_line_error(analyze_quietly(str(empty), "--out", str(tmp_path / "o")),
                    f"trace file {empty} holds no trace; record a corpus into it with `quiver record`")
    _one_line_error(analyze_quietly(str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")),
                    f"trace file {tmp_path / 'nope.jsonl'} does not exist")


def test_types_declared_on_the_decorators_are_used(corpus: Path, tmp_path: Path) -> None:
    module = tmp_path / "declared.py"
    module.write_text(
        "import quiver\n"
        "@quiver.node('classify', fields={'category': {'type': 'categorical', 'role': 'routing'},\n"
        "                                 'sentiment': {'type': 'categorical', 'role': 'observability'}})\n"
        "def classify(text): ...\n"
        "@quiver.node('never-ran', output={'type': 'text'})\n"
        "def unused(x): ...\n"
    )
    proc = run("analyze", str(corpus), "--out", str(tmp_path / "o"), "--pipeline", f"{module}:classify",
               "--cache", str(tmp_path / "cache"), "--quiet", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    graph = json.loads((tmp_path / "o" / "profile.json").read_text())["graph"]
    fields = graph["nodes"]["classify"]["fields"]
    assert fields["category"]["role"] == "routing" and fields["sentiment"]["role"] == "observability"
    assert fields["urgent"]["type"] == "bool"  # not declared: inferred
    assert "never-ran" not in graph["nodes"]
