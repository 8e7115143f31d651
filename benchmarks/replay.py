"""Benchmark: replay makes LLM calls only at and downstream of the target.

Records the support bot (``experiments/support_bot``, its first 59 messages) once on an
in-process simulator with the demo's models, then, per perturbation target, replays
every trace where the target ran with one operator and prints, measured in this one
run:

* LLM calls per replayed pair, read from the simulator's own request counter (and the
  replays' per-node counts, which must add up to it);
* LLM calls per trace of a full re-run of the same inputs (the pipeline run again from
  scratch, counted the same way);
* their ratio, and the nodes that made calls in the replays (never a node upstream of
  the target);
* wall time per replayed pair next to per full run.

Run: ``python benchmarks/replay.py [--latency-ms 0] [--limit 59]``. ``--latency-ms``
gives every simulated call a fixed latency, so the time columns show what the saved
calls are worth against a real endpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import quiver.experiments.support_bot.sim_models  # noqa: F401  (registers the demo's models)
from quiver._trace import iter_traces
from quiver.perturbations import make_operator
from quiver.replay import (
    FaultConfig,
    InputItem,
    LatencyConfig,
    LLMClient,
    Simulator,
    SimulatorConfig,
    Target,
    load_pipeline,
    record_corpus,
    replay_many,
)

DEMO = Path(__file__).resolve().parents[1] / "experiments" / "support_bot"
CASES = [
    ("rewriter", "prompt_swap", {"variant": "prompts/rewriter_terse.txt"}),
    ("signal_analysis", "override", {"set": {"web_search_hint": True}}),
    ("context_sufficiency", "override", {"set": {"sufficient": True}}),
    ("route", "override", {"set": {"web_search": "insert"}}),
    ("discovery", "list_edit", {"action": "remove", "count": 1}),
    ("planner", "categorical_flip", {"field": "action", "to": "COMPOSE"}),
    ("composer", "text_edit", {"field": "response", "action": "add_keyword", "keywords": ["anyway"]}),
]
UPSTREAM = {
    "rewriter": set(),
    "signal_analysis": set(),
    "context_sufficiency": set(),
    "route": {"rewriter", "signal_analysis", "context_sufficiency"},
    "discovery": {"rewriter", "signal_analysis", "context_sufficiency"},
    "planner": {"rewriter", "signal_analysis", "context_sufficiency"},
    "composer": {"rewriter", "signal_analysis", "context_sufficiency", "smalltalk"},
}
"""(``route`` is perturbed only where it routed to an answer: a small-talk route has no
``web_search`` gate to set.)

Nodes that run before the target on every path (parallel siblings of the first wave
are not upstream of each other, and are not re-executed either)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fixed latency per simulated call")
    parser.add_argument("--limit", type=int, default=59, help="messages to use, from the first (59)")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    inputs = [
        InputItem.from_record(json.loads(line))
        for line in (DEMO / "inputs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ][: args.limit]
    fn = load_pipeline("pipeline.py:run", DEMO)
    latency = LatencyConfig(dist="constant", ms=args.latency_ms) if args.latency_ms else LatencyConfig()
    sim_config = SimulatorConfig(nondeterminism=0.15, faults=FaultConfig(latency=latency))
    with Simulator(sim_config) as sim, tempfile.TemporaryDirectory() as tmp:
        client = LLMClient(base_url=sim.url, model="support-bot-planner", api_key="sk-bench",
                           params={"temperature": 0, "seed": 42})
        t0, r0 = time.perf_counter(), sim.stats()["requests"]
        recorded = record_corpus(fn, pipeline_name="support_bot", inputs=inputs, repeats=1, output_dir=Path(tmp) / "a",
                                 llm=client, concurrency=args.concurrency, progress_stream=None)
        rerun_s, rerun_calls = time.perf_counter() - t0, sim.stats()["requests"] - r0
        traces = list(iter_traces(recorded.traces_path))
        per_trace = rerun_calls / len(traces)
        print(f"full re-run: {len(traces)} traces, {rerun_calls} LLM calls = {per_trace:.2f} per trace, "
              f"{1000 * rerun_s / len(traces):.1f} ms per trace (concurrency {args.concurrency})")
        print()
        print(f"{'target':<20} {'operator':<17} {'pairs':>5} {'calls/pair':>10} {'full run':>9} {'ratio':>6} "
              f"{'ms/pair':>8} {'ms/run':>7}  nodes called in replays")
        worst = 0.0
        for node, op, params in CASES:
            eligible = [
                t for t in traces
                if any(c.node == node for c in t.calls)
                and (node != "route" or all(c.node != "smalltalk" for c in t.calls))
            ]
            full_calls = sum(sum(c.kind == "llm" for c in t.calls) for t in eligible) / max(len(eligible), 1)
            operator = make_operator(op, params)
            r0, t0 = sim.stats()["requests"], time.perf_counter()
            results = replay_many(eligible, fn, concurrency=args.concurrency, target=Target(node), operator=operator,
                                  client=client, base_dir=DEMO, seed=1)
            seconds = time.perf_counter() - t0
            made = sim.stats()["requests"] - r0
            by_node = Counter[str]()
            for r in results:
                by_node.update(r.llm_calls)
            if sum(by_node.values()) != made:
                print(f"MISMATCH: replays counted {sum(by_node.values())} calls, the simulator answered {made}")
                return 1
            upstream_called = set(by_node) & UPSTREAM[node]
            if upstream_called:
                print(f"UPSTREAM CALLS at target {node}: {sorted(upstream_called)}")
                return 1
            per_pair = made / max(len(results), 1)
            ratio = per_pair / full_calls if full_calls else 0.0
            worst = max(worst, ratio)
            names = ", ".join(f"{n} {c}" for n, c in sorted(by_node.items()))
            print(f"{node:<20} {op:<17} {len(results):>5} {per_pair:>10.2f} {full_calls:>9.2f} {ratio:>6.2f} "
                  f"{1000 * seconds / max(len(results), 1):>8.1f} {1000 * rerun_s / len(traces):>7.1f}  {names}")
        client.close()
    print()
    print(f"calls per replayed pair / calls per full run of the same traces: at most {worst:.2f}; "
          "no replay called a node upstream of its target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
