"""Dose-response over an adaptive ladder (quiver._interventional.dose): the fit, the
midpoint and onset, the rule of the rounds, and a known answer.

The known answer: a decision turns over with probability ``p(x) = logistic((x - m) / s)``
at dose ``x`` (the chosen midpoint ``m = 0.37`` and slope ``s = 0.03``), over 60 inputs
whose control rate is ``p(0)`` (about 4e-6). The excess over the controls is
``p(x) - p(0)``: its plateau is 1 (to within 1e-9 at x = 1), its half-plateau dose is
``m`` (to within 1e-5). The onset band: the onset is a level whose excess a finite sample
can tell from 0, and which the step-down test reaches from above, so it lies where the
true excess is between 0.005 (``x >= m + s * logit(0.005)``, about 0.211) and one half
plus one resolution step (``x <= m + 0.02``). Each seed draws the decisions afresh; the
search is the engine's (``plan_round`` and ``dose_response`` round after round, slots
laid out as a campaign lays them: every input once, then again). The same pipeline runs
through real campaigns in ``tests/experiments/test_adaptive_ladder.py`` and
``benchmarks/adaptive.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from quiver._interventional import (
    AdaptiveSettings,
    Columns,
    DoseResponse,
    RoundPlan,
    coarse_levels,
    dose_response,
    isotonic,
    plan_round,
)

MIDPOINT, SLOPE, INPUTS, RESOLUTION = 0.37, 0.03, 60, 0.02
BAND = (MIDPOINT + SLOPE * math.log(0.005 / 0.995), MIDPOINT + RESOLUTION)


def _p(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-(x - MIDPOINT) / SLOPE))


def _columns(rows: list[tuple[int, int, bool]]) -> Columns:
    """Rows ``(step, input, event)`` as a campaign's columns (every pair effective)."""
    n = len(rows)
    event = np.array([r[2] for r in rows], dtype=bool)
    groups = [f"in-{i:03d}" for i in range(INPUTS)]
    group = np.array([r[1] for r in rows], dtype=np.int64)
    return Columns(groups=groups, group=group, trace=[groups[g] for g in group],
                   step=np.array([r[0] for r in rows], dtype=np.int64),
                   stratum=np.array(["effective"] * n, dtype=object),
                   magnitude=np.full(n, 0.5), d_iter=event, d_shape=event, d_output=event, d_struct=event, d={},
                   fails=np.full(n, np.nan), baseline_fails=np.full(n, np.nan))


def _curve(levels: list[float], rows: list[tuple[int, int, bool]]) -> DoseResponse:
    cols = _columns(rows)
    return dose_response(levels, cols, np.zeros(len(rows)), cols.bootstrap(1000, 0), "D_shape", "amount")


def _adaptive(seed: int, budget: int = 3000) -> tuple[DoseResponse, int, list[RoundPlan]]:
    settings = AdaptiveSettings(param="amount", lo=0.0, hi=1.0, resolution=RESOLUTION, max_replays=budget)
    rng = np.random.default_rng(seed)
    levels: list[float] = []
    used: dict[float, int] = {}
    rows: list[tuple[int, int, bool]] = []
    plans: list[RoundPlan] = []
    curve = None
    while True:
        plan = plan_round(settings, len(plans), curve, levels, used, len(rows), INPUTS)
        plans.append(plan)
        if plan.stop:
            assert curve is not None
            return curve, len(rows), plans
        for x, n in plan.add:
            if x not in used:
                levels.append(x)
                used[x] = 0
            rows += [(levels.index(x), slot % INPUTS, bool(rng.random() < _p(x)))
                     for slot in range(used[x], used[x] + n)]
            used[x] += n
        curve = _curve(levels, rows)


def _uniform(seed: int, per_level: int) -> DoseResponse:
    rng = np.random.default_rng(10_000 + seed)
    levels = [round(RESOLUTION * k, 6) for k in range(1, round(1 / RESOLUTION) + 1)]
    rows = [(step, slot % INPUTS, bool(rng.random() < _p(x))) for step, x in enumerate(levels)
            for slot in range(per_level)]
    return _curve(levels, rows)


@pytest.fixture(scope="module")
def searches() -> list[tuple[DoseResponse, int, list[RoundPlan]]]:
    return [_adaptive(seed) for seed in range(20)]


def test_the_search_recovers_a_logistic_midpoint_within_0_02_on_19_of_20_seeds(searches: list) -> None:
    errors = [abs(curve.midpoint.value - MIDPOINT) for curve, _, _ in searches if curve.midpoint.value is not None]
    assert sum(e <= 0.02 for e in errors) >= 19, errors
    for curve, spent, plans in searches:
        assert plans[-1].stop in ("resolution reached", "budget spent", "10 rounds done")
        assert spent <= 3000 and curve.plateau.value == pytest.approx(1.0, abs=0.05)
        assert curve.defined >= 0.95 and curve.midpoint.ci is not None


