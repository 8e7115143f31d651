"""What the campaign and gate benchmarks share: the support bot's folder, the ``quiver``
command, its baseline recording, and the head of a spec that replays it against the
bundled simulator at a fixed latency."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "experiments" / "support_bot"

SPEC_HEAD = """\
pipeline: {demo}/pipeline.py:run
name: support_bot
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.15
    faults: {{latency: {latency}}}
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
baseline: {baseline}
graph: {demo}/graph.yaml
"""
"""Format with ``demo``, ``latency`` (:func:`latency`) and ``baseline``; a benchmark adds
its own perturbations, executor and analysis lines."""


def quiver() -> list[str]:
    """The ``quiver`` command: the installed script, else the module."""
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


def latency(ms: float) -> str:
    """The simulator's latency block for ``ms`` per call (none at 0)."""
    return f"{{dist: constant, ms: {ms:g}}}" if ms else "{dist: none}"


def record_baseline(folder: Path) -> Path:
    """Record ``experiments/support_bot/record.yaml`` (225 traces) into ``folder/baseline``."""
    out = folder / "baseline"
    start = time.perf_counter()
    subprocess.run([*quiver(), "record", str(DEMO / "record.yaml"), "--output", str(out), "--quiet"],
                   check=True, capture_output=True, text=True)
    print(f"  baseline recorded in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return out / "traces.jsonl"
