"""``quiver run SPEC --plan``: what a campaign will cost, before anything is paid.

The plan makes no LLM call and writes nothing. It needs the baseline: the spec's
``baseline`` file, or a recording already made into ``OUTPUT/baseline/traces.jsonl``;
when the spec records its baseline first and none is there yet, the plan cannot say
what the replays will call and refuses (a :class:`~quiver._errors.QuiverError`, exit 2).

* **Replays**: the campaign's own jobs (:func:`~quiver.experiments._campaign.jobs.expand_jobs`),
  per perturbation and per control, so the plan counts exactly the jobs the run makes.
* **LLM calls**: for each job, the calls of its baseline trace that the replay runs
  live, placed by the replayer's own regions
  (:func:`~quiver.replay._replayer.recorded_regions`) and the spec's ``replay:`` block:
  upstream calls are served from the recording (unless the model is unfrozen or the
  node is in ``live_nodes``); the target runs live for execution operators (prompt swap,
  parameter change), the live control and the gate, and is served transformed for
  output operators and the served control; every LLM call downstream runs live;
  retrieval and tool calls downstream are served while their dimension is frozen, and
  whatever was recorded under a served call is served with it. A ``text_edit``
  paraphrase adds its own call per replay (its tokens are not predicted).
  ``downstream: cached`` changes nothing in a fresh run: every replay has its own
  sample keys, so the cache only answers replays run again after a kill.
* **Tokens**: the recorded usage of those calls (prompt and completion), per model (a
  ``param_change`` of the model bills the target's calls to the new model).
* **Cost**: tokens x the spec's ``prices:`` (per model, per 1M input and output tokens).

The prediction follows each trace's recorded path. A perturbation that changes the
path (an override that skips a branch, a flip that adds loop iterations) makes more or
fewer calls: ``calls_min`` and ``calls_max`` are what the jobs would make if every
replay took the shortest or the longest path any baseline trace took through the same
target, a range of the recorded paths, not a bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from quiver._errors import QuiverError
from quiver._trace import NodeCall, Trace
from quiver.experiments._config import BudgetSpec, load_inputs
from quiver.perturbations import get_operator
from quiver.replay import ReplayJob, ReplayMode, Target
from quiver.replay._replayer import recorded_regions

from .jobs import controls as campaign_controls, distinct, eligible_traces, expand_jobs
from .resume import split_job_id

__all__ = ["Usage", "PlanRow", "CampaignPlan", "plan_jobs", "plan_campaign", "live_llm_calls"]

class PriceSpec(Protocol):
    """A model's price per 1M tokens (the spec's ``prices:`` entries)."""

    @property
    def input(self) -> float: ...

    @property
    def output(self) -> float: ...


_DIMENSIONS = {"llm": ("model", "prompt"), "retrieval": ("retrieval",), "tool": ("tools",)}
"""The replay dimensions that hold a call of each kind frozen (the replayer's)."""


@dataclass
class Usage:
    """LLM calls and their tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage, times: int = 1) -> None:
        self.calls += other.calls * times
        self.prompt_tokens += other.prompt_tokens * times
        self.completion_tokens += other.completion_tokens * times

    def to_json(self) -> dict[str, int]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens": self.tokens}


def _call_usage(call: NodeCall) -> Usage:
    usage = call.response.usage if call.response is not None else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt is None and completion is None:  # an endpoint that gives the total only
        return Usage(1, int(usage.get("total_tokens", 0)), 0)
    return Usage(1, int(prompt or 0), int(completion or 0))


def _within(path: str, outer: str) -> bool:
    return path.startswith(outer + "/")


def live_llm_calls(trace: Trace, target: Target, mode: ReplayMode, *, target_runs: bool) -> list[NodeCall]:
    """The recorded LLM calls of ``trace`` that a replay perturbing ``target`` sends to
    the endpoint, when it takes the recorded path (see the module docstring).

    Args:
        trace: The baseline trace.
        target: The perturbed call.
        mode: What the replay holds frozen.
        target_runs: The target's body runs (an execution operator, the live control,
            the gate) rather than being served transformed (an output operator).

    Raises:
        ReplayError: ``target`` is not in the trace.
    """
    regions = recorded_regions(trace, target)
    served: list[str] = []  # paths whose recorded subtree a replay copies without running it
    live: list[NodeCall] = []
    for call in trace.calls:
        if call.kind == "source" or any(_within(call.call_path, s) for s in served):
            continue
        region = regions[call.call_id]
        dims = _DIMENSIONS.get(call.kind, ())
        live_node = call.node in mode.live_nodes
        frozen = not live_node and all(d in mode.frozen for d in dims)
        if region == "upstream":
            if (dims and frozen) or call.node in mode.frozen_nodes:
                served.append(call.call_path)
                continue
            sends = live_node or "model" not in mode.frozen
        elif region == "ancestor":
            sends = live_node or "model" not in mode.frozen  # its own call is made before the target opens
        elif region == "target" and not target_runs:
            served.append(call.call_path)
            continue
        elif region == "downstream" and call.kind in ("retrieval", "tool") and frozen:
            served.append(call.call_path)
            continue
        else:  # the target run live, inside it, downstream
            sends = True
        if sends and call.response is not None:
            live.append(call)
    return live


@dataclass
class PlanRow:
    """The replays of one perturbation (all its steps) or of one control."""

    id: str
    control: bool
    jobs: int = 0
    by_model: dict[str, Usage] = field(default_factory=dict)
    calls_min: int = 0
    calls_max: int = 0
    operator_calls: int = 0
    """Calls an operator makes itself (a paraphrase), one per replay; tokens not predicted."""

    @property
    def usage(self) -> Usage:
        total = Usage()
        for u in self.by_model.values():
            total.add(u)
        total.calls += self.operator_calls
        return total

    def cost(self, prices: Mapping[str, PriceSpec] | None) -> tuple[float | None, list[str]]:
        """The cost at ``prices`` and the models without a price (None: no prices)."""
        if prices is None:
            return None, []
        return _cost(self.by_model, prices)

    def to_json(self, prices: Mapping[str, PriceSpec] | None) -> dict[str, Any]:
        cost, unpriced = self.cost(prices)
        return {"id": self.id, "control": self.control, "jobs": self.jobs, **self.usage.to_json(),
                "calls_min": self.calls_min, "calls_max": self.calls_max, "operator_calls": self.operator_calls,
                "by_model": {m: u.to_json() for m, u in sorted(self.by_model.items())},
                "cost": cost, "unpriced_models": unpriced}


def _cost(by_model: dict[str, Usage], prices: Mapping[str, PriceSpec]) -> tuple[float, list[str]]:
    total, unpriced = 0.0, []
    for model, u in sorted(by_model.items()):
        price = prices.get(model)
        if price is None:
            if u.calls:
                unpriced.append(model)
            continue
        total += u.prompt_tokens * price.input / 1e6 + u.completion_tokens * price.output / 1e6
    return total, unpriced


@dataclass
class CampaignPlan:
    """What a campaign's replays will call, per perturbation and control, and in all."""

    spec: str
    baseline: str
    traces: int
    rows: list[PlanRow]
    job_calls: list[tuple[str, int, int]]
    """Per job in job order: (row id, predicted calls, predicted tokens): where a budget stops."""
    prices: Mapping[str, PriceSpec] | None = None
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    adaptive: dict[str, int] = field(default_factory=dict)
    """Adaptive ladders: perturbation id -> the most replays its search may spend (its
    rows count its coarse round only: later rounds depend on what the replays show)."""

    @property
    def total(self) -> PlanRow:
        row = PlanRow("total", False)
        for r in self.rows:
            row.jobs += r.jobs
            row.calls_min += r.calls_min
            row.calls_max += r.calls_max
            row.operator_calls += r.operator_calls
            for model, u in r.by_model.items():
                row.by_model.setdefault(model, Usage()).add(u)
        return row

    def budget_stop(self) -> tuple[int, str, str] | None:
        """Where the budget stops the run if the prediction holds: (replays committed
        before it, the perturbation or control then running, the limit reached), or
        None when the plan fits (or there is no budget)."""
        calls = tokens = 0
        for i, (row_id, c, t) in enumerate(self.job_calls):
            calls, tokens = calls + c, tokens + t
            if self.budget.max_llm_calls is not None and calls >= self.budget.max_llm_calls:
                return i + 1, row_id, f"max_llm_calls {self.budget.max_llm_calls:,}"
            if self.budget.max_tokens is not None and tokens >= self.budget.max_tokens:
                return i + 1, row_id, f"max_tokens {self.budget.max_tokens:,}"
        return None

    def to_json(self) -> dict[str, Any]:
        stop = self.budget_stop()
        return {
            "spec": self.spec, "baseline": self.baseline, "traces": self.traces,
            "rows": [r.to_json(self.prices) for r in self.rows], "total": self.total.to_json(self.prices),
            "prices": None if self.prices is None else {m: {"input": p.input, "output": p.output}
                                                          for m, p in sorted(self.prices.items())},
            "budget": self.budget.model_dump(),
            "budget_stop": None if stop is None else {"replays": stop[0], "running": stop[1], "limit": stop[2]},
            "adaptive": dict(self.adaptive),
        }

    def render(self) -> str:
        """The plan as printed by ``quiver run --plan``."""
        total = self.total
        controls = [r for r in self.rows if r.control]
        lines = [f"plan of {self.spec}: {total.jobs:,} replays ({sum(r.jobs for r in controls):,} of them controls) "
                 f"of {self.traces:,} baseline traces ({self.baseline}); no LLM call was made",
                 f"{'perturbation / control':<40} {'replays':>8} {'LLM calls':>10} {'(min-max)':>17} "
                 f"{'tokens':>12} {'cost':>10}"]
        lines += [self._line(r) for r in self.rows if not r.control]
        lines += [self._line(r) for r in controls]
        lines.append(self._line(total))
        lines += self._notes(total)
        return "\n".join(lines)

    def _line(self, row: PlanRow) -> str:
        cost, _ = row.cost(self.prices)
        usage = row.usage
        span = f"({row.calls_min + row.operator_calls:,}-{row.calls_max + row.operator_calls:,})"
        return (f"{row.id:<40} {row.jobs:>8,} {usage.calls:>10,} {span:>17} {usage.tokens:>12,} "
                f"{'-' if cost is None else f'{cost:,.4f}':>10}")

    def _notes(self, total: PlanRow) -> list[str]:
        notes = ["LLM calls and tokens follow each trace's recorded path; (min-max): if every replay took the "
                 "shortest or longest path a baseline trace took through the same target"]
        if total.operator_calls:
            notes.append(f"{total.operator_calls:,} of the calls are an operator's own (paraphrase): "
                         "their tokens are not predicted")
        if self.prices is None:
            notes.append("cost: no prices given (a `prices:` block in the spec, per model: input and output "
                         "price per 1M tokens)")
        else:
            cost, unpriced = total.cost(self.prices)
            unpriced_part = f"; no price for {', '.join(unpriced)}: its calls are not in it" if unpriced else ""
            notes.append(f"cost: {cost:,.4f} at the spec's prices per 1M tokens{unpriced_part}")
        for pid, most in self.adaptive.items():
            coarse = next((r.jobs for r in self.rows if r.id == pid), 0)
            notes.append(f"{pid}: an adaptive ladder; its row is its coarse round ({coarse:,} replays): later rounds "
                         f"depend on what the replays show, up to max_replays {most:,} in all")
        notes.append(self._budget_note(total))
        return notes

    def _budget_note(self, total: PlanRow) -> str:
        budget = self.budget
        if budget.max_llm_calls is None and budget.max_tokens is None:
            return "budget: none set"
        limits = ", ".join(f"{name} {value:,}" for name, value in budget.model_dump().items() if value is not None)
        stop = self.budget_stop()
        if stop is None:
            return f"budget ({limits}): the plan fits"
        done, running, limit = stop
        return (f"budget ({limits}): the plan EXCEEDS it ({total.usage.calls:,} calls, {total.usage.tokens:,} "
                f"tokens): the run would stop at {limit} after about {done:,} of {total.jobs:,} replays, "
                f"in {running}")


