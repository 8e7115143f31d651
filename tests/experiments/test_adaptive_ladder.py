"""Adaptive ladders in real campaigns: the known-answer pipeline end to end, the same
rounds and numbers on Ray and after a SIGKILL, and the spec's refusals.

The pipeline (``tests/pipelines/dose_logistic.py``): ``score`` returns 0; ``decide`` (the
simulator at temperature 1) turns a baseline ``hold`` into ``escalate`` with probability
``logistic((x - 0.37) / 0.03)`` when ``numeric_edit`` shifts the score by ``x``. The
excess D_shape rate over the control replays reaches half its plateau at 0.37; the onset
band is the one of ``tests/engine/test_dose.py`` (the true excess between 0.005 and one
half plus one resolution step).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from quiver._errors import SpecError
from quiver._yamlspec import load_spec
from quiver.experiments._campaign import CampaignRun, run_campaign
from quiver.experiments._config import CampaignSpec
from quiver.replay import declared_graph, load_pipeline

ROOT = Path(__file__).parents[2]
PIPELINE = ROOT / "tests" / "pipelines" / "dose_logistic.py"
QUIVER = shutil.which("quiver")
MIDPOINT, SLOPE, RESOLUTION = 0.37, 0.03, 0.02
BAND = (MIDPOINT + SLOPE * math.log(0.005 / 0.995), MIDPOINT + RESOLUTION)

HEAD = """\
pipeline: {pipeline}:pipeline
name: dose
llm:
  simulator:
    models: [{pipeline}]
  model: dose-decide
"""

RECORD = HEAD + """\
inputs: inputs.jsonl
repeats: 2
seed: 0
output: {output}
"""

CAMPAIGN = HEAD + """\
baseline: {baseline}
seed: 0
perturbations:
  - id: shift
    node: score
    op: numeric_edit
    params: {{field: value, action: shift}}
    ladder: {{adaptive: {{param: amount, range: [0, 1], resolution: {resolution}, max_replays: 3000}}}}
