"""How far an intervention moves the outcome: a perturbation's effect on the pass rate.

**[engine]** The effect of a perturbation is the pass rate of its *effective* replays
minus that of its *control replays on the same baseline traces* (a no-op replay moves
nothing, so it would only dilute the effect; a control replay of a trace no effective
replay came from compares other inputs). A replay passes when its outcome is ``pass``; an
outcome that could not be evaluated (``error``) is not a pass; a replay with no outcome
(it failed before its checks ran) is left out. The interval is the 95% percentile
interval of the difference of the two arms' pass rates over the same bootstrap resamples
of input groups (QUIVER.md §13), n the effective replays. The mean score difference is
given the same way when the outcomes carry scores.

Per input group, the effective replays' failures are tested against the control
replays' of the same traces, as paths are (:mod:`.inputs`: exact stratified tests, Holm
over Tarone's family): the inputs where the perturbation makes answers fail more often.

Absence is claimed only inside the equivalence margin: the interval of the difference
lies within ±``margin`` (the campaign's ``analysis.equivalence_margin``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quiver._stats import Estimate, GroupBootstrap, percentile_interval

from .inputs import InputEffects, input_effects
from .reader import Reader
from .rows import PairRow

__all__ = ["OutcomeEffect", "outcome_effect"]


def _est(e: Estimate) -> dict[str, Any]:
    d = e.as_dict("value")
    return {"value": d["value"], "ci": d["value_ci"], "n": d["value_n"]}


@dataclass(frozen=True)
class OutcomeEffect:
    """A perturbation's effect on the outcome (see the module docstring).

    Attributes:
        pass_rate: The effective replays' pass rate (value, ci, n).
        control_pass_rate: Their controls' (the control replays of the same traces).
        difference: pass_rate − control_pass_rate, its interval over the same resamples.
        score: The effective replays' mean score, with ``control_score`` and
            ``score_difference`` (None: no scores).
        errors: Effective replays whose outcome could not be evaluated (not passes).
        pass_to_fail: Effective replays that failed where their recorded baseline passed.
        per_input: Per input group, failures against its controls' (None: no controls).
        margin: The equivalence margin the difference is read against.
    """

    pass_rate: dict[str, Any]
    control_pass_rate: dict[str, Any]
    difference: dict[str, Any]
    score: dict[str, Any] | None
    control_score: dict[str, Any] | None
    score_difference: dict[str, Any] | None
    errors: int
    pass_to_fail: int
    per_input: InputEffects | None
    margin: float

    @property
    def equivalent(self) -> bool:
        """The difference's interval lies inside ±margin: no effect, claimed."""
        ci = self.difference.get("ci")
        return bool(ci) and -self.margin <= ci[0] and ci[1] <= self.margin

    @property
    def lowers(self) -> bool:
        """The interval lies below 0: the perturbation lowers the pass rate."""
        ci = self.difference.get("ci")
        return bool(ci) and ci[1] < 0

    @property
    def raises(self) -> bool:
        ci = self.difference.get("ci")
        return bool(ci) and ci[0] > 0

    def to_json(self) -> dict[str, Any]:
        return {"pass_rate": self.pass_rate, "control_pass_rate": self.control_pass_rate,
                "difference": self.difference, "score": self.score, "control_score": self.control_score,
                "score_difference": self.score_difference, "errors": self.errors, "pass_to_fail": self.pass_to_fail,
                "margin": self.margin, "equivalent": self.equivalent,
                **({"per_input": self.per_input.to_json()} if self.per_input is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "outcome") -> OutcomeEffect:
        r = Reader(data, where)
        return cls(pass_rate=dict(data["pass_rate"]), control_pass_rate=dict(data["control_pass_rate"]),
                   difference=dict(data["difference"]), score=data.get("score"),
                   control_score=data.get("control_score"), score_difference=data.get("score_difference"),
                   errors=r.integer("errors"), pass_to_fail=r.integer("pass_to_fail"),
                   per_input=r.read("per_input", InputEffects.from_json) if r.has("per_input") else None,
                   margin=r.number("margin"))


def _difference(a: Estimate, b: Estimate) -> Estimate:
    if a.value is None or b.value is None or a.draws is None or b.draws is None:
        return Estimate.empty()
    return Estimate(a.value - b.value, percentile_interval(a.draws - b.draws), a.n, a.draws - b.draws)


def outcome_effect(rows: Sequence[PairRow], control_rows: Sequence[PairRow], *, resamples: int, seed: int,
                   alpha: float, margin: float) -> OutcomeEffect | None:
    """The outcome effect of one perturbation's pair rows against its control rows (see
    the module docstring); None when no effective replay carries an outcome or no control
    replay of their traces does."""
    effective = [r for r in rows if r.status == "ok" and r.stratum == "effective" and r.replay_passed is not None]
    traces = {r.trace_id for r in effective}
    controls = [r for r in control_rows if r.status == "ok" and r.trace_id in traces and r.replay_passed is not None]
    if not effective or not controls:
        return None
    units = effective + controls
    groups = sorted({str(r.input_id) for r in units})
    index = {g: i for i, g in enumerate(groups)}
    boot = GroupBootstrap(np.array([index[str(r.input_id)] for r in units]), len(groups), resamples=resamples,
                          seed=seed)
    arm = np.arange(len(units)) < len(effective)
    passed = np.array([float(bool(r.replay_passed)) for r in units])
    mine, theirs = boot.mean(passed, arm), boot.mean(passed, ~arm)
    scores = np.array([np.nan if (r.outcome or {}).get("score") is None else float(r.outcome["score"])  # type: ignore[index]
                       for r in units])
    scored = np.isfinite(scores)
    score = control_score = score_diff = None
    if (scored & arm).any() and (scored & ~arm).any():
        s1, s0 = boot.mean(scores, scored & arm), boot.mean(scores, scored & ~arm)
        score, control_score, score_diff = _est(s1), _est(s0), _est(_difference(s1, s0))
    per_input = input_effects([str(r.input_id) for r in units], [str(r.trace_id) for r in units], arm,
                              passed == 0.0, alpha=alpha, event_name="fails")
    return OutcomeEffect(
        pass_rate=_est(mine), control_pass_rate=_est(theirs), difference=_est(_difference(mine, theirs)),
        score=score, control_score=control_score, score_difference=score_diff,
        errors=sum((r.outcome or {}).get("replay") == "error" for r in effective),
        pass_to_fail=sum((r.outcome or {}).get("baseline") == "pass" and not r.replay_passed for r in effective),
        per_input=per_input, margin=margin)
