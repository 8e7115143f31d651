"""Per-input effects (``quiver._interventional.inputs``): the exact test, its family and its design.

* The test of one input with one trace is Fisher's exact test, one-sided (scipy's);
  with several traces it is the exact law of the changed arm's count given each trace's
  margins, enumerated here by brute force over every relabelling of the units within
  their traces.
* A complete change of k replays per arm reaches p = 1 / C(2k, k); the replays needed
  for G inputs at a level are the fewest with 1 / C(2k, k) <= level / G.
* Known answer: over 400 seeded campaigns of 16 inputs whose two arms are drawn from the
  same law (traces of different rates, so pooling them would not be exact), the
  familywise false-rejection rate of Holm over Tarone's family stays at or below alpha;
  one input whose changed arm always has the event among 15 that do not is found.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import fisher_exact

from quiver._interventional import (
    InputEffects,
    complete_change_p,
    exact_p,
    input_effects,
    min_attainable_p,
    replays_needed,
    tarone_family,
)


@pytest.mark.parametrize("table", [(3, 3, 3, 0), (6, 4, 6, 1), (5, 0, 5, 2), (4, 2, 7, 2)])
def test_one_trace_is_fishers_exact_test_one_sided(table: tuple[int, int, int, int]) -> None:
    n1, x1, n0, x0 = table
    _, expected = fisher_exact([[x1, n1 - x1], [x0, n0 - x0]], alternative="greater")
    assert exact_p([table]) == pytest.approx(expected, rel=1e-9)


def _brute_force(strata: list[tuple[int, int, int, int]]) -> float:
    """P(changed arm's events >= observed) over every relabelling within each trace."""
    laws = []
    for n1, x1, n0, x0 in strata:
        units = [1] * (x1 + x0) + [0] * (n1 + n0 - x1 - x0)
        picks = list(itertools.combinations(range(len(units)), n1))
        laws.append([sum(units[i] for i in pick) for pick in picks])
    observed = sum(s[1] for s in strata)
    hits = total = 0
    for combo in itertools.product(*laws):
        total += 1
        hits += sum(combo) >= observed
    return hits / total


def test_several_traces_follow_the_exact_law_within_each_trace() -> None:
    strata = [(2, 2, 2, 0), (2, 1, 2, 1), (3, 2, 2, 0)]
    assert exact_p(strata) == pytest.approx(_brute_force(strata), rel=1e-9)
    assert min_attainable_p(strata) == pytest.approx(
        _brute_force([(n1, min(n1, x1 + x0), n0, x1 + x0 - min(n1, x1 + x0)) for n1, x1, n0, x0 in strata]))


def test_a_trace_with_one_arm_only_is_left_out_of_the_test() -> None:
    assert exact_p([(3, 3, 0, 0)]) is None and min_attainable_p([(3, 3, 0, 0)]) is None
    assert exact_p([(3, 3, 0, 0), (3, 3, 3, 0)]) == pytest.approx(1 / 20)


def test_a_complete_change_reaches_one_over_the_central_binomial() -> None:
    for k in (1, 3, 6):
        assert exact_p([(k, k, k, 0)]) == pytest.approx(1 / math.comb(2 * k, k))
        assert complete_change_p(k) == pytest.approx(1 / math.comb(2 * k, k))
    assert complete_change_p(3, strata=2) == pytest.approx(1 / 400)


@pytest.mark.parametrize("groups, level, strata, expected", [(16, 0.025, 1, 6), (75, 0.025, 1, 7), (1, 0.05, 1, 3),
                                                             (16, 0.025, 3, 3), (1, 0.025, 1, 4)])
def test_the_replays_needed_are_the_fewest_a_complete_change_needs(groups: int, level: float, strata: int,
                                                                  expected: int) -> None:
    k = replays_needed(groups, level, strata)
    assert k == expected
    assert complete_change_p(k, strata) <= level / groups * (1 + 1e-9)
    assert k == 1 or complete_change_p(k - 1, strata) > level / groups


def test_tarone_keeps_only_the_inputs_whose_changes_could_reach_significance() -> None:
    k, inside = tarone_family([0.001, 0.5, None, 0.02, 0.03], 0.05)
    assert k == 2 and inside == [True, False, False, True, False]
    assert tarone_family([0.5, 0.9], 0.05) == (1, [False, False])


def _campaign(rng: np.random.Generator, rates: np.ndarray, changed_rate: np.ndarray, traces: int,
              per_arm: int) -> InputEffects:
    group, stratum, changed, event = [], [], [], []
    for g in range(len(rates)):
        for t in range(traces):
            rate = rates[g] * (0.5 + t)  # the traces of one input differ
            for arm, p in ((True, changed_rate[g] * (0.5 + t)), (False, rate)):
                hits = rng.random(per_arm) < min(p, 1.0)
                group += [f"in{g:02d}"] * per_arm
                stratum += [f"in{g:02d}/{t}"] * per_arm
                changed += [arm] * per_arm
                event += hits.tolist()
    return input_effects(group, stratum, np.array(changed), np.array(event), alpha=0.05, event_name="D_shape")


def test_under_no_change_the_familywise_false_rejection_rate_stays_at_alpha() -> None:
    rng = np.random.default_rng(2026)
    rates = np.array([0.0] * 8 + [0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.05, 0.3])
    trials = 400
    rejected = sum(bool(_campaign(rng, rates, rates, traces=2, per_arm=3).moved()) for _ in range(trials))
    bound = 0.05 * trials + 2 * math.sqrt(trials * 0.05 * 0.95)  # alpha plus two binomial sd
    print(f"per-input family: {rejected} of {trials} null campaigns rejected some input (alpha 0.05)")
    assert rejected <= bound


def test_one_input_that_always_changes_is_found_among_fifteen_that_do_not() -> None:
    rng = np.random.default_rng(7)
    rates = np.array([0.02] * 15 + [0.0])
    changed = rates.copy()
    changed[-1] = 2.0  # every replay of the last input, in both of its traces
    effects = _campaign(rng, rates, changed, traces=1, per_arm=6)
    assert [g.input_id for g in effects.moved()] == ["in15"]
    [g] = effects.moved()
    assert (g.events, g.n, g.control_events) == (6, 6, 0) and g.p_holm is not None and g.p_holm <= 0.05
    back = InputEffects.from_json(effects.to_json())
    assert back.to_json() == effects.to_json() and back.concentrated