replay: {{controls: 2}}
executor: {{kind: {executor}, concurrency: 8, batch_size: 16}}
output: {output}
"""


def _cli(*args: str) -> list[str]:
    return [*([QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]), *args]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 inputs recorded twice each (the analysis compares repeats of an input)."""
    tmp = tmp_path_factory.mktemp("dose")
    (tmp / "inputs.jsonl").write_text("".join(
        json.dumps({"case": i, "midpoint": MIDPOINT, "slope": SLOPE}) + "\n" for i in range(60)))
    (tmp / "record.yaml").write_text(RECORD.format(pipeline=PIPELINE, output=tmp / "baseline"))
    proc = subprocess.run(_cli("record", str(tmp / "record.yaml"), "--quiet"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tmp / "baseline" / "traces.jsonl"


def _spec(folder: Path, baseline: Path, name: str, executor: str = "local") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(CAMPAIGN.format(pipeline=PIPELINE, baseline=baseline, resolution=RESOLUTION, executor=executor,
                                    output=folder / name))
    return path


@pytest.fixture(scope="module")
def reference(baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The campaign run once, locally, without interruption."""
    folder = tmp_path_factory.mktemp("reference")
    result = run_campaign(_spec(folder, baseline, "run"), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    return folder / "run"


def _adaptive(out: Path) -> dict[str, Any]:
    return json.loads((out / "campaign.json").read_text())["perturbations"][0]["adaptive"]


def test_a_real_campaign_finds_the_logistic_midpoint_and_an_onset_in_its_band(reference: Path) -> None:
    adaptive = _adaptive(reference)
    curve = adaptive["beta_shape"]
    assert abs(curve["midpoint"] - MIDPOINT) <= 0.02, curve["midpoint"]
    lo, hi = curve["midpoint_ci"]
    assert hi - lo <= RESOLUTION + 1e-9 and curve["defined"] >= 0.95
    assert BAND[0] <= curve["onset"] <= BAND[1] and curve["onset"] - curve["below"] <= RESOLUTION + 1e-9
    assert adaptive["stopped"] == "resolution reached" and adaptive["replays"] <= 3000
    assert curve["plateau"] == pytest.approx(1.0, abs=0.05)
    # every level the rounds placed is a step of the threshold's bins, and every round but the coarse one
    # (which follows from the spec) is in the ledger
    assert len(adaptive["levels"]) == len({*adaptive["levels"]}) == len(curve["points"])
    with sqlite3.connect(str(reference / "ledger.sqlite")) as db:
        held = [json.loads(text) for (text,) in db.execute("SELECT plan FROM rounds ORDER BY round")]
    assert held == adaptive["rounds"][1:]
    pairs = [json.loads(line) for line in (reference / "pairs.jsonl").read_text().splitlines()]
    assert sum(p["perturbation_id"] == "shift" for p in pairs) == adaptive["replays"]


def test_ray_takes_the_same_rounds_and_gives_the_same_numbers(baseline: Path, reference: Path,
                                                               tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    result = run_campaign(_spec(tmp_path, baseline, "run", executor="ray"), progress_stream=None)
    assert result.complete and result.executor == "ray"
    assert (tmp_path / "run" / "campaign.json").read_bytes() == (reference / "campaign.json").read_bytes()
    assert (tmp_path / "run" / "pairs.jsonl").read_bytes() == (reference / "pairs.jsonl").read_bytes()


def _rounds_and_replays(ledger: Path) -> tuple[int, int]:
    try:
        with sqlite3.connect(str(ledger)) as db:
            rounds = db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0]
            replays = db.execute("SELECT COUNT(*) FROM replays").fetchone()[0]
    except sqlite3.Error:
        return 0, 0
    return int(rounds), int(replays)


def test_killed_after_a_round_was_decided_the_resume_takes_the_same_rounds_to_the_same_numbers(
        baseline: Path, reference: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, baseline, "run")
    ledger = tmp_path / "run" / "ledger.sqlite"
    proc = subprocess.Popen(_cli("run", str(spec), "--quiet"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:  # into round 1: its plan is in the ledger, some of its replays too
            assert proc.poll() is None, "the campaign ended before it could be killed"
            rounds, replays = _rounds_and_replays(ledger) if ledger.exists() else (0, 0)
            if rounds >= 1 and replays >= 345:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the campaign did not reach its first adaptive round")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    rounds, kept = _rounds_and_replays(ledger)
    total = len((reference / "pairs.jsonl").read_text().splitlines())
    assert rounds >= 1 and 345 <= kept < total
    resumed = subprocess.run(_cli("run", str(spec), "--resume", "--quiet"), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["resumed"] == kept
    assert (tmp_path / "run" / "campaign.json").read_bytes() == (reference / "campaign.json").read_bytes()
    again = subprocess.run(_cli("run", str(spec), "--resume", "--quiet"), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already complete" in again.stdout + again.stderr


def _bad_spec(tmp_path: Path, ladder: str) -> Path:
    text = CAMPAIGN.format(pipeline=PIPELINE, baseline=tmp_path / "none.jsonl", resolution=RESOLUTION,
                           executor="local", output=tmp_path / "out")
    spec = tmp_path / "bad.yaml"
    spec.write_text("\n".join(f"    ladder: {ladder}" if line.startswith("    ladder:") else line
                              for line in text.splitlines()) + "\n")
    return spec


REFUSED = [
    ("{adaptive: {param: amount, resolution: 0.02}}", "amount (-inf, inf) is unbounded; give the range"),
    ("{adaptive: {param: amount, range: [0, 1]}}", "ladder.adaptive.resolution: required field is missing"),
    ("{adaptive: {param: value, range: [0, 1], resolution: 0.1}}", "cannot ladder 'value' adaptively"),
    ("{adaptive: {param: amount, range: [1, 0], resolution: 0.1}}", "the low end must be below the high end"),
    ("{adaptive: {param: amount, range: [0, 1], resolution: 0.1}, amount: [1]}", "ladder.amount: unknown key"),
    ("{adaptive: {param: amount, range: [0, 1], resolution: 0.1, pairs: 0}}", "ladder.adaptive.pairs"),
]


@pytest.mark.parametrize(("ladder", "says"), REFUSED)
def test_a_bad_adaptive_ladder_is_refused_naming_the_spec_line(tmp_path: Path, ladder: str, says: str) -> None:
    spec = _bad_spec(tmp_path, ladder)
    with pytest.raises(SpecError) as caught:
        load_spec(CampaignSpec, spec)
    line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if text.startswith("    ladder:"))
    assert says in str(caught.value) and f"{spec}:{line}:" in str(caught.value), str(caught.value)


def test_the_command_refuses_it_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    ladder, says = REFUSED[2]
    spec = _bad_spec(tmp_path, ladder)
    proc = subprocess.run(_cli("run", str(spec)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{spec}:" in lines[0] and says in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_nodes_another_pipeline_declared_in_this_process_do_not_hide_this_one_s(baseline: Path,
                                                                                tmp_path: Path) -> None:
    """The decorators' graph holds every pipeline imported so far, and only the nodes that
    declare types or parents: a node it lacks is checked against the baseline instead."""
    load_pipeline(str(ROOT / "tests" / "pipelines" / "structured.py") + ":pipeline", None)
    assert declared_graph().nodes and "score" not in declared_graph().nodes
    CampaignRun.load(_spec(tmp_path, baseline, "run"), stream=None)  # no "unknown node 'score'"
    typo = _spec(tmp_path, baseline, "typo")
    typo.write_text(typo.read_text().replace("node: score", "node: scor"))
    run = CampaignRun.load(typo, stream=None)
    with pytest.raises(SpecError, match=r"unknown node 'scor': no baseline trace ran it; the baseline's nodes are "
                                        r"decide, hold, input, route, score"):
        run.checked_baseline()


def test_a_ladder_following_the_outcome_without_outcomes_is_refused_in_one_line(baseline: Path,
                                                                                tmp_path: Path) -> None:
    """The dose pipeline has no outcome checks and its recording no outcome: a ladder with
    ``event: outcome`` has nothing to follow, and the command says so naming the spec."""
    spec = _spec(tmp_path, baseline, "outcome")
    spec.write_text(spec.read_text().replace("max_replays: 3000}", "max_replays: 3000, event: outcome}"))
    proc = subprocess.run(_cli("run", str(spec)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{spec}:" in lines[0], proc.stderr
    assert "perturbation 'shift' follows the outcome, but the spec has no outcome checks" in lines[0]
    assert not (tmp_path / "outcome" / "ledger.sqlite").exists()
