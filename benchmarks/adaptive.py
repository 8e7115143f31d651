"""Adaptive dose-response search against a uniform ladder, side by side, on a pipeline
whose answer is known: replays spent for the midpoint's interval width.

The pipeline (``tests/pipelines/dose_logistic.py``): a numeric score of 0 feeds a decision
(the simulator at temperature 1) that turns over with probability
``logistic((x - 0.37) / 0.03)`` when ``numeric_edit`` shifts the score by ``x``; 60 inputs
recorded twice. Every run is a real ``quiver`` campaign (local executor, 2 control
replays per trace, 1,000 bootstrap resamples).

* **Adaptive**: ``ladder: {adaptive: {param: amount, range: [0, 1], resolution: 0.02,
  max_replays: 3000}}`` at ``--seeds`` campaign seeds: replays spent (the search's, the
  controls' apart), the midpoint and its interval, the onset. The bar: the midpoint within
  0.02 of 0.37 on at least 19 of 20 seeds, the onset in its band (the true excess between
  0.005 and one half plus one resolution step: 0.211 to 0.39).
* **Uniform**: every 0.02 from 0.02 to 1 (50 levels), the same number of replays at each,
  the same estimator (a one-round adaptive ladder: ``coarse: 50``, ``max_replays`` = 50 x
  the replays per level, so the search stops after its first pass), at ``--uniform-seeds``
  seeds, for each multiple of the adaptive median in ``--multiples``. A uniform ladder
  "reaches the same width" at a budget whose median midpoint interval is at most the
  adaptive median; the ratio printed is adaptive median replays / the smallest such
  uniform budget (or, when no budget tried reaches it, an upper bound: below 1 / the
  largest multiple tried).

Usage::

    python benchmarks/adaptive.py [--seeds 20] [--uniform-seeds 10] [--multiples 3 6] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _support_bot import quiver

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "tests" / "pipelines" / "dose_logistic.py"
MIDPOINT, SLOPE, RESOLUTION, INPUTS = 0.37, 0.03, 0.02, 60
BAND = (MIDPOINT + SLOPE * math.log(0.005 / 0.995), MIDPOINT + RESOLUTION)

HEAD = """\
pipeline: {pipeline}:pipeline
name: dose
llm:
  simulator:
    models: [{pipeline}]
  model: dose-decide
"""

CAMPAIGN = HEAD + """\
baseline: {baseline}
seed: {seed}
perturbations:
  - id: shift
    node: score
    op: numeric_edit
    params: {{field: value, action: shift}}
    ladder: {{adaptive: {{{ladder}}}}}
