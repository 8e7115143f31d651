"""Benchmark: which step broke a failing run, by the engine and by two log readers.

The injected-fault pipeline (``experiments/invoice_chain``): five steps whose simulated
models err at known rates at known steps (``extract`` transposes the amount's digits,
``price`` gives another tier's discount, ``reply`` writes the amount before the
discount), and a first step (``restate``) that varies from run to run and never
matters, the trap for a reader of logs. Each seed records the 20 requests x ``--repeats``
and runs ``quiver localize`` on every failing run. The ground truth comes from
``experiments/invoice_chain/oracle.py``, which names the erring steps of a trace from its
outputs alone, without the engine.

On the failures with a single erring step it prints, with Wilson 95% intervals:

* the engine's top-1 accuracy: its decisive step is the erring step;
* the observational baseline's: the first step whose output differs from a passing run
  of the same input (what ``quiver diff`` against a passing run gives, as
  ``localize.json`` records it);
* "blame the last LLM call" (``reply``);
* replays per failure (mean and max) and the verdicts.

A second part sets the pipeline's deterministic bug (``INVOICE_CHAIN_BUG=1``: one
customer's tier is one no price list has, so every run of that customer fails and no
run of its input passes) and counts the verdicts of those failures: they should be "no
single step", not a step blamed.

Run: ``python benchmarks/localize.py [--seeds 3] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quiver import load_traces
from quiver.experiments.invoice_chain.oracle import erring_steps

ROOT = Path(__file__).resolve().parents[1]
SPEC = """\
pipeline: {root}/experiments/invoice_chain/pipeline.py:run
name: invoice_chain
llm:
  simulator:
    models: [{root}/experiments/invoice_chain/sim_models.py]
  model: invoice-extract
inputs: {root}/experiments/invoice_chain/inputs.jsonl
repeats: {repeats}
concurrency: 4
seed: {seed}
outcome:
  - {{name: right_total, python: {root}/experiments/invoice_chain/outcome.py:right_total, takes: trace}}
executor: {{kind: local, concurrency: 4}}
output: {out}
"""


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "—"
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{p:.3f} [{max(0.0, centre - half):.3f}, {min(1.0, centre + half):.3f}] (n = {n})"


def localize(folder: Path, seed: int, repeats: int, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record and localise one seed: localize.json, and trace id -> trace."""
    spec = folder / f"seed{seed}.yaml"
    out = folder / f"seed{seed}"
    spec.write_text(SPEC.format(root=ROOT, repeats=repeats, seed=seed, out=out))
    done = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "localize", str(spec), "--quiet"],
                          capture_output=True, text=True, cwd=folder, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"quiver localize failed (seed {seed}):\n{done.stdout}\n{done.stderr}")
    data = json.loads((out / "localize" / "localize.json").read_text())
    traces = {t.trace_id: t for t in load_traces(out / "localize" / "baseline" / "traces.jsonl").traces}
    return data, traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="recordings (seeds 0..N-1) (3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per request (3)")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("INVOICE_CHAIN_BUG", None)
    t0 = time.perf_counter()
    single = engine = observational = last = 0
    replays: list[int] = []
    verdicts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="quiver-localize-bench-") as tmp:
        for seed in range(args.seeds):
            data, traces = localize(Path(tmp), seed, args.repeats, env)
            for row in data["failures"]:
                verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
                replays.append(row["replays"])
                wrong = erring_steps(traces[row["trace_id"]])
                if len(wrong) != 1:
                    continue
                single += 1
                engine += int((row.get("decisive") or {}).get("node") == wrong[0])
                observational += int((row.get("observational") or {}).get("node") == wrong[0])
                last += int(wrong[0] == "reply")
        print(f"injected-fault benchmark: {args.seeds} seed(s) x 20 requests x {args.repeats} repeats; "
              f"{len(replays)} failing runs localised, {single} with a single erring step (oracle)")
        print(f"  top-1 accuracy on single-error failures: engine {wilson(engine, single)}")
        print(f"                                    observational baseline {wilson(observational, single)}")
        print(f"                                    blame the last LLM call {wilson(last, single)}")
        print(f"  replays per failure: mean {sum(replays) / max(len(replays), 1):.1f}, max {max(replays, default=0)}; "
              f"verdicts {verdicts}")
        bug_env = {**env, "INVOICE_CHAIN_BUG": "1"}
        data, traces = localize(Path(tmp), 100, args.repeats, bug_env)
        buggy = [r for r in data["failures"] if traces[r["trace_id"]].inputs["request"].find("Wonka") >= 0]
        said: dict[str, int] = {}
        for row in buggy:
            said[row["verdict"]] = said.get(row["verdict"], 0) + 1
        print(f"  deterministic bug (no passing run of the input): {len(buggy)} failures, verdicts {said}")
    print(f"  {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
