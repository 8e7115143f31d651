"""Benchmark: ``quiver attribute`` pays for the calls a live dimension changes, not for a
re-run per condition.

Records the support bot (``experiments/support_bot``, its first ``--limit`` messages)
once at v1 on an in-process simulator with the demo's models, counting the LLM calls of
that full run. Then, against each deployment (v1, and each single v2 change), runs
:func:`quiver.experiments.attribute` over the recording with ``--repeats`` repeats and
prints per condition, side by side:

* the LLM calls it sent, read from the simulator's own request counter (and the
  replays' own counts, which must add up to it);
* the LLM calls of full re-runs of the same traces for as many repeats (the recorded
  run's count times R);
* their ratio.

``frozen`` sends nothing. ``sampling`` sends every recorded request again, R times: a
full re-run's worth. Each dimension's condition goes through the run's response cache,
so it sends only the requests the live dimension changed (the dimension's downstream).

Run: ``python benchmarks/attribute.py [--limit 75] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import quiver.experiments.support_bot.sim_models  # noqa: F401  (registers the demo's models)
from quiver._trace import iter_traces
from quiver.experiments import attribute
from quiver.replay import InputItem, LLMClient, Simulator, SimulatorConfig, load_pipeline, record_corpus

DEMO = Path(__file__).resolve().parents[1] / "experiments" / "support_bot"
DEPLOYMENTS = {"v1": "run", "v2 retrieval": "run_v2_retrieval", "v2 tools": "run_v2_tools",
               "v2 prompt": "run_v2_prompt", "v2 model": "run_v2_model"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=75, help="messages to use, from the first (all 75)")
    parser.add_argument("--repeats", type=int, default=2, help="R, replays per trace and live condition (2)")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    inputs = [
        InputItem.from_record(json.loads(line))
        for line in (DEMO / "inputs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ][: args.limit]
    with Simulator(SimulatorConfig(nondeterminism=0.15)) as sim, tempfile.TemporaryDirectory() as tmp:
        client = LLMClient(base_url=sim.url, model="support-bot-planner", api_key="sk-bench",
                           params={"temperature": 0, "seed": 42})
        r0 = sim.stats()["requests"]
        recorded = record_corpus(load_pipeline("pipeline.py:run", DEMO), pipeline_name="support_bot", inputs=inputs,
                                 repeats=1, output_dir=Path(tmp), llm=client, concurrency=args.concurrency,
                                 progress_stream=None)
        full_run = sim.stats()["requests"] - r0
        traces = list(iter_traces(recorded.traces_path))
        rerun = full_run * args.repeats
        print(f"full run: {len(traces)} traces, {full_run} LLM calls; R = {args.repeats} full re-runs: {rerun}")
        print()
        print(f"{'deployment':<13} {'condition':<10} {'LLM calls':>9} {'re-runs':>8} {'ratio':>6} {'seconds':>8}")
        for deployment, name in DEPLOYMENTS.items():
            counted: dict[str, int] = {}
            mark = [sim.stats()["requests"], time.perf_counter()]

            def done(condition: str, counted: dict[str, int] = counted, mark: list[float] = mark,
                     deployment: str = deployment) -> None:
                now = sim.stats()["requests"]
                counted[condition] = int(now - mark[0])
                print(f"{deployment:<13} {condition:<10} {counted[condition]:>9} "
                      f"{rerun if condition != 'frozen' else 0:>8} "
                      f"{counted[condition] / rerun if condition != 'frozen' else 0.0:>6.2f} "
                      f"{time.perf_counter() - mark[1]:>8.1f}")
                mark[0], mark[1] = now, time.perf_counter()

            result = attribute(traces, load_pipeline(f"pipeline.py:{name}", DEMO), client=client,
                               repeats=args.repeats, concurrency=args.concurrency, progress=done)
            if result.llm_calls != counted:
                print(f"MISMATCH: the replays counted {result.llm_calls}, the simulator answered {counted}")
                return 1
            if result.not_reproduced:
                print(f"NOT REPRODUCED frozen: {result.not_reproduced[:3]}")
                return 1
        client.close()
    print()
    print("sampling sends a full re-run's worth of calls (every recorded request again); a dimension's condition "
          "sends only the requests its live dimension changed, and none when today's deployment is the recorded one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
