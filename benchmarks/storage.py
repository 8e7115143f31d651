"""Benchmark: bytes per replay, and reading the replays back, stored as differences.

Runs the README campaign (``quiver run experiments/specs/support_bot.yaml``, 5,988
replays) into a temporary folder, or reads the campaign folder given with ``--run``, and
prints, per replay:

* what the ledger (``ledger.sqlite``) and the readable record (``replays.jsonl``) take,
  each replay stored as its difference from its baseline trace (compressed where that
  pays), against what the same replays take stored whole, as the engine stored them
  before: the ledger row's JSON text with the whole trace (keys sorted) and the trace's
  line (``trace_to_line``), both computed here from the replays read back;
* the time to read them back: every ledger row made into a whole
  :class:`~quiver.replay.ReplayResult`, as the campaign's pairing reads them, and every
  line of ``replays.jsonl`` parsed as a trace (``load_traces``), each against the same
  from the whole form (a ledger of whole rows and a file of whole lines written here);
* whether every replay read back equals the whole one.

Run: ``python benchmarks/storage.py [--run FOLDER]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quiver._trace import load_traces, trace_to_line
from quiver.experiments._campaign import Ledger
from quiver.experiments._campaign.stored import Baselines, unpacked, whole_rows
from quiver.replay import ReplayResult

from _support_bot import quiver  # benchmarks/, first on the path

ROOT = Path(__file__).resolve().parents[1]


def _size(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _read_ledger(ledger_path: Path, by_id: dict[str, Any], baselines: Baselines,
                 baseline_of: dict[str, str]) -> list[ReplayResult]:
    """Every row of a ledger made into a whole replay, as the pairing reads them."""
    ledger = Ledger(ledger_path)
    try:
        out = []
        for job_id, data in ledger.replays():
            if "error" in data:
                continue
            base = by_id[baseline_of[job_id]]
            out.append(ReplayResult.from_json(unpacked(data, base, baselines), base))
        return out
    finally:
        ledger.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="a finished campaign folder (default: run the README campaign)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quiver-bench-storage-") as tmp:
        folder = Path(tmp)
        run = args.run
        if run is None:
            run = folder / "run"
            start = time.perf_counter()
            subprocess.run([*quiver(), "run", str(ROOT / "experiments" / "specs" / "support_bot.yaml"), "--output",
                            str(run), "--quiet"], check=False, capture_output=True, text=True)
            print(f"  README campaign run in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        baseline = run / "baseline" / "traces.jsonl"
        if not baseline.is_file():
            spec = json.loads((run / "spec.resolved.json").read_text(encoding="utf-8"))
            baseline = Path(spec["baseline"])
        rows = whole_rows(run / "ledger.sqlite", baseline)
        by_id = {t.trace_id: t for t in load_traces(baseline).traces}
        baselines = Baselines()
        with sqlite3.connect(str(run / "ledger.sqlite")) as db:
            stored = dict(db.execute("SELECT job_id, length(CAST(data AS BLOB)) FROM replays"))
            seqs = dict(db.execute("SELECT job_id, seq FROM replays"))
        n = len(rows)
        # the whole form: a ledger of whole rows and a file of whole lines
        whole_ledger = folder / "whole.sqlite"
        ledger = Ledger(whole_ledger)
        ledger.commit([(job_id, seqs[job_id], data, json.dumps(data, sort_keys=True)) for job_id, data in rows.items()])
        ledger.close()
        with sqlite3.connect(str(whole_ledger)) as db:  # stored as it was: the text, uncompressed
            db.executemany("UPDATE replays SET data = ?, crc = NULL WHERE job_id = ?",
                           [(json.dumps(d, sort_keys=True), j) for j, d in rows.items()])
        whole_bytes = sum(len(json.dumps(d, sort_keys=True).encode()) for d in rows.values())
        whole_lines = folder / "replays-whole.jsonl"
        loaded, _ = _timed(lambda: load_traces(run / "replays.jsonl"))
        whole_lines.write_text("".join(trace_to_line(t) + "\n" for t in loaded.traces), encoding="utf-8")
        lines_bytes, whole_line_bytes = _size(run / "replays.jsonl"), _size(whole_lines)
        ledger_bytes = _size(run / "ledger.sqlite")
        print(f"{n} replays of the README campaign ({len(by_id)} baseline traces, "
              f"{_size(baseline) / n:.0f} B of baseline per replay)")
        print(f"{'per replay':<34} {'as differences':>14} {'whole':>10} {'ratio':>7}")
        print(f"{'ledger rows (stored bytes)':<34} {sum(stored.values()) / n:>14.0f} {whole_bytes / n:>10.0f} "
              f"{sum(stored.values()) / whole_bytes:>7.3f}")
        print(f"{'ledger.sqlite (file)':<34} {ledger_bytes / n:>14.0f} {_size(whole_ledger) / n:>10.0f} "
              f"{ledger_bytes / _size(whole_ledger):>7.3f}")
        print(f"{'replays.jsonl':<34} {lines_bytes / n:>14.0f} {whole_line_bytes / n:>10.0f} "
              f"{lines_bytes / whole_line_bytes:>7.3f}")
        together, before = ledger_bytes + lines_bytes, _size(whole_ledger) + whole_line_bytes
        print(f"{'ledger.sqlite + replays.jsonl':<34} {together / n:>14.0f} {before / n:>10.0f} "
              f"{together / before:>7.3f}")
        # reading back: the pairing's read of the ledger, and load_traces of the record
        baseline_of = {j: _baseline_id(d, by_id) for j, d in rows.items()}
        new, t_new = _timed(lambda: _read_ledger(run / "ledger.sqlite", by_id, baselines, baseline_of))
        old, t_old = _timed(lambda: _read_ledger(whole_ledger, by_id, Baselines(), baseline_of))
        same = [a.trace == b.trace for a, b in zip(new, old, strict=True)]
        print(f"ledger read back into whole replays: {t_new:.1f} s as differences, {t_old:.1f} s whole; "
              f"{sum(same)} of {len(same)} identical")
        lines, t_lines = _timed(lambda: load_traces(run / "replays.jsonl"))
        whole, t_whole = _timed(lambda: load_traces(whole_lines))
        print(f"replays.jsonl read (load_traces): {t_lines:.1f} s as differences, {t_whole:.1f} s whole; "
              f"{sum(a == b for a, b in zip(lines.traces, whole.traces, strict=True))} of {len(whole.traces)} "
              f"identical")
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _baseline_id(data: dict[str, Any], by_id: dict[str, Any]) -> str:
    """The baseline trace id of a whole row (the replay's id less its ``~...`` suffix)."""
    trace_id = str(data.get("trace", {}).get("trace_id", ""))
    base = trace_id.rsplit("~", 1)[0]
    return base if base in by_id else ""


if __name__ == "__main__":
    sys.exit(main())
