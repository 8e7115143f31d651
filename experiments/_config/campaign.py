"""The campaign spec: what ``quiver run`` reads.

It extends the recording spec (:class:`~quiver.experiments._config.RecordSpec`): the
baseline corpus (an existing traces file, or ``inputs`` x ``repeats`` recorded first),
the graph, which traces to perturb, the perturbations, how replays run, where, with
which seeds and budget, and the analysis options. Every field is documented here;
``quiver schema campaign`` prints the JSON Schema for editors. Paths are relative to the
spec's folder, except ``output`` (relative to the working directory).

Example::

    pipeline: ../support_bot/pipeline.py:run
    llm: {simulator: {models: [../support_bot/sim_models.py], nondeterminism: 0.15},
          params: {temperature: 0, seed: 42}}
    inputs: ../support_bot/inputs.jsonl
    repeats: 3
    graph: ../support_bot/graph.yaml
    perturbations:
      - id: rewriter-swap
        node: rewriter
        op: prompt_swap
        params: {variants: [prompts/rewriter_terse.txt, prompts/rewriter_verbose.txt]}
      - id: cs-override
        node: context_sufficiency
        op: override
        params: {set: {sufficient: true}}
      - id: fragments-drop
        node: discovery
        op: list_edit
        params: {action: remove}
        ladder: {count: [1, 2, 3, 5, 8]}
    executor: {kind: local, concurrency: 8}
    output: runs/support_bot_campaign
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from quiver._interventional import AdaptiveSettings, coarse_levels
from quiver.perturbations import (
    Magnitude,
    OperatorError,
    expand_ladder,
    expand_variants,
    get_operator,
    magnitude_of,
    make_operator,
)
from quiver.replay._replayer import DIMENSIONS, Dimension

from .record import SEED_MAX, RecordSpec, _Spec

__all__ = [
    "AdaptiveSpec",
    "AdaptiveLadder",
    "PerturbationSpec",
    "GateSpec",
    "SelectSpec",
    "ReplaySpec",
    "ExecutorSpec",
    "BudgetSpec",
    "PriceSpec",
    "AnalysisSpec",
    "AttributionSpec",
    "CampaignSpec",
]


MAX_STEPS = 10_000
"""The most parameter sets (ladder steps, times variants) one perturbation may replay with."""


class AdaptiveSpec(_Spec):
    """An adaptive ladder: levels of one operator parameter placed in rounds where the
    excess path-change rate crosses from 0 to clearly above it and to half its plateau
    (:mod:`quiver._interventional.dose` says how), until the intervals are narrower than
    ``resolution`` or ``max_replays`` are spent. Written ``ladder: {adaptive: {...}}``."""

    param: str = Field(min_length=1)
    """The parameter searched: one the operator declares as its magnitude (``list_edit``:
    fraction, count; ``numeric_edit``: amount; ``text_edit``: temperature, count;
    ``prompt_swap``: level, over its ordered ``variants``; ``param_change``: temperature,
    top_p)."""
    range: list[float] | None = Field(default=None, min_length=2, max_length=2)
    """``[lo, hi]``, within the parameter's declared range (default: the declared range,
    when it is bounded). A real parameter's ``lo`` is the zero dose the control replays
    stand for and is not replayed itself; a whole-number parameter's every value is a dose."""
    resolution: float = Field(gt=0)
    """The width at which the search stops: the midpoint's interval and the levels
    around it, and the onset's bracket (for a whole-number parameter at least 1)."""
    max_replays: int = Field(default=2000, ge=1, le=10_000_000)
    """The most replays the search spends, all rounds included, in [1, 10000000]."""
    coarse: int = Field(default=5, ge=2, le=100)
    """The levels of the first (coarse) round, evenly over the range, in [2, 100]."""
    pairs: int = Field(default=20, ge=1, le=1_000_000)
    """The replays a new level gets in its round (the selected traces in turn, then again
    with the next repeat), in [1, 1000000]."""
    event: Literal["D_shape", "D_iter"] = "D_shape"
    """The path change the search follows (the curves of both are reported)."""
    max_rounds: int = Field(default=10, ge=1, le=1000)
    """The most rounds after the coarse one, in [1, 1000]."""

    @model_validator(mode="after")
    def _range(self) -> AdaptiveSpec:
        if self.range is not None and not self.range[0] < self.range[1]:
            raise ValueError(f"range [{self.range[0]}, {self.range[1]}]: the low end must be below the high end")
        return self


