"""``quiver run --resume`` always finishes, and never reuses stale or damaged work.

A small support-bot campaign (six inputs recorded twice, four traces sampled per
perturbation, an override and a prompt swap, their two controls: 16 replays, downstream
served from the run's response cache) is run once without interruption: the
*reference*. Then:

* **Kill points** (seeded): a real ``quiver run`` subprocess SIGKILLed once its ledger
  (database and WAL) has grown past a seeded byte size, again and again on each resume;
  SIGKILLed once a final file (``pairs.jsonl``, ``campaign.json``, ``report.md``) has
  reached a seeded byte offset; and the states a kill in the final writes can leave,
  built directly (a final file cut at a seeded byte, or its ``.tmp`` left behind). Every
  resume finishes, and its ``campaign.json`` and ``pairs.jsonl`` are byte for byte the
  reference's (nothing in them depends on time or on where the run folder is).
* ``--retry-failed``: replays that failed (a pipeline that raises on marked messages,
  a worker that dies on some jobs, while a marker file is there) are kept by
  ``--resume``, which says so; ``--retry-failed`` runs exactly those again and gives
  the reference.
* A perturbation edited under the same id (its params, the variant file it reads, the
  pipeline's code) is refused on resume: one line, exit 2. A ledger written before
  identities were kept resumes, with a warning.
* A bad baseline line costs only itself (one warning naming ``baseline FILE:LINE``, the
  rest replayed, exit 1) and is skipped the same way on resume; a line that read when
  the replays were made and is garbled now is named on resume and refused, not blamed
  on the spec. A resume of a finished campaign touches nothing.
* A damaged ledger (truncated, bytes flipped, header overwritten, a row of bad JSON or
  without a key) is one line, exit 2, naming the file; moved aside, ``--resume`` runs
  its replays again to the reference.

Every resume after the first observational phase finds the profile's plots drawn
already (the run folder's ``observational/`` is the reference's, as a kill after that
phase leaves it), so each subprocess pays only for its start and its replays.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, CliResult, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver.experiments._campaign.stored import unpack_text
from quiver.replay import LocalExecutor, executor

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "experiments" / "support_bot"
RESULTS = ("pairs.jsonl", "replays.jsonl", "campaign.json", "report.md", "summary.json")
"""What a campaign writes once every replay is in its ledger."""
SAME = ("campaign.json", "pairs.jsonl", "report.md")
"""What every resume must write byte for byte as the reference did (``report.md`` ends
with the observational report, which names its own run time: every run here keeps the
reference's, as a resume after the observational phase does)."""
LEDGER_CHAINS = (3, 5)
"""Seeds of the kill chains on the ledger writer."""
KILLS_PER_CHAIN = 4
LEDGER_STEP = 48 * 1024
"""A chain's next kill fires once the ledger has grown by up to this many bytes more."""
CUT_STATES = 13
"""Seeded states of the final files as a kill in their writing leaves them."""
RUN_SECONDS = 180.0
"""The longest one in-process resume may take on a loaded 2-core machine."""


def _quiver() -> list[str]:
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


SPEC = """\
pipeline: {pipeline}
name: support_bot
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.15
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
{source}
graph: {demo}/graph.yaml
select: {{mode: sample, n: 4, seed: 3}}
perturbations:
  - id: cs-override
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variant: rewriter_terse.txt}}
replay: {{repeats: 1, controls: 1, downstream: live}}
executor: {{{executor}}}
analysis: {{resamples: 100, permutations: 100, cache_dir: {embeddings}}}
output: {output}
"""


class Campaign:
    """The module's corpus and embedding cache, and specs that run on them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.baseline = root / "baseline.jsonl"
        self.embeddings = root / "embeddings"

    def spec(self, folder: Path, *, pipeline: str | None = None, executor: str = "kind: local, concurrency: 2",
             recorded: bool = False) -> Path:
        """``folder/campaign.yaml`` (output ``folder/run``) and its variant file; with
        ``recorded``, the spec records its baseline into the run folder instead."""
        folder.mkdir(parents=True, exist_ok=True)
        variant = folder / "rewriter_terse.txt"
        if not variant.exists():
            shutil.copyfile(DEMO / "prompts" / "rewriter_terse.txt", variant)
        source = f"inputs: {self.root / 'inputs.jsonl'}\nrepeats: 2" if recorded else f"baseline: {self.baseline}"
        path = folder / "campaign.yaml"
        path.write_text(SPEC.format(pipeline=pipeline or f"{DEMO / 'pipeline.py'}:run", demo=DEMO, source=source,
                                    executor=executor, embeddings=self.embeddings, output=folder / "run"),
                        encoding="utf-8")
        return path


@pytest.fixture(scope="session")  # shared with the interrupt tests
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    """Six support-bot messages recorded twice each (the baseline every spec replays)."""
    root = tmp_path_factory.mktemp("campaign")
    lines = (DEMO / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[4::12]
    (root / "inputs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    record = root / "record.yaml"
    record.write_text(
        f"pipeline: {DEMO / 'pipeline.py'}:run\nname: support_bot\n"
        f"llm:\n  simulator:\n    models: [{DEMO / 'sim_models.py'}]\n    nondeterminism: 0.15\n"
        "  model: support-bot-planner\n  params: {temperature: 0, seed: 42}\n"
        f"inputs: inputs.jsonl\nrepeats: 2\nconcurrency: 4\nseed: 0\noutput: {root / 'recorded'}\n",
        encoding="utf-8",
    )
    done = run_cli(["record", str(record), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stderr
    shutil.copyfile(root / "recorded" / "traces.jsonl", root / "baseline.jsonl")
    return Campaign(root)


@pytest.fixture(scope="session")  # shared with the interrupt tests
def reference(campaign: Campaign) -> Path:
    """The campaign run once, uninterrupted: what every resume must give."""
    spec = campaign.spec(campaign.root / "reference")
    done = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    out = spec.parent / "run"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["jobs"] == 16 and summary["status"] == {"ok": 16}
    return out


# --------------------------------------------------------------------------- helpers


def _copy_run(reference: Path, out: Path, *, ledger: bool = True, results: bool = True) -> None:
    """The reference's run folder at ``out``: with or without its ledger and final files."""
    skip = set() if results else {*RESULTS, *(f"{name}.tmp" for name in RESULTS)}
    if not ledger:
        skip |= {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "cache"}
    shutil.copytree(reference, out, ignore=lambda folder, names: [n for n in names if n in skip]
                    if Path(folder) == reference else [])


def _same_as(reference: Path, out: Path) -> None:
    for name in SAME:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["done"] == summary["jobs"] == 16


def _resume(spec: Path, *extra: str) -> CliResult:
    return run_cli(["run", str(spec), "--resume", "--quiet", *extra], seconds=RUN_SECONDS)


def _size(*paths: Path) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            pass
    return total


def _ledger_bytes(out: Path) -> int:
    return _size(out / "ledger.sqlite", out / "ledger.sqlite-wal")


def _text(stored: str | bytes) -> str:
    """A ledger row's JSON text (rows are stored compressed where that pays)."""
    return stored if isinstance(stored, str) else unpack_text(stored).decode("utf-8")


def _rows(out: Path) -> dict[str, str]:
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        return {job_id: _text(data) for job_id, data in db.execute("SELECT job_id, data FROM replays")}


def _killed_when(spec: Path, fired: Callable[[], bool]) -> bool:
    """Run ``quiver run SPEC --resume`` in a subprocess, polling ``fired`` every few
    milliseconds while it runs; SIGKILL it the first time ``fired`` is true. Returns
    whether it was killed (else it finished, and must have finished well)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*_quiver(), "run", str(spec), "--resume", "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + RUN_SECONDS
        try:
            while time.monotonic() < deadline:
                try:
                    proc.wait(timeout=0.002)
                except subprocess.TimeoutExpired:
                    if fired():
                        os.kill(proc.pid, signal.SIGKILL)
                        proc.wait()
                        return True
                    continue
                err.seek(0)
                assert proc.returncode == 0, err.read().decode(errors="replace")[-3000:]
                return False
            pytest.fail("the campaign neither finished nor reached its kill point")
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


# --------------------------------------------------------------------------- kill points


@pytest.mark.parametrize("seed", LEDGER_CHAINS)
def test_killed_again_and_again_as_the_ledger_grows_each_resume_finishes_to_the_same_result(
    campaign: Campaign, reference: Path, tmp_path: Path, seed: int
) -> None:
    """A chain of real SIGKILLs: each run (the first, then every resume) is killed once
    the ledger has grown by a seeded number of bytes since it started; then one resume
    runs to the end."""
    rng = random.Random(seed)
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out, ledger=False, results=False)
    kills = 0
    for _ in range(KILLS_PER_CHAIN):
        grown_past = _ledger_bytes(out) + rng.randint(1, LEDGER_STEP)
        if not _killed_when(spec, lambda: _ledger_bytes(out) >= grown_past):  # noqa: B023 (called in this turn)
            break
        kills += 1
        tried("campaign kill points")
    assert kills >= 1, "the first run finished before its ledger grew past the kill point"
    done = _resume(spec)
    assert done.code == 0, done.stderr
    _same_as(reference, out)


@pytest.mark.parametrize("name", ["pairs.jsonl", "campaign.json", "report.md"])
def test_killed_as_a_final_file_reaches_a_byte_offset_the_resume_writes_it_again(
    campaign: Campaign, reference: Path, tmp_path: Path, name: str
) -> None:
    """Every replay in the ledger; a real ``quiver run --resume`` pairs them and writes
    the results, and is SIGKILLed once ``name`` (or the ``.tmp`` it is written to) has
    reached a seeded byte offset. The next resume finishes to the same files."""
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out, results=False)
    offset = random.Random(name).randint(1, _size(reference / name))
    if _killed_when(spec, lambda: _size(out / name, out / f"{name}.tmp") >= offset):
        tried("campaign kill points")
    done = _resume(spec)
    assert done.code == 0, done.stderr
    _same_as(reference, out)


@pytest.mark.parametrize("state", range(CUT_STATES))
def test_final_files_cut_at_a_byte_are_written_again_whole(
    campaign: Campaign, reference: Path, tmp_path: Path, state: int
) -> None:
    """What a kill in the final writes can leave, built directly: each final file whole,
    missing, cut at a seeded byte (a kill mid-write of a file written in place), or
    missing with a ``.tmp`` cut at a seeded byte beside it (a kill before it replaced
    the file). ``--resume`` writes every one of them again."""
    rng = random.Random(1000 + state)
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out)
    for name in RESULTS:
        data = (out / name).read_bytes()
        cut = data[:rng.randrange(len(data))]
        how = rng.choice(["whole", "missing", "cut", "tmp"] if state else ["cut"])
        if how == "cut":
            (out / name).write_bytes(cut)
        elif how in ("missing", "tmp"):
            (out / name).unlink()
        if how == "tmp":
            (out / f"{name}.tmp").write_bytes(cut)
    tried("campaign kill points")
    done = _resume(spec)
    assert done.code == 0, done.stderr
    _same_as(reference, out)
    assert not [p.name for p in out.glob("*.tmp")]


# --------------------------------------------------------------------------- --retry-failed

FLAKY = '''\
"""The support bot, failing on messages that mention boards while a marker file is there."""
from pathlib import Path

from quiver.replay import load_pipeline

_run = load_pipeline("{pipeline}:run")
MARKER = Path(__file__).with_name("failing")


def run(message, account_id, history=None):
    if MARKER.exists() and "board" in message:
        raise RuntimeError("a marked message fails while the marker is there")
    return _run(message=message, account_id=account_id, history=history)
'''


@executor("dying-workers")
class DyingWorkers(LocalExecutor):
    """The local executor, whose worker dies on every third job (the job's replay is an
    error) while the marker file of its ``options`` is there."""

    def __init__(self, concurrency: int, marker: Path) -> None:
        super().__init__(concurrency)
        self.marker = marker

    @classmethod
    def from_settings(cls, settings: Any) -> DyingWorkers:
        return cls(int(settings.get("concurrency") or 2), Path(settings["options"]["marker"]))

    def run(self, context: Any, jobs: Sequence[Any], on_done: Any, should_stop: Any) -> None:
        seq = {job.job_id: job.seq for job in jobs}

        def reported(job_id: str, data: dict[str, Any]) -> None:
            if self.marker.exists() and seq[job_id] % 3 == 0:
                data = {"error": "worker failed: WorkerCrashedError: the worker died"}
            on_done(job_id, data)

        super().run(context, jobs, reported, should_stop)


def test_retry_failed_runs_exactly_the_failed_replays_again_to_the_uninterrupted_result(
    campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY.format(pipeline=DEMO / "pipeline.py"), encoding="utf-8")
    marker = tmp_path / "failing"
    marker.touch()
    spec = campaign.spec(tmp_path, pipeline=f"{tmp_path / 'flaky.py'}:run",
                         executor=f"kind: dying-workers, concurrency: 2, options: {{marker: {marker}}}")
    # the pipeline fails on purpose while the marker is there: the fidelity check would stop
    # the run before the failed replays this test is about
    spec.write_text(spec.read_text(encoding="utf-8") + "fidelity: {per_group: 0}\n", encoding="utf-8")
    out = tmp_path / "run"
    _copy_run(reference, out, ledger=False, results=False)
    first = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert first.code == 1, first.stderr
    rows = {job_id: json.loads(data) for job_id, data in _rows(out).items()}
    errors = {j for j, d in rows.items() if "error" in d}
    raised = {j for j, d in rows.items() if "error" not in d and d["trace_status"] == "failed"}
    assert errors and raised and len(rows) == 16  # both kinds of failure, and the rest ok

    (out / "campaign.json").unlink()  # not finished: the resume writes the results again
    kept = _resume(spec)
    assert kept.code == 1
    assert f"{len(errors | raised)} failed replay(s) from the ledger kept as they are" in kept.stderr
    assert "--retry-failed" in kept.stderr
    assert json.loads((out / "summary.json").read_text())["status"]["failed"] == len(errors | raised)
    finished = _resume(spec)  # finished: the failures said again, nothing touched
    assert finished.code == 1
    assert finished.stdout == (f"already complete: 16 replays in {out / 'ledger.sqlite'} ({len(errors | raised)} "
                               f"failed: `quiver run {spec} --retry-failed` runs them again); nothing to do\n")

    marker.unlink()
    retried = _resume(spec, "--retry-failed")
    assert retried.code == 0, retried.stderr
    assert f"{len(errors | raised)} failed run again" in retried.stdout
    _same_as(reference, out)
    again = {job_id: json.loads(data) for job_id, data in _rows(out).items()}
    assert {j: again[j] for j in rows if j not in errors | raised} == {
        j: d for j, d in rows.items() if j not in errors | raised}  # the rest kept as they were


# --------------------------------------------------------------------------- identities


@pytest.mark.parametrize("edit", ["params", "variant", "pipeline"])
def test_a_perturbation_edited_under_the_same_id_is_refused_on_resume(
    campaign: Campaign, reference: Path, tmp_path: Path, edit: str
) -> None:
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out)
    if edit == "params":
        spec.write_text(spec.read_text().replace("sufficient: true", "sufficient: false"), encoding="utf-8")
        named, change = "'cs-override'", "params[0].set.sufficient: true -> false"
    elif edit == "variant":
        variant = tmp_path / "rewriter_terse.txt"
        variant.write_text(variant.read_text() + "Answer in one line.\n", encoding="utf-8")
        named, change = "'rewriter-swap'", "the contents of rewriter_terse.txt changed"
    else:
        wrapper = tmp_path / "flaky.py"  # another function in another file, the same answers
        wrapper.write_text(FLAKY.format(pipeline=DEMO / "pipeline.py"), encoding="utf-8")
        spec.write_text(spec.read_text().replace(f"{DEMO / 'pipeline.py'}:run", f"{wrapper}:run"), encoding="utf-8")
        named, change = "'cs-override'", f"the pipeline's source file {wrapper} changed"
    before = _rows(out)
    refused = _resume(spec)
    assert refused.code == 2, refused.stdout + refused.stderr
    line = refused.error_lines()[0]
    assert named in line and change in line, line
    assert str(out / "ledger.sqlite") in line and "--output" in line and "aside" in line
    assert _rows(out) == before  # nothing reused, nothing removed


def test_a_perturbation_edited_before_any_of_its_replays_was_kept_takes_its_new_identity(
    campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    """Killed before the prompt swap's first replay was committed, then its variant
    edited: nothing stale to reuse, so the resume runs it with the new variant."""
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out, results=False)
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        db.execute("DELETE FROM replays WHERE job_id LIKE 'rewriter-swap/%'")
    variant = tmp_path / "rewriter_terse.txt"
    variant.write_text(variant.read_text() + "Answer in one line.\n", encoding="utf-8")
    done = _resume(spec)
    assert done.code == 0, done.stderr
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        stored = json.loads(db.execute("SELECT identity FROM identities WHERE perturbation = 'rewriter-swap'")
                            .fetchone()[0])
    assert stored["files"] == {"rewriter_terse.txt": hashlib.sha256(variant.read_bytes()).hexdigest()}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("  - id: rewriter-swap", "  - id: rewriter-swap-off"),
         "holds replays of control 'control.rewriter.0.live', which the spec no longer makes: put it back"),
        (("n: 4, seed: 3", "n: 3, seed: 3"), "which this spec does not make (fewer steps, repeats or selected traces"),
    ],
    ids=["a perturbation taken out", "fewer traces selected"],
)
def test_replays_of_jobs_the_spec_no_longer_makes_are_refused_naming_what_is_gone(
    campaign: Campaign, reference: Path, tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    spec = campaign.spec(tmp_path)
    _copy_run(reference, tmp_path / "run")
    text = spec.read_text()
    if edit[0].startswith("  - id: rewriter-swap"):  # the whole perturbation taken out
        text = text[:text.index(edit[0])] + text[text.index("replay:"):]
    else:
        text = text.replace(*edit)
    spec.write_text(text, encoding="utf-8")
    refused = _resume(spec)
    assert refused.code == 2, refused.stdout + refused.stderr
    assert message in refused.error_lines()[0] and "--output" in refused.error_lines()[0]


def test_a_ledger_from_before_identities_resumes_with_a_warning(
    campaign: Campaign, reference: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The choice for ledgers written before identities were kept: resume (their replays
    are taken as made with the spec as it is), say so, and keep identities from then on."""
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out)  # replays.jsonl and pairs.jsonl hold the replays the ledger points at
    (out / "campaign.json").unlink()  # not finished: the results are written again
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        db.execute("DROP TABLE identities")
        db.execute("ALTER TABLE replays DROP COLUMN crc")
        db.execute("ALTER TABLE replays DROP COLUMN failed")
    done = _resume(spec)
    assert done.code == 0, done.stderr
    assert "written before the ledger kept what each perturbation's replays were made with" in caplog.text
    _same_as(reference, out)
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        kept = {r[0] for r in db.execute("SELECT perturbation FROM identities")}
    assert {"cs-override", "rewriter-swap"} <= kept


