"""Benchmark: bytes per replay, each replay stored once.

A campaign keeps each replay once: its line of ``replays.jsonl`` (its difference from
its baseline trace, compressed with the baseline as the dictionary where that pays) and
its row of ``pairs.jsonl``, which the ledger points into; the ledger row holds the rest
of the replay's result, small (``experiments/_campaign/journal.py``). This prints, per
replay, for a finished campaign folder:

* a baseline trace's size (its line, the mean over the baseline), the bytes of
  ``ledger.sqlite`` and ``replays.jsonl`` per replay and their sum as a share of a trace
  (``pairs.jsonl``, the campaign's result, beside them);
* reading back: every ledger row made whole (its line read from ``replays.jsonl``,
  :func:`~quiver.experiments._campaign.stored.whole_rows`) against ``replays.jsonl``
  read by ``load_traces``, replay by replay.

Two campaigns, unless ``--run`` names a folder: the README campaign
(``experiments/specs/support_bot.yaml``: traces of about 17 KB) and a held-out-like
campaign of about 1,260 replays on the multi-hop QA demo (HotpotQA questions, traces of
about 10 KB: a passage dropped from each retrieval, a query rewritten, repeats).

Run: ``python benchmarks/storage.py [--run FOLDER] [--only readme|multihop]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quiver._trace import load_traces
from quiver.experiments._campaign.stored import whole_rows

from _support_bot import quiver  # benchmarks/, first on the path

ROOT = Path(__file__).resolve().parents[1]
MULTIHOP = ROOT / "experiments" / "multihop_qa"

HELD_OUT = """\
pipeline: {demo}/pipeline.py:run
name: multihop_qa
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.05
  model: multihop-query
  params: {{temperature: 0.7}}
baseline: {baseline}
graph: {demo}/graph.yaml
select: {{mode: all}}
perturbations:
  - id: drop-passage-1
    node: retrieve_1
    op: list_edit
    params: {{action: remove, count: 1}}
  - id: drop-passage-2
    node: retrieve_2
    op: list_edit
    params: {{action: remove, count: 1}}
replay: {{repeats: 2, controls: 0}}
executor: {{kind: local, concurrency: 16}}
analysis: {{resamples: 200, permutations: 200}}
output: {output}
"""


def _size(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def measure(label: str, run: Path) -> dict[str, float]:
    """The bytes per replay of a finished campaign folder, and its read-back check."""
    baseline = run / "baseline" / "traces.jsonl"
    if not baseline.is_file():
        spec = json.loads((run / "spec.resolved.json").read_text(encoding="utf-8"))
        baseline = Path(spec["baseline"])  # as the spec gave it: run from the spec's folder when it is relative
    lines = baseline.read_bytes().splitlines()
    trace = sum(len(line) + 1 for line in lines) / max(len(lines), 1)
    start = time.perf_counter()
    rows = whole_rows(run / "ledger.sqlite", baseline)
    t_rows = time.perf_counter() - start
    start = time.perf_counter()
    loaded = {t.trace_id: t for t in load_traces(run / "replays.jsonl").traces}
    t_lines = time.perf_counter() - start
    same = sum(1 for r in rows.values() if "trace" in r and loaded.get(r["trace"]["trace_id"]) is not None
               and loaded[r["trace"]["trace_id"]].model_dump(mode="json") == r["trace"])
    n = len(rows)
    ledger, record, pairs = _size(run / "ledger.sqlite"), _size(run / "replays.jsonl"), _size(run / "pairs.jsonl")
    print(f"\n{label}: {n} replays, a baseline trace {trace / 1024:.1f} KB ({len(lines)} traces)")
    print(f"  {'per replay':<30} {'bytes':>8} {'share of a trace':>17}")
    for name, size in (("ledger.sqlite", ledger), ("replays.jsonl", record), ("together", ledger + record),
                       ("pairs.jsonl (the result)", pairs)):
        print(f"  {name:<30} {size / n:>8.0f} {size / n / trace:>17.3f}")
    print(f"  read back: {same} of {len(loaded)} replays of replays.jsonl equal their ledger row made whole "
          f"({t_rows:.1f} s for the ledger's {n} rows, {t_lines:.1f} s for load_traces)")
    return {"replays": n, "trace_bytes": trace, "ledger": ledger / n, "replays_jsonl": record / n,
            "together_share": (ledger + record) / n / trace}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, help="a finished campaign folder (else the two campaigns are run)")
    parser.add_argument("--only", choices=["readme", "multihop"], help="run one of the two campaigns")
    args = parser.parse_args()
    print(f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    if args.run is not None:
        measure(str(args.run), args.run)
        return 0
    with tempfile.TemporaryDirectory(prefix="quiver-bench-storage-") as tmp:
        folder = Path(tmp)
        if args.only in (None, "multihop"):
            rec = folder / "multihop-baseline"
            subprocess.run([*quiver(), "record", str(MULTIHOP / "record.yaml"), "--output", str(rec), "--quiet"],
                           check=True, capture_output=True, text=True)
            spec = folder / "held-out.yaml"
            spec.write_text(HELD_OUT.format(demo=MULTIHOP, baseline=rec / "traces.jsonl", output=folder / "held-out"))
            start = time.perf_counter()
            proc = subprocess.run([*quiver(), "run", str(spec), "--quiet"], capture_output=True, text=True)
            if proc.returncode not in (0, 1):
                sys.exit(proc.stderr[-2000:])
            print(f"  held-out campaign run in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            measure("held-out-like campaign (multi-hop QA, HotpotQA)", folder / "held-out")
        if args.only in (None, "readme"):
            run = folder / "readme"
            start = time.perf_counter()
            proc = subprocess.run([*quiver(), "run", str(ROOT / "experiments" / "specs" / "support_bot.yaml"),
                                   "--output", str(run), "--quiet"], capture_output=True, text=True)
            if proc.returncode not in (0, 1):
                sys.exit(proc.stderr[-2000:])
            print(f"  README campaign run in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            measure("README campaign (support bot)", run)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