def test_its_onset_falls_in_the_band_the_logistic_gives(searches: list) -> None:
    onsets = [curve.onset for curve, _, _ in searches]
    assert all(o is not None and BAND[0] <= o <= BAND[1] for o in onsets), (BAND, onsets)
    for curve, _, _ in searches:  # the bracket: the level under the onset did not qualify
        assert curve.below is not None and curve.onset - curve.below <= RESOLUTION + 1e-9


def test_it_spends_at_most_a_third_of_what_a_uniform_ladder_needs_for_the_same_width(searches: list) -> None:
    """A uniform ladder (every 0.02 from 0.02 to 1) given three times the adaptive
    search's median replays still has a wider median midpoint interval over the same
    20 seeds: it needs more than three times the replays for the same width."""
    spent = float(np.median([s for _, s, _ in searches]))
    width = float(np.median([c.midpoint_width for c, _, _ in searches]))
    per_level = math.ceil(3 * spent / 50)
    uniform = [_uniform(seed, per_level).midpoint_width for seed in range(20)]
    assert float(np.median([w if w is not None else math.inf for w in uniform])) > width, (spent, width, uniform)


def test_isotonic_pools_adjacent_violators_with_their_weights() -> None:
    fit = isotonic(np.array([0.0, 0.3, 0.2, 0.5, 0.4, 1.0]), np.array([1.0, 1, 1, 1, 3, 1]))
    assert fit.tolist() == pytest.approx([0.0, 0.25, 0.25, 0.425, 0.425, 1.0])
    assert isotonic(np.array([0.5, 0.1]), np.array([1.0, 4.0])).tolist() == pytest.approx([0.18, 0.18])


def test_the_midpoint_is_linear_between_the_levels_around_half_the_plateau() -> None:
    levels = [0.1, 0.2, 0.3, 0.4]
    rows = [(k, i, i < round(rate * INPUTS)) for k, rate in enumerate([0.0, 0.2, 0.6, 0.8]) for i in range(INPUTS)]
    curve = _curve(levels, rows)
    assert curve.plateau.value == pytest.approx(0.8)
    assert curve.midpoint.value == pytest.approx(0.2 + (0.4 - 0.2) / (0.6 - 0.2) * 0.1)
    assert curve.onset == 0.2 and curve.below == 0.1  # step-down: 0.4, 0.3, 0.2 qualify, 0.1 does not


def test_no_excess_at_the_top_means_no_threshold_and_the_search_stops_when_traces_run_out() -> None:
    settings = AdaptiveSettings(param="amount", lo=0.0, hi=1.0, resolution=0.05, max_replays=1000, pairs=30)
    levels = coarse_levels(settings)
    rows = [(k, i % INPUTS, False) for k in range(len(levels)) for i in range(30)]
    curve = _curve(levels, rows)
    assert curve.onset is None and curve.midpoint.value is None and "not above 0" in (curve.reason or "")
    more = plan_round(settings, 1, curve, levels, dict.fromkeys(levels, 30), len(rows), INPUTS)
    assert more.stop is None and [x for x, _ in more.add] == levels[-2:]
    done = plan_round(settings, 2, curve, levels, dict.fromkeys(levels, INPUTS), len(rows), INPUTS)
    assert done.stop is not None and not done.add


def test_a_round_that_does_not_fit_the_budget_is_cut_in_proportion_then_the_search_stops() -> None:
    settings = AdaptiveSettings(param="amount", lo=0.0, hi=1.0, resolution=0.02, max_replays=110, pairs=20)
    first = plan_round(settings, 0, None, [], {}, 0, INPUTS)
    assert [x for x, _ in first.add] == [0.2, 0.4, 0.6, 0.8, 1.0] and sum(n for _, n in first.add) == 100
    curve = _curve(coarse_levels(settings), [(k, i, k >= 2) for k in range(5) for i in range(20)])
    cut = plan_round(settings, 1, curve, coarse_levels(settings), dict.fromkeys(coarse_levels(settings), 20), 100,
                     INPUTS)
    assert sum(n for _, n in cut.add) == 10 and "cut to the 10 replays left" in cut.reason
    spent = plan_round(settings, 2, curve, coarse_levels(settings), {}, 110, INPUTS)
    assert spent.stop == "budget spent"


def test_whole_number_levels_and_the_plan_round_trips_through_json() -> None:
    settings = AdaptiveSettings(param="level", lo=0, hi=2, resolution=1, max_replays=100, integer=True)
    assert coarse_levels(settings) == [0.0, 1.0, 2.0]
    counts = AdaptiveSettings(param="count", lo=1, hi=8, resolution=1, max_replays=100, integer=True)
    assert coarse_levels(counts) == [1.0, 3.0, 4.0, 6.0, 8.0]
    plan = plan_round(settings, 0, None, [], {}, 0, 10)
    assert RoundPlan.from_json(plan.to_json()) == plan


