"""The interventional estimates of a campaign as typed objects (``campaign.json``).

:func:`~quiver._interventional.campaign_estimates` returns a :class:`CampaignEstimates`;
every level of it is a frozen dataclass with ``to_json()`` and ``from_json(data)``, as
the observational side's :class:`~quiver._observational.EdgeSensitivity`. Statistical
estimates stay :class:`~quiver._stats.Estimate` objects; ``to_json`` writes them flat
(``name``, ``name_ci``, ``name_n``) and ``from_json`` reads them back without draws, so
that ``CampaignEstimates.from_json(data).to_json() == data`` for a ``campaign.json``
read from disk. What each number means, and the choices behind it, is in
:mod:`quiver._interventional` (``estimates`` and ``betas``).

Choices made here:

* The divergence rates of a block (a stratum, the observational pairs, the control
  replays) are one :class:`Rates`; the downstream nodes' mean distances are a mapping
  node -> Estimate, in the order of the downstream nodes.
* Strata are a mapping ``effective`` / ``noop`` -> :class:`StratumEstimates` (the
  order of ``STRATA``), read with :meth:`PerturbationEstimates.stratum`; the row counts
  are :class:`RowCounts` under ``counts``.
* The negative control writes ``reason`` only when it was not run (``passed`` is None)
  and ``alpha`` / ``permutations`` only when it was; a node's test writes ``reason``
  only when the node was not tested.
* The observational sigma of a validation row is the profile's, as the profile wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from quiver._errors import QuiverError
from quiver._stats import Estimate

from .betas import Threshold
from .dose import AdaptiveEstimates
from .inputs import InputEffects
from .outcomes import OutcomeEffect
from .reader import Reader, nodes_json
from .validation_rows import SkippedValidationRow, ValidationRow

__all__ = [
    "RATES",
    "STRATA",
    "NOT_APPLIED",
    "Rates",
    "RowCounts",
    "StratumEstimates",
    "ObservationalEstimates",
    "ControlReplays",
    "NodeTest",
    "NegativeControl",
    "ValidationRow",
    "SkippedValidationRow",
    "PerturbationEstimates",
    "CampaignEstimates",
    "UnknownPerturbationError",
]

Stratum = Literal["effective", "noop"]
STRATA: tuple[Stratum, ...] = ("effective", "noop")

NOT_APPLIED = "not_applied"
"""The stratum of a pair whose perturbation did not land (QUIVER.md §13, [engine]): it
enters neither stratum's estimates."""
"""The strata of §11/§13."""
RATES = ("D_iter", "D_shape", "D_output", "D_output_only", "D_struct")
"""The divergence rates reported per stratum (QUIVER.md §6)."""


class UnknownPerturbationError(QuiverError):
    """A perturbation id that the campaign does not have."""


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Rates:
    """The divergence rates of a set of pairs (QUIVER.md §6; Def. 7-9).

    Attributes:
        d_iter: P(D_iter > 0).
        d_shape: P(D_shape > 0).
        d_output: P(D_output > 0).
        d_output_only: P(D_output > 0, D_shape = 0, D_iter = 0).
        d_struct: P(D_struct > 0).
    """

    d_iter: Estimate
    d_shape: Estimate
    d_output: Estimate
    d_output_only: Estimate
    d_struct: Estimate

    def by_name(self) -> dict[str, Estimate]:
        """``{"D_iter": ..., "D_shape": ..., ...}``, in the order of ``RATES``."""
        return dict(zip(RATES, (getattr(self, f.name) for f in fields(self)), strict=True))

    def to_json(self) -> dict[str, Any]:
        """``D_iter``, ``D_iter_ci``, ``D_iter_n``, ``D_shape``, ..."""
        return {k: v for name, est in self.by_name().items() for k, v in est.as_dict(name).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "rates") -> Rates:
        """The rates as :meth:`to_json` writes them (keys of other estimates are ignored)."""
        r = Reader(data, where)
        return cls(*(r.estimate(name) for name in RATES))