# --------------------------------------------------------------------------- the baseline


def test_a_recorded_baseline_line_garbled_after_its_replays_were_made_is_named_and_refused_on_resume(
    campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    """The bad line costs only itself (one warning naming it), but the ledger's replays
    were made with it read: the resume refuses, naming the line, not the spec."""
    spec = campaign.spec(tmp_path, recorded=True)
    out = tmp_path / "run"
    _copy_run(reference, out)
    (out / "baseline").mkdir()
    lines = campaign.baseline.read_text(encoding="utf-8").splitlines(keepends=True)
    traces = out / "baseline" / "traces.jsonl"
    traces.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2] + "\n" + "".join(lines[3:]),
                      encoding="utf-8")
    refused = _resume(spec)
    assert refused.code == 2
    (line,) = refused.error_lines()
    assert f"baseline {traces}:3: " in line and "restore that line" in line and "--output" in line, line
    assert "spec edited" not in line
    warned = [w for w in refused.stderr.splitlines() if w.startswith("quiver run: warning: ")]
    assert len(warned) == 1 and warned[0].startswith(f"quiver run: warning: baseline {traces}:3: "), refused.stderr
    assert warned[0].endswith("; the line is skipped")
    traces.write_text("".join(lines), encoding="utf-8")  # the way out: the line restored
    done = _resume(spec)
    assert done.code == 0, done.stderr
    _same_as(reference, out)


