"""The gate's outcome criterion: does the candidate make answers worse?

With outcome checks (every replay carries its outcome), the gate compares the
candidate arm's pass rate with the current template's on the same probes:

* **non-inferiority** with margin delta (the spec's ``gate.outcome_margin``, 0.05 by
  default), read from the difference's test interval (the two-sided 1 - 2 x level
  percentile interval of its bootstrap draws over probe inputs, as the gate's rates are):
  ``worse`` (fail) when its upper end lies below -delta: the pass rate is lower by more
  than the margin, with confidence; ``non-inferior`` when its lower end lies above
  -delta; ``undecided`` otherwise (the verdict is then *re-evaluate*, exit 1: the
  replays cannot tell whether the candidate keeps answers right);
* **per input** (:mod:`.inputs`): answers fail more often in the candidate's replays
  than in the current template's, at an input (exact stratified tests, Holm over
  Tarone's family): fail, naming it.

Its two tests take their share of the gate's familywise level
(:func:`~quiver._interventional.gate.gate_levels` with outcomes: the average level's
tests at familywise / 8 each, the two per-input families at familywise / 4 each).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from quiver._stats import GroupBootstrap, fmt

from .inputs import InputEffect, input_effects
from .pairing import PairResult

__all__ = ["OUTCOME_EVENT", "outcome_criterion"]

OUTCOME_EVENT = "fails"
"""The event the outcome's per-input tests count: the replay's answer did not pass."""


def _passed(p: PairResult) -> float:
    outcome = p.perturbed.outcome if p.perturbed is not None else None
    return np.nan if outcome is None else float(outcome.status == "pass")


def _failure(g: InputEffect, level: float, family: int) -> str:
    return (f"input {g.input_id}: answers fail in {g.events} of {g.n} candidate replays against "
            f"{g.control_events} of {g.control_n} with the current template (exact p = {g.p_value:.3g}, "
            f"Holm-adjusted {g.p_holm:.3g} ≤ {level:.3g} over {family} testable input(s))")


def outcome_criterion(pairs: Sequence[PairResult], n: int, group: Sequence[str], stratum: Sequence[str],
                      boot: GroupBootstrap, *, margin: float, each: float, inputs_level: float,
                      tested: Any) -> dict[str, Any] | None:
    """The outcome block of a candidate's ``gate.json`` row (see the module docstring):
    the arms' pass rates, their difference and its test interval, the decision, the
    per-input tests, and the failures it adds; None when the replays carry no outcome.

    Args:
        pairs: The candidate arm's ``n`` pairs, then the current arm's.
        group, stratum: Per pair, its input and its probe (both arms).
        tested: The gate's test of a difference of rates (``gate._tested``).
    """
    passed = np.array([_passed(p) for p in pairs])
    if not np.isfinite(passed).any():
        return None
    row = tested(boot, passed[:n], passed[n:], each)
    lo, hi = row["test_ci"] or (None, None)
    decision = ("worse" if hi is not None and hi < -margin else "non-inferior" if lo is not None and lo > -margin
                else "undecided")
    judged = np.isfinite(passed)
    changed = np.arange(len(pairs)) < n
    effects = input_effects([g for g, j in zip(group, judged, strict=True) if j],
                            [s for s, j in zip(stratum, judged, strict=True) if j], changed[judged],
                            passed[judged] == 0.0, alpha=inputs_level, event_name=OUTCOME_EVENT)
    failures = []
    if decision == "worse":
        diff = row["difference"]
        failures.append(f"the pass rate falls by {fmt(-diff['value'])} [{fmt(-hi)}, {fmt(-lo)}] "
                        f"({100 * row['test_level']:.4g}% interval) below the current template's "
                        f"({fmt(row['candidate']['value'])} against {fmt(row['current']['value'])}, n = {diff['n']}), "
                        f"beyond the non-inferiority margin {margin:g}")
    failures += [_failure(g, inputs_level, effects.family) for g in effects.moved()]
    undecided = None
    if decision == "undecided":
        undecided = (f"the pass rate is not shown non-inferior: candidate {fmt(row['candidate']['value'])} against "
                     f"{fmt(row['current']['value'])}, difference {fmt(row['difference']['value'], signed=True)} "
                     f"[{fmt(lo, signed=True)}, {fmt(hi, signed=True)}] ({100 * row['test_level']:.4g}% interval, "
                     f"n = {row['difference']['n']}) reaches below the margin -{margin:g}; more probes or repeats "
                     "would decide it")
    return {**row, "margin": margin, "decision": decision, "per_input": effects.to_json(), "failures": failures,
            "undecided": undecided}