def plan_jobs(jobs: Sequence[ReplayJob], traces: Iterable[Trace], mode: ReplayMode, *,
              prices: Mapping[str, PriceSpec] | None = None, budget: BudgetSpec | None = None,
              controls: Iterable[str] = (), spec: str = "", baseline: str = "", by_perturbation: bool = False,
              ) -> CampaignPlan:
    """The plan of ``jobs`` (a campaign's or the gate's) on the baseline ``traces``.

    Args:
        jobs: The replay jobs, in the order they run.
        traces: The baseline traces the jobs name.
        mode: What the replays hold frozen.
        prices: Per model, the price of 1M input and output tokens.
        budget: The run's ceiling, to say where it would stop.
        controls: The perturbation ids of control jobs (listed apart).
        spec: The spec's path, for the heading.
        baseline: Where the baseline came from, for the heading.
        by_perturbation: One row per job's ``perturbation_id`` (the gate's arms) instead
            of the group its job id names.
    """
    by_id = {t.trace_id: t for t in traces}
    control_ids = set(controls)
    rows: dict[str, PlanRow] = {}
    cache: dict[tuple[str, str, int, bool, str | None], dict[str, Usage]] = {}
    spans: dict[tuple[str, int, bool, str | None], tuple[int, int]] = {}
    job_calls: list[tuple[str, int, int]] = []

    def usage_of(trace: Trace, node: str, occurrence: int, runs: bool, model: str | None) -> dict[str, Usage]:
        key = (trace.trace_id, node, occurrence, runs, model)
        if key not in cache:
            regions = recorded_regions(trace, Target(node, occurrence))
            found: dict[str, Usage] = {}
            for call in live_llm_calls(trace, Target(node, occurrence), mode, target_runs=runs):
                name = model if model and regions[call.call_id] in ("target", "inside") else (
                    call.model.name if call.model is not None else "(unknown)")
                found.setdefault(name, Usage()).add(_call_usage(call))
            cache[key] = found
        return cache[key]

    for job in jobs:
        group = job.perturbation_id if by_perturbation else split_job_id(job.job_id)[0]
        trace = by_id[job.trace["trace_id"]]
        runs = not job.op or get_operator(job.op).mode == "execution"
        model = job.params.get("model") if job.op == "param_change" else None
        used = usage_of(trace, job.node, job.occurrence, runs, model)
        row = rows.setdefault(group, PlanRow(group, group in control_ids))
        row.jobs += 1
        for name, u in used.items():
            row.by_model.setdefault(name, Usage()).add(u)
        span_key = (job.node, job.occurrence, runs, model)
        if span_key not in spans:
            counts = [sum(u.calls for u in usage_of(t, job.node, job.occurrence, runs, model).values())
                      for t in eligible_traces(list(by_id.values()), job.node, job.occurrence)]
            spans[span_key] = (min(counts, default=0), max(counts, default=0))
        row.calls_min += spans[span_key][0]
        row.calls_max += spans[span_key][1]
        extra = int(job.op == "text_edit" and job.params.get("action") == "paraphrase")
        row.operator_calls += extra
        job_calls.append((group, sum(u.calls for u in used.values()) + extra, sum(u.tokens for u in used.values())))
    return CampaignPlan(spec=spec, baseline=baseline, traces=len(by_id), rows=list(rows.values()),
                        job_calls=job_calls, prices=prices, budget=budget or BudgetSpec())