def test_a_bad_line_of_the_spec_s_baseline_costs_only_itself_the_same_way_on_resume(
    campaign: Campaign, tmp_path: Path
) -> None:
    """A garbled line of the spec's baseline file: one warning naming it, the campaign
    runs on the other traces, exit 1. A resume skips it the same way (the same traces,
    so the ledger's replays are taken) and writes the same results; a resume of the
    finished campaign touches nothing."""
    garbled = tmp_path / "baseline.jsonl"
    lines = campaign.baseline.read_text(encoding="utf-8").splitlines(keepends=True)
    garbled.write_text("".join(lines[:5]) + "{not json\n" + "".join(lines[5:]), encoding="utf-8")
    spec = campaign.spec(tmp_path)
    spec.write_text(spec.read_text().replace(str(campaign.baseline), str(garbled)), encoding="utf-8")
    out = tmp_path / "run"
    first = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert first.code == 1, first.stdout + first.stderr
    named = [m for m in first.stderr.splitlines() if f"{garbled}:" in m]
    assert len(named) == 1 and named[0].startswith(f"quiver run: warning: baseline {garbled}:6: "), first.stderr
    assert named[0].endswith("; the line is skipped") and "16 of 16 pairs" in first.stdout
    written = {name: (out / name).read_bytes() for name in SAME}

    (out / "campaign.json").unlink()  # as a kill in the final writes leaves it
    again = _resume(spec)
    assert again.code == 1, again.stdout + again.stderr
    assert "(16 from the ledger; ok 16)" in again.stdout and f"{garbled}:6: " in again.stderr
    assert {name: (out / name).read_bytes() for name in SAME} == written

    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}
    complete = _resume(spec)
    assert complete.code == 1, complete.stdout + complete.stderr  # the line is still skipped
    assert complete.stdout == (f"already complete: 16 replays in {out / 'ledger.sqlite'} (1 bad baseline line(s) "
                               "skipped); nothing to do\n")
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()} == before


