"""``quiver localize``: the decisive step of each failing run, computed by replay.

The invoice desk (experiments/invoice_chain: simulated models err at known rates at known
steps, a harmless first step varies) is recorded once; then localised through a
counting front: the LLM requests it reports are the front's, every decisive step is one
the oracle names among the run's erring steps. The same ``localize.json`` comes out of a
run killed with SIGKILL and resumed, and out of the Ray executor. With the pipeline's
deterministic bug (no run of the input passes) the failures have no single step.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_front import CountingFront
from fuzzing import run_cli

from quiver import load_traces
from quiver.experiments.invoice_chain.oracle import erring_steps
from quiver.replay import Simulator, SimulatorConfig
from quiver.replay._sim import load_model_modules

ROOT = Path(__file__).parents[2]
CHAIN = ROOT / "experiments" / "invoice_chain"
SECONDS = 600.0

SPEC = """\
pipeline: {chain}/pipeline.py:run
name: invoice_chain
llm: {llm}
{source}
repeats: 3
concurrency: 4
seed: 0
outcome:
  - {{name: right_total, python: {chain}/outcome.py:right_total, takes: trace}}
executor: {{kind: local, concurrency: 4}}
output: {out}
"""


def _spec(folder: Path, name: str, llm: str, source: str) -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(SPEC.format(chain=CHAIN, llm=llm, source=source, out=folder / name))
    return spec


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    load_model_modules([str(CHAIN / "sim_models.py")])
    with Simulator(SimulatorConfig()) as sim, CountingFront(sim.url) as counting, \
            pytest.MonkeyPatch.context() as env:
        env.setenv("QUIVER_CHAIN_KEY", "sk-chain-test")
        env.delenv("INVOICE_CHAIN_BUG", raising=False)
        yield counting


@pytest.fixture(scope="module")
def corpus(front: CountingFront, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chain")
    llm = f"{{base_url: {front.url}, model: invoice-extract, api_key_env: QUIVER_CHAIN_KEY}}"
    spec = _spec(root, "rec", llm, f"inputs: {CHAIN}/inputs.jsonl")
    spec.write_text(spec.read_text().replace("executor: {kind: local, concurrency: 4}\n", ""))  # a recording spec
    done = run_cli(["record", str(spec), "--quiet"], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return root / "rec" / "traces.jsonl"


@pytest.fixture(scope="module")
def localized(front: CountingFront, corpus: Path) -> tuple[Path, dict[str, Any], int, Any]:
    """The localisation of the corpus's failures (budget 40) through the counting front."""
    root = corpus.parents[1]
    llm = f"{{base_url: {front.url}, model: invoice-extract, api_key_env: QUIVER_CHAIN_KEY}}"
    spec = _spec(root, "loc", llm, f"baseline: {corpus}")
    mark = front.mark()
    done = run_cli(["localize", str(spec), "--output", str(root / "loc"), "--budget", "40", "--quiet"],
                   seconds=SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    sent = len(front.since(mark))
    return spec, json.loads((root / "loc" / "localize.json").read_text()), sent, done


def test_the_llm_requests_localize_reports_are_the_fronts(localized: tuple[Path, dict[str, Any], int, Any]) -> None:
    _, data, sent, done = localized
    assert data["llm_calls"] == sent > 0 and data["judge_calls"] == 0
    assert f"{data['llm_calls']} LLM calls" in done.stdout


def test_each_decisive_step_is_an_erring_step_and_earlier_steps_are_ruled_out(
        localized: tuple[Path, dict[str, Any], int, Any], corpus: Path) -> None:
    _, data, _, _ = localized
    traces = {t.trace_id: t for t in load_traces(corpus).traces}
    failing = [t for t in traces.values() if t.outcome is not None and t.outcome.status == "fail"]
    assert data["failing"] == data["localized"] == len(failing) > 5
    single = right = 0
    for row in data["failures"]:
        wrong = erring_steps(traces[row["trace_id"]])
        assert row["replays"] <= 40
        if row["verdict"] != "decisive":
            continue
        decisive = row["decisive"]
        assert decisive["effect_ci"][0] > 0
        earlier = [s for s in row["steps"] if s["index"] < decisive["step"] and "state" in s]
        assert all(s["state"] == "ruled_out" for s in earlier), row
        if len(wrong) == 1:
            single += 1
            right += decisive["node"] == wrong[0]
    assert single >= 5 and right >= single - 1, (right, single)
    shares = {n["node"]: n for n in data["nodes"]}
    assert sum(n["decisive"] for n in shares.values()) == data["verdicts"]["decisive"]
    for n in shares.values():
        assert n["failures"] == data["localized"] and n["share_ci"][0] <= n["share"] <= n["share_ci"][1]


def test_a_localisation_killed_and_resumed_writes_the_same_localize_json(
        localized: tuple[Path, dict[str, Any], int, Any], tmp_path: Path) -> None:
    spec, data, _, _ = localized
    out = tmp_path / "killed"
    ledger = out / "localize.sqlite"
    command = [sys.executable, "-m", "quiver.experiments._cli", "localize", str(spec), "--output", str(out),
               "--budget", "40", "--quiet"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + SECONDS
    committed = 0
    while proc.poll() is None and time.monotonic() < deadline:
        if ledger.is_file():
            try:
                with sqlite3.connect(ledger, timeout=1) as db:
                    committed = db.execute("SELECT COUNT(*) FROM replays").fetchone()[0]
            except sqlite3.Error:
                committed = 0
            if committed >= 30:
                os.kill(proc.pid, signal.SIGKILL)
                break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert committed >= 30, proc.stderr.read() if proc.stderr else ""
    assert not (out / "localize.json").exists()
    again = subprocess.run(command + ["--resume"], capture_output=True, text=True, timeout=SECONDS)
    assert again.returncode == 0, again.stderr
    assert "committed by the run it resumes" in again.stdout
    assert (out / "localize.json").read_text() == json.dumps(data, indent=2) + "\n"


def test_a_deterministic_bug_with_no_passing_run_is_no_single_step(front: CountingFront, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INVOICE_CHAIN_BUG", "1")
    llm = f"{{base_url: {front.url}, model: invoice-extract, api_key_env: QUIVER_CHAIN_KEY}}"
    spec = _spec(tmp_path, "bug", llm, f"inputs: {CHAIN}/inputs.jsonl")
    done = run_cli(["localize", str(spec), "--output", str(tmp_path / "bug"), "--quiet"], seconds=SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "bug" / "localize.json").read_text())
    traces = {t.trace_id: t for t in load_traces(tmp_path / "bug" / "baseline" / "traces.jsonl").traces}
    buggy = [r for r in data["failures"] if "Wonka" in traces[r["trace_id"]].inputs["request"]]
    assert buggy and all(r["verdict"] == "no single step" and r["decisive"] is None for r in buggy)
    assert "with no single step whose intervention raises the pass rate" in done.stdout


def test_a_spec_without_outcome_checks_and_an_unknown_trace_are_refused(corpus: Path, front: CountingFront,
                                                                         tmp_path: Path) -> None:
    llm = f"{{base_url: {front.url}, model: invoice-extract, api_key_env: QUIVER_CHAIN_KEY}}"
    spec = tmp_path / "plain.yaml"
    spec.write_text(SPEC.format(chain=CHAIN, llm=llm, source=f"baseline: {corpus}", out=tmp_path / "o")
                    .split("outcome:")[0] + f"output: {tmp_path / 'o'}\n")
    done = run_cli(["localize", str(spec)], seconds=SECONDS)
    assert done.code == 2 and "needs outcome checks" in done.error_lines()[0]
    spec = _spec(tmp_path, "unknown", llm, f"baseline: {corpus}")
    mark = front.mark()
    done = run_cli(["localize", str(spec), "--trace", "no-such-trace"], seconds=SECONDS)
    assert done.code == 2 and "--trace no-such-trace: no failing trace" in done.error_lines()[0]
    assert front.since(mark) == []  # no LLM request (the endpoint is probed once, as every command does)


def test_the_ray_executor_writes_the_same_localize_json(localized: tuple[Path, dict[str, Any], int, Any],
                                                        tmp_path: Path) -> None:
    pytest.importorskip("ray")
    spec, data, _, _ = localized
    out = tmp_path / "ray"
    done = run_cli(["localize", str(spec), "--output", str(out), "--budget", "40", "--executor", "ray", "--quiet"],
                   seconds=SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    assert (out / "localize.json").read_text() == json.dumps(data, indent=2) + "\n"


def test_show_prints_a_failure_beside_the_intervention_that_made_it_pass_and_the_page_lists_each(
        localized: tuple[Path, dict[str, Any], int, Any]) -> None:
    spec, data, _, _ = localized
    folder = spec.parent / "loc"
    listing = run_cli(["show", str(folder), "--list"])
    assert listing.code == 0 and len(listing.stdout.splitlines()) == data["localized"]
    row = next(r for r in data["failures"] if r["verdict"] == "decisive")
    shown = run_cli(["show", str(folder), row["trace_id"]])
    assert shown.code == 0, shown.stderr
    d = row["decisive"]
    assert f"Decisive: `{d['node']}`#{d['occurrence']}" in shown.stdout
    assert "The failing run beside the replay of its decisive step's intervention that passed" in shown.stdout
    assert "<- first divergent call, the target" in shown.stdout
    page = (folder / "report.html").read_text()
    assert page.count("<details") == data["localized"] and "What was found" in page


def test_the_plan_counts_the_first_round_as_the_run_makes_it_and_sends_nothing(
        localized: tuple[Path, dict[str, Any], int, Any], front: CountingFront) -> None:
    spec, data, _, _ = localized
    mark = front.mark()
    done = run_cli(["localize", str(spec), "--budget", "40", "--plan"])
    assert done.code == 0, done.stderr
    assert front.since(mark, "") == [] and not (spec.parent / "loc" / "localize").exists()
    tested = sum(1 for row in data["failures"] for s in row["steps"] if "state" in s)
    assert f"replays: {2 * data['settings']['n_min'] * tested:,} in the first round" in done.stdout
    assert f"{data['localized']} of {data['failing']} failing runs" in done.stdout
