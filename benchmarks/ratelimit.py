"""Benchmark: a campaign paced to the endpoint's rate limits, against per-call backoff alone.

Records the support bot (``experiments/support_bot/record.yaml``, 225 traces) once, then
runs the same campaign (the perturbations of ``benchmarks/campaign.py``, about
``--replays`` jobs) four times, each against a simulator of its own
(``benchmarks/_limited_sim.py``, started fresh so its windows start empty) that allows
each model ``--rpm`` requests and ``--tpm`` tokens a minute over a sliding window of
``--window-s`` seconds, answers in ``--latency-ms`` and sends ``x-ratelimit-*`` headers:

* ``local paced`` and ``ray paced``: the spec states the limits (``llm.limits``), the
  run paces every request to them (and to the headers) from one schedule, shared by the
  local executor's threads or, on Ray, by every actor through one coordinator actor;
* ``local backoff`` and ``ray backoff``: ``llm.limits: {pace: false}``: each call backs
  off on its own after a 429 (retry-after, then exponential backoff): the engine's
  behaviour before pacing.

Every model of the support bot has its own limits (as a hosted provider's are, per key
and model); the planner takes most calls and is the limit that binds. For each run the
benchmark prints, per model and measured at the simulator: the requests and tokens
admitted, each as a share of what the limit allowed over the span from the run's first
to its last admitted request (used / allowed), the share of attempts answered 429; and
for the run: the replays done and failed (a call that met 429 after its last attempt
fails its replay), the replay phase's wall time and the ideal, ``requests / rpm`` of the
binding model (the work over the limit).

Run: ``python benchmarks/ratelimit.py [--replays 800] [--rpm 600] [--tpm 400000]
[--window-s 10] [--latency-ms 200] [--concurrency 64] [--executors local,ray]``. The
defaults make the limit the bottleneck (64 replays at once at 200 ms could send about 19,000
requests a minute) and each run last about 100 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign import PERTURBATIONS, _patched, eligible_counts, ray_cluster, ray_slots, sizing

from quiver.experiments._campaign import CampaignRun, run_campaign
from quiver.replay import SimulatorConfig

from _support_bot import DEMO, record_baseline  # benchmarks/, first on the path

SPEC = """\
pipeline: {demo}/pipeline.py:run
name: support_bot
llm:
  base_url: {url}
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
  limits: {limits}