class AdaptiveLadder(_Spec):
    """``ladder: {adaptive: {...}}``."""

    adaptive: AdaptiveSpec
    """The adaptive search (see :class:`AdaptiveSpec`)."""


def _located(loc: tuple[str, ...], message: str) -> ValidationError:
    """A validation error at ``loc`` inside the perturbation (its spec line is that key's)."""
    return ValidationError.from_exception_data("PerturbationSpec", [
        {"type": PydanticCustomError("value_error", "{message}", {"message": message}), "loc": loc, "input": None}])


def _ladder_kind(value: Any) -> str:
    """Which kind of ladder a spec gives: adaptive (a mapping with that key) or listed steps
    (the tags are no keys of a spec, so that error locations leave them out)."""
    adaptive = isinstance(value, AdaptiveLadder) or (isinstance(value, dict) and "adaptive" in value)
    return "adaptive ladder" if adaptive else "listed steps"


class PerturbationSpec(_Spec):
    """One perturbation: an operator applied at one node call of every selected trace."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    """A unique name (letters, digits, ``_ . : -``): it keys sample keys and results."""
    node: str
    """The node to perturb."""
    occurrence: int = Field(default=0, ge=0, le=100_000)
    """Which call of the node (0: the first), in [0, 100000]."""
    op: str
    """The operator: override, bool_flip, categorical_flip, list_edit, numeric_edit,
    text_edit, prompt_swap, param_change, or one plugged in through the ``quiver.operators``
    entry points."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The operator's parameters (``quiver replay --help`` and the README list them)."""
    ladder: Annotated[
        Annotated[AdaptiveLadder, Tag("adaptive ladder")]
        | Annotated[dict[str, Annotated[list[Any], Field(min_length=1, max_length=10_000)]], Tag("listed steps")],
        Discriminator(_ladder_kind),
    ] | None = None
    """A magnitude ladder: a parameter and its steps (``{count: [1, 2, 3, 5]}``), one
    replay per step, several keys giving their product; or an adaptive search of one
    parameter (``{adaptive: {param: fraction, range: [0, 1], resolution: 0.02}}``, see
    :class:`AdaptiveSpec`)."""
    repeats: int | None = Field(default=None, ge=1, le=100_000)
    """Replays per (trace, step) for this perturbation, in [1, 100000] (default: ``replay.repeats``)."""

    @model_validator(mode="after")
    def _operator(self) -> PerturbationSpec:
        try:
            variants = len(expand_variants(self.op, self.params, self._laddered()))
        except OperatorError as exc:
            raise ValueError(str(exc)) from None
        if self.adaptive is not None:
            self._check_adaptive(variants)
        size = variants * math.prod(len(steps) for steps in self.listed_ladder().values())
        if size > MAX_STEPS:
            raise ValueError(f"{size} parameter sets (variants x the product of the ladder's lists); at most "
                             f"{MAX_STEPS} are allowed: split it into several perturbations")
        for params in self.steps():
            try:
                make_operator(self.op, params)
            except OperatorError as exc:
                raise ValueError(str(exc)) from None
            self._strict_types(params)
        return self

    def _strict_types(self, params: dict[str, Any]) -> None:
        """A parameter of another type than the operator's is refused, not converted (a
        spec's ``"3"`` is not a count), at the place it was written (``params.count`` or
        ``ladder.count``)."""
        try:
            get_operator(self.op).Params.model_validate(params, strict=True)
        except ValidationError as exc:
            ladder = self.listed_ladder()
            adaptive = self.adaptive.param if self.adaptive is not None else None
            located = []
            for error in exc.errors(include_url=False):
                if not error["type"].endswith(("_type", "_parsing")):
                    continue  # the operator's own checks passed above: only a type is wrong
                loc = tuple(error["loc"])
                place = (("ladder", *loc) if loc and loc[0] in ladder else
                         ("ladder", "adaptive", "range") if loc and loc[0] == adaptive else ("params", *loc))
                located.append({"type": error["type"], "loc": place, "input": error["input"],
                                **({"ctx": error["ctx"]} if "ctx" in error else {})})
            if located:
                raise ValidationError.from_exception_data(exc.title, located) from None  # type: ignore[arg-type]

    @property
    def adaptive(self) -> AdaptiveSpec | None:
        """The adaptive search, when the ladder is one."""
        return self.ladder.adaptive if isinstance(self.ladder, AdaptiveLadder) else None

    def _laddered(self) -> list[str]:
        """The parameters the ladder sets (a prompt_swap's laddered level keeps its variants together)."""
        return [self.adaptive.param] if self.adaptive is not None else list(self.listed_ladder())

    def listed_ladder(self) -> dict[str, list[Any]]:
        """The ladder's lists of steps (none for an adaptive ladder)."""
        return {} if self.ladder is None or isinstance(self.ladder, AdaptiveLadder) else self.ladder

    def steps(self) -> list[dict[str, Any]]:
        """The parameter sets this perturbation replays with: variants x ladder steps; for
        an adaptive ladder, the coarse round's levels (later rounds place their own)."""
        if self.adaptive is not None:
            return [self.level_params(x) for x in coarse_levels(self.adaptive_settings())]
        try:
            return [step for variant in expand_variants(self.op, self.params, self._laddered())
                    for step in expand_ladder(variant, self.listed_ladder())]
        except OperatorError as exc:
            raise ValueError(str(exc)) from None

    def level_params(self, level: float) -> dict[str, Any]:
        """The operator's parameters at one level of the adaptive search."""
        settings = self.adaptive_settings()
        return {**self.params, settings.param: settings.level(level)}

    def adaptive_settings(self) -> AdaptiveSettings:
        """The adaptive search as the engine runs it (the range made concrete).

        Raises:
            ValueError: The perturbation has no adaptive ladder, or its parameter no range.
        """
        a = self.adaptive
        if a is None:
            raise ValueError(f"perturbation {self.id!r} has no adaptive ladder")
        declared = self._magnitude()
        lo, hi = a.range if a.range is not None else (declared.lo, declared.hi)
        if lo is None or hi is None:
            raise _located(("ladder", "adaptive", "param"), f"{declared} is unbounded; give the range to search, "
                           "e.g. range: [0, 1]")
        return AdaptiveSettings(param=a.param, lo=float(lo), hi=float(hi), resolution=a.resolution,
                                max_replays=a.max_replays, coarse=a.coarse, pairs=a.pairs, integer=declared.integer,
                                event=a.event, max_rounds=a.max_rounds)

    def _magnitude(self) -> Magnitude:
        assert self.adaptive is not None
        try:
            return magnitude_of(self.op, self.adaptive.param, self.params)
        except OperatorError as exc:
            raise _located(("ladder", "adaptive", "param"), str(exc)) from None

    def _check_adaptive(self, variants: int) -> None:
        """The searched parameter is the operator's, not also in params, over a range it may take."""
        a = self.adaptive
        assert a is not None
        if a.param in self.params:
            raise _located(("ladder", "adaptive", "param"), f"'{a.param}' is also given in params "
                           f"({self.params[a.param]!r}); the search sets it: take it out of params")
        if variants > 1:
            raise _located(("ladder", "adaptive"), f"the params give {variants} variants; an adaptive search takes "
                           "one parameter set (for prompt_swap over ordered variants, search param: level)")
        if self.repeats is not None:
            raise _located(("repeats",), "an adaptive ladder places its own replays (ladder.adaptive.pairs per "
                           "new level, then more where it needs them); take repeats out")
        declared = self._magnitude()
        settings = self.adaptive_settings()
        for end, value in (("low", settings.lo), ("high", settings.hi)):
            inside = declared.contains(value) or (end == "low" and declared.lo_open and value == declared.lo)
            if not inside:
                raise _located(("ladder", "adaptive", "range"), f"the {end} end {value:g} is outside {declared}")
        if declared.integer and a.resolution < 1:
            raise _located(("ladder", "adaptive", "resolution"), f"{a.resolution:g}; '{a.param}' takes whole "
                           "numbers, so the resolution is at least 1")