replay: {{controls: 2}}
executor: {{kind: local, concurrency: 16}}
output: {output}
"""


def record(root: Path) -> Path:
    (root / "inputs.jsonl").write_text("".join(
        json.dumps({"case": i, "midpoint": MIDPOINT, "slope": SLOPE}) + "\n" for i in range(INPUTS)))
    spec = root / "record.yaml"
    spec.write_text(HEAD.format(pipeline=PIPELINE) + f"inputs: inputs.jsonl\nrepeats: 2\nseed: 0\n"
                    f"output: {root / 'baseline'}\n")
    subprocess.run([*quiver(), "record", str(spec), "--quiet"], check=True, capture_output=True)
    return root / "baseline" / "traces.jsonl"


def campaign(root: Path, baseline: Path, name: str, seed: int, ladder: str) -> dict[str, Any]:
    spec = root / f"{name}.yaml"
    out = root / name
    spec.write_text(CAMPAIGN.format(pipeline=PIPELINE, baseline=baseline, seed=seed, ladder=ladder, output=out))
    subprocess.run([*quiver(), "run", str(spec), "--quiet"], check=True, capture_output=True)
    entry = json.loads((out / "campaign.json").read_text())["perturbations"][0]
    adaptive = entry["adaptive"]
    curve = adaptive["beta_shape"]
    ci = curve["midpoint_ci"]
    return {"replays": adaptive["replays"], "midpoint": curve["midpoint"], "ci": ci,
            "width": (ci[1] - ci[0]) if ci else math.inf, "onset": curve["onset"], "stopped": adaptive["stopped"],
            "rounds": len(adaptive["rounds"]) - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--uniform-seeds", type=int, default=10)
    parser.add_argument("--multiples", type=float, nargs="+", default=[3.0, 6.0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="adaptive-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    baseline = record(root)
    adaptive = f"param: amount, range: [0, 1], resolution: {RESOLUTION}, max_replays: 3000"
    runs = []
    print(f"adaptive search, midpoint {MIDPOINT}, slope {SLOPE}, {INPUTS} inputs x 2; onset band "
          f"[{BAND[0]:.3f}, {BAND[1]:.3f}]")
    print(f"{'seed':>4}  {'replays':>7}  {'rounds':>6}  {'midpoint':>8}  {'95% interval':>18}  {'width':>6}  "
          f"{'onset':>6}  stopped")
    for seed in range(args.seeds):
        r = campaign(root, baseline, f"adaptive-{seed}", seed, adaptive)
        runs.append(r)
        ci = f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]" if r["ci"] else "none"
        print(f"{seed:>4}  {r['replays']:>7}  {r['rounds']:>6}  {r['midpoint']:>8.4f}  {ci:>18}  {r['width']:>6.4f}  "
              f"{r['onset']:>6}  {r['stopped']}", flush=True)
    within = sum(r["midpoint"] is not None and abs(r["midpoint"] - MIDPOINT) <= 0.02 for r in runs)
    in_band = sum(r["onset"] is not None and BAND[0] <= r["onset"] <= BAND[1] for r in runs)
    covered = sum(r["ci"] is not None and r["ci"][0] <= MIDPOINT <= r["ci"][1] for r in runs)
    spent = statistics.median(r["replays"] for r in runs)
    width = statistics.median(r["width"] for r in runs)
    print(f"midpoint within 0.02: {within} of {len(runs)}; onset in band: {in_band} of {len(runs)}; interval covers "
          f"{MIDPOINT}: {covered} of {len(runs)}")
    print(f"adaptive: median {spent:.0f} replays (max {max(r['replays'] for r in runs)}), median width {width:.4f}")
    print()
    print(f"{'ladder':<22}  {'replays':>7}  {'median width':>12}  {'within 0.02':>11}  reaches the adaptive width")
    print(f"{'adaptive':<22}  {spent:>7.0f}  {width:>12.4f}  {within:>8}/{len(runs):<2}")
    reached = None
    for multiple in args.multiples:
        per_level = math.ceil(multiple * spent / 50)
        uniform = f"param: amount, range: [0, 1], resolution: {RESOLUTION}, coarse: 50, pairs: {per_level}, " \
                  f"max_replays: {50 * per_level}"
        u = [campaign(root, baseline, f"uniform-{multiple:g}-{seed}", seed, uniform)
             for seed in range(args.uniform_seeds)]
        u_width = statistics.median(r["width"] for r in u)
        u_within = sum(r["midpoint"] is not None and abs(r["midpoint"] - MIDPOINT) <= 0.02 for r in u)
        ok = u_width <= width
        print(f"{f'uniform x{multiple:g} (50 x {per_level})':<22}  {50 * per_level:>7}  {u_width:>12.4f}  "
              f"{u_within:>8}/{len(u):<2}  {'yes' if ok else 'no'}", flush=True)
        if ok and reached is None:
            reached = 50 * per_level
    if reached is not None:
        print(f"ratio adaptive / uniform at the same width: {spent / reached:.3f}")
    else:
        print(f"ratio adaptive / uniform at the same width: below {1 / max(args.multiples):.3f} (no uniform budget "
              f"tried, up to {max(args.multiples):g}x the adaptive median, reaches its width)")
    print(f"benchmark time {time.monotonic() - t0:.0f}s; runs in {root}")


if __name__ == "__main__":
    main()