# --------------------------------------------------------------------------- a damaged ledger


def _row_spans(data: bytes, texts: list[str | bytes]) -> list[tuple[int, int]]:
    """Where each row's stored bytes start in the file, and how far they run in its page."""
    spans = []
    for text in texts:
        head = (text.encode() if isinstance(text, str) else text)[:200]
        at = data.find(head)
        if at >= 0:
            spans.append((at, len(head)))
    return spans


def _damage(ledger: Path, pristine: bytes, texts: list[str | bytes], kind: str,
            pick: Callable[[int, int], int]) -> None:
    """``ledger`` as ``pristine`` damaged one way; ``pick(lo, hi)`` draws every seeded
    detail (an integer in ``[lo, hi]``)."""
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    data = bytearray(pristine)
    if kind == "truncated":
        data = data[:pick(1, len(data) - 1)]
    elif kind == "flipped":  # a byte of a row's text, where its CRC covers it
        spans = _row_spans(pristine, texts)
        at, length = spans[pick(0, len(spans) - 1)]
        data[at + pick(0, length - 1)] ^= pick(1, 255)
    elif kind == "header":  # overwritten from a byte of SQLite's magic string on
        start = pick(0, 15)
        junk = bytes(pick(0, 255) for _ in range(pick(1, 100 - start)))
        if junk[0] == data[start]:
            junk = bytes([junk[0] ^ 0xFF]) + junk[1:]
        data[start:start + len(junk)] = junk
    ledger.write_bytes(bytes(data))
    if kind.startswith(("bad JSON", "missing key")):
        with sqlite3.connect(str(ledger)) as db:
            job_id, stored = db.execute("SELECT job_id, data FROM replays ORDER BY seq LIMIT 1 OFFSET ?",
                                        (pick(0, len(texts) - 1),)).fetchone()
            text = _text(stored)
            if kind.startswith("bad JSON"):
                new = text[:pick(0, len(text) - 1)]
            else:
                row = json.loads(text)
                keys = sorted(k for k in row if k in ("trace", "trace_delta", "perturbation_id", "repeat",
                                                      "divergences", "seconds"))
                del row[keys[pick(0, len(keys) - 1)]]
                new = json.dumps(row, sort_keys=True)
            if kind.endswith("CRC kept"):  # the text changed under its checksum
                db.execute("UPDATE replays SET data = ? WHERE job_id = ?", (new, job_id))
            else:  # as written with its checksum: only reading the row finds it wrong
                db.execute("UPDATE replays SET data = ?, crc = ? WHERE job_id = ?",
                           (new, zlib.crc32(new.encode()), job_id))