class SelectSpec(_Spec):
    """Which baseline traces are perturbed."""

    mode: Literal["all", "sample", "near_boundary"] = "all"
    """``all``; ``sample`` (``n`` traces drawn with ``seed``); ``near_boundary``: traces whose
    target call was marginal: a recorded decision or categorical output whose top token
    logprob exceeds the runner-up by at most ``margin``."""
    n: int | None = Field(default=None, ge=1, le=100_000_000)
    """How many traces ``sample`` draws (and the most ``near_boundary`` keeps), in [1, 100000000]."""
    margin: float = Field(default=1.0, gt=0, le=1000)
    """The logprob margin (nats) under which a call counts as near its boundary, in (0, 1000]."""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    """The draw's seed."""

    @model_validator(mode="after")
    def _n_for_sample(self) -> SelectSpec:
        if self.mode == "sample" and self.n is None:
            raise ValueError("select.mode 'sample' needs n: how many traces to draw")
        return self


class ReplaySpec(_Spec):
    """How replays run."""

    frozen: list[Dimension] = Field(default_factory=lambda: list(DIMENSIONS))
    """Dimensions served from the recording upstream of the target (default: all)."""
    live_nodes: list[str] = Field(default_factory=list)
    """Nodes that always run live."""
    frozen_nodes: list[str] = Field(default_factory=list)
    """Nodes served from the recording upstream of the target whatever their kind."""
    downstream: Literal["live", "cached"] = "live"
    """Calls after the target: ``live`` every time, or ``cached``: answered from the
    response cache when the same request with the same sample key was answered before."""
    repeats: int = Field(default=1, ge=1, le=100_000)
    """Replays per (trace, perturbation step), each with its own sample keys, in [1, 100000]."""
    controls: int = Field(default=1, ge=0, le=100_000)
    """Control replays per selected trace and target: the target served as recorded (for
    output operators) or run live unchanged (for execution operators), everything
    downstream live. Their event rates, trace by trace, are the noise every magnitude
    bin of a threshold is held against; 0 runs none (the bins are then held against the
    observational noise of their inputs)."""


