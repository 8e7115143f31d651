"""``quiver gate --plan`` counts what the gate then runs; Ctrl-C on the gate says how far it got.

* **The plan**: ``quiver gate SPEC --candidate ... --profile RUN --plan`` for the README's
  gate (:func:`strict_gate`, run once per session) predicts exactly the replays the gate
  ran (probes x repeats x 2 arms, half of them the current template's: its controls) and
  LLM calls within 10% of those it made (from ``gate.json``), says what the per-input test
  can find with them, sends no LLM call and writes nothing (the gate's folder is not made).
* **Ctrl-C**: a gate over the quickstart corpus, its simulator answering 300 ms late, is
  sent SIGINT (to its whole process group, as a terminal does) once a seeded number of
  its replays have started (a wrapper pipeline counts them in a file). It exits 130
  within a few seconds with one line: the replays finished of how many, and that
  nothing was kept, so the gate is run again; it writes no verdict.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli, tried

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "experiments" / "specs" / "support_bot.yaml"
STRICT = ROOT / "experiments" / "support_bot" / "prompts" / "candidates" / "planner_strict.txt"
QUICKSTART = ROOT / "experiments" / "quickstart"
EXIT_WITHIN_S = 20.0
"""A generous bound on the time from the signal to the exit (the rule is 5 s; the
machine running the tests may be loaded)."""


def test_the_gate_plan_counts_the_replays_the_gate_ran_and_its_llm_calls_within_10_percent(
    strict_gate: tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, Path], support_bot_run: Path,
    tmp_path: Path,
) -> None:
    proc, data, _ = strict_gate
    assert data is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "gate"
    plan = run_cli(["gate", str(SPEC), "--output", str(out), "--candidate", f"support_bot.planner={STRICT}",
                    "--profile", str(support_bot_run), "--plan"], seconds=120)
    assert plan.code == 0, plan
    assert not out.exists()  # nothing written
    total = re.search(r"^total\s+([\d,]+)\s+([\d,]+)\s+\(([\d,]+)-([\d,]+)\)\s+([\d,]+)", plan.stdout, re.M)
    assert total is not None, plan.stdout
    replays, calls = (int(total.group(i).replace(",", "")) for i in (1, 2))
    [c] = data["candidates"]
    assert replays == data["replays"] == c["probes"] * c["repeats"] * 2
    assert abs(calls - data["llm_calls"]) <= 0.10 * data["llm_calls"], (calls, data["llm_calls"])
    assert "no LLM call was made" in plan.stdout and "nothing was written" in plan.stdout
    # the current template's arm is the candidate's control: half the replays, said so
    assert f"{replays:,} replays ({replays // 2:,} of them controls)" in plan.stdout, plan.stdout
    assert (f"{c['inputs']} input(s), {c['probes']} probe(s) (1 per input) x {c['repeats']} replay(s) per arm"
            in plan.stdout and "a complete change of an input can fail it" in plan.stdout), plan.stdout
    print(f"gate plan: {replays} replays, {calls} LLM calls predicted; the gate made {data['llm_calls']}")


COUNTING = '''\
"""The quickstart pipeline, noting each run in a file (one line a replay started)."""
from pathlib import Path

from quiver.replay import load_pipeline

_run = load_pipeline("{pipeline}:run")
STARTED = Path(__file__).with_name("started")


def run(ticket):
    with STARTED.open("a") as fh:
        fh.write("x\\n")
    return _run(ticket=ticket)
'''


@pytest.fixture(scope="module")
def slow_gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gate spec over four recorded quickstart traces: a counting pipeline, a simulator
    that answers 300 ms late, the observational profile computed first."""
    folder = tmp_path_factory.mktemp("gate_interrupt")
    tickets = (QUICKSTART / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    (folder / "inputs.jsonl").write_text("\n".join(tickets) + "\n", encoding="utf-8")
    sim = f"llm:\n  simulator:\n    models: [{QUICKSTART / 'sim_models.py'}]\n"
    (folder / "record.yaml").write_text(
        f"pipeline: {QUICKSTART / 'pipeline.py'}:run\n{sim}  model: quickstart-classify\n"
        "inputs: inputs.jsonl\nrepeats: 2\nseed: 5\n", encoding="utf-8")
    done = run_cli(["record", str(folder / "record.yaml"), "--output", str(folder / "corpus"), "--quiet"],
                   seconds=120)
    assert done.code == 0, done.stderr
    (folder / "counting.py").write_text(COUNTING.format(pipeline=QUICKSTART / "pipeline.py"), encoding="utf-8")
    (folder / "candidate.txt").write_text("Triage the ticket; answer in JSON.\n---\nTicket: {ticket}\n",
                                          encoding="utf-8")
    spec = folder / "gate.yaml"
    spec.write_text(
        f"pipeline: counting.py:run\n{sim}    faults: {{latency: {{dist: constant, ms: 300}}}}\n"
        "  model: quickstart-classify\nbaseline: corpus/traces.jsonl\n"
        "perturbations:\n  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}\n"
        "gate: {probes: 4, repeats: 2}\nexecutor: {kind: local, concurrency: 2}\noutput: run\n",
        encoding="utf-8")
    return spec


def _started(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_ctrl_c_on_the_gate_says_how_many_replays_finished_and_that_nothing_was_kept(slow_gate: Path) -> None:
    tried("gate interrupt")
    folder = slow_gate.parent
    started = folder / "started"
    started.unlink(missing_ok=True)
    at = random.Random(11).randint(1, 4)
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiver.experiments._cli", "gate", str(slow_gate), "--candidate",
         f"classify={folder / 'candidate.txt'}", "--output", str(folder / "out"), "--quiet"],
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
    )
    try:
        deadline = time.monotonic() + 180
        while _started(started) < at:
            assert proc.poll() is None, f"the gate ended before the signal: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, "the gate never started its replays"
            time.sleep(0.02)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"gate: exit {proc.returncode} {seconds:.2f} s after SIGINT")
    assert proc.returncode == 130, err[-3000:]
    assert seconds < EXIT_WITHIN_S
    said = re.fullmatch(r"quiver gate: interrupted: (\d+) of 16 gate replays finished; the gate keeps nothing "
                        r"to resume: nothing was kept; run it again\n", err)
    assert said is not None, err[-3000:]
    assert int(said.group(1)) < 16 and int(said.group(1)) <= _started(started)
    assert not (folder / "out" / "gate.json").exists()
    for word in ("Traceback", "Connection", "LLMUnavailable"):
        assert word not in err, err[-3000:]