def plan_campaign(run: Any) -> CampaignPlan:
    """The plan of a :class:`~quiver.experiments._campaign.run.CampaignRun`'s campaign.

    Raises:
        QuiverError: The spec records its baseline first and no recording is there yet.
        SpecError: A perturbation the run would refuse on its baseline before its first
            replay (:func:`~quiver.experiments._campaign.checks.check_baseline`).
    """
    run.require_perturbations()
    spec = run.spec
    if spec.baseline is not None:
        source = str(run.base_dir / spec.baseline)
    else:
        recorded = run.out / "baseline" / "traces.jsonl"
        if not recorded.is_file():
            count = len(load_inputs(spec, run.base_dir))
            raise QuiverError(
                f"{run.path}: the plan needs the baseline: this spec records it first ({count} inputs x "
                f"{spec.repeats} repeats) into {recorded.parent}, and no recording is there yet (the replays' "
                "calls are predicted from the recorded ones); record it with `quiver record`, set `baseline:` "
                "to its traces.jsonl, and plan again"
            )
        source = str(recorded)
    traces = run.checked_baseline(resume=True)  # what the run refuses before its first replay, the plan refuses
    jobs, _, _ = expand_jobs(spec, traces)
    control_ids = [c.id for c in distinct(campaign_controls(spec, traces))]
    plan = plan_jobs(jobs, traces, run.replay_mode(), prices=spec.prices, budget=spec.budget,
                     controls=control_ids, spec=str(run.path), baseline=source)
    plan.adaptive = {p.id: p.adaptive.max_replays for p in spec.perturbations if p.adaptive is not None}
    return plan
