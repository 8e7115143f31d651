"""One rule per situation, the same for every command (the README's table).

* **A bad line in a trace file** costs only itself: every command that reads a corpus
  (``validate``, ``analyze``, ``replay``) names it once (``FILE:LINE: REASON``), works on
  the other lines, and exits 1 (done, with problems). A corpus in which no line reads is
  exit 2, one error line (``validate``, whose job is to list bad lines, exits 1).
* **An output folder that holds a corpus or a campaign** is refused (exit 2, one line
  naming ``--resume`` and another ``--output``) by the commands that write one
  (``record``, ``run``); ``analyze --out`` and ``replay --out`` replace their own files.
* **A finished corpus on ``--resume``** is "already complete ... nothing to do", exit 0.

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

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profile, "make_embedder", lambda spec: FunctionEmbedder(vectors, name="rules-sha256"))
        yield


READERS = {
    "validate": lambda path, out: ["validate", str(path)],
    "analyze": lambda path, out: ["analyze", str(path), "--out", str(out), "--resamples", "20", "--no-plots",
                                  "--quiet"],
    "replay": lambda path, out: ["replay", str(path), "--pipeline", PIPELINE, "--check", "--quiet"],
}
"""Every command that reads a corpus, as it is run on ``path`` (``out``: its output folder)."""


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


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize("how", ["torn", "garbage"])
def test_a_bad_line_costs_only_itself_named_once_and_exit_1(
    command: str, how: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    path, line = _damaged(corpus[1], tmp_path, how)
    result = run_cli(READERS[command](path, tmp_path / "out"), seconds=120)
    assert result.code == 1, result
    named = [m for m in result.stderr.splitlines() if f"{path}:" in m]
    assert len(named) == 1 and f"{path}:{line}: " in named[0], result.stderr
    if command != "validate":
        assert named[0].startswith(f"quiver {command}: warning: ") and named[0].endswith("; the line is skipped")
    assert "error" not in result.stderr.replace(named[0], ""), result.stderr


@pytest.mark.parametrize("command", sorted(READERS))
def test_a_corpus_in_which_no_line_reads_cannot_be_worked_on(
    command: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    path, _ = _damaged(corpus[1], tmp_path, "nothing")
    result = run_cli(READERS[command](path, tmp_path / "out"), seconds=120)
    lines = (corpus[1] / "traces.jsonl").read_bytes().count(b"\n")
    if command == "validate":  # it lists the bad lines: that is its work, done
        assert result.code == 1 and f"0 trace(s) valid, {lines} line(s) bad" in result.stdout, result
        return
    assert result.code == 2, result
    (error,) = result.error_lines()
    assert f"{path}: {lines} bad line(s), none that reads (the first: {path}:1: " in error, error


@pytest.mark.parametrize("command", ["analyze", "replay"])
def test_analyze_and_replay_replace_their_own_files_in_an_existing_out_folder(
    command: str, corpus: tuple[Path, Path], tmp_path: Path, hashing_embedder: None
) -> None:
    tried(SUITE)
    traces = corpus[1] / "traces.jsonl"
    out = tmp_path / "out"
    argv = (READERS["analyze"](traces, out) if command == "analyze"
            else ["replay", str(traces), "--pipeline", PIPELINE, "--check", "--out", str(out), "--quiet"])
    first = run_cli(argv, seconds=120)
    assert first.code == 0, first
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run_cli(argv, seconds=120)
    assert again.code == 0, again
    assert {p.name for p in out.iterdir()} == set(written)


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
