"""``quiver record --resume``: killed at any byte of its trace writer, a recording resumes
to the corpus an uninterrupted run writes; ``--retry-failed`` records failed traces
again; a finished corpus is neither recorded again nor overwritten.

The recording is the bundled quickstart pipeline (three tickets, two repeats) against the
bundled simulator, which answers as a pure function of the request and its sample key:
a trace recorded again has the same content. What differs between two runs of one spec
is the run's identity and the clock, so :func:`content` leaves out ``run_id``,
``trace_id`` (the run id, the input and the repeat) and each call's ``started_at`` /
``ended_at``; everything else (inputs, calls, outputs, prompts, responses, decisions,
retries, status) must be equal.

A kill point is built as the file the trace writer leaves: the uninterrupted run's
lines in an order traces could have finished in (a seeded shuffle), cut at a seeded
byte. Every third one is the file two kills leave when the first resume appended behind
a torn line (as this command did before it cut torn lines): a line torn in the middle
of the file, glued to the next trace. Three more are real: the real ``quiver record``
process SIGKILLed once its partial file has grown past a seeded size.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "experiments" / "quickstart"
INPUTS, REPEATS = 3, 2
TRACES = INPUTS * REPEATS
KILL_POINTS = 30
REAL_KILLS = 3


def quiver_command() -> list[str]:
    """The installed ``quiver`` script, else the module."""
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


@pytest.fixture(scope="session")  # shared with the interrupt tests
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart spec cut down to three tickets, two repeats each."""
    folder = tmp_path_factory.mktemp("spec")
    tickets = (QUICKSTART / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:INPUTS]
    (folder / "inputs.jsonl").write_text("\n".join(tickets) + "\n", encoding="utf-8")
    path = folder / "record.yaml"
    path.write_text(
        f"pipeline: {QUICKSTART / 'pipeline.py'}:run\n"
        "name: helpdesk-triage\n"
        "llm:\n"
        "  simulator:\n"
        f"    models: [{QUICKSTART / 'sim_models.py'}]\n"
        "    nondeterminism: 0.05\n"
        "  model: quickstart-classify\n"
        "  params: {temperature: 0.7}\n"
        "inputs: inputs.jsonl\n"
        f"repeats: {REPEATS}\n"
        "concurrency: 2\n"
        "seed: 0\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="session")  # shared with the interrupt tests
def uninterrupted(spec: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``quiver record`` run to the end, in a subprocess: the corpus every resume must give."""
    out = tmp_path_factory.mktemp("uninterrupted") / "out"
    proc = subprocess.run([*quiver_command(), "record", str(spec), "--output", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"recorded {TRACES} traces ({TRACES} ok, 0 failed, 0 resumed)" in proc.stdout
    return out


def content(path: Path) -> list[dict[str, Any]]:
    """The traces of a corpus without what differs between runs (run identity, clock)."""
    traces = []
    for line in path.read_text(encoding="utf-8").splitlines():
        trace = json.loads(line)
        del trace["run_id"], trace["trace_id"]
        for call in trace["calls"]:
            del call["started_at"], call["ended_at"]
        traces.append(trace)
    return traces


def key(line: bytes) -> tuple[str, int]:
    trace = json.loads(line)
    return trace["input_id"], trace["repeat"]


def record(spec: Path, out: Path, *flags: str) -> Any:
    """``quiver record SPEC --output OUT --quiet FLAGS`` in this process (the real command).

    Templates are registered process-wide when a pipeline file is imported, and other
    tests in this process may have registered one under the same id (``classify``): the
    pipeline files they loaded are forgotten, so the quickstart's is imported again and
    its own templates are the ones in force, as in a ``quiver record`` process."""
    for name in [n for n in sys.modules if n.startswith("quiver_pipeline_")]:
        del sys.modules[name]
    return run_cli(["record", str(spec), "--output", str(out), "--quiet", *flags])


def assert_resumed_to(out: Path, uninterrupted: Path, kept: dict[tuple[str, int], bytes]) -> None:
    """``out`` holds the uninterrupted corpus, every trace ``kept`` byte for byte, one run id."""
    final = out / "traces.jsonl"
    assert content(final) == content(uninterrupted / "traces.jsonl")
    lines = {key(line): line for line in final.read_bytes().splitlines(keepends=True)}
    for k, line in kept.items():
        assert lines[k] == line, f"the finished trace {k} was not kept as it was"
    assert len({json.loads(line)["run_id"] for line in lines.values()}) == 1
    assert not (out / "traces.jsonl.partial").exists() and not (out / "traces.jsonl.partial.tmp").exists()


def kill_point(lines: list[bytes], case: int) -> bytes:
    """The partial file a kill leaves, case by case (seeded)."""
    rng = random.Random(case)
    order = lines[:]
    rng.shuffle(order)
    data = b"".join(order)
    boundary = len(b"".join(order[:3]))
    edges = {0: 0, 1: boundary, 3: len(data), 4: boundary - 1}  # nothing, whole lines, all, all but a newline
    cut = edges[case] if case in edges else rng.randrange(0, len(data) + 1)
    if case % 3 == 2:  # a second run appended behind the torn tail, then was killed too
        written = data[:cut]
        finished = written.count(b"\n")
        rest = b"".join(order[finished + 1:] + order[finished:finished + 1])
        data = written + rest
        cut = len(written) + rng.randrange(0, len(rest) + 1)
    return data[:cut]


def finished_traces(partial: bytes) -> tuple[dict[tuple[str, int], bytes], int, int]:
    """What a resume keeps of a partial file: its readable lines (by input and repeat), and
    how many lines it drops: torn at the end (0 or 1), unreadable in the middle."""
    kept: dict[tuple[str, int], bytes] = {}
    torn = unreadable = 0
    for line in partial.splitlines(keepends=True):
        try:
            trace = json.loads(line)
        except ValueError:
            torn += not line.endswith(b"\n")
            unreadable += line.endswith(b"\n")
            continue
        kept[(trace["input_id"], trace["repeat"])] = line if line.endswith(b"\n") else line + b"\n"
    return kept, torn, unreadable


def interrupted_folder(tmp_path: Path, uninterrupted: Path, partial: bytes) -> Path:
    """An output folder as a killed run leaves it: the spec it resolved, its log, the partial file."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(uninterrupted / "spec.resolved.json", out / "spec.resolved.json")
    (out / "record.log").write_text("", encoding="utf-8")
    (out / "traces.jsonl.partial").write_bytes(partial)
    return out


@pytest.mark.parametrize("case", range(KILL_POINTS))
def test_a_kill_at_any_byte_resumes_to_the_uninterrupted_corpus(
    case: int, spec: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    lines = (uninterrupted / "traces.jsonl").read_bytes().splitlines(keepends=True)
    partial = kill_point(lines, case)
    kept, torn, unreadable = finished_traces(partial)
    out = interrupted_folder(tmp_path, uninterrupted, partial)

    result = record(spec, out, "--resume")

    assert result.code == 0, result.stderr
    assert f"recorded {TRACES} traces ({TRACES} ok, 0 failed, {len(kept)} resumed)" in result.stdout
    assert_resumed_to(out, uninterrupted, kept)
    summary = json.loads((out / "summary.json").read_text())
    log = (out / "record.log").read_text()
    assert summary["resumed"] == len(kept) and summary["dropped_lines"] == torn + unreadable
    assert log.count("the last line is torn") == torn
    assert log.count("the line is dropped, and the trace it held is recorded again") == unreadable


def test_a_torn_last_line_is_cut_and_said_on_stderr(spec: Path, uninterrupted: Path, tmp_path: Path) -> None:
    lines = (uninterrupted / "traces.jsonl").read_bytes().splitlines(keepends=True)
    partial = lines[0] + lines[1][: len(lines[1]) // 2]
    out = interrupted_folder(tmp_path, uninterrupted, partial)
    proc = subprocess.run([*quiver_command(), "record", str(spec), "--output", str(out), "--quiet", "--resume"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    warning = f"{out / 'traces.jsonl.partial'}:2: the last line is torn ({len(lines[1]) // 2} bytes and no newline"
    assert warning in proc.stderr and warning in (out / "record.log").read_text()
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert_resumed_to(out, uninterrupted, {key(lines[0]): lines[0]})


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


@pytest.mark.parametrize("case", range(REAL_KILLS))
def test_a_real_sigkill_resumes_to_the_uninterrupted_corpus(
    case: int, spec: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    total = (uninterrupted / "traces.jsonl").stat().st_size
    grown_past = random.Random(1000 + case).randrange(total // 10, total * 2 // 3)
    out = tmp_path / "out"
    partial = out / "traces.jsonl.partial"
    proc = subprocess.Popen([*quiver_command(), "record", str(spec), "--output", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None and size(partial) <= grown_past:
            time.sleep(0.002)  # polling the file's size: the kill point is a size, not a time
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, "the recording finished before it could be killed"
    kept, _, unreadable = finished_traces(partial.read_bytes())
    assert not (out / "traces.jsonl").exists() and len(kept) < TRACES and unreadable == 0

    result = record(spec, out, "--resume")

    assert result.code == 0, result.stderr
    assert f"({TRACES} ok, 0 failed, {len(kept)} resumed)" in result.stdout
    assert_resumed_to(out, uninterrupted, kept)


# --------------------------------------------------------------------------- --retry-failed

FLAKY = '''
"""A one-call pipeline that fails, after its call, for the texts listed in failing.txt."""
from pathlib import Path

import quiver

FAILING = Path(__file__).with_name("failing.txt")
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"label": {"type": "string", "enum": ["keep", "drop"]}},
    "required": ["label"]}}}

quiver.template("flaky.answer", user="Keep or drop: {text}")


@quiver.node("answer", kind="llm")
def answer(text: str) -> dict:
    return quiver.llm().chat("flaky.answer", text=text, response_format=FORMAT, temperature=0.7).data


def run(text: str) -> dict:
    out = answer(text)
    if text in FAILING.read_text().split():
        raise RuntimeError(f"the service behind {text} is down")
    return out
'''


@pytest.fixture
def flaky(tmp_path: Path) -> tuple[Path, Path]:
    """A spec of the flaky pipeline (three inputs, two repeats) and its failing.txt."""
    (tmp_path / "flaky.py").write_text(FLAKY, encoding="utf-8")
    failing = tmp_path / "failing.txt"
    failing.write_text("", encoding="utf-8")
    spec = tmp_path / "flaky.yaml"
    spec.write_text(
        "pipeline: flaky.py:run\nllm: simulator\nrepeats: 2\nconcurrency: 2\nseed: 3\n"
        "inputs: [{id: a, text: alpha}, {id: b, text: bravo}, {id: c, text: charlie}]\n",
        encoding="utf-8",
    )
    return spec, failing


def statuses(path: Path) -> dict[tuple[str, int], str]:
    return {key(line): json.loads(line)["status"] for line in path.read_bytes().splitlines()}


def test_retry_failed_records_exactly_the_failed_traces_again(flaky: tuple[Path, Path], tmp_path: Path) -> None:
    spec, failing = flaky
    clean = record(spec, tmp_path / "clean")
    assert clean.code == 0, clean.stderr
    out = tmp_path / "out"
    corpus = out / "traces.jsonl"

    failing.write_text("bravo charlie")
    first = record(spec, out)
    assert first.code == 1 and "(2 ok, 4 failed, 0 resumed)" in first.stdout
    assert "4 trace(s) failed" in first.stderr and "--retry-failed` records them again" in first.stderr
    before = corpus.read_bytes()

    # a plain resume keeps failed traces as they are, and says how to retry them
    kept = record(spec, out, "--resume")
    assert kept.code == 1
    assert kept.stdout == (f"already complete: 6 traces in {corpus} (4 failed; `quiver record --retry-failed` "
                           "records them again); nothing to do\n")
    assert corpus.read_bytes() == before

    failing.write_text("charlie")
    second = record(spec, out, "--retry-failed")
    assert second.code == 1 and "(4 ok, 2 failed, 2 resumed, 4 retried)" in second.stdout
    assert statuses(corpus) == {("a", 0): "ok", ("a", 1): "ok", ("b", 0): "ok", ("b", 1): "ok",
                                ("c", 0): "failed", ("c", 1): "failed"}
    ok_before = [line for line in before.splitlines() if json.loads(line)["status"] == "ok"]
    assert ok_before == corpus.read_bytes().splitlines()[:2]  # the ok traces, byte for byte

    # killed while retrying: the partial file holds the corpus, its last line torn
    lines = corpus.read_bytes().splitlines(keepends=True)
    (out / "traces.jsonl.partial").write_bytes(b"".join(lines[:-1]) + lines[-1][:100])
    corpus.unlink()
    failing.write_text("")
    third = record(spec, out, "--retry-failed")
    assert third.code == 0, third.stderr
    assert "(6 ok, 0 failed, 4 resumed, 1 retried)" in third.stdout  # the torn one is recorded again too
    assert content(corpus) == content(tmp_path / "clean" / "traces.jsonl")
    assert json.loads((out / "summary.json").read_text())["dropped_lines"] == 1


# --------------------------------------------------------------------------- a finished corpus


def test_resuming_a_finished_recording_changes_nothing(spec: Path, uninterrupted: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    result = record(spec, out, "--resume")

    assert result.code == 0, result.stderr
    assert result.stdout == f"already complete: {TRACES} traces in {out / 'traces.jsonl'}; nothing to do\n"
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    log = after.pop("record.log")
    assert after == {k: v for k, v in before.items() if k != "record.log"}
    assert log.startswith(before["record.log"]) and b"nothing to do" in log[len(before["record.log"]):]


@pytest.mark.parametrize(
    ("held", "expected"),
    [("traces.jsonl", "already holds a corpus (traces.jsonl); use --resume to keep it (--retry-failed to record "
                      "its failed traces again), or another --output, or delete it"),
     ("traces.jsonl.partial", "holds an interrupted recording (traces.jsonl.partial); use --resume to finish it, "
                              "or another --output, or delete it")],
)
def test_recording_into_a_folder_that_holds_a_corpus_is_refused(
    held: str, expected: str, spec: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(uninterrupted / "traces.jsonl", out / held)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    result = record(spec, out)

    assert result.code == 2
    assert result.error_lines() == [f"quiver record: error: {out} {expected}"]
    assert result.stdout == "" and {p.name: p.read_bytes() for p in out.iterdir()} == before
