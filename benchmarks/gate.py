"""Benchmark: ``quiver gate`` on 50 probes with an existing profile, at 200 ms per LLM call.

Records the support bot (``experiments/support_bot/record.yaml``, 225 traces) once at
zero latency and analyses it (``quiver analyze``: the observational profile), then runs
``quiver gate`` as CI would (a subprocess, ``--profile`` pointing at that profile) with
the bundled simulator at ``--latency-ms`` per call, once per candidate:

* ``support_bot.rewriter``: the reworded rewriter template (a change at the first node
  whose downstream runs live: the most LLM calls per replay);
* ``support_bot.planner``: the planner template with a 90% coverage threshold (fails).

For each it prints the probes, replays and LLM calls (from gate.json and the simulator
settings), the wall time of the whole command (simulator start, baseline and profile
loading, replays, pairing, reports) against the 2-minute target, and the verdict. The
setup (recording and analysis) is timed apart and is not part of a gate.

Run: ``python benchmarks/gate.py [--probes 50] [--latency-ms 200] [--repeats 2]``.
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

from _support_bot import DEMO, SPEC_HEAD, latency, quiver, record_baseline  # benchmarks/, first on the path

CANDIDATES = {
    "support_bot.rewriter": DEMO / "prompts" / "candidates" / "rewriter_reworded.txt",
    "support_bot.planner": DEMO / "prompts" / "candidates" / "planner_strict.txt",
}
TARGET_S = 120.0
SPEC = SPEC_HEAD + """\
perturbations:
  - {{id: unused, node: rewriter, op: prompt_swap, params: {{variant: {demo}/prompts/rewriter_terse.txt}}}}
executor: {{kind: local, concurrency: {concurrency}}}
analysis: {{cache_dir: {cache}}}
gate: {{probes: {probes}, repeats: {repeats}}}
output: {output}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=50, help="probes per candidate (50)")
    parser.add_argument("--repeats", type=int, default=2, help="replays per probe and arm (2)")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="fixed latency per simulated call (200)")
    parser.add_argument("--concurrency", type=int, default=16, help="replays at once (16)")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="quiver-bench-gate-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        traces = record_baseline(folder)
        subprocess.run([*quiver(), "analyze", str(traces), "--graph", str(DEMO / "graph.yaml"), "--out",
                        str(folder / "run" / "observational"), "--cache", str(folder / "emb"), "--no-plots",
                        "--quiet"], check=True, capture_output=True, text=True)
        print(f"setup (not part of a gate): baseline recorded and analysed in {time.perf_counter() - start:.1f} s",
              file=sys.stderr, flush=True)
        spec = folder / "gate.yaml"
        spec.write_text(SPEC.format(demo=DEMO, latency=latency(args.latency_ms), baseline=traces,
                                    concurrency=args.concurrency, cache=folder / "emb", probes=args.probes,
                                    repeats=args.repeats, output=folder / "run"), encoding="utf-8")
        rows = []
        for template, path in CANDIDATES.items():
            out = folder / f"gate-{template}"
            t0 = time.perf_counter()
            proc = subprocess.run([*quiver(), "gate", str(spec), "--candidate", f"{template}={path}", "--profile",
                                   str(folder / "run"), "--output", str(out), "--quiet"],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode not in (0, 1):
                print(f"{template}: the gate could not run (exit {proc.returncode}): {proc.stderr[-1500:]}")
                return 2
            data = json.loads((out / "gate.json").read_text(encoding="utf-8"))
            [c] = data["candidates"]
            rows.append((template, c, wall, data))
    print(f"load average (1, 5, 15 min) at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"quiver gate, {args.probes} probes x {args.repeats} replays per arm (candidate, current), "
          f"{args.latency_ms:g} ms per LLM call, local executor at {args.concurrency}; target < {TARGET_S:.0f} s")
    print(f"{'candidate':<22} {'node':<9} {'replays':>7} {'wall s':>7} {'in gate':>8} {'of target':>9}  verdict")
    for template, c, wall, data in rows:
        replays = c["pairs"]["candidate"] + c["pairs"]["current"]
        print(f"{template:<22} {c['node']:<9} {replays:>7} {wall:>7.1f} {data['seconds']:>8.1f} "
              f"{wall / TARGET_S:>9.2f}  {c['verdict']}")
    worst = max(wall for _, _, wall, _ in rows)
    print(f"slowest gate {worst:.1f} s = {worst / TARGET_S:.2f} of the {TARGET_S:.0f} s target "
          f"({'met' if worst < TARGET_S else 'NOT met'}); 'wall s' is the whole command, 'in gate' its own "
          "timing after the Python start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
