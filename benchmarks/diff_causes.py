"""``quiver diff`` and ``quiver compare`` on the support bot's v2 deployments, all 75
inputs x 3 repeats, against ``deployment_truth`` (the causes known by construction).

Records v1, each single v2 change, the two-change deployment (retrieval + prompt) and
v1 at another seed, then prints per deployment:

* known pairs: v1/v2 traces of the same input and repeat whose first divergence is the
  truth's call (every call before it has the same outcome, it has not), and the share
  where ``quiver diff`` names the truth's cause (the bar: 95%);
* false causes: tool/retrieval/prompt/model named for a pair of one deployment (within
  each corpus; v1 at two seeds), and a dimension named across v1/v2 that was not changed
  (the bar: 0);
* ``quiver compare v1 v2``: the nodes it flags, the nodes the truth moves (with the
  number of inputs), which must be flagged and which must not (the rule of
  tests/experiments/test_diff_support_bot.py: must not = the truth never moves the node's
  output; must = the truth moves it on r >= 5 of the n inputs where it ran with
  ``(1 - r/n)**n < ALPHA / (2m)``, m = compare's ``tests.excess``), and its exit code.

Usage::

    python benchmarks/diff_causes.py [--repeats 3] [--out /tmp/diff_causes]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from quiver import Trace, diff_traces, load_traces
from quiver._canonical import canonical_json
from quiver._compare import ALPHA
from quiver.experiments.support_bot.deployment_truth import Cause, argmax_traces, deployment_causes

from _support_bot import DEMO, quiver as quiver_command

DEPLOYMENTS: dict[str, tuple[str, ...]] = {
    "retrieval": ("retrieval",), "tools": ("tools",), "prompt": ("prompt",), "model": ("model",),
    "retrieval_prompt": ("retrieval", "prompt"),
}
DIMENSIONS = {"retrieval": "retrieval", "tools": "tool", "prompt": "prompt", "model": "model"}
FALSE = {"tool", "retrieval", "prompt", "model"}
MIN_MOVED = 5
"""A node the change moves on fewer inputs than this may go unflagged by compare."""


def record(root: Path, name: str, spec: str, seed: int, repeats: int) -> Path:
    text = (DEMO / f"{spec}.yaml").read_text(encoding="utf-8").replace("seed: 0", f"seed: {seed}")
    text = text.replace("pipeline.py", str(DEMO / "pipeline.py"))
    text = text.replace("[sim_models.py]", f"[{DEMO / 'sim_models.py'}]")
    path = root / f"{name}.yaml"
    path.write_text(text.replace("inputs: inputs.jsonl", f"inputs: {DEMO / 'inputs.jsonl'}"), encoding="utf-8")
    subprocess.run([*quiver_command(), "record", str(path), "--quiet", "--repeats", str(repeats), "--output",
                    str(root / name)], check=True, capture_output=True)
    return root / name / "traces.jsonl"


def _outcome(call: Any) -> str:
    text: str = canonical_json([call.output, call.decision, call.error.model_dump() if call.error else None])
    return text


def known_cause(a: Trace, b: Trace, truth: Cause) -> str | None:
    """The cause diff must name when the pair first diverges at the truth's call."""
    if truth.cause is None:
        return None
    others = {c.call_path: c for c in b.calls}
    for call in a.calls:
        other = others.get(call.call_path)
        same = other is not None and _outcome(call) == _outcome(other)
        if call.call_path == truth.call_path:
            return None if same else DIMENSIONS[truth.cause]
        if not same:
            return None
    return None


def _causes(pairs: list[tuple[Trace, Trace]]) -> Counter[str]:
    return Counter(f.cause for f in (diff_traces(a, b).first for a, b in pairs) if f is not None)


def _within(corpus: list[Trace]) -> list[tuple[Trace, Trace]]:
    return [(a, b) for i, a in enumerate(corpus) for b in corpus[i + 1:] if a.input_id == b.input_id]


def _cross(before: list[Trace], after: list[Trace]) -> list[tuple[Trace, Trace]]:
    return [(a, b) for a in before for b in after if a.input_id == b.input_id]


def flag_rule(data: dict[str, Any], truth: dict[str, Cause], traces: list[Trace]) -> tuple[set[str], set[str]]:
    rows = data["nodes"]
    m = data["tests"]["excess"]
    ran: dict[str, set[str]] = {}
    for t in traces:
        for c in t.calls:
            ran.setdefault(c.node, set()).add(t.input_id)
    moved = Counter(node for cause in truth.values() for node in cause.reached)
    must = {r["node"] for r in rows if moved[r["node"]] >= MIN_MOVED
            and (1 - moved[r["node"]] / len(ran[r["node"]])) ** len(ran[r["node"]]) < ALPHA / (2 * m)}
    return must, {r["node"] for r in rows if not moved[r["node"]]}