class ExecutorSpec(_Spec):
    """Where replays run."""

    kind: str = "local"
    """A registered executor: ``local`` (threads in this process), ``ray`` (Ray tasks on a
    local instance or a cluster), or one plugged in through the ``quiver.executors``
    entry points."""
    concurrency: int = Field(default=8, ge=1, le=1024)
    """Replays at once (local), in [1, 1024]."""
    address: str | None = None
    """A Ray cluster's address; none starts a local Ray instance."""
    batch_size: int | None = Field(default=None, ge=1, le=1_000_000)
    """Jobs per Ray call (default: sized from the replays' measured time, so that a batch
    takes about ``task_seconds``)."""
    max_in_flight: int | None = Field(default=None, ge=1, le=1_000_000)
    """Ray batches submitted and not yet returned, in all (default: two per replay that
    can run at once)."""
    max_retries: int = Field(default=3, ge=0, le=100)
    """Restarts of a Ray actor whose process died."""
    threads: int = Field(default=4, ge=1, le=256)
    """Replays at once inside one Ray actor, in [1, 256]."""
    task_cpus: float = Field(default=0.25, gt=0, le=1024)
    """CPUs a Ray actor reserves: the cluster holds ``CPUs / task_cpus`` actors, so Ray
    replays at once = that x ``threads`` (replays wait on LLM calls: a fraction)."""
    task_seconds: float = Field(default=2.0, gt=0, le=86_400)
    """What a sized Ray batch aims to take."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Settings of a plugged-in executor, passed to it as they are."""

    @field_validator("kind")
    @classmethod
    def _registered(cls, value: str) -> str:
        from quiver._errors import QuiverError
        from quiver.replay._executors import EXECUTORS

        try:
            EXECUTORS.get(value)
        except QuiverError as exc:  # the registry's message: the registered names, how to add one
            raise ValueError(str(exc)) from None
        return value


