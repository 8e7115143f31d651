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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quiver._interventional import DoseResponse, RoundPlan, plan_round
from quiver._trace import Trace
from quiver.experiments._config import CampaignSpec, PerturbationSpec
from quiver.perturbations import get_operator
from quiver.replay import ReplayJob, sample_ids

__all__ = ["eligible_traces", "sample_traces", "select_traces", "expand_jobs", "Control", "controls", "distinct",
           "AdaptiveLayout", "adaptive_layouts", "adaptive_order"]


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


@dataclass
class AdaptiveLayout:
    """Where an adaptive perturbation's replays go: its rounds' plans laid out over levels
    (steps, in the order first met) and slots. Slot ``k`` of a level is the trace
    ``order[k % len(order)]`` with repeat ``k // len(order)``: every selected trace once,
    then each again.

    The trace order spreads the first slots over the inputs: the inputs in a seeded
    shuffle (``seed``, the perturbation id), their first traces, then their second ones,
    and so on; with ``select.mode: near_boundary`` it is the selection's own order, the
    traces nearest their boundary first.
    """

    perturbation: PerturbationSpec
    order: list[Trace]
    plans: list[RoundPlan]
    levels: list[float] = field(default_factory=list)
    used: dict[float, int] = field(default_factory=dict)
    placed: list[tuple[int, int, float, int, int]] = field(default_factory=list)
    """``(round, step, level, trace index in order, repeat)`` of every replay, in plan order."""

    def __post_init__(self) -> None:
        for plan in self.plans:
            self._place(plan)

    def _place(self, plan: RoundPlan) -> None:
        if not self.order:
            return
        for level, n in plan.add:
            if level not in self.used:
                self.levels.append(level)
                self.used[level] = 0
            step = self.levels.index(level)
            for slot in range(self.used[level], self.used[level] + n):
                self.placed.append((plan.round, step, level, slot % len(self.order), slot // len(self.order)))
            self.used[level] += n

    def add(self, plan: RoundPlan) -> None:
        """Lay out one more round."""
        self.plans.append(plan)
        self._place(plan)

    @property
    def spent(self) -> int:
        return len(self.placed)

    @property
    def stopped(self) -> str | None:
        """Why the search stopped (None: it goes on)."""
        return self.plans[-1].stop if self.plans else None

    def next_plan(self, curve: DoseResponse | None) -> RoundPlan:
        """The next round's plan, from the curve over the rounds so far."""
        return plan_round(self.perturbation.adaptive_settings(), len(self.plans), curve, self.levels, self.used,
                          self.spent, len(self.order))


def adaptive_order(spec: CampaignSpec, perturbation: PerturbationSpec, traces: Sequence[Trace]) -> list[Trace]:
    """The order an adaptive perturbation takes its traces in (see :class:`AdaptiveLayout`)."""
    chosen = select_traces(spec, perturbation, traces)
    if spec.select.mode == "near_boundary":
        return chosen
    by_input: dict[str, list[Trace]] = {}
    for t in chosen:
        by_input.setdefault(str(t.input_id), []).append(t)
    inputs = sorted(by_input)
    random.Random(f"{spec.seed}|{perturbation.id}|adaptive").shuffle(inputs)
    depth = max((len(v) for v in by_input.values()), default=0)
    return [by_input[i][k] for k in range(depth) for i in inputs if k < len(by_input[i])]


def adaptive_layouts(spec: CampaignSpec, traces: Sequence[Trace],
                     rounds: Mapping[str, Sequence[RoundPlan]] | None = None) -> dict[str, AdaptiveLayout]:
    """Every adaptive perturbation's layout: its coarse round, then the rounds recorded
    (``rounds``: perturbation id -> its plans from round 1 on)."""
    out = {}
    for p in spec.perturbations:
        if p.adaptive is None:
            continue
        layout = AdaptiveLayout(p, adaptive_order(spec, p, traces), [])
        layout.add(layout.next_plan(None))
        for plan in (rounds or {}).get(p.id, ()):
            layout.add(plan)
        out[p.id] = layout
    return out


def expand_jobs(spec: CampaignSpec, traces: Sequence[Trace], rounds: Mapping[str, Sequence[RoundPlan]] | None = None,
                ) -> tuple[list[ReplayJob], dict[str, int], dict[str, int]]:
    """Every job of the campaign in a fixed order, with the step of each job and the
    traces each perturbation left out (no target call, or not selected).

    An adaptive perturbation's coarse round takes its place among the perturbations;
    the later rounds (``rounds``, as the ledger keeps them) come after the controls,
    round after round, the perturbations in the spec's order within a round."""
    jobs: list[ReplayJob] = []
    steps: dict[str, int] = {}
    left_out: dict[str, int] = {}
    payloads: dict[str, dict[str, Any]] = {}

    def payload(trace: Trace) -> dict[str, Any]:  # one JSON form per trace, shared by its jobs
        if trace.trace_id not in payloads:
            payloads[trace.trace_id] = trace.model_dump(mode="json")
        return payloads[trace.trace_id]

    keyed = sample_ids(traces)
    layouts = adaptive_layouts(spec, traces, rounds)

    def place(layout: AdaptiveLayout, round_: int) -> None:
        p = layout.perturbation
        for r, step, level, index, repeat in layout.placed:
            if r != round_:
                continue
            trace = layout.order[index]
            job_id = f"{p.id}/{step}/{trace.trace_id}/{repeat}"
            steps[job_id] = step
            jobs.append(ReplayJob(
                job_id=job_id, seq=len(jobs), trace=payload(trace), perturbation_id=f"{p.id}#{step}", node=p.node,
                occurrence=p.occurrence, op=p.op, params=p.level_params(level), repeat=repeat,
                sample_id=keyed[trace.trace_id],
            ))

    for p in spec.perturbations:
        chosen = select_traces(spec, p, traces)
        left_out[p.id] = len(traces) - len(chosen)
        if p.id in layouts:
            place(layouts[p.id], 0)
            continue
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
    last = max((len(layout.plans) for layout in layouts.values()), default=0)
    for round_ in range(1, last):
        for layout in layouts.values():
            place(layout, round_)
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
