"""Interventional attribution (DESIGN.md "Attribution and deployments").

Every recorded trace is replayed against the *current* pipeline, index, tools and
endpoint under these conditions, ``R`` repeats each:

* ``frozen``: every dimension frozen; the trace must reproduce (a trace that does not
  is reported and left out of the rates);
* ``sampling``: LLM calls sent to the endpoint again, every other dimension frozen:
  what the model's own variability does;
* ``retrieval``, ``tools``: sampling, with that dimension live as well (retrieval and
  tool calls run their code against today's index and tools).

Repeat ``r`` of every condition uses the same sample key, so where a live dimension
changes nothing its replays are those of ``sampling``, call for call. A node *diverges*
in a replay when the outputs of its calls (in program order) or their number differ from
the recording. Per node and condition the divergence rate is a mean over replays, with a
95% group-bootstrap interval over inputs; the increment of a dimension is the paired
difference of its rate over ``sampling``'s, with the same interval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quiver._canonical import canonical_json
from quiver._stats import Estimate, GroupBootstrap
from quiver._trace import Trace
from quiver.replay import LLMClient, Replayer, ReplayMode

__all__ = ["CONDITIONS", "DIMENSION_CONDITIONS", "Attribution", "attribute", "write_attribution"]

DIMENSION_CONDITIONS = ("retrieval", "tools")
"""The dimensions unfrozen one at a time on top of sampling."""
CONDITIONS = ("frozen", "sampling", *DIMENSION_CONDITIONS)
"""The replay conditions, in the order they run."""

_MODES = {
    "frozen": ReplayMode(),
    "sampling": ReplayMode().unfreeze("model"),
    "retrieval": ReplayMode().unfreeze("model", "retrieval"),
    "tools": ReplayMode().unfreeze("model", "tools"),
}


@dataclass
class Attribution:
    """What :func:`attribute` found.

    Attributes:
        nodes: The nodes of the recorded traces, in order of first appearance.
        rates: condition -> node -> divergence rate (replays where the node diverged).
        increments: dimension -> node -> rate over ``sampling``'s, paired by replay.
        reproduced: Traces that reproduced with every dimension frozen.
        not_reproduced: Ids of the traces that did not (left out of the rates).
        repeats: R.
        llm_calls: condition -> LLM requests the endpoint answered.
        served_calls: condition -> calls served from the recording.
    """

    nodes: list[str]
    rates: dict[str, dict[str, Estimate]]
    increments: dict[str, dict[str, Estimate]]
    reproduced: int
    not_reproduced: list[str]
    repeats: int
    llm_calls: dict[str, int] = field(default_factory=dict)
    served_calls: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "conditions": list(CONDITIONS), "repeats": self.repeats, "reproduced": self.reproduced,
            "not_reproduced": self.not_reproduced, "llm_calls": self.llm_calls, "served_calls": self.served_calls,
            "nodes": {
                node: {
                    "rates": {c: self.rates[c][node].as_dict("rate") for c in CONDITIONS},
                    "increments": {d: self.increments[d][node].as_dict("increment") for d in DIMENSION_CONDITIONS},
                }
                for node in self.nodes
            },
        }


def _outputs(trace: Trace) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for call in trace.calls:
        if call.kind != "source":
            out.setdefault(call.node, []).append(canonical_json(call.output))
    return out


def _diverged(baseline: Trace, replayed: Trace, nodes: Sequence[str]) -> list[bool]:
    before, after = _outputs(baseline), _outputs(replayed)
    return [before.get(n, []) != after.get(n, []) for n in nodes]


def attribute(
    traces: Sequence[Trace],
    pipeline: Callable[..., Any],
    *,
    client: LLMClient | None = None,
    repeats: int = 3,
    seed: int = 0,
    concurrency: int = 4,
    resamples: int = 1000,
) -> Attribution:
    """Replay ``traces`` under every condition of :data:`CONDITIONS` and attribute each
    node's divergence (see the module docstring).

    Args:
        traces: Recorded traces (failed ones are skipped).
        pipeline: The pipeline as deployed now (the spec's).
        client: The LLM client for live calls.
        repeats: R, replays per trace and live condition.
        seed: Seeds the replays' sample keys and the bootstrap.
        concurrency: Replays at once.
        resamples: Bootstrap resamples.
    """
    usable = [t for t in traces if t.status == "ok"]
    nodes = list(dict.fromkeys(c.node for t in usable for c in t.calls if c.kind != "source"))
    llm_calls: dict[str, int] = {}
    served: dict[str, int] = {}

    def run(condition: str, repeat: int, baselines: Sequence[Trace]) -> list[Any]:
        replayer = Replayer(pipeline, mode=_MODES[condition], client=client, seed=seed, run_id="attribute")
        results = replayer.replay_many(baselines, concurrency=concurrency, perturbation_id="attribute",
                                       repeat=repeat)
        llm_calls[condition] = llm_calls.get(condition, 0) + sum(r.total_llm_calls for r in results)
        served[condition] = served.get(condition, 0) + sum(r.served_calls for r in results)
        return results

    frozen = run("frozen", 0, usable)
    kept = [r.baseline for r in frozen if r.reproduced]
    missing = [r.baseline.trace_id for r in frozen if not r.reproduced]
    groups = {g: i for i, g in enumerate(dict.fromkeys(t.input_id for t in kept))}
    events: dict[str, np.ndarray] = {}
    for condition in CONDITIONS:
        rows = [
            _diverged(r.baseline, r.trace, nodes)
            for repeat in range(repeats if condition != "frozen" else 1)
            for r in (run(condition, repeat, kept) if condition != "frozen" else [f for f in frozen if f.reproduced])
        ]
        events[condition] = np.array(rows, dtype=np.float64).reshape(len(rows), len(nodes))
    unit_groups = np.array([groups[t.input_id] for t in kept] * repeats, dtype=np.int64)
    boot = GroupBootstrap(unit_groups, len(groups), resamples=resamples, seed=seed)
    frozen_boot = GroupBootstrap(unit_groups[: len(kept)], len(groups), resamples=resamples, seed=seed)
    rates = {
        c: {n: (frozen_boot if c == "frozen" else boot).rate(events[c][:, j]) for j, n in enumerate(nodes)}
        for c in CONDITIONS
    }
    increments = {
        d: {n: boot.mean(events[d][:, j] - events["sampling"][:, j]) for j, n in enumerate(nodes)}
        for d in DIMENSION_CONDITIONS
    }
    return Attribution(nodes, rates, increments, len(kept), missing, repeats, llm_calls, served)


def _fmt(e: Estimate) -> str:
    if e.value is None:
        return "n/a"
    ci = f" [{e.ci[0]:+.3f}, {e.ci[1]:+.3f}]" if e.ci else ""
    return f"{e.value:+.3f}{ci}"


def write_attribution(result: Attribution, out: Path) -> tuple[Path, Path]:
    """Write ``attribution.json`` and ``attribution.md`` to ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "attribution.json", out / "attribution.md"
    js.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    lines = [
        "# Divergence attribution", "",
        f"{result.reproduced} traces reproduced with every dimension frozen"
        + (f"; {len(result.not_reproduced)} did not and are left out" if result.not_reproduced else "")
        + f". {result.repeats} repeat(s) per live condition. Rates are the share of replays where the node's "
        "outputs differ from the recording; increments are over sampling alone, with 95% group-bootstrap "
        "intervals over inputs.", "",
        "| node | " + " | ".join(f"rate {c}" for c in CONDITIONS[1:])
        + " | " + " | ".join(f"+{d}" for d in DIMENSION_CONDITIONS) + " |",
        "|---" * (1 + len(CONDITIONS) - 1 + len(DIMENSION_CONDITIONS)) + "|",
    ]
    for node in result.nodes:
        cells = [f"{result.rates[c][node].value:.3f}" for c in CONDITIONS[1:]]
        cells += [_fmt(result.increments[d][node]) for d in DIMENSION_CONDITIONS]
        lines.append(f"| {node} | " + " | ".join(cells) + " |")
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return js, md