class BudgetSpec(_Spec):
    """An optional ceiling: the campaign stops cleanly when it is reached (resume with a larger one)."""

    max_llm_calls: int | None = Field(default=None, ge=1, le=10**12)
    """LLM requests the endpoint answers during replays."""
    max_tokens: int | None = Field(default=None, ge=1, le=10**15)
    """Total tokens (prompt + completion) of those requests."""


class PriceSpec(_Spec):
    """What one model costs per 1M tokens, in any one currency (``quiver run --plan``
    prints the sum in it)."""

    input: float = Field(ge=0, le=1_000_000)
    """The price of 1M prompt (input) tokens, in [0, 1000000]."""
    output: float = Field(ge=0, le=1_000_000)
    """The price of 1M completion (output) tokens, in [0, 1000000]."""


class AnalysisSpec(_Spec):
    """The estimators' options."""

    epsilon: float = Field(default=0.01, gt=0, le=1)
    """The distance below which a node counts as unchanged, in (0, 1]."""
    alphas: list[Annotated[float, Field(gt=0, lt=1)]] = Field(default_factory=lambda: [0.5, 0.8], min_length=1,
                                                               max_length=100)
    """Levels for drift budgets and impact sets, each in (0, 1)."""
    resamples: int = Field(default=1000, ge=100, le=1_000_000)
    """Bootstrap resamples of input groups, in [100, 1000000]."""
    permutations: int = Field(default=2000, ge=100, le=1_000_000)
    """Permutations of the negative control's test, in [100, 1000000]."""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    """The bootstrap's and the permutations' seed."""
    equivalence_margin: float = Field(default=0.05, gt=0, lt=1)
    """The margin inside which a difference of rates counts as none, in (0, 1): a
    finding says a perturbation leaves an event as its control does (or a gate's
    candidate as the current template does) only when the difference's 95% interval
    lies inside [-margin, +margin] (two one-sided tests, TOST); otherwise it says the
    difference is not distinguishable at its n, with its interval."""
    embedder: str | None = None
    """The sentence-transformers model (default all-MiniLM-L6-v2, shipped offline)."""
    cache_dir: str | None = None
    """The embedding cache (default ``~/.cache/quiver/embeddings``)."""


class GateSpec(_Spec):
    """The pre-deployment check of prompt changes (``quiver gate``)."""

    probes: int | None = Field(default=None, ge=2, le=100_000)
    """Baseline traces replayed per candidate, drawn stratified by input (seeded): one
    per input in turn, then a second, and so on, among the ok traces where the changed
    node ran (all of them when there are fewer). Default: one per input. Inputs a
    budget below them leaves without a probe are named in the report as not tested."""
    repeats: int | None = Field(default=None, ge=1, le=10_000)
    """Replays per probe and arm (candidate, current template), in [1, 10000]. Default:
    the fewest at which a candidate that changes every replay of one input fails the
    per-input test with every probed input in the family (6 for 16 inputs, 7 for 75, at
    ``familywise`` 0.05)."""
    familywise: float = Field(default=0.05, gt=0, lt=1)
    """The familywise level of the verdict, in (0, 1): the chance that a candidate that
    changes nothing fails is at most this (half to the average-level tests, half to the
    per-input family, Holm-corrected)."""
    outcome_margin: float = Field(default=0.05, gt=0, lt=1)
    """With outcome checks: the non-inferiority margin of the pass rate. The gate fails a
    candidate whose pass rate is below the current template's by more than this, with
    confidence, and says re-evaluate (exit 1) when its interval cannot rule that out."""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    """Seed of the probe sample and of the replays' sample keys."""
    alpha: float | None = Field(default=None, gt=0, le=1)
    """The level of the drift budgets and impact sets (default: the first of
    ``analysis.alphas``); it must be one the profile was computed at."""
    output: str | None = None
    """The gate's folder (default: ``OUTPUT/gate``, beside the campaign's run folder)."""


