"""An LLM endpoint that dies mid-run is noticed within seconds, and costs nothing.

The endpoint is the simulator the command starts itself (``llm: simulator:``), which
answers every call 100 ms late so that a kill lands mid-run. It is SIGKILLed once the
campaign's ledger (or the recording's partial file) holds a given number of rows; the
command must then exit 2 on its own with one line naming the endpoint and the
``--resume`` command, having committed nothing as failed because of it (the ledger
holds only replays that finished, the partial file only traces that finished). The
resume, which starts a new simulator, must give the uninterrupted result: the campaign
of ``test_campaign_resume`` (its ``campaign.json``, ``pairs.jsonl`` and ``report.md``
byte for byte) after kills at three points of its replays, and the corpus of
``test_record_resume``.

The specs set ``retry: {unreachable_s: 2}`` (the default is 5 s) to keep the test short;
the seconds from each kill to the exit are printed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzzing import run_cli
from siblings import sibling

from quiver.experiments._campaign.ledger import replay_failed
from quiver.experiments._campaign.stored import unpack_text

_campaign_resume = sibling("test_campaign_resume", Path(__file__).parent)
_record_resume = sibling("test_record_resume", Path(__file__).parents[1] / "replay")
Campaign = _campaign_resume.Campaign
_copy_run, _same_as = _campaign_resume._copy_run, _campaign_resume._same_as
campaign, reference = _campaign_resume.campaign, _campaign_resume.reference  # fixtures, used by name
content, spec, uninterrupted = _record_resume.content, _record_resume.spec, _record_resume.uninterrupted

__all__ = ["campaign", "reference", "spec", "uninterrupted"]  # fixtures, used by name

SLOW = "    faults: {latency: {dist: constant, ms: 100}}\n"
"""Added under ``simulator:``: every call answered 100 ms late (the answers are the same)."""
BOUND = "  retry: {unreachable_s: 2}\n"
"""Added under ``llm:``: the endpoint is declared down after 2 s of refused connections."""
EXIT_WITHIN_S = 60.0
"""How long the test waits for the command to stop on its own (it takes a few seconds)."""
KILL_POINTS = (2, 7, 12)
"""Ledger rows (of 16 replays) at which the endpoint is killed, one run each."""


def _quiver() -> list[str]:
    return [sys.executable, "-m", "quiver.experiments._cli"]


def _with_endpoint_settings(text: str) -> str:
    """A spec's text with the simulator slowed down and the bound shortened."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for line in lines:
        out.append(line)
        if line.startswith("llm:"):
            out.append(BOUND)
        elif line.startswith("    nondeterminism:"):
            out.append(SLOW)
    return "".join(out)


def _simulator_of(pid: int) -> int | None:
    """The pid of the simulator process that ``pid`` started, if it runs."""
    mark = f"--parent\0{pid}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"quiver.replay._sim.process" in (cmdline := (entry / "cmdline").read_bytes()) and mark in cmdline:
                return int(entry.name)
        except OSError:
            continue
    return None


def _endpoint_killed(argv: list[str], fired: Callable[[], bool]) -> tuple[int, str, float]:
    """Run ``quiver ARGV``; once ``fired()``, SIGKILL the simulator it started. Returns the
    exit code, stderr and the seconds from the kill to the exit."""
    proc = subprocess.Popen([*_quiver(), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not fired():
            assert proc.poll() is None, f"the run ended before its kill point: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the run did not reach its kill point"
            time.sleep(0.005)
        sim = _simulator_of(proc.pid)
        assert sim is not None, "no simulator process found"
        os.kill(sim, signal.SIGKILL)
        killed = time.monotonic()
        _, err = proc.communicate(timeout=EXIT_WITHIN_S)
        return proc.returncode, err, time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ledger_rows(out: Path) -> int:
    try:
        with sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT count(*) FROM replays").fetchone()[0])
    except sqlite3.Error:
        return 0


def _failed_rows(out: Path) -> list[str]:
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        rows = list(db.execute("SELECT job_id, data FROM replays"))
    failed = []
    for job_id, data in rows:
        replay = json.loads(unpack_text(data) if isinstance(data, bytes) else data)
        if replay_failed(replay):
            failed.append(job_id)
    return failed


def _one_line_naming_the_endpoint(err: str, resume: str) -> None:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1, err[-3000:]
    assert "stopped answering" in lines[0] and resume in lines[0], lines[0]


def test_endpoint_killed_at_three_points_of_a_campaign_each_run_stops_and_resume_finishes_it(
    campaign: Any, reference: Path, tmp_path: Path
) -> None:
    spec = campaign.spec(tmp_path)
    spec.write_text(_with_endpoint_settings(spec.read_text(encoding="utf-8")), encoding="utf-8")
    out = tmp_path / "run"
    _copy_run(reference, out, ledger=False, results=False)
    stops = []
    for at in KILL_POINTS:
        code, err, seconds = _endpoint_killed(["run", str(spec), "--resume", "--quiet"],
                                              lambda: _ledger_rows(out) >= at)  # noqa: B023 (called in this turn)
        assert code == 2, err[-3000:]
        _one_line_naming_the_endpoint(err, f"quiver run {spec} --output {out} --resume")
        assert _failed_rows(out) == []
        stops.append(round(seconds, 1))
    print(f"stopped {stops} s after the endpoint was killed at ledger rows {KILL_POINTS}")
    done = run_cli(["run", str(spec), "--resume", "--quiet"], seconds=180)
    assert done.code == 0, done.stderr
    _same_as(reference, out)


def test_endpoint_killed_while_recording_stops_and_resume_records_the_same_corpus(
    spec: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    slow = tmp_path / "record.yaml"
    slow.write_text(_with_endpoint_settings(spec.read_text(encoding="utf-8")), encoding="utf-8")
    (tmp_path / "inputs.jsonl").write_bytes((spec.parent / "inputs.jsonl").read_bytes())
    out = tmp_path / "out"
    partial = out / "traces.jsonl.partial"

    def written() -> int:
        return len(partial.read_bytes().splitlines()) if partial.exists() else 0

    code, err, seconds = _endpoint_killed(["record", str(slow), "--output", str(out), "--quiet"],
                                          lambda: written() >= 2)
    assert code == 2, err[-3000:]
    _one_line_naming_the_endpoint(err, f"quiver record {slow} --output {out} --resume")
    kept = [json.loads(line) for line in partial.read_bytes().splitlines()]
    assert kept and all(t["status"] == "ok" for t in kept)
    print(f"stopped {seconds:.1f} s after the endpoint was killed, {len(kept)} trace(s) kept")
    done = run_cli(["record", str(slow), "--output", str(out), "--resume", "--quiet"], seconds=120)
    assert done.code == 0, done.stderr
    assert content(out / "traces.jsonl") == content(uninterrupted / "traces.jsonl")
