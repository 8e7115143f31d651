"""A campaign's jobs: which traces each perturbation replays, and in which order.

Every perturbation's parameter sets (prompt variants x ladder steps) x the selected
traces where its target call ran x the replay repeats, each with its job id and sample
keys fixed up front (seed, trace, perturbation step, repeat). Then the control replays
(``replay.controls`` per trace): one control per target and kind, over every trace a
perturbation of that target selected, the target served as recorded (``identity``, for
output operators) or run live unchanged (for execution operators), downstream live: the
noise the thresholds are held against.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from quiver._trace import Trace
from quiver.experiments._config import CampaignSpec, PerturbationSpec
from quiver.perturbations import get_operator
from quiver.replay import ReplayJob, sample_ids

__all__ = ["eligible_traces", "sample_traces", "select_traces", "expand_jobs", "Control", "controls", "distinct"]


def _margin(call: Any) -> float | None:
    """The smallest gap between the top token logprob and the runner-up in a call's
    recorded response (None without alternatives)."""
    if call.response is None or not call.response.logprobs:
        return None
    gaps = []
    for entry in call.response.logprobs:
        top = sorted((alt.get("logprob", float("-inf")) for alt in entry.get("top_logprobs") or []), reverse=True)
        if len(top) >= 2:
            gaps.append(top[0] - top[1])
    return min(gaps) if gaps else None


def eligible_traces(traces: Sequence[Trace], node: str, occurrence: int = 0) -> list[Trace]:
    """The ok traces where the ``occurrence``-th call of ``node`` ran."""
    return [t for t in traces
            if t.status == "ok" and any(c.node == node and c.occurrence == occurrence for c in t.calls)]


def sample_traces(traces: Sequence[Trace], n: int | None, seed: int, key: str) -> list[Trace]:
    """A seeded sample of ``n`` of ``traces`` (all when ``n`` is None or not smaller), in
    their order; ``key`` (a perturbation id, a template id) gives each its own draw."""
    if n is None or n >= len(traces):
        return list(traces)
    keep = set(random.Random(f"{seed}|{key}").sample(range(len(traces)), n))
    return [t for i, t in enumerate(traces) if i in keep]


def select_traces(spec: CampaignSpec, perturbation: PerturbationSpec, traces: Sequence[Trace]) -> list[Trace]:
    """The baseline traces a perturbation replays: ok traces where its target call ran,
    filtered by the spec's ``select``."""
    eligible = eligible_traces(traces, perturbation.node, perturbation.occurrence)
    select = spec.select
    if select.mode == "sample":
        return sample_traces(eligible, select.n, select.seed, perturbation.id)
    if select.mode == "near_boundary":
        scored = []
        for t in eligible:
            call = next(c for c in t.calls if c.node == perturbation.node and c.occurrence == perturbation.occurrence)
            margin = _margin(call)
            if margin is not None and margin <= select.margin:
                scored.append((margin, t.trace_id, t))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [t for _, _, t in scored[: select.n or len(scored)]]
    return eligible


def expand_jobs(spec: CampaignSpec, traces: Sequence[Trace]) -> tuple[list[ReplayJob], dict[str, int], dict[str, int]]:
    """Every job of the campaign in a fixed order, with the step of each job and the
    traces each perturbation left out (no target call, or not selected)."""
    jobs: list[ReplayJob] = []
    steps: dict[str, int] = {}
    left_out: dict[str, int] = {}
    payloads: dict[str, dict[str, Any]] = {}

    def payload(trace: Trace) -> dict[str, Any]:  # one JSON form per trace, shared by its jobs
        if trace.trace_id not in payloads:
            payloads[trace.trace_id] = trace.model_dump(mode="json")
        return payloads[trace.trace_id]

    keyed = sample_ids(traces)
    for p in spec.perturbations:
        chosen = select_traces(spec, p, traces)
        left_out[p.id] = len(traces) - len(chosen)
        parameter_sets = p.steps()
        repeats = p.repeats or spec.replay.repeats
        for step, params in enumerate(parameter_sets):
            pid = p.id if len(parameter_sets) == 1 else f"{p.id}#{step}"
            for trace in chosen:
                for r in range(repeats):
                    job_id = f"{p.id}/{step}/{trace.trace_id}/{r}"
                    steps[job_id] = step
                    jobs.append(ReplayJob(
                        job_id=job_id, seq=len(jobs), trace=payload(trace), perturbation_id=pid, node=p.node,
                        occurrence=p.occurrence, op=p.op, params=params, repeat=r, sample_id=keyed[trace.trace_id],
                    ))
    for control in distinct(controls(spec, traces)):
        for trace in control.traces:
            for r in range(spec.replay.controls):
                job_id = f"{control.id}/0/{trace.trace_id}/{r}"
                steps[job_id] = 0
                jobs.append(ReplayJob(
                    job_id=job_id, seq=len(jobs), trace=payload(trace), perturbation_id=control.id,
                    node=control.node,
                    occurrence=control.occurrence, op=control.op, params={}, repeat=r,
                    sample_id=keyed[trace.trace_id],
                ))
    return jobs, steps, left_out


@dataclass
class Control:
    """The control replays of one target: its perturbations' downstream noise, trace by trace."""

    id: str
    node: str
    occurrence: int
    kind: str
    """``served`` (the target as recorded: the control of output operators) or ``live``
    (the target run again unchanged: the control of execution operators)."""
    traces: list[Trace]
    perturbations: list[str]

    @property
    def op(self) -> str:
        return "identity" if self.kind == "served" else ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "occurrence": self.occurrence, "kind": self.kind,
                "op": self.op or None, "perturbations": self.perturbations}


def controls(spec: CampaignSpec, traces: Sequence[Trace]) -> dict[str, Control]:
    """The campaign's controls by perturbation id (none when ``replay.controls`` is 0):
    one per target and kind, over every trace a perturbation of that target selected."""
    if spec.replay.controls == 0:
        return {}
    by_key: dict[tuple[str, int, str], Control] = {}
    of: dict[str, Control] = {}
    for p in spec.perturbations:
        kind = "live" if get_operator(p.op).mode == "execution" else "served"
        key = (p.node, p.occurrence, kind)
        control = by_key.get(key)
        if control is None:
            control = by_key[key] = Control(f"control.{p.node}.{p.occurrence}.{kind}", p.node, p.occurrence, kind,
                                            [], [])
        seen = {t.trace_id for t in control.traces}
        control.traces += [t for t in select_traces(spec, p, traces) if t.trace_id not in seen]
        control.perturbations.append(p.id)
        of[p.id] = control
    return of


def distinct(of: dict[str, Control]) -> list[Control]:
    """The controls of :func:`controls`' result, each once, in the order first met."""
    return list({c.id: c for c in of.values()}.values())