baseline: {baseline}
graph: {demo}/graph.yaml
select: {select}
perturbations:
{perturbations}replay: {{repeats: {repeats}, controls: 0}}
executor: {executor}
analysis: {{resamples: 100, permutations: 100, cache_dir: {cache}}}
output: {output}
"""


@dataclass
class Arm:
    label: str
    executor: str
    paced: bool
    concurrency: int
    jobs: int = 0
    done: int = 0
    failed: int = 0
    phase_s: float = 0.0
    sim: dict[str, Any] | None = None


class LimitedSimulator:
    """``benchmarks/_limited_sim.py`` as a subprocess: its URL, and its counts once stopped."""

    def __init__(self, folder: Path, config: SimulatorConfig) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.config_file, self.ready, self.stats = folder / "sim.json", folder / "sim.url", folder / "sim-stats.json"
        self.config_file.write_text(config.model_dump_json(), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DEMO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_limited_sim.py")),
                                      str(self.config_file), str(self.ready), str(self.stats)], env=env)
        deadline = time.monotonic() + 60
        while not self.ready.is_file() or not self.ready.read_text(encoding="utf-8"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("the limited simulator did not start")
            time.sleep(0.1)
        self.url = self.ready.read_text(encoding="utf-8").strip()

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        found: dict[str, Any] = json.loads(self.stats.read_text(encoding="utf-8"))
        return found


def run_arm(folder: Path, arm: Arm, block: str, args: argparse.Namespace, *, baseline: Path, repeats: int,
            sample: int | None) -> Arm:
    name = arm.label.replace(" ", "-")
    sim = LimitedSimulator(folder / f"{name}-sim", SimulatorConfig(
        models=["sim_models"], nondeterminism=0.15,
        faults={"latency": {"dist": "constant", "ms": args.latency_ms}},
        limits={"requests_per_minute": args.rpm, "tokens_per_minute": args.tpm, "window_s": args.window_s},
    ))
    limits = (f"{{requests_per_minute: {args.rpm}, tokens_per_minute: {args.tpm}}}" if arm.paced
              else "{pace: false}")
    select = "{mode: all}" if sample is None else f"{{mode: sample, n: {sample}, seed: 3}}"
    spec = folder / f"{name}.yaml"
    spec.write_text(SPEC.format(
        demo=DEMO, url=sim.url, limits=limits, baseline=baseline, select=select,
        perturbations=PERTURBATIONS.format(demo=DEMO), repeats=repeats, executor=block,
        cache=folder / f"{name}-emb", output=folder / name), encoding="utf-8")
    print(f"  {arm.label} ...", file=sys.stderr, flush=True)
    phase = [0.0]

    def timed(original: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                phase[0] += time.perf_counter() - start
        return wrapper

    try:
        with _patched(CampaignRun, "_replay_jobs", timed):
            result = run_campaign(spec, executor=arm.executor, progress_stream=None)
    finally:
        arm.sim = sim.stop()
    arm.jobs, arm.done, arm.failed = result.jobs, result.done, result.status.get("failed", 0)
    arm.phase_s = phase[0]
    return arm


def report(arms: list[Arm], args: argparse.Namespace) -> None:
    print(f"limits per model: {args.rpm} requests and {args.tpm} tokens a minute, sliding window "
          f"{args.window_s:g} s; latency {args.latency_ms:g} ms. used / allowed: admitted at the simulator over "
          "what the limit allowed in the replay phase (from the first request to the last committed replay)")
    print(f"{'run':<14} {'model':<26} {'admitted':>8} {'429s':>6} {'429 share':>9} {'req used/allowed':>16} "
          f"{'tok used/allowed':>16}")
    for arm in arms:
        assert arm.sim is not None
        minutes = max(arm.phase_s, 1e-9) / 60
        for model, c in sorted(arm.sim["limits"].items(), key=lambda kv: -kv[1]["admitted"]):
            attempts = c["admitted"] + c["refused"]
            print(f"{arm.label:<14} {model:<26} {c['admitted']:>8.0f} {c['refused']:>6.0f} "
                  f"{c['refused'] / max(attempts, 1):>9.3f} {c['admitted'] / (args.rpm * minutes):>16.3f} "
                  f"{c['tokens'] / (args.tpm * minutes):>16.3f}")
    print()
    print(f"{'run':<14} {'jobs':>5} {'failed':>6} {'binding model':<26} {'ideal s':>8} {'replay phase s':>14} "
          f"{'ideal/actual':>12} {'its requests s':>14} {'429 share (all)':>15}")
    for arm in arms:
        assert arm.sim is not None
        binding, c = max(arm.sim["limits"].items(), key=lambda kv: kv[1]["admitted"])
        ideal = c["admitted"] / args.rpm * 60
        admitted = sum(m["admitted"] for m in arm.sim["limits"].values())
        refused = sum(m["refused"] for m in arm.sim["limits"].values())
        print(f"{arm.label:<14} {arm.jobs:>5} {arm.failed:>6} {binding:<26} {ideal:>8.1f} "
              f"{arm.phase_s:>14.1f} {ideal / max(arm.phase_s, 1e-9):>12.3f} {c['span_s']:>14.1f} "
              f"{refused / max(admitted + refused, 1):>15.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replays", type=int, default=800, help="jobs in each campaign, about (800)")
    parser.add_argument("--rpm", type=int, default=600, help="requests a minute per model (600)")
    parser.add_argument("--tpm", type=int, default=400_000, help="tokens a minute per model (400000)")
    parser.add_argument("--window-s", type=float, default=10.0, help="the limits' sliding window (10)")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="latency per simulated call (200)")
    parser.add_argument("--concurrency", type=int, default=64, help="local replays at once (64)")
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray (local,ray)")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray instance (2)")
    args = parser.parse_args()
    executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="quiver-bench-ratelimit-") as tmp:
        folder = Path(tmp)
        baseline = record_baseline(folder)
        repeats, sample, jobs = sizing(args.replays, eligible_counts(baseline))
        sized = {"baseline": baseline, "repeats": repeats, "sample": sample}
        print(f"campaign: {jobs} jobs", file=sys.stderr, flush=True)
        arms: list[Arm] = []
        for executor in executors:
            if executor == "local":
                block = f"{{kind: local, concurrency: {args.concurrency}}}"
                for paced in (True, False):
                    arm = Arm(f"local {'paced' if paced else 'backoff'}", "local", paced, args.concurrency)
                    arms.append(run_arm(folder, arm, block, args, **sized))
                continue
            with ray_cluster(1, args.ray_cpus, simulated=False):
                block, concurrency, _ = ray_slots(args.ray_cpus)
                for paced in (True, False):
                    arm = Arm(f"ray {'paced' if paced else 'backoff'}", "ray", paced, concurrency)
                    arms.append(run_arm(folder, arm, block, args, **sized))
        print()
        print(f"load average (1, 5, 15 min) at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at the end "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        report(arms, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
