"""Ctrl-C (and SIGTERM) stops ``quiver record`` and ``quiver run`` cleanly.

The signal is sent as a terminal sends it: to the command's whole process group
(``os.killpg``), the simulator child included, once the command's trace file or ledger
holds a seeded number of rows. The simulator answers every call 300 ms late, so the
signal lands mid-run. Each command must then exit 130 within a few seconds, print how
much it kept (equal to what its file or ledger holds) and the ``--resume`` command; the
simulator must have served the calls in flight to the end (no connection error anywhere),
and the resume must finish to the uninterrupted result (the comparisons of
``test_record_resume`` and ``test_campaign_resume``). A second Ctrl-C exits at once,
still 130.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fuzzing import run_cli
from siblings import sibling

from quiver.experiments._campaign.stored import unpack_text

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "replay"))


_campaign_resume = sibling("test_campaign_resume", Path(__file__).parent)
_record_resume = sibling("test_record_resume", Path(__file__).parents[1] / "replay")
Campaign = _campaign_resume.Campaign
_copy_run, _same_as = _campaign_resume._copy_run, _campaign_resume._same_as
campaign, reference = _campaign_resume.campaign, _campaign_resume.reference  # fixtures, used by name
content, spec, uninterrupted = _record_resume.content, _record_resume.spec, _record_resume.uninterrupted

__all__ = ["campaign", "reference", "spec", "uninterrupted"]  # fixtures, used by name

SLOW = "    faults: {latency: {dist: constant, ms: 300}}\n"
"""Added under ``simulator:``: every call answered 300 ms late (the answers are the same)."""
EXIT_WITHIN_S = 20.0
"""A generous bound on the time from the signal to the exit (the rule is 5 s; the
machine running the tests may be loaded)."""
RUN_SECONDS = 180.0


def _quiver() -> list[str]:
    return [sys.executable, "-m", "quiver.experiments._cli"]


def _slow(spec_text: str) -> str:
    return re.sub(r"(\n    nondeterminism: [0-9.]+\n)", lambda m: m.group(1) + SLOW, spec_text, count=1)


def _interrupted(argv: list[str], rows: Callable[[], int], at: int, sig: signal.Signals = signal.SIGINT,
                 twice: bool = False) -> tuple[int, str, float]:
    """Run ``quiver ARGV`` in a session of its own; once ``rows()`` reaches ``at``, send
    ``sig`` to the whole group (twice: a second one right after). Returns the exit code,
    stderr and the seconds from the signal to the exit."""
    proc = subprocess.Popen([*_quiver(), *argv], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_SECONDS
        while rows() < at:
            assert proc.poll() is None, f"quiver {argv} ended before the signal: {proc.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, f"quiver {argv} never reached {at} rows"
            time.sleep(0.02)
        sent = time.monotonic()
        os.killpg(proc.pid, sig)
        if twice:
            os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _ledger_rows(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT count(*) FROM replays").fetchone()[0])
    except sqlite3.Error:
        return 0


def _no_connection_error(*texts: str) -> None:
    for text in texts:
        for word in ("Connection", "connection refused", "LLMUnavailable", "Traceback"):
            assert word not in text, text[-3000:]


# --------------------------------------------------------------------------- record


def test_ctrl_c_on_record_keeps_the_finished_traces_and_resume_finishes_them(
    spec: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    slow = spec.with_name("slow.yaml")  # beside it: the inputs file is relative
    slow.write_text(_slow(spec.read_text(encoding="utf-8")), encoding="utf-8")
    assert SLOW in slow.read_text()
    out = tmp_path / "out"
    partial = out / "traces.jsonl.partial"
    at = random.Random(1).randint(1, 3)

    code, err, seconds = _interrupted(["record", str(slow), "--output", str(out), "--quiet"],
                                      lambda: _lines(partial), at)

    print(f"record: exit {code} {seconds:.2f} s after SIGINT")
    assert code == 130, err
    assert seconds < EXIT_WITHIN_S
    said = re.search(r"interrupted: (\d+) of 6 traces written to (\S+); continue with: quiver record (\S+) "
                     r"--output (\S+) --resume", err)
    assert said is not None, err
    assert int(said.group(1)) == _lines(partial) >= at
    assert said.group(2) == str(partial)
    assert err.count("\n") == 1, err  # --quiet: the one line
    kept = partial.read_bytes()
    traces = [json.loads(line) for line in kept.splitlines()]
    assert all(t["status"] == "ok" for t in traces)
    _no_connection_error(err, (out / "record.log").read_text())

    done = run_cli(["record", str(spec), "--output", str(out), "--quiet", "--resume"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stderr
    assert f"{len(traces)} resumed" in done.stdout
    assert content(out / "traces.jsonl") == content(uninterrupted / "traces.jsonl")
    finished = (out / "traces.jsonl").read_bytes().splitlines(keepends=True)
    assert all(line in finished for line in kept.splitlines(keepends=True))


# --------------------------------------------------------------------------- run


def _spec(campaign: Campaign, folder: Path, *, slow: bool) -> Path:
    path = campaign.spec(folder)
    if slow:
        path = path.with_name("slow.yaml")
        path.write_text(_slow(campaign.spec(folder).read_text(encoding="utf-8")), encoding="utf-8")
        assert SLOW in path.read_text()
    return path


def _said_committed(err: str, spec: Path, out: Path) -> int:
    said = re.search(rf"quiver run: interrupted: (\d+) of 16 replays committed to {re.escape(str(out))}"
                     rf"/ledger.sqlite; continue with: quiver run {re.escape(str(spec))} "
                     rf"--output {re.escape(str(out))} --resume\n", err)
    assert said is not None, err[-3000:]
    return int(said.group(1))


def test_sigint_then_sigterm_on_run_commit_what_finished_and_resume_finishes_it(
    campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    """SIGINT once the ledger holds a seeded number of rows; the resume is stopped by
    SIGTERM a few rows later; the last resume finishes to the uninterrupted result."""
    slow = _spec(campaign, tmp_path, slow=True)
    out = tmp_path / "run"
    _copy_run(reference, out, ledger=False, results=False)
    ledger = out / "ledger.sqlite"
    rng = random.Random(7)
    committed = 0
    for step, sig in enumerate((signal.SIGINT, signal.SIGTERM)):
        at = committed + rng.randint(1, 3)
        argv = ["run", str(slow), "--output", str(out), "--quiet"] + (["--resume"] if step else [])
        code, err, seconds = _interrupted(argv, lambda: _ledger_rows(ledger), at, sig)
        print(f"run: exit {code} {seconds:.2f} s after {sig.name}")
        assert code == 130, err[-3000:]
        assert seconds < EXIT_WITHIN_S
        committed = _said_committed(err, slow, out)
        assert committed == _ledger_rows(ledger) >= at
        assert committed < 16, "the campaign finished before the signal"
        _no_connection_error(err)
        with sqlite3.connect(str(ledger)) as db:
            assert not [d for (d,) in db.execute("SELECT CAST(data AS BLOB) FROM replays")
                        if "error" in json.loads(unpack_text(d))]

    done = run_cli(["run", str(_spec(campaign, tmp_path, slow=False)), "--output", str(out), "--quiet", "--resume"],
                   seconds=RUN_SECONDS)
    assert done.code == 0, done.stderr
    assert f"({committed} from the ledger; ok 16)" in done.stdout
    _same_as(reference, out)


def test_a_second_ctrl_c_exits_at_once_with_130(spec: Path, tmp_path: Path) -> None:
    slow = spec.with_name("slow.yaml")
    slow.write_text(_slow(spec.read_text(encoding="utf-8")), encoding="utf-8")
    out = tmp_path / "out"
    code, err, seconds = _interrupted(["record", str(slow), "--output", str(out), "--quiet"],
                                      lambda: _lines(out / "traces.jsonl.partial"), 1, twice=True)
    print(f"record: exit {code} {seconds:.2f} s after two SIGINTs")
    assert code == 130, err[-3000:]
    assert seconds < EXIT_WITHIN_S
    assert "Traceback" not in err
    assert "quiver record: interrupted" in err
