"""Campaigns on a real Ray cluster: a head and two worker nodes started with ``ray start``
on this machine (tests/ray_cluster.py), shared by every test here (one xdist group).

The project's folder (spec, baseline, a copy of the support bot's pipeline and data)
lies in a folder that one worker node cannot see: it runs in a mount namespace where that
folder is an empty tmpfs. That node runs replays all the same, so the pipeline reaches
it through Ray's runtime environment (the folder shipped as ``working_dir``), not
through the disk it would share with the driver. Each campaign must give a
``campaign.json`` byte-identical to the same campaign run locally: through
``executor: {kind: ray, address: ...}``; as a Ray job (``ray job submit --working-dir``);
with a worker node killed mid-campaign (its raylet and workers, by PID); and, after the
head of another cluster is killed mid-campaign (the driver stops with one line naming
it), resumed on this one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver.experiments._campaign import run_campaign

pytest.importorskip("ray")
if os.geteuid() != 0 or shutil.which("unshare") is None:  # pragma: no cover - CI and this machine run as root
    pytest.skip("a node that cannot see the project's folder needs root (unshare --mount)", allow_module_level=True)

from ray_cluster import Cluster, committed, ray_command  # noqa: E402  (tests/ is on sys.path: tests/conftest.py)

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "experiments" / "support_bot"

SPEC = """\
pipeline: support_bot/pipeline.py:run
name: support_bot
llm:
  simulator:
    models: [support_bot/sim_models.py]
    nondeterminism: 0.15
    faults: {{latency: {latency}}}
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
baseline: baseline.jsonl
graph: support_bot/graph.yaml
select: {{mode: sample, n: 8, seed: 3}}
perturbations:
  - id: cs-override
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variants: [support_bot/prompts/rewriter_terse.txt, support_bot/prompts/rewriter_polite.txt]}}
replay: {{repeats: 2}}
executor: {{kind: {kind}, threads: 2}}
analysis: {{resamples: 200, permutations: 200}}
output: out
"""


def _quiver() -> list[str]:
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


@pytest.fixture(scope="module")
def hidden() -> Iterator[Path]:
    """The folder the project lives in, which one worker node cannot see."""
    folder = Path(tempfile.mkdtemp(prefix="quiver-hidden-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(hidden: Path) -> Iterator[Cluster]:
    """A head (1 CPU) and two worker nodes (1 CPU each), ``b`` blind to ``hidden``."""
    made = Cluster(head_cpus=1)
    try:
        made.add_node("a")
        made.add_node("b", hide=[hidden])
        yield made
    finally:
        made.shutdown()


@pytest.fixture(scope="module")
def project(hidden: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project folder: a copy of the support bot, its baseline, the spec (ray)."""
    folder = hidden / "project"
    shutil.copytree(DEMO, folder / "support_bot", ignore=shutil.ignore_patterns("__pycache__", "runs"))
    rec = tmp_path_factory.mktemp("rec")
    proc = subprocess.run([*_quiver(), "record", str(DEMO / "record.yaml"), "--output", str(rec), "--repeats", "2",
                           "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    shutil.copy(rec / "traces.jsonl", folder / "baseline.jsonl")
    (folder / "spec.yaml").write_text(SPEC.format(kind="ray", latency="{dist: constant, ms: 150}"), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def reference(project: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """``campaign.json`` of the same campaign run locally (no latency: it changes no number)."""
    folder = tmp_path_factory.mktemp("local")
    for item in ("support_bot", "baseline.jsonl"):
        (folder / item).symlink_to(project / item)
    (folder / "spec.yaml").write_text(SPEC.format(kind="local", latency="{dist: none}"), encoding="utf-8")
    result = run_campaign(folder / "spec.yaml", output=str(folder / "out"), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    return (folder / "out" / "campaign.json").read_bytes()


def _run(cluster: Cluster, project: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*_quiver(), "run", str(project / "spec.yaml"), "--output", str(out), "--quiet", *args,
                             "--executor", "ray", "--address", cluster.address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)


def _whencommitted(proc: subprocess.Popen[str], ledger: Path, n: int) -> None:
    """Return once ``n`` replays are in ``ledger`` (the run must still be going)."""
    deadline = time.monotonic() + 300
    while committed(ledger) < n:
        assert proc.poll() is None, f"the run ended before {n} replays were committed: {proc.communicate()}"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def test_a_campaign_on_the_cluster_ships_its_folder_and_gives_the_local_numbers(
    cluster: Cluster, project: Path, reference: bytes, tmp_path: Path
) -> None:
    proc = _run(cluster, project, tmp_path / "out")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    summary = _summary(tmp_path / "out")
    assert summary["complete"] and summary["nodes"] == 3  # the blind node ran replays too
    assert (tmp_path / "out" / "campaign.json").read_bytes() == reference
    assert not (project / "out").exists()  # only the driver writes, and only where it was told


def test_a_ray_job_runs_the_campaign_from_its_working_dir(
    cluster: Cluster, project: Path, reference: bytes, tmp_path: Path
) -> None:
    out = tmp_path / "job-out"
    command = [*ray_command(), "job", "submit", "--address", cluster.dashboard, "--working-dir", str(project),
               "--", *_quiver(), "run", "spec.yaml", "--output", str(out), "--quiet"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=cluster.env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = _summary(out)
    assert summary["complete"] and summary["executor"] == "ray" and summary["nodes"] == 3
    assert (out / "campaign.json").read_bytes() == reference


def test_a_worker_node_killed_mid_campaign_changes_nothing(
    cluster: Cluster, project: Path, reference: bytes, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = _run(cluster, project, out)
    try:
        _whencommitted(proc, out / "ledger.sqlite", 20)
        node = next(n for n in cluster.nodes if n.name == "a")
        killed = cluster.kill_node(node)
        assert killed
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        if not any(n.name.startswith("a") for n in cluster.nodes):
            cluster.add_node("a2")  # the next test has its three nodes again
    assert proc.returncode == 0, stderr[-3000:]
    summary = _summary(out)
    assert summary["complete"] and summary["status"].get("failed", 0) == 0
    assert (out / "campaign.json").read_bytes() == reference


def test_a_lost_head_stops_the_driver_in_one_line_and_another_cluster_finishes_it(
    cluster: Cluster, project: Path, reference: bytes, tmp_path: Path
) -> None:
    doomed = Cluster(head_cpus=1)
    out = tmp_path / "out"
    try:
        doomed.add_node("x")
        proc = _run(doomed, project, out)
        try:
            _whencommitted(proc, out / "ledger.sqlite", 20)
            doomed.kill_head()
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        doomed.shutdown()
    assert proc.returncode == 2, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[:5000]
    assert f"the Ray head at 127.0.0.1:{doomed.port}" in lines[0] and "--resume" in lines[0]
    kept = committed(out / "ledger.sqlite")
    assert kept >= 20
    proc = _run(cluster, project, out, "--resume")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert _summary(out)["resumed"] == kept
    assert (out / "campaign.json").read_bytes() == reference
