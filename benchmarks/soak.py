"""Benchmark: a 100,000-replay campaign, locally and on a Ray cluster, at zero latency.

What a long campaign asks of its driver, measured from outside the ``quiver run``
process (sampled once a second from ``/proc``; the ledger's row count read from it):

* its resident memory (RSS) against the replays committed: flat after warm-up means at
  most 10% growth from 10,000 replays to the end of the replay phase (the last sample
  before the last replay is committed: the results are read back right after, the
  run's peak, reported apart); the curve is written as ``soak-rss.svg`` (and
  ``soak-rss.csv``) beside the runs;
* its CPU per replay over the replay phase (from the first committed replay to the
  last: its own process, worker processes and Ray workers not included), with replays a
  second;
* a run SIGKILLed once ``--kill-at`` replays are in its ledger, resumed: the time until
  the resume commits again ("ready"), and its ``campaign.json`` against the
  uninterrupted run's (byte for byte);
* a ``--resume`` of the finished 100,000-replay folder with its results removed: the
  time until it has read and checked its ledger and begins its replay phase (nothing
  left to replay: it writes the results again), and in all;
* the output's size per replay (``ledger.sqlite``, ``replays.jsonl``, ``pairs.jsonl``).

The pipeline (``_soak_pipeline.py``) is small on purpose: one LLM call (``sim-echo``) that
triages a ticket, a router and two branches, every output categorical or boolean, so
that a replay costs little and the driver's own cost per replay shows. The campaign:
``--inputs`` tickets recorded once, an override of the triage (``urgent: true``)
replayed ``repeats`` times per trace and its controls, about ``--replays`` jobs. The
simulator answers at once (no latency).

Run: ``python benchmarks/soak.py [--replays 100000] [--executors local,ray]
[--ray-nodes 3] [--kill-at 50000] [--out DIR]``. It takes long on a small machine:
three runs of ``--replays`` replays locally (uninterrupted; killed and resumed), one on
the cluster.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # tests/ray_cluster.py: a cluster started with ray start

from ray_cluster import committed  # noqa: E402

from _support_bot import quiver  # noqa: E402  (benchmarks/, first on the path)

TICKETS = ("billing", "bug", "thanks", "refund", "login", "invoice", "crash", "upgrade")

RECORD = """\
pipeline: {here}/_soak_pipeline.py:pipeline
name: soak
llm:
  simulator: {{}}
  model: sim-echo
  params: {{temperature: 0, seed: 7}}
inputs: {inputs}
repeats: 2
concurrency: 8
seed: 0
output: {output}
"""

SPEC = """\
pipeline: {here}/_soak_pipeline.py:pipeline
name: soak
llm:
  simulator: {{}}
  model: sim-echo
  params: {{temperature: 0, seed: 7}}
baseline: {baseline}
select: {{mode: all}}
perturbations:
  - id: urgent
    node: triage
    op: override
    params: {{set: {{urgent: true}}}}
    repeats: {repeats}