def compare(root: Path, before: Path, after: Path, name: str) -> tuple[int, dict[str, Any], float]:
    t0 = time.perf_counter()
    argv = ["compare", str(before), str(after), "--out", str(root / f"compare-{name}")]
    proc = subprocess.run([*quiver_command(), *argv], capture_output=True, text=True)
    data = json.loads((root / f"compare-{name}" / "compare.json").read_text(encoding="utf-8"))
    return proc.returncode, data, time.perf_counter() - t0


def evaluate(root: Path, paths: dict[str, Path], corpora: dict[str, list[Trace]], name: str,
             truth: dict[str, Cause]) -> dict[str, Any]:
    v1, v2 = corpora["v1"], corpora[name]
    twin = {(t.input_id, t.repeat): t for t in v2}
    known = right = 0
    t0 = time.perf_counter()
    for a in v1:
        b = twin[(a.input_id, a.repeat)]
        expected = known_cause(a, b, truth[a.input_id])
        if expected is not None:
            known += 1
            first = diff_traces(a, b).first
            right += first is not None and first.cause == expected
    within = _causes(_within(v2))
    cross = _causes(_cross(v1, v2))
    diff_s = time.perf_counter() - t0
    changed = {DIMENSIONS[d] for d in DEPLOYMENTS[name]}
    code, data, cmp_s = compare(root, paths["v1"], paths[name], name)
    must, must_not = flag_rule(data, truth, [*v1, *v2])
    flagged = set(data["reached"])
    moved = Counter(node for cause in truth.values() for node in cause.reached)
    return {
        "deployment": name, "inputs_moved": sum(c.cause is not None for c in truth.values()),
        "known_pairs": known, "right": right, "right_rate": round(right / known, 4) if known else None,
        "false_within": sum(within[c] for c in FALSE), "false_across": sum(n for c, n in cross.items()
                                                                             if c in FALSE - changed),
        "causes_across": dict(cross), "flagged": sorted(flagged), "truth_moves": dict(moved),
        "must_flag": sorted(must), "must_not_flag": sorted(must_not), "missed": sorted(must - flagged),
        "wrongly_flagged": sorted(flagged & must_not), "compare_exit": code,
        "less_consistent": data["less_consistent"], "diff_seconds": round(diff_s, 2),
        "compare_seconds": round(cmp_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="diff_causes-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = {"v1": record(root, "v1", "record", 0, args.repeats),
             "v1-seed7": record(root, "v1-seed7", "record", 7, args.repeats)}
    paths |= {n: record(root, n, f"record_v2_{n}", 0, args.repeats) for n in DEPLOYMENTS}
    corpora = {n: load_traces(p).traces for n, p in paths.items()}
    print(f"recorded {len(paths)} corpora of {len(corpora['v1'])} traces in {time.perf_counter() - t0:.0f} s",
          flush=True)
    baseline = argmax_traces(())
    rows = []
    same = _causes([*_within(corpora["v1"]), *_cross(corpora["v1"], corpora["v1-seed7"])])
    code, data, _ = compare(root, paths["v1"], paths["v1-seed7"], "seeds")
    print(f"v1 vs v1 at seed 7: diff causes {dict(same)} (false {sum(same[c] for c in FALSE)}); compare exit "
          f"{code}, flagged {data['reached']}, less consistent {data['less_consistent']}")
    for name, dims in DEPLOYMENTS.items():
        row = evaluate(root, paths, corpora, name, deployment_causes(dims, baseline=baseline))
        rows.append(row)
        print(f"v2 {name}: {row['inputs_moved']} inputs moved; known pairs {row['known_pairs']}, right cause "
              f"{row['right']} ({row['right_rate']}); false causes within {row['false_within']}, across "
              f"{row['false_across']} (across: {row['causes_across']}); compare exit {row['compare_exit']} "
              f"flags {row['flagged']}, truth moves {row['truth_moves']}, must {row['must_flag']}, missed "
              f"{row['missed']}, wrongly flagged {row['wrongly_flagged']}; diff {row['diff_seconds']} s, "
              f"compare {row['compare_seconds']} s", flush=True)
    print(f"done in {time.perf_counter() - t0:.0f} s; folder {root}")
    (root / "diff_causes.json").write_text(json.dumps({"seeds": {"causes": dict(same), "compare_exit": code,
                                                                   "flagged": data["reached"]},
                                                         "deployments": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