@dataclass(frozen=True)
class RowCounts:
    """How many pair rows a perturbation has, by status and stratum.

    Attributes:
        pairs: Every row of the perturbation.
        effective: Ok rows of the effective stratum.
        noop: Ok rows of the no-op stratum.
        unstratified: Ok rows without a stratum (no operator).
        diverged: Rows whose replay left the recording before the target.
        failed: Rows whose replay failed.
        not_applied: Ok rows whose perturbation did not land (the requests or the output
            it changes do not carry the change): in no stratum, and a problem of the run.
    """

    pairs: int
    effective: int
    noop: int
    unstratified: int
    diverged: int
    failed: int
    not_applied: int = 0

    def to_json(self) -> dict[str, int]:
        """``{"pairs": ..., "effective": ..., ...}``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "counts") -> RowCounts:
        """The counts as :meth:`to_json` writes them (other keys are ignored; ``not_applied``,
        which files written before it existed lack, reads as 0)."""
        r = Reader(data, where)
        return cls(*(r.integer(f.name) if f.name in data or f.name != "not_applied" else 0 for f in fields(cls)))


@dataclass(frozen=True)
class StratumEstimates:
    """One stratum of a perturbation's ok rows (Table 3).

    Attributes:
        n: Its ok rows.
        rates: Its divergence rates.
        magnitude: The mean target distance d_i.
        mean_d: Per downstream node, its mean distance.
        mean_d_given_shape: Per downstream node, its mean distance over the pairs with
            D_shape > 0 (the cascade signature).
    """

    n: int
    rates: Rates
    magnitude: Estimate
    mean_d: Mapping[str, Estimate]
    mean_d_given_shape: Mapping[str, Estimate]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: ``n``, the rates, ``magnitude``, then the per-node means."""
        return {"n": self.n, **self.rates.to_json(), **self.magnitude.as_dict("magnitude"),
                **nodes_json("mean_d", self.mean_d), **nodes_json("mean_d_given_shape", self.mean_d_given_shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "stratum") -> StratumEstimates:
        """The stratum as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        return cls(n=r.integer("n"), rates=Rates.from_json(data, where=where), magnitude=r.estimate("magnitude"),
                   mean_d=r.node_estimates("mean_d"), mean_d_given_shape=r.node_estimates("mean_d_given_shape"))


@dataclass(frozen=True)
class ObservationalEstimates:
    """The observational same-input pairs a campaign is held against.

    Attributes:
        n: The pairs.
        rates: Their divergence rates.
        mean_d: Per node of the pair table, its mean distance (the noise floor, §8).
    """

    n: int
    rates: Rates
    mean_d: Mapping[str, Estimate]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: ``n``, the rates, then the per-node means."""
        return {"n": self.n, **self.rates.to_json(), **nodes_json("mean_d", self.mean_d)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "observational") -> ObservationalEstimates:
        """The block as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        return cls(n=r.integer("n"), rates=Rates.from_json(data, where=where), mean_d=r.node_estimates("mean_d"))


@dataclass(frozen=True)
class ControlReplays:
    """The control replays of a perturbation's target, summarised (module ``betas``).

    Attributes:
        id: The control's id (its rows carry it as ``perturbation_id``).
        pairs: Every row of the control.
        n: Its ok rows.
        traces: The baseline traces they replay.
        rates: Their divergence rates.
        mean_d: Per downstream node of the perturbation, its mean distance.
    """

    id: str
    pairs: int
    n: int
    traces: int
    rates: Rates
    mean_d: Mapping[str, Estimate]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: the counts, the rates, then the per-node means."""
        return {"id": self.id, "pairs": self.pairs, "n": self.n, "traces": self.traces, **self.rates.to_json(),
                **nodes_json("mean_d", self.mean_d)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "control_replays") -> ControlReplays:
        """The summary as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        return cls(id=r.string("id"), pairs=r.integer("pairs"), n=r.integer("n"), traces=r.integer("traces"),
                   rates=Rates.from_json(data, where=where), mean_d=r.node_estimates("mean_d"))


# --------------------------------------------------------------------------- negative control


@dataclass(frozen=True)
class NodeTest:
    """The negative control at one downstream node (QUIVER.md §13).

    Attributes:
        statistic: mean(no-op) - mean(observational) (None: not tested).
        p_value: The one-sided permutation p-value (None: not tested).
        p_holm: Its Holm-adjusted value over the tested nodes (None: not tested).
        n_noop: The no-op distances.
        n_obs: The observational distances of the same inputs.
        mean_noop: Their mean (None: none).
        mean_obs: Their mean (None: none).
        rejects: Whether the Holm-adjusted p-value is <= alpha (None: not tested).
        reason: Why the node was not tested (None when it was).
    """

    statistic: float | None
    p_value: float | None
    p_holm: float | None
    n_noop: int
    n_obs: int
    mean_noop: float | None
    mean_obs: float | None
    rejects: bool | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The node's row; ``reason`` only for a node that was not tested."""
        data = {"statistic": self.statistic, "p_value": self.p_value, "p_holm": self.p_holm, "n_noop": self.n_noop,
                "n_obs": self.n_obs, "mean_noop": self.mean_noop, "mean_obs": self.mean_obs, "rejects": self.rejects}
        return data if self.reason is None else {**data, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "node") -> NodeTest:
        """The row as :meth:`to_json` writes it."""
        r = Reader(data, where)
        return cls(
            statistic=r.opt_number("statistic"), p_value=r.opt_number("p_value"), p_holm=r.opt_number("p_holm"),
            n_noop=r.integer("n_noop"), n_obs=r.integer("n_obs"), mean_noop=r.opt_number("mean_noop"),
            mean_obs=r.opt_number("mean_obs"), rejects=r.opt_boolean("rejects"),
            reason=r.opt_string("reason") if r.has("reason") else None,
        )


@dataclass(frozen=True)
class NegativeControl:
    """The no-op stratum against the observational noise, per downstream node (§13).

    Attributes:
        passed: True when no node rejects, False when some does, None when the test
            was not run (see ``reason``).
        reason: Why it was not run (None when it was).
        alpha: The level after Holm correction (None when not run).
        permutations: Label permutations per node (None when not run).
        statistic: The largest statistic over the tested nodes.
        p_value: The smallest Holm-adjusted p-value over the tested nodes.
        rejected: The nodes that reject, in downstream order.
        nodes: Per downstream node, its test.
    """

    passed: bool | None
    reason: str | None
    alpha: float | None
    permutations: int | None
    statistic: float | None
    p_value: float | None
    rejected: tuple[str, ...]
    nodes: Mapping[str, NodeTest]

    def to_json(self) -> dict[str, Any]:
        """``reason`` when the test was not run, ``alpha`` and ``permutations`` when it was."""
        head: dict[str, Any] = ({"passed": None, "reason": self.reason} if self.passed is None else
                                {"passed": self.passed, "alpha": self.alpha, "permutations": self.permutations})
        return {**head, "statistic": self.statistic, "p_value": self.p_value, "rejected": list(self.rejected),
                "nodes": {node: test.to_json() for node, test in self.nodes.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "negative_control") -> NegativeControl:
        """The verdict as :meth:`to_json` writes it."""
        r = Reader(data, where)
        passed = r.opt_boolean("passed")
        return cls(
            passed=passed, reason=r.opt_string("reason") if passed is None else None,
            alpha=None if passed is None else r.number("alpha"),
            permutations=None if passed is None else r.integer("permutations"),
            statistic=r.opt_number("statistic"), p_value=r.opt_number("p_value"), rejected=r.strings("rejected"),
            nodes=r.read_each("nodes", NodeTest.from_json),
        )


# --------------------------------------------------------------------------- perturbation and campaign


@dataclass(frozen=True)
class PerturbationEstimates:
    """What one perturbation of a campaign measured (QUIVER.md §6-§7, §11-§13).

    Attributes:
        id: The perturbation's id.
        node: Its target node.
        op: Its operator.
        params: The operator's parameters, as the spec gave them.
        ladder: The ladder of strengths, as the spec gave it (None: none).
        counts: Its rows by status and stratum.
        groups: The input groups of its ok rows (the unit its intervals resample).
        downstream: The nodes downstream of the target, in topological order.
        strata: ``effective`` and ``noop``, in that order (see :meth:`stratum`).
        control_replays: Its control's replays, summarised (None: no control).
        negative_control: The no-op stratum against the observational noise.
        beta_shape: The interventional bifurcation threshold of D_shape.
        beta_iter: The interventional bifurcation threshold of D_iter.
        adaptive: What its adaptive ladder spent and found, with the dose-response
            curves (None: its ladder is not adaptive; then ``to_json`` leaves it out).
        per_input: Per input group, its effective pairs' path-change rate (D_shape)
            against its control replays', tested (:mod:`quiver._interventional.inputs`;
            None: no control replays, or a file written before it existed; then
            ``to_json`` leaves it out).
        outcome: Its effect on the pass rate: its effective replays' against its control
            replays' of the same traces (:mod:`quiver._interventional.outcomes`; None: no
            outcome checks, or no control replays).
    """

    id: str
    node: str
    op: str | None
    params: Any
    ladder: Any
    counts: RowCounts
    groups: int
    downstream: tuple[str, ...]
    strata: Mapping[str, StratumEstimates]
    control_replays: ControlReplays | None
    negative_control: NegativeControl
    beta_shape: Threshold
    beta_iter: Threshold
    adaptive: AdaptiveEstimates | None = None
    per_input: InputEffects | None = None
    outcome: OutcomeEffect | None = None

    def stratum(self, name: Stratum) -> StratumEstimates:
        """The ``effective`` or ``noop`` stratum."""
        return self.strata[name]

    def to_json(self) -> dict[str, Any]:
        """The perturbation's entry of ``campaign.json`` (the counts written flat)."""
        return {
            "id": self.id, "node": self.node, "op": self.op, "params": self.params, "ladder": self.ladder,
            **self.counts.to_json(), "groups": self.groups, "downstream": list(self.downstream),
            "strata": {name: s.to_json() for name, s in self.strata.items()},
            "control_replays": None if self.control_replays is None else self.control_replays.to_json(),
            "negative_control": self.negative_control.to_json(),
            "beta_shape": self.beta_shape.to_json(), "beta_iter": self.beta_iter.to_json(),
            **({"adaptive": self.adaptive.to_json()} if self.adaptive is not None else {}),
            **({"per_input": self.per_input.to_json()} if self.per_input is not None else {}),
            **({"outcome": self.outcome.to_json()} if self.outcome is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "perturbation") -> PerturbationEstimates:
        """The entry as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        return cls(
            id=r.string("id"), node=r.string("node"), op=r.opt_string("op"), params=r.raw("params"),
            ladder=r.raw("ladder"), counts=RowCounts.from_json(data, where=where), groups=r.integer("groups"),
            downstream=r.strings("downstream"),
            strata=r.read_each("strata", StratumEstimates.from_json),
            control_replays=r.read_opt("control_replays", ControlReplays.from_json),
            negative_control=r.read("negative_control", NegativeControl.from_json),
            beta_shape=r.read("beta_shape", Threshold.from_json), beta_iter=r.read("beta_iter", Threshold.from_json),
            adaptive=r.read_opt("adaptive", AdaptiveEstimates.from_json) if r.has("adaptive") else None,
            per_input=r.read("per_input", InputEffects.from_json) if r.has("per_input") else None,
            outcome=r.read("outcome", OutcomeEffect.from_json) if r.has("outcome") else None,
        )


@dataclass(frozen=True)
class CampaignEstimates:
    """The interventional estimates of a perturbation campaign: ``campaign.json``.

    Attributes:
        epsilon: The drift threshold.
        alpha: The level of the negative controls after Holm correction.
        resamples: Bootstrap resamples of input groups.
        seed: The seed of the resamples and permutations.
        permutations: Label permutations per negative-control test.
        pairs: Every pair row given (of perturbations and controls).
        observational: The observational same-input pairs.
        perturbations: Per perturbation, what it measured, in the campaign's order.
        validation: Observational against interventional sigma at targetable edges.
        validation_skipped: Targetable edges that could not be compared.
        controls: The campaign's control replays, as given.
        equivalence_margin: The margin inside which a difference of rates counts as none
            (the findings' absence claims; None: a file written before it existed, read
            with the default 0.05).
        loop: The pipeline's loop body (None: no loop, or a file written before it
            existed): whether D_iter speaks of loop iterations.
    """

    epsilon: float
    alpha: float
    resamples: int
    seed: int
    permutations: int
    pairs: int
    observational: ObservationalEstimates
    perturbations: tuple[PerturbationEstimates, ...]
    validation: tuple[ValidationRow, ...]
    validation_skipped: tuple[SkippedValidationRow, ...]
    controls: tuple[Mapping[str, Any], ...]
    equivalence_margin: float | None = None
    loop: tuple[str, ...] | None = None

    def perturbation(self, id: str) -> PerturbationEstimates:
        """The perturbation ``id``.

        Raises:
            UnknownPerturbationError: The campaign has no such perturbation.
        """
        for p in self.perturbations:
            if p.id == id:
                return p
        raise UnknownPerturbationError(
            f"the campaign has no perturbation {id!r}; its perturbations are "
            f"{', '.join(repr(p.id) for p in self.perturbations) or 'none'}"
        )

    def beta_shape_at(self, node: str) -> float | None:
        """The smallest interventional beta_shape ``value`` over the perturbations that
        target ``node`` (None: none of them has one)."""
        values = [p.beta_shape.value for p in self.perturbations if p.node == node and p.beta_shape.value is not None]
        return min(values) if values else None

    def to_json(self) -> dict[str, Any]:
        """``campaign.json``: ``json.dumps(estimates.to_json(), indent=2) + "\\n"``."""
        return {
            "epsilon": self.epsilon, "alpha": self.alpha, "resamples": self.resamples, "seed": self.seed,
            "permutations": self.permutations, "pairs": self.pairs, "observational": self.observational.to_json(),
            "perturbations": [p.to_json() for p in self.perturbations],
            "validation": [v.to_json() for v in self.validation],
            "validation_skipped": [s.to_json() for s in self.validation_skipped],
            "controls": [dict(c) for c in self.controls],
            **({} if self.equivalence_margin is None else {"equivalence_margin": self.equivalence_margin}),
            **({} if self.loop is None else {"loop": list(self.loop)}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "campaign.json") -> CampaignEstimates:
        """``campaign.json`` as :meth:`to_json` writes it (its estimates without draws).

        Raises:
            CampaignFormatError: A key missing or of the wrong type, with its place.
        """
        r = Reader(data, where)
        return cls(
            epsilon=r.number("epsilon"), alpha=r.number("alpha"), resamples=r.integer("resamples"),
            seed=r.integer("seed"), permutations=r.integer("permutations"), pairs=r.integer("pairs"),
            observational=r.read("observational", ObservationalEstimates.from_json),
            perturbations=r.read_all("perturbations", PerturbationEstimates.from_json),
            validation=r.read_all("validation", ValidationRow.from_json),
            validation_skipped=r.read_all("validation_skipped", SkippedValidationRow.from_json),
            controls=tuple(dict(c.data) for c in r.objs("controls")),
            equivalence_margin=r.number("equivalence_margin") if r.has("equivalence_margin") else None,
            loop=r.strings("loop") if r.has("loop") else None,
        )