replay: {{repeats: 1, controls: {controls}}}
executor: {executor}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {output}
"""


@dataclass
class Sample:
    t: float
    rss_mb: float
    cpu_s: float
    committed: int


@dataclass
class Run:
    name: str
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    lines: list[tuple[float, str]] = field(default_factory=list)
    returncode: int | None = None

    def at(self, committed: int) -> Sample | None:
        """The first sample with at least ``committed`` replays in the ledger."""
        return next((s for s in self.samples if s.committed >= committed), None)

    def last_replaying(self) -> Sample | None:
        """The last sample before the ledger held its final count: the end of the replay
        phase. (The results are read back as soon as the last replay is committed: the
        first sample at the final count may already hold them, the run's peak.)"""
        final = max((s.committed for s in self.samples), default=0)
        return next((s for s in reversed(self.samples) if 0 < s.committed < final), None)

    def phase(self) -> tuple[Sample, Sample] | None:
        """The samples at the first and the last replay committed."""
        moving = [s for s in self.samples if s.committed > 0]
        if len(moving) < 2:
            return None
        last = next(s for s in moving if s.committed == moving[-1].committed)
        return moving[0], last


def _proc(pid: int) -> tuple[float, float] | None:
    """RSS (MB) and CPU seconds (user + system) of process ``pid`` alone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def run(name: str, spec: Path, out: Path, *args: str, kill_at: int | None = None,
        env: dict[str, str] | None = None) -> Run:
    """``quiver run SPEC --output OUT ARGS`` sampled once a second (SIGKILLed once
    ``kill_at`` replays are committed)."""
    result = Run(name)
    start = time.perf_counter()
    proc = subprocess.Popen([*quiver(), "run", str(spec), "--output", str(out), *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            result.lines.append((time.perf_counter() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None:
        found = _proc(proc.pid)
        count = committed(out / "ledger.sqlite")
        if found is not None:
            result.samples.append(Sample(time.perf_counter() - start, found[0], found[1], count))
        if kill_at is not None and count >= kill_at:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(1.0)
    proc.wait()
    reader.join(timeout=10)
    result.seconds = time.perf_counter() - start
    result.returncode = proc.returncode
    print(f"  {name}: exit {proc.returncode} in {result.seconds:.0f} s", file=sys.stderr, flush=True)
    if kill_at is None and proc.returncode not in (0, 1):
        print("\n".join(line for _, line in result.lines[-20:]), file=sys.stderr)
    return result


def prepare(folder: Path, inputs: int) -> Path:
    """The inputs, and their baseline recorded once (zero latency)."""
    with (folder / "inputs.jsonl").open("w") as fh:
        for i in range(inputs):
            fh.write(json.dumps({"input_id": f"t{i:05d}", "text": f"{TICKETS[i % len(TICKETS)]} ticket number {i}"})
                     + "\n")
    spec = folder / "record.yaml"
    spec.write_text(RECORD.format(here=HERE, inputs=folder / "inputs.jsonl", output=folder / "baseline"))
    subprocess.run([*quiver(), "record", str(spec), "--quiet"], check=True, capture_output=True, text=True)
    return folder / "baseline" / "traces.jsonl"


def write_spec(folder: Path, name: str, baseline: Path, replays: int, inputs: int, executor: str) -> Path:
    controls = 1
    repeats = max(1, round(replays / (2 * inputs)) - controls)  # two baseline traces per input
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(here=HERE, baseline=baseline, repeats=repeats, controls=controls, executor=executor,
                                cache=folder / "emb", output=folder / name))
    return path


def plot(runs: list[Run], path: Path) -> None:
    """The driver's RSS against the replays committed, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        points = [(s.committed, s.rss_mb) for s in r.samples if s.committed > 0]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=r.name)
    ax.set_xlabel("replays committed")
    ax.set_ylabel("driver RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("quiver run: the driver's resident memory over a campaign")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    with path.with_suffix(".csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["run", "seconds", "rss_mb", "cpu_s", "committed"])
        for r in runs:
            for s in r.samples:
                out.writerow([r.name, f"{s.t:.1f}", f"{s.rss_mb:.1f}", f"{s.cpu_s:.2f}", s.committed])


def report(r: Run, total: int) -> dict[str, object]:
    """The RSS growth, CPU per replay and rate of a run."""
    out: dict[str, object] = {"run": r.name, "seconds": round(r.seconds, 1)}
    early, late = r.at(total // 10), r.last_replaying()
    if early is not None and late is not None and late.committed > early.committed:
        out.update(rss_10pct_mb=round(early.rss_mb, 1), rss_10pct_at=early.committed,
                   rss_end_mb=round(late.rss_mb, 1), rss_end_at=late.committed,
                   rss_growth=round(late.rss_mb / early.rss_mb - 1, 3))
    out["rss_peak_mb"] = round(max((s.rss_mb for s in r.samples), default=0.0), 1)
    phase = r.phase()
    if phase is not None:
        first, last = phase
        n = last.committed - first.committed
        if n > 0:
            out.update(replays_in_phase=n, phase_s=round(last.t - first.t, 1),
                       replays_per_s=round(n / max(last.t - first.t, 1e-9), 1),
                       driver_cpu_ms_per_replay=round(1000 * (last.cpu_s - first.cpu_s) / n, 3),
                       driver_cpu_share=round((last.cpu_s - first.cpu_s) / max(last.t - first.t, 1e-9), 3))
    return out


def sizes(out: Path, replays: int) -> dict[str, float]:
    names = ("ledger.sqlite", "replays.jsonl", "pairs.jsonl")
    found = {n: (out / n).stat().st_size for n in names if (out / n).exists()}
    return {f"{n} B/replay": round(v / replays, 1) for n, v in found.items()}


def digest(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest() if path.exists() else "missing"


def first_commit_after(r: Run, before: int) -> float | None:
    return next((s.t for s in r.samples if s.committed > before), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replays", type=int, default=100_000, help="jobs of each campaign, about (100000)")
    parser.add_argument("--inputs", type=int, default=200, help="tickets, each recorded twice (200)")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray (local,ray)")
    parser.add_argument("--ray-nodes", type=int, default=3, help="worker nodes of the Ray cluster (3)")
    parser.add_argument("--kill-at", type=int, default=None, help="SIGKILL the second local run here (half)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs in this folder")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-and-resumed local run")
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="quiver-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    kill_at = args.kill_at or args.replays // 2
    load = os.getloadavg()
    print(f"soak in {folder}; {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
          file=sys.stderr, flush=True)
    baseline = prepare(folder, args.inputs)
    runs: list[Run] = []
    results: dict[str, object] = {"cpus": os.cpu_count(), "load_at_start": [round(x, 2) for x in load]}
    executors = args.executors.split(",")
    if "local" in executors:
        spec = write_spec(folder, "local", baseline, args.replays, args.inputs, "{kind: local, concurrency: 32}")
        local = run("local", spec, folder / "local", "--quiet")
        jobs = committed(folder / "local" / "ledger.sqlite")
        runs.append(local)
        results["local"] = {**report(local, jobs), **sizes(folder / "local", jobs), "jobs": jobs}
        save(folder, results, runs)
    if "local" in executors and not args.no_kill:
        killed_spec = write_spec(folder, "killed", baseline, args.replays, args.inputs,
                                 "{kind: local, concurrency: 32}")
        run("killed", killed_spec, folder / "killed", "--quiet", kill_at=kill_at)
        kept = committed(folder / "killed" / "ledger.sqlite")
        resumed = run("resumed", killed_spec, folder / "killed", "--quiet", "--resume")
        ready = first_commit_after(resumed, kept)
        results["killed_and_resumed"] = {
            "killed_with": kept, "resume_ready_s": round(ready, 1) if ready is not None else None,
            "resume_s": round(resumed.seconds, 1),
            "campaign_json_identical": (folder / "killed" / "campaign.json").read_bytes()
            == (folder / "local" / "campaign.json").read_bytes(),
            "md5": [digest(folder / "local" / "campaign.json"), digest(folder / "killed" / "campaign.json")]}
        save(folder, results, runs)
    if "local" in executors:
        whole = folder / "whole"
        shutil.copytree(folder / "local", whole)
        for name in ("campaign.json", "report.md", "report.html", "summary.json", ".finished"):
            (whole / name).unlink(missing_ok=True)
        again = run("resume of the finished ledger", spec, whole, "--resume")
        replays_line = next((t for t, line in again.lines if line.startswith("replays")), None)
        results["resume_of_whole_ledger"] = {
            "ready_s": round(replays_line, 1) if replays_line is not None else None, "total_s": round(again.seconds, 1),
            "campaign_json_identical": digest(whole / "campaign.json") == digest(folder / "local" / "campaign.json")}
        save(folder, results, runs)
    if "ray" in executors:
        from ray_cluster import Cluster

        cluster = Cluster(head_cpus=1)
        try:
            for i in range(args.ray_nodes):
                cluster.add_node(f"w{i}")
            project = folder / "ray-project"  # what is shipped to the workers: the spec and its pipeline
            project.mkdir(exist_ok=True)
            shutil.copy(HERE / "_soak_pipeline.py", project / "_soak_pipeline.py")
            spec = write_spec(project, "ray", baseline, args.replays, args.inputs,
                              f"{{kind: ray, address: '{cluster.address}'}}")
            spec.write_text(spec.read_text().replace(str(HERE / "_soak_pipeline.py"), "_soak_pipeline.py")
                            .replace(f"output: {project / 'ray'}", f"output: {folder / 'ray'}")
                            .replace(f"cache_dir: {project / 'emb'}", f"cache_dir: {folder / 'emb'}"))
            ray_run = run(f"ray, {args.ray_nodes} worker nodes", spec, folder / "ray", "--quiet", env=cluster.env)
        finally:
            cluster.shutdown()
        jobs = committed(folder / "ray" / "ledger.sqlite")
        runs.append(ray_run)
        results["ray"] = {**report(ray_run, jobs), **sizes(folder / "ray", jobs), "jobs": jobs,
                          "campaign_md5": digest(folder / "ray" / "campaign.json")}
    save(folder, results, runs)
    print(json.dumps(results, indent=2))
    return 0


def save(folder: Path, results: dict[str, object], runs: list[Run]) -> None:
    """The figures so far (``soak.json``) and the RSS curve (``soak-rss.svg``, ``.csv``)."""
    if runs:
        plot(runs, folder / "soak-rss.svg")
        results["plot"] = str(folder / "soak-rss.svg")
    (folder / "soak.json").write_text(json.dumps(results, indent=2) + "\n")



if __name__ == "__main__":
    raise SystemExit(main())