AttributedDimension = Literal["retrieval", "tools", "prompt", "model"]


def _every_dimension() -> list[AttributedDimension]:
    return ["retrieval", "tools", "prompt", "model"]


class AttributionSpec(_Spec):
    """Divergence attribution after the campaign (``quiver attribute`` over the baseline):
    each baseline trace replayed against the spec's pipeline with every dimension
    frozen, with model sampling live, then with each of ``dimensions`` live in turn;
    ``attribution/attribution.json`` and ``attribution.md`` in the run folder."""

    dimensions: list[AttributedDimension] = Field(default_factory=_every_dimension, min_length=1, max_length=4)
    """The dimensions unfrozen one at a time on top of sampling, each once (default all
    four: retrieval, tools, prompt, model)."""
    repeats: int = Field(default=3, ge=1, le=10_000)
    """Replays per trace and live condition, in [1, 10000]."""
    traces: int | None = Field(default=None, ge=1, le=100_000_000)
    """At most this many baseline traces, a sample seeded by the spec's ``seed`` (default:
    every ok trace)."""

    @field_validator("dimensions")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        twice = sorted({d for d in value if value.count(d) > 1})
        if twice:
            raise ValueError(f"each dimension once; repeated: {', '.join(twice)}")
        return value


class CampaignSpec(RecordSpec):
    """A perturbation campaign (``quiver run``)."""

    inputs: str | list[dict[str, Any]] | None = None  # type: ignore[assignment]
    """Inputs to record the baseline from (with ``repeats``), when ``baseline`` is not given."""
    baseline: str | None = None
    """An existing traces file (relative to the spec) to perturb instead of recording one."""
    graph: str | None = None
    """The graph YAML (types, roles, categories, loop); what it leaves out is inferred."""
    select: SelectSpec = Field(default_factory=SelectSpec)
    """Which traces are perturbed."""
    perturbations: list[PerturbationSpec] = Field(default_factory=list)
    """The perturbations (``quiver run`` needs at least one; ``quiver gate`` and
    ``quiver localize`` read a spec without any)."""
    replay: ReplaySpec = Field(default_factory=ReplaySpec)
    """How replays run."""
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    """Where replays run."""
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    """An optional ceiling on LLM calls or tokens."""
    prices: dict[str, PriceSpec] | None = Field(default=None, max_length=10_000)
    """Per model name, as the pipeline requests it (``{gpt-4o-mini: {input: 0.15, output:
    0.6}}``): the price of 1M input and output tokens, from which ``quiver run --plan``
    gives the cost of the replays' LLM calls (without it, calls and tokens only)."""
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)
    """Estimator options."""
    gate: GateSpec = Field(default_factory=GateSpec)
    """``quiver gate``: probes and levels of the pre-deployment check."""
    attribution: AttributionSpec | None = None
    """Divergence attribution over the baseline after the campaign (absent: none; ``{}``:
    every dimension, 3 repeats)."""
    output: str = "runs/campaign"
    """The run folder (relative to the working directory)."""

    @model_validator(mode="after")
    def _baseline_or_inputs(self) -> CampaignSpec:
        if (self.baseline is None) == (self.inputs is None):
            raise ValueError(
                "give exactly one of 'baseline' (an existing traces file) and 'inputs' (recorded "
                "first, 'repeats' times each)"
            )
        ids = [p.id for p in self.perturbations]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"perturbation ids must be unique; repeated: {', '.join(dupes)}")
        return self
