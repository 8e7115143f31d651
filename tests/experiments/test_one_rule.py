"""One rule per situation, the same for every command (the README's table).

Every command is checked against each rule that applies to it:

* **A bad line in a trace file** costs only itself: every command that reads a corpus
  (``validate``, ``analyze``, ``replay``, ``attribute``, ``diff``, ``compare``, and
  ``run`` and ``gate`` for their baseline, named ``baseline FILE:LINE``) names it once
  (``FILE:LINE: REASON; the line is skipped``), works on the other lines, and exits 1
  (done, with problems). A corpus in which no line reads is exit 2, one error line
  (``validate``, whose job is to list bad lines, exits 1). ``record --resume`` cuts a
  torn line of its partial file, names it once and records its trace again (exit 0:
  nothing is missing). ``report`` reads a run folder's JSON, not a corpus.
* **An output folder that holds a corpus or a campaign** is refused (exit 2, one line
  naming ``--resume`` and another ``--output``) by the commands that write one
  (``record``, ``run``); the commands that write their own files (``analyze --out``,
  ``replay --out``, ``gate --output``, ``compare --out``, ``attribute --out``,
  ``report``) replace them. ``validate`` and ``diff`` write nothing.
* **A finished corpus on ``--resume``** (``record``, ``run``, the commands that have a
  ``--resume``) is "already complete ... nothing to do", exit 0, every file unchanged.

``diff`` and ``compare`` still stop at a corpus's first bad line (exit 2): their cases
are marked as expected to fail (strictly: they fail the suite once the commands follow
the rule, so that the mark is taken off).

Every case is the real command line in this process (:func:`fuzzing.run_cli`: no
traceback, exit 2 with exactly one error line).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzing import CliResult, run_cli, tried

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "experiments" / "quickstart"
PIPELINE = f"{QUICKSTART / 'pipeline.py'}:run"
SIMULATOR = f"llm:\n  simulator:\n    models: [{QUICKSTART / 'sim_models.py'}]\n  model: quickstart-classify\n"
CAMPAIGN = ROOT / "experiments" / "specs" / "support_bot.yaml"
SUITE = "one rule per situation"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The record spec and the corpus it wrote: the quickstart on two tickets, two repeats."""
    folder = tmp_path_factory.mktemp("rules")
    tickets = (QUICKSTART / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    (folder / "inputs.jsonl").write_text("\n".join(tickets) + "\n", encoding="utf-8")
    spec = folder / "record.yaml"
    spec.write_text(
        f"pipeline: {PIPELINE}\nllm:\n  simulator:\n    models: [{QUICKSTART / 'sim_models.py'}]\n"
        "  model: quickstart-classify\ninputs: inputs.jsonl\nrepeats: 2\nseed: 5\n",
        encoding="utf-8",
    )
    result = run_cli(["record", str(spec), "--output", str(folder / "corpus"), "--quiet"], seconds=120)
    assert result.code == 0, result.stderr
    return spec, folder / "corpus"


@pytest.fixture(scope="module")
def hashing_embedder() -> Iterator[None]:
    """``quiver analyze`` embeds texts with a hash instead of a model."""
    import quiver._observational.profile as profile
    from quiver._distance.embed import FunctionEmbedder

    def vectors(texts: list[str]) -> Any:
        digests = [hashlib.sha256(t.encode("utf-8", "replace")).digest()[:16] for t in texts]
        return np.array([list(d) for d in digests], dtype=float).reshape(len(texts), 16)

    import quiver.experiments._campaign.run as campaign

    with pytest.MonkeyPatch.context() as mp:
        for module in (profile, campaign):  # the profile's embeddings, and those of a campaign's or gate's pairs
            mp.setattr(module, "make_embedder", lambda spec: FunctionEmbedder(vectors, name="rules-sha256"))
        yield


def _campaign(folder: Path, baseline: Path) -> Path:
    """A campaign spec over ``baseline`` (one override of the quickstart's classify, one
    replay a trace, no control; the gate: 2 probes, 1 repeat) into ``folder/run``, and a
    candidate template for the gate beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "candidate.txt").write_text("Triage the ticket; answer in JSON.\n---\nTicket: {ticket}\n",
                                          encoding="utf-8")
    spec = folder / "campaign.yaml"
    spec.write_text(
        f"pipeline: {PIPELINE}\n{SIMULATOR}baseline: {baseline}\n"
        "perturbations:\n  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}\n"
        "replay: {repeats: 1, controls: 0}\nanalysis: {resamples: 100, permutations: 100}\n"
        f"gate: {{probes: 2, repeats: 1}}\noutput: {folder / 'run'}\n", encoding="utf-8")
    return spec


READERS: dict[str, Any] = {
    "validate": lambda path, out, good, record: ["validate", str(path)],
    "analyze": lambda path, out, good, record: ["analyze", str(path), "--out", str(out), "--resamples", "20",
                                                "--no-plots", "--quiet"],
    "replay": lambda path, out, good, record: ["replay", str(path), "--pipeline", PIPELINE, "--check", "--quiet"],
    "run": lambda path, out, good, record: ["run", str(_campaign(out.parent / "spec", path)), "--output", str(out),
                                            "--quiet"],
    "gate": lambda path, out, good, record: ["gate", str(_campaign(out.parent / "spec", path)), "--output", str(out),
                                             "--candidate", f"classify={out.parent / 'spec' / 'candidate.txt'}",
                                             "--quiet"],
    "attribute": lambda path, out, good, record: ["attribute", str(path), "--spec", str(record), "--repeats", "1",
                                                  "--dimensions", "prompt", "--out", str(out)],
    "diff": lambda path, out, good, record: ["diff", str(path), "--resamples", "20"],
    "compare": lambda path, out, good, record: ["compare", str(good), str(path), "--out", str(out), "--resamples",
                                                "20"],
}
"""Every command that reads a corpus, as it is run on ``path`` (``out``: its output folder;
``good``: the whole corpus, which ``compare`` compares with; ``record``: the recording spec)."""

NOT_YET: set[str] = set()
"""Commands that still stop at a corpus's first bad line (exit 2)."""


def _reader(command: str) -> Any:
    """The command as a parameter, expected to fail while it does not follow the rule."""
    marks = [pytest.mark.xfail(strict=True, reason=f"quiver {command} stops at the first bad line")] \
        if command in NOT_YET else []
    return pytest.param(command, marks=marks)


def _argv(command: str, path: Path, out: Path, corpus: tuple[Path, Path]) -> list[str]:
    argv: list[str] = READERS[command](path, out, corpus[1] / "traces.jsonl", corpus[0])
    return argv


def _damaged(corpus: Path, folder: Path, how: str) -> tuple[Path, int]:
    """A copy of the corpus with its last line torn (``torn``), a line of garbage in the
    middle (``garbage``), or every line torn (``nothing``); and the line number named."""
    lines = (corpus / "traces.jsonl").read_bytes().splitlines(keepends=True)
    path = folder / f"{how}.jsonl"
    if how == "torn":
        path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
        return path, len(lines)
    if how == "garbage":
        path.write_bytes(b"".join(lines[:2]) + b"{not json\n" + b"".join(lines[2:]))
        return path, 3
    path.write_bytes(b"".join(line[:40] + b"\n" for line in lines))
    return path, 1


@pytest.mark.parametrize("command", [_reader(c) for c in sorted(READERS)])
@pytest.mark.parametrize("how", ["torn", "garbage"])
def test_a_bad_line_costs_only_itself_named_once_and_exit_1(
    command: str, how: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    path, line = _damaged(corpus[1], tmp_path, how)
    result = run_cli(_argv(command, path, tmp_path / "out", corpus), seconds=120)
    assert result.code == 1, result
    named = [m for m in result.stderr.splitlines() if f"{path}:" in m]
    assert len(named) == 1 and f"{path}:{line}: " in named[0], result.stderr
    if command != "validate":
        baseline = "baseline " if command in ("run", "gate") else ""
        assert named[0].startswith(f"quiver {command}: warning: {baseline}{path}:{line}: "), named[0]
        assert named[0].endswith("; the line is skipped"), named[0]
    assert "error" not in result.stderr.replace(named[0], "").lower(), result.stderr


def test_record_resume_cuts_a_torn_line_of_its_partial_file_names_it_once_and_records_it_again(
    corpus: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tried(SUITE)
    out = tmp_path / "out"
    out.mkdir()
    lines = (corpus[1] / "traces.jsonl").read_bytes().splitlines(keepends=True)
    partial = out / "traces.jsonl.partial"
    partial.write_bytes(b"".join(lines[:2]) + lines[2][:50])
    result = run_cli(["record", str(corpus[0]), "--output", str(out), "--quiet", "--resume"], seconds=120)
    assert result.code == 0, result
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]  # the log's warning, on stderr
    named = [m for m in [*said, *result.stderr.splitlines()] if f"{partial}:" in m]
    assert len(named) == 1 and f"{partial}:3: " in named[0] and "recorded again" in named[0], said
    assert "recorded 4 traces (4 ok, 0 failed, 2 resumed)" in result.stdout, result


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_corpus_in_which_no_line_reads_cannot_be_worked_on(
    command: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    path, _ = _damaged(corpus[1], tmp_path, "nothing")
    result = run_cli(_argv(command, path, tmp_path / "out", corpus), seconds=120)
    lines = (corpus[1] / "traces.jsonl").read_bytes().count(b"\n")
    if command in NOT_YET:  # exit 2 and one line, naming the first bad line (but not that none reads)
        assert result.code == 2, result
        (error,) = result.error_lines()
        assert f"{path}:1" in error, error
        return
    if command == "validate":  # it lists the bad lines: that is its work, done
        assert result.code == 1 and f"0 trace(s) valid, {lines} line(s) bad" in result.stdout, result
        return
    assert result.code == 2, result
    (error,) = result.error_lines()
    assert f"{path}: {lines} bad line(s), none that reads (the first: {path}:1: " in error, error


WRITERS = ("analyze", "replay", "gate", "compare", "attribute", "report")
"""The commands that write their own files into a folder they are given."""


def _writer(command: str, corpus: tuple[Path, Path], tmp_path: Path) -> tuple[list[str], Path]:
    """The command run on the whole corpus, and the folder it writes to."""
    traces, out = corpus[1] / "traces.jsonl", tmp_path / "out"
    if command == "replay":
        return ["replay", str(traces), "--pipeline", PIPELINE, "--check", "--out", str(out), "--quiet"], out
    if command == "report":  # the report of an analysis folder, written into it
        analyzed = run_cli(READERS["analyze"](traces, out, traces, corpus[0]), seconds=120)
        assert analyzed.code == 0, analyzed
        return ["report", str(out)], out
    return _argv(command, traces, out, corpus), out


@pytest.mark.parametrize("command", WRITERS)
def test_commands_that_write_their_own_files_replace_them_in_an_existing_folder(
    command: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    argv, out = _writer(command, corpus, tmp_path)
    first = run_cli(argv, seconds=120)
    assert first.code in (0, 1) and not first.error_lines(), first
    written = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    (out / "stranger.txt").write_text("not the command's\n", encoding="utf-8")
    again = run_cli(argv, seconds=120)
    assert again.code == first.code, again
    assert {p.relative_to(out) for p in out.rglob("*") if p.is_file()} == written | {Path("stranger.txt")}
    assert (out / "stranger.txt").read_text(encoding="utf-8") == "not the command's\n"


@pytest.mark.parametrize("leftover", ["traces.jsonl", "traces.jsonl.partial"])
def test_record_refuses_a_folder_that_holds_a_corpus_and_names_the_ways_out(
    leftover: str, corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    tried(SUITE)
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(corpus[1] / "traces.jsonl", out / leftover)
    result = run_cli(["record", str(corpus[0]), "--output", str(out), "--quiet"], seconds=120)
    assert result.code == 2, result
    (error,) = result.error_lines()
    assert str(out) in error and "--resume" in error and "--output" in error, error
    assert (out / leftover).read_bytes() == (corpus[1] / "traces.jsonl").read_bytes()


def test_run_refuses_a_folder_that_holds_a_campaign_and_names_the_ways_out(tmp_path: Path) -> None:
    tried(SUITE)
    out = tmp_path / "run"
    out.mkdir()
    (out / "ledger.sqlite").write_bytes(b"")
    result = run_cli(["run", str(CAMPAIGN), "--output", str(out), "--quiet"], seconds=120)
    assert result.code == 2, result
    (error,) = result.error_lines()
    assert str(out) in error and "--resume" in error and "--output" in error, error
    assert (out / "ledger.sqlite").read_bytes() == b""


def test_a_finished_corpus_on_resume_is_already_complete(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    tried(SUITE)
    out = tmp_path / "out"
    shutil.copytree(corpus[1], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "record.log"}
    result: CliResult = run_cli(["record", str(corpus[0]), "--output", str(out), "--quiet", "--resume"],
                                seconds=120)
    assert result.code == 0, result
    assert result.stdout.startswith("already complete: 4 traces in ") and "nothing to do" in result.stdout
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "record.log"} == before


def _files(folder: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_a_finished_campaign_on_resume_is_already_complete_and_touches_nothing(
    corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    spec = _campaign(tmp_path / "spec", corpus[1] / "traces.jsonl")
    out = tmp_path / "run"
    first = run_cli(["run", str(spec), "--output", str(out), "--quiet"], seconds=120)
    assert first.code == 0, first
    before = _files(out)
    again = run_cli(["run", str(spec), "--output", str(out), "--quiet", "--resume"], seconds=120)
    assert again.code == 0, again
    assert again.stdout == f"already complete: 4 replays in {out / 'ledger.sqlite'}; nothing to do\n", again
    assert _files(out) == before

    report = (out / "report.md").read_bytes()
    (out / "report.md").write_bytes(report[: len(report) // 2])  # a result file not whole: written again
    whole = run_cli(["run", str(spec), "--output", str(out), "--quiet", "--resume"], seconds=120)
    assert whole.code == 0 and "4 of 4 pairs (4 from the ledger" in whole.stdout, whole
    assert (out / "report.md").read_bytes() == report
