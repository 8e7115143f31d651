"""The local executor's worker processes: the same numbers as threads of one process,
one pacing schedule for all of them, a worker process killed mid-run, and each replay
finished where it ran (the driver pairs nothing).

A small campaign on a fixed support_bot baseline (recorded once per module) runs with
``processes: 0`` (threads of the driver) as the reference, then in two worker processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ray_cluster import committed  # tests/ is on sys.path (tests/conftest.py)

from quiver.experiments._campaign import run_campaign

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "experiments" / "support_bot"

SPEC = """\
pipeline: {demo}/pipeline.py:run
name: support_bot
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.15
{sim_limits}  model: support-bot-planner
{client_limits}  params: {{temperature: 0, seed: 42}}
baseline: {baseline}
graph: {demo}/graph.yaml
select: {{mode: sample, n: 6, seed: 3}}
perturbations:
  - id: cs-override
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variants: [{demo}/prompts/rewriter_terse.txt, {demo}/prompts/rewriter_polite.txt]}}
replay: {{repeats: 2}}
executor: {{kind: local, concurrency: 8, processes: {processes}}}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {output}
"""


def _spec(tmp: Path, baseline: Path, processes: int, *, paced: bool = False) -> Path:
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(
        demo=DEMO, baseline=baseline, processes=processes, cache=tmp / "emb", output=tmp / "run",
        sim_limits="    limits: {requests_per_minute: 3000, window_s: 1}\n" if paced else "",
        client_limits="  limits: {requests_per_minute: 3000, utilization: 0.6}\n" if paced else "",
    ), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("baseline")
    found = shutil.which("quiver")
    quiver = [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]
    proc = subprocess.run([*quiver, "record", str(DEMO / "record.yaml"), "--output", str(out), "--repeats", "2",
                           "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out / "traces.jsonl"


@pytest.fixture(scope="module")
def threads(baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The campaign in threads of the driver's process."""
    tmp = tmp_path_factory.mktemp("threads")
    result = run_campaign(_spec(tmp, baseline, 0), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    return tmp / "run"


def _pairs(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]


def test_worker_processes_give_the_numbers_of_threads_and_the_driver_pairs_nothing(
    baseline: Path, threads: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quiver.experiments._campaign import finish

    def not_here(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the driver finished a replay: the worker processes should have")

    monkeypatch.setattr(finish._State, "finish", not_here)  # in this (the driver's) process only
    result = run_campaign(_spec(tmp_path, baseline, 2), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    assert _pairs(tmp_path / "run") == _pairs(threads)
    assert (tmp_path / "run" / "campaign.json").read_bytes() == (threads / "campaign.json").read_bytes()
    ids = [json.loads(line)["trace_id"] for line in (tmp_path / "run" / "replays.jsonl").read_text().splitlines()]
    assert ids == [json.loads(line)["trace_id"] for line in (threads / "replays.jsonl").read_text().splitlines()]


def _kill_one_worker(stop: threading.Event, killed: list[int], ledger: Path) -> None:
    """SIGKILL one of this process's worker processes once replays are being committed
    (it has jobs in hand then)."""
    me = os.getpid()
    while not stop.is_set() and committed(ledger) < 8:
        time.sleep(0.02)
    for entry in os.listdir("/proc"):
        if stop.is_set() or not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == me and b"multiprocessing" in command:
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
            return


def test_a_worker_process_killed_mid_run_and_one_schedule_for_all_change_nothing(
    baseline: Path, threads: Path, tmp_path: Path
) -> None:
    """Against a simulator allowing 50 requests a second per model (over a 1 s window),
    the two processes share the driver's one schedule at 30 a second, so no attempt meets
    a 429 (every answered request counts as an LLM call: a 429 would change the numbers);
    processes pacing each on its own would not. One of them is SIGKILLed while it holds
    jobs: they go to the other."""
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_one_worker, args=(stop, killed, tmp_path / "run" / "ledger.sqlite"))
    killer.start()
    try:
        result = run_campaign(_spec(tmp_path, baseline, 2, paced=True), progress_stream=None)
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker process was seen"
    assert result.complete and result.status.get("failed", 0) == 0
    assert _pairs(tmp_path / "run") == _pairs(threads)
    assert (tmp_path / "run" / "campaign.json").read_bytes() == (threads / "campaign.json").read_bytes()