def _refused_as_damaged(spec: Path, ledger: Path) -> None:
    refused = _resume(spec)
    assert refused.code == 2, refused.stdout + refused.stderr
    line = refused.error_lines()[0]
    assert str(ledger) in line and "damaged" in line and "move it aside" in line and "--resume" in line, line


@pytest.fixture(scope="module")
def damaged_folder(campaign: Campaign, reference: Path, simulator: Any,
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the reference's folder whose ledger the fuzz cases damage in turn. Its
    spec names the session's simulator as an endpoint (``base_url``): a resume refused
    for its ledger makes no call, and so each case does not start a simulator of its own."""
    folder = tmp_path_factory.mktemp("damaged")
    spec = campaign.spec(folder)
    block = f"  simulator:\n    models: [{DEMO}/sim_models.py]\n    nondeterminism: 0.15\n"
    text = spec.read_text(encoding="utf-8")
    assert block in text
    spec.write_text(text.replace(block, f"  base_url: {simulator.url}\n"), encoding="utf-8")
    _copy_run(reference, folder / "run")
    return folder


FAST_KINDS = ["truncated", "flipped", "header", "bad JSON, CRC kept", "missing key, CRC kept"]
"""Damage found when the ledger is opened (SQLite's check, the rows' CRCs)."""


@settings(parent=FUZZ, max_examples=150)
@given(kind=st.sampled_from(FAST_KINDS), data=st.data())
def test_a_damaged_ledger_is_one_line_naming_it(damaged_folder: Path, kind: str, data: st.DataObject) -> None:
    tried("ledgers")
    ledger = damaged_folder / "run" / "ledger.sqlite"
    pristine, texts = _pristine(damaged_folder)
    _damage(ledger, pristine, texts, kind, lambda lo, hi: data.draw(st.integers(lo, hi)))
    _refused_as_damaged(damaged_folder / "campaign.yaml", ledger)


_PRISTINE: dict[Path, tuple[bytes, list[str]]] = {}


def _pristine(folder: Path) -> tuple[bytes, list[str]]:
    """The folder's ledger as the reference wrote it, and its rows' texts (read once)."""
    if folder not in _PRISTINE:
        ledger = folder / "run" / "ledger.sqlite"
        with sqlite3.connect(str(ledger)) as db:
            texts = [r[0] for r in db.execute("SELECT data FROM replays ORDER BY seq")]
        _PRISTINE[folder] = (ledger.read_bytes(), texts)
    return _PRISTINE[folder]


@pytest.mark.parametrize("kind", ["truncated", "flipped", "header", "bad JSON", "missing key"])
def test_a_damaged_ledger_moved_aside_resumes_to_the_same_result(
    campaign: Campaign, reference: Path, tmp_path: Path, kind: str
) -> None:
    """Each kind of damage, once (``bad JSON`` and ``missing key`` with a CRC that matches:
    found when the row is read for pairing); then the way out the message gives."""
    spec = campaign.spec(tmp_path)
    out = tmp_path / "run"
    _copy_run(reference, out, results=False)
    ledger = out / "ledger.sqlite"
    with sqlite3.connect(str(ledger)) as db:
        texts = [r[0] for r in db.execute("SELECT data FROM replays ORDER BY seq")]
    _damage(ledger, ledger.read_bytes(), texts, kind, random.Random(kind).randint)
    tried("ledgers")
    _refused_as_damaged(spec, ledger)
    ledger.rename(out / "ledger.sqlite.damaged")
    done = _resume(spec)
    assert done.code == 0, done.stderr
    _same_as(reference, out)