def test_a_bracket_between_adjacent_levels_off_the_grid_gets_its_middle() -> None:
    """Levels 0.25 and 0.4 at resolution 0.1: the grid point 0.3 lies within half a
    resolution of 0.25, so without the middle (0.325) the bracket would never narrow and
    the search would double the two levels until its budget ran out."""
    settings = AdaptiveSettings(param="fraction", lo=0.0, hi=1.0, resolution=0.1, max_replays=5000, coarse=4)
    levels = [0.25, 0.4, 0.5, 0.75, 1.0]
    rows = [(k, i % INPUTS, i < rate * 60) for k, rate in enumerate([0.1, 0.9, 0.95, 1.0, 1.0]) for i in range(60)]
    curve = _curve(levels, rows)
    plan = plan_round(settings, 1, curve, levels, dict.fromkeys(levels, 60), len(rows), INPUTS)
    assert 0.325 in [x for x, _ in plan.add], plan
    # a region widened to an interval's ends spans levels already there: no level off the grid
    fine = AdaptiveSettings(param="amount", lo=0.0, hi=1.0, resolution=0.02, max_replays=5000)
    near = [0.36, 0.38, 0.4]
    rows = [(k, i % INPUTS, i < rate * 60) for k, rate in enumerate([0.3, 0.6, 0.9]) for i in range(60)]
    assert all(round(x / 0.02, 6).is_integer() for x, _ in plan_round(
        fine, 1, _curve(near, rows), near, dict.fromkeys(near, 60), len(rows), INPUTS).add)


def _outcome_rows(rng: np.random.Generator, levels: list[float], per_level: int) -> tuple[list, list]:
    """Pair rows of a ladder whose answers fail with probability 0.1 + 0.8 * p(x) (the
    logistic above), and one control replay per trace failing with probability 0.1; the
    path never changes, so only the outcome can show the dose."""
    from quiver._interventional import PairRow

    def row(trace: int, step: int, stratum: str, fails: bool, magnitude: float) -> PairRow:
        return PairRow.from_json({"perturbation_id": "p", "trace_id": f"t{trace}",
                                   "input_id": f"in-{trace % INPUTS:03d}", "repeat": 0,
                                  "status": "ok", "node": "n", "op": "list_edit", "params": {}, "step": step,
                                  "stratum": stratum, "magnitude": magnitude, "D_shape": False, "D_iter": 0,
                                  "D_output": True, "D_struct": False, "d": {},
                                  "outcome": {"baseline": "pass", "replay": "fail" if fails else "pass",
                                              "score": None}})

    rows = [row(slot, step, "effective", bool(rng.random() < 0.1 + 0.8 * _p(x)), x)
            for step, x in enumerate(levels) for slot in range(per_level)]
    controls = [row(t, 0, "control", bool(rng.random() < 0.1), 0.0) for t in range(per_level)]
    return rows, controls


def test_a_ladder_following_the_outcome_finds_where_answers_start_to_fail_with_the_path_unchanged() -> None:
    """The outcome curve's excess at each level is the failure rate minus the same
    trace's control failure rate, recomputed here by hand; its plateau is about 0.8 and
    its midpoint about 0.37, though no replay's path changed."""
    from quiver._interventional import adaptive_curve

    levels = [0.2, 0.3, 0.35, 0.4, 0.45, 0.6, 0.8]
    rows, controls = _outcome_rows(np.random.default_rng(7), levels, 120)
    curve = adaptive_curve(rows, controls, None, levels, "outcome", "fraction", resamples=500, seed=0)
    control = {r.trace_id: float(r.outcome["replay"] != "pass") for r in controls}  # one control a trace
    for point in curve.points:
        at = [r for r in rows if r.step == point.step]
        by_hand = sum(float(r.outcome["replay"] != "pass") - control[r.trace_id] for r in at) / len(at)
        assert point.excess.value == pytest.approx(by_hand, abs=1e-12) and point.n == len(at)
    assert curve.event == "outcome" and curve.plateau.value == pytest.approx(0.8, abs=0.1)
    assert curve.midpoint.value is not None and abs(curve.midpoint.value - MIDPOINT) <= 0.05
    assert curve.onset is not None and curve.onset <= 0.4
    assert DoseResponse.from_json(curve.to_json()).event == "outcome"


def test_without_a_control_the_outcome_reference_is_the_recording_and_rows_without_outcomes_are_left_out() -> None:
    from quiver._interventional import PairRow, adaptive_curve

    rows = [PairRow.from_json({"perturbation_id": "p",
                               "trace_id": f"t{i}", "input_id": f"in-{i}", "repeat": 0, "status": "ok", "node": "n",
                               "op": "list_edit", "params": {}, "step": 0, "stratum": "effective", "magnitude": 0.5,
                               "D_shape": False, "D_iter": 0, "D_output": False, "D_struct": False, "d": {},
                               **({} if i >= 8 else {"outcome": {"baseline": "fail" if i < 2 else "pass",
                                                                 "replay": "error" if i < 6 else "pass",
                                                                 "score": None}})})
            for i in range(10)]
    curve = adaptive_curve(rows, [], None, [0.5], "outcome", "fraction", resamples=200, seed=0)
    [point] = curve.points
    # 8 rows carry an outcome; 6 did not pass (an error is not a pass), 2 recordings failed
    assert point.n == 8 and point.n_events == 6 and point.excess.value == pytest.approx((6 - 2) / 8)
