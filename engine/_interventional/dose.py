"""Dose-response of a perturbation over an adaptive magnitude ladder.

An adaptive ladder searches one operator parameter (its *dose*: ``fraction``, ``amount``,
``temperature``, a variant ``level``; the operator declares it, see
:func:`quiver.perturbations.magnitude_of`) over a range, in rounds. This module holds
the statistics of one round and of the final result, and the rule that places the next
round's levels; the campaign (``quiver.experiments``) turns a plan into replays and
keeps every round's decision in its ledger.

**The curve** (QUIVER.md §7, extended). Pairs: the perturbation's effective ok rows whose
baseline trace has a reference noise rate ``o(i)`` (the control replays of the same
trace, else the observational rate of its input: the references of the thresholds, see
:mod:`quiver._interventional.betas`). Per level, the excess is the mean of
``event_i - o(i)`` (``event``: D_shape > 0 or D_iter > 0), with the 95% interval of the
group bootstrap over input groups (the perturbation's shared resamples). **The outcome**
is an event too: the replay's outcome does not pass (a fail, or a check's error), over
the rows whose replay carries an outcome, with its own reference (:func:`reference_rate`:
the control replays' failure rate on the same trace, else the recording's own); so its
onset is the dose from which answers fail beyond control, its midpoint the dose at
which half the plateau's extra failures are reached. A ladder whose replays carry
outcomes reports its curve beside the path's, and ``event: outcome`` makes the search
place its levels by it. The
dose-response curve is the weighted isotonic (non-decreasing) fit of the levels'
excesses against the dose (pool-adjacent-violators, weights = the levels' pairs); its
pointwise band is the 2.5 and 97.5 percentiles of the fit refitted on each resample.
The *plateau* is the fit at the largest level. The *midpoint* is the dose at which the
fit first reaches half the plateau, linear between the two levels around the crossing;
it is undefined when the plateau is not above 0 or the smallest level is already at
half of it. Its interval is the percentile interval of the midpoints of the refits
(``defined``: the share of resamples that have one; the interval is reported when at
least 95% do). The *onset* is the existing definition of an interventional threshold
(QUIVER.md §7 [engine]) with one bin per level: the step-down test from the largest level
while the lower end of a level's excess interval is above 0; ``onset`` is the last level
reached, ``onset_d`` the smallest target distance d_i that bifurcated at that level
(the threshold's ``value``), ``below`` the largest level under it (the onset lies in
``(below, onset]``).

**The search.** Round 0 replays ``coarse`` levels evenly over the range: for a real
parameter ``lo + (hi - lo) * k / coarse``, k = 1..coarse (the low end is the zero dose
the control replays stand for), for a whole-number parameter the rounded values of
``lo + (hi - lo) * k / (coarse - 1)``, k = 0..coarse-1 (every value is a dose: a count,
a variant). Each new level gets ``pairs`` replays (the first ``pairs`` slots of the
perturbation's trace order: every selected trace once, then each again with the next
repeat). After each round:

* *no onset*: the largest level does not qualify. While traces are left at it, the top
  two levels get as many replays again as they have (the effect may be small); else the
  search stops: no threshold in the range.
* *midpoint*: unless its interval is narrower than ``resolution`` and so are the two
  levels around the crossing (the fit is linear between them), the region from the
  levels around the crossing to the ends of the interval gets new levels where two
  levels are further apart than ``resolution`` (a grid of spacing ``max(resolution,
  width / 4)`` rounded to a multiple of it, on the grid ``lo + k * resolution``; between two
  adjacent levels where no grid point lies more than half a resolution from both, the
  middle of the gap), and its
  existing levels double their replays;
* *onset*: unless ``onset - below <= resolution`` (or the onset is the smallest dose
  within ``resolution`` of the range's low end), the bracket gets new levels the same
  way and its two ends double their replays.
* It stops when both are within ``resolution`` ("resolution reached"), when the next
  round would pass ``max_replays`` and not one replay is left ("budget spent"; a
  round that does not fit whole is cut, each level's share in proportion), or after
  ``max_rounds`` rounds.

Each round's decision is a plain JSON-able :class:`RoundPlan`, so a resumed or
distributed campaign takes it from the ledger instead of deciding again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quiver._stats import Estimate, GroupBootstrap, percentile_interval, rounded

from .betas import _references, step_down
from .columns import TIE, Columns, DoseEvent
from .reader import Reader
from .rows import PairRow

__all__ = ["AdaptiveSettings", "AdaptiveEstimates", "CurvePoint", "DoseResponse", "RoundPlan", "adaptive_curve",
           "adaptive_estimates", "coarse_levels", "dose_response", "isotonic", "plan_round", "DEFINED_SHARE"]

DEFINED_SHARE = 0.95
"""The share of resamples that must have a midpoint for its interval to be reported."""


@dataclass(frozen=True)
class AdaptiveSettings:
    """An adaptive ladder, as a spec gives it (``ladder: {adaptive: {...}}``).

    Attributes:
        param: The operator parameter searched (its dose).
        lo: The range's low end.
        hi: The range's high end.
        resolution: The interval width at which the search stops.
        max_replays: The most replays the search spends, all rounds included.
        coarse: The levels of round 0.
        pairs: The replays a new level gets in its round.
        integer: Whether the levels are whole numbers.
        event: The event the search follows (the path changes are both reported, the
            outcome whenever the replays carry one).
        max_rounds: The most rounds after round 0.
    """

    param: str
    lo: float
    hi: float
    resolution: float
    max_replays: int
    coarse: int = 5
    pairs: int = 20
    integer: bool = False
    event: DoseEvent = "D_shape"
    max_rounds: int = 10

    def level(self, x: float) -> float | int:
        """A level as the operator takes it: a whole number for an integer parameter."""
        return int(round(x)) if self.integer else round(float(x), 6)


@dataclass(frozen=True)
class RoundPlan:
    """One round's decision: the levels that get replays, and why; or why the search stops.

    Attributes:
        round: The round (0: the coarse pass).
        add: ``(level, replays)`` in the order the replays are made.
        reason: What the round is for (or why the search stops).
        stop: Why the search stops (None: it goes on with ``add``).
        known: What was known when it was decided (midpoint, its interval, onset, ...).
    """

    round: int
    add: tuple[tuple[float, int], ...]
    reason: str
    stop: str | None = None
    known: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "add": [[x, n] for x, n in self.add], "reason": self.reason, "stop": self.stop,
                "known": dict(sorted(self.known.items()))}  # as the ledger keeps it (sorted keys)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "round") -> RoundPlan:
        r = Reader(data, where)
        add = []
        for i, item in enumerate(r.array("add")):
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], (int, float))
                    and isinstance(item[1], int) and not isinstance(item[1], bool)):
                raise r.wrong(f"add[{i}]", "[level, replays]")
            add.append((item[0], item[1]))
        known = r.raw("known") if r.has("known") else {}
        return cls(round=r.integer("round"), add=tuple(add), reason=r.string("reason"), stop=r.opt_string("stop"),
                   known=dict(known) if isinstance(known, Mapping) else {})


@dataclass(frozen=True)
class CurvePoint:
    """One level of a dose-response curve.

    Attributes:
        level: The dose.
        step: Its step (the order levels were introduced in).
        n: Effective pairs with a reference.
        inputs: Their input groups.
        n_events: Those with the event.
        mean_d: Their mean target distance d_i.
        excess: Their mean ``event - o(i)``, interval and n.
        fit: The isotonic fit at this level.
        band: The fit's pointwise 95% band.
        qualifies: Whether the excess interval lies above 0.
    """

    level: float
    step: int
    n: int
    inputs: int
    n_events: int
    mean_d: float | None
    excess: Estimate
    fit: float | None
    band: tuple[float, float] | None
    qualifies: bool

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "step": self.step, "n": self.n, "inputs": self.inputs,
                "n_events": self.n_events, "mean_d": rounded(self.mean_d), **self.excess.as_dict("excess"),
                "fit": rounded(self.fit), "band": None if self.band is None else [rounded(b) for b in self.band],
                "qualifies": self.qualifies}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "point") -> CurvePoint:
        r = Reader(data, where)
        return cls(level=r.number("level"), step=r.integer("step"), n=r.integer("n"), inputs=r.integer("inputs"),
                   n_events=r.integer("n_events"), mean_d=r.opt_number("mean_d"), excess=r.estimate("excess"),
                   fit=r.opt_number("fit"), band=r.pair("band"), qualifies=r.boolean("qualifies"))


@dataclass(frozen=True)
class DoseResponse:
    """The dose-response of one event over an adaptive ladder (module docstring).

    Attributes:
        event: ``D_shape``, ``D_iter`` or ``outcome`` (the replay's outcome does not pass).
        param: The dose parameter.
        points: The levels, in increasing dose.
        plateau: The fit at the largest level, with its interval.
        midpoint: The dose at half the plateau, with its interval (n: the pairs).
        defined: The share of resamples with a midpoint.
        onset: The last level the step-down test reached (None: none qualifies).
        onset_d: The smallest d_i with the event at that level.
        below: The largest level under the onset (None: the onset is the smallest level).
        reason: Why there is no midpoint or onset (None: both are there).
    """

    event: DoseEvent
    param: str
    points: tuple[CurvePoint, ...]
    plateau: Estimate
    midpoint: Estimate
    defined: float
    onset: float | None
    onset_d: float | None
    below: float | None
    reason: str | None

    @property
    def midpoint_width(self) -> float | None:
        ci = self.midpoint.ci
        return None if ci is None else ci[1] - ci[0]

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "param": self.param, **self.plateau.as_dict("plateau"),
                **self.midpoint.as_dict("midpoint"), "defined": rounded(self.defined), "onset": self.onset,
                "onset_d": rounded(self.onset_d), "below": self.below, "reason": self.reason,
                "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "dose_response") -> DoseResponse:
        r = Reader(data, where)
        event = r.string("event")
        if event not in ("D_shape", "D_iter", "outcome"):
            raise r.wrong("event", "'D_shape', 'D_iter' or 'outcome'")
        return cls(event="D_shape" if event == "D_shape" else "D_iter" if event == "D_iter" else "outcome",
                   param=r.string("param"),
                   points=r.read_all("points", CurvePoint.from_json), plateau=r.estimate("plateau"),
                   midpoint=r.estimate("midpoint"), defined=r.number("defined"), onset=r.opt_number("onset"),
                   onset_d=r.opt_number("onset_d"), below=r.opt_number("below"), reason=r.opt_string("reason"))


@dataclass(frozen=True)
class AdaptiveEstimates:
    """What an adaptive ladder spent and found (a perturbation's ``adaptive`` in ``campaign.json``).

    Attributes:
        settings: The search as the spec gave it (range made concrete).
        levels: The dose of each step, in the order the levels were introduced.
        rounds: Every round's plan, round 0 first, the stop last.
        replays: The replays the search placed, all rounds.
        stopped: Why the search stopped (None: it did not finish).
        beta_shape: The dose-response of D_shape.
        beta_iter: The dose-response of D_iter.
        outcome: The dose-response of the outcome not passing (None: no replay of the
            ladder carries an outcome).
    """

    settings: Mapping[str, Any]
    levels: tuple[float, ...]
    rounds: tuple[RoundPlan, ...]
    replays: int
    stopped: str | None
    beta_shape: DoseResponse
    beta_iter: DoseResponse
    outcome: DoseResponse | None = None

    def curve(self, event: str) -> DoseResponse | None:
        """The curve of ``event`` (``D_shape``, ``D_iter`` or ``outcome``)."""
        return self.beta_shape if event == "D_shape" else self.beta_iter if event == "D_iter" else self.outcome

    @property
    def followed(self) -> DoseResponse:
        """The curve the search followed (its ``event`` setting; D_shape's when that curve is missing)."""
        return self.curve(str(self.settings.get("event", "D_shape"))) or self.beta_shape

    def to_json(self) -> dict[str, Any]:
        return {"settings": dict(self.settings), "levels": list(self.levels), "replays": self.replays,
                "stopped": self.stopped, "rounds": [r.to_json() for r in self.rounds],
                "beta_shape": self.beta_shape.to_json(), "beta_iter": self.beta_iter.to_json(),
                **({"outcome": self.outcome.to_json()} if self.outcome is not None else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "adaptive") -> AdaptiveEstimates:
        r = Reader(data, where)
        settings = r.raw("settings")
        if not isinstance(settings, Mapping):
            raise r.wrong("settings", "an object")
        levels = r.array("levels")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in levels):
            raise r.wrong("levels", "a list of numbers")
        return cls(settings=dict(settings), levels=tuple(float(x) for x in levels),
                   rounds=r.read_all("rounds", RoundPlan.from_json), replays=r.integer("replays"),
                   stopped=r.opt_string("stopped"), beta_shape=r.read("beta_shape", DoseResponse.from_json),
                   beta_iter=r.read("beta_iter", DoseResponse.from_json),
                   outcome=r.read("outcome", DoseResponse.from_json) if r.has("outcome") else None)


# --------------------------------------------------------------------------- the fit


def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted non-decreasing least-squares fit of ``y`` (pool adjacent violators);
    every weight is positive (levels without pairs are left out before)."""
    values: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(y.tolist(), w.tolist(), strict=True):
        values.append(yi)
        weights.append(wi)
        sizes.append(1)
        while len(values) > 1 and values[-2] > values[-1] + TIE:
            total = weights[-2] + weights[-1]
            merged = (values[-2] * weights[-2] + values[-1] * weights[-1]) / total
            sizes[-2] += sizes[-1]
            values[-2], weights[-2] = merged, total
            del values[-1], weights[-1], sizes[-1]
    return np.repeat(np.array(values, dtype=np.float64), sizes)


def _midpoint(x: np.ndarray, fit: np.ndarray) -> float | None:
    """The dose at which ``fit`` first reaches half its last value (None: undefined)."""
    if fit.size == 0 or not np.isfinite(fit[-1]) or fit[-1] <= TIE:
        return None
    half = fit[-1] / 2
    k = int(np.argmax(fit >= half - TIE))
    if k == 0:
        return None
    f0, f1 = fit[k - 1], fit[k]
    if f1 - f0 <= TIE:
        return float(x[k])
    return float(x[k - 1] + (half - f0) / (f1 - f0) * (x[k] - x[k - 1]))


# --------------------------------------------------------------------------- the curve


def dose_response(levels: Sequence[float], cols: Columns, reference: np.ndarray, boot: GroupBootstrap,
                  event: DoseEvent, param: str) -> DoseResponse:
    """The dose-response of ``event`` (module docstring).

    Args:
        levels: The dose of each step (``levels[step]``).
        cols: The perturbation's ok rows (``cols.step`` indexes ``levels``).
        reference: Per row, its reference noise rate (NaN: none).
        boot: The perturbation's group bootstrap over ``cols``' input groups.
        event: The event.
        param: The dose parameter's name.
    """
    fired = _fired(cols, event)
    usable = (cols.stratum == "effective") & np.isfinite(reference) & np.isfinite(fired) & (cols.step < len(levels))
    fired = np.nan_to_num(fired)
    diff = np.where(usable, fired - np.nan_to_num(reference), 0.0)
    steps = sorted({int(s) for s in cols.step[usable]}, key=lambda s: (levels[s], s))
    x = np.array([levels[s] for s in steps], dtype=np.float64)
    sums = np.zeros((len(steps), boot.n_groups))
    counts = np.zeros((len(steps), boot.n_groups))
    raw: list[tuple[int, Estimate, int, int, float | None]] = []
    for k, s in enumerate(steps):
        at = usable & (cols.step == s)
        sums[k], counts[k] = boot.group_sums(diff, at)
        excess = boot.mean(diff, at)
        d = cols.magnitude[at]
        d = d[np.isfinite(d)]
        raw.append((s, excess, int(np.unique(cols.group[at]).size), int(fired[at].sum()),
                    float(d.mean()) if d.size else None))
    n = counts.sum(axis=1)
    y = np.divide(sums.sum(axis=1), n, out=np.zeros_like(n), where=n > 0)
    fit = isotonic(y, n) if len(steps) else np.zeros(0)
    draws_fit, draws_mid = _refits(x, sums, counts, boot.weights)
    band = [percentile_interval(draws_fit[:, k]) for k in range(len(steps))]
    plateau_draws = draws_fit[:, -1] if len(steps) else np.zeros(0)
    plateau = Estimate(float(fit[-1]) if len(steps) else None, percentile_interval(plateau_draws) if len(steps)
                       else None, int(n.sum()), plateau_draws)
    defined = float(np.isfinite(draws_mid).mean()) if draws_mid.size else 0.0
    mid = _midpoint(x, fit)
    mid_ci = percentile_interval(draws_mid) if defined >= DEFINED_SHARE else None
    points = tuple(
        CurvePoint(level=float(levels[s]), step=s, n=int(n[k]), inputs=inputs, n_events=events, mean_d=mean_d,
                   excess=excess, fit=float(fit[k]), band=band[k],
                   qualifies=bool(excess.value is not None and excess.value > TIE and excess.ci is not None
                                  and excess.ci[0] > TIE))
        for k, (s, excess, inputs, events, mean_d) in enumerate(raw)
    )
    onset_k = step_down(points)
    onset = points[onset_k].level if onset_k is not None else None
    onset_d = None
    if onset_k is not None:
        at = usable & (cols.step == points[onset_k].step) & (fired > 0)
        d = cols.magnitude[at]
        onset_d = float(d[np.isfinite(d)].min()) if np.isfinite(d).any() else None
    reason = _reason(points, mid, onset)
    return DoseResponse(event=event, param=param, points=points, plateau=plateau,
                        midpoint=Estimate(mid, mid_ci, int(n.sum()), draws_mid), defined=defined, onset=onset,
                        onset_d=onset_d, below=points[onset_k - 1].level if onset_k else None, reason=reason)


def _fired(cols: Columns, event: DoseEvent) -> np.ndarray:
    """Per row, 1.0 when it has the event, 0.0 when not, NaN when it cannot say (an
    outcome event on a replay without an outcome)."""
    if event == "outcome":
        return cols.fails.astype(np.float64)
    return cols.event(event).astype(np.float64)


def reference_rate(cols: Columns, table: Any, event: DoseEvent, control: Columns | None) -> np.ndarray:
    """Per row, the reference rate of ``event`` (NaN: none). A path change's is its
    thresholds' (:func:`~quiver._interventional.betas._references`: the control replays
    of the same trace, else the observational rate of the input). **[engine]** The
    outcome's: the share of the same trace's control replays whose outcome did not pass;
    for a trace without a control replay carrying an outcome, its recorded baseline's own
    (1.0 or 0.0: one unbiased draw of the trace's failure rate; the observational
    same-input pairs hold no outcome)."""
    if event != "outcome":
        return _references(cols, table, event, control).rate
    rate = cols.baseline_fails.astype(np.float64).copy()
    if control is not None and control.trace:
        k: dict[str, float] = {}
        n: dict[str, int] = {}
        for t, f in zip(control.trace, control.fails, strict=True):
            if np.isfinite(f):
                k[t] = k.get(t, 0.0) + float(f)
                n[t] = n.get(t, 0) + 1
        for i, t in enumerate(cols.trace):
            if t in n:
                rate[i] = k[t] / n[t]
    return rate


def adaptive_curve(rows: Sequence[PairRow], control_rows: Sequence[PairRow], table: Any, levels: Sequence[float],
                   event: DoseEvent, param: str, *, resamples: int, seed: int) -> DoseResponse:
    """The dose-response of one perturbation's rows (all its rounds so far), with the
    references and the resamples its estimates use (:func:`reference_rate`; ``table``:
    the observational same-input pairs)."""
    cols = Columns.of([r for r in rows if r.status == "ok"], [])
    ok = [r for r in control_rows if r.status == "ok"]
    control = Columns.of(ok, []) if ok else None
    reference = reference_rate(cols, table, event, control)
    return dose_response(levels, cols, reference, cols.bootstrap(resamples, seed), event, param)


def adaptive_estimates(adaptive: Mapping[str, Any], cols: Columns, boot: GroupBootstrap, table: Any,
                       control: Columns | None) -> AdaptiveEstimates:
    """A perturbation's :class:`AdaptiveEstimates` from its spec entry's ``adaptive``
    (``settings``, ``levels``, ``rounds``) and its ok rows as columns."""
    levels = [float(x) for x in adaptive.get("levels") or []]
    settings = dict(adaptive.get("settings") or {})
    param = str(settings.get("param", "level"))
    rounds = tuple(r if isinstance(r, RoundPlan) else RoundPlan.from_json(r, where=f"adaptive.rounds[{i}]")
                   for i, r in enumerate(adaptive.get("rounds") or []))
    events: tuple[DoseEvent, ...] = ("D_shape", "D_iter", "outcome") if np.isfinite(cols.fails).any() else (
        "D_shape", "D_iter")
    curves = {event: dose_response(levels, cols, reference_rate(cols, table, event, control), boot, event, param)
              for event in events}
    return AdaptiveEstimates(settings=settings, levels=tuple(levels), rounds=rounds,
                             replays=sum(n for r in rounds for _, n in r.add),
                             stopped=rounds[-1].stop if rounds else None, beta_shape=curves["D_shape"],
                             beta_iter=curves["D_iter"], outcome=curves.get("outcome"))


def _refits(x: np.ndarray, sums: np.ndarray, counts: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The isotonic fit and the midpoint on every resample (NaN: undefined there)."""
    resamples = weights.shape[0]
    if x.size == 0:
        return np.zeros((resamples, 0)), np.full(resamples, np.nan)
    s = weights @ sums.T
    c = weights @ counts.T
    fits = np.full((resamples, x.size), np.nan)
    mids = np.full(resamples, np.nan)
    for b in range(resamples):
        keep = c[b] > 0
        if not keep.any():
            continue
        fit = isotonic(s[b, keep] / c[b, keep], c[b, keep])
        fits[b, keep] = fit
        m = _midpoint(x[keep], fit)
        if m is not None:
            mids[b] = m
    return fits, mids


def _reason(points: Sequence[CurvePoint], mid: float | None, onset: float | None) -> str | None:
    if not points:
        return "no effective pair with a reference noise rate"
    if onset is None:
        top = points[-1]
        return (f"the largest level ({top.level}, n = {top.n}) has an excess of {rounded(top.excess.value)}, "
                "not above 0: no threshold in the range")
    if mid is None:
        return f"the smallest level ({points[0].level}) is already at half the plateau: the midpoint lies below it"
    return None


# --------------------------------------------------------------------------- the search


def coarse_levels(s: AdaptiveSettings) -> list[float]:
    """Round 0's levels (module docstring)."""
    if s.integer:
        k = max(s.coarse, 2)
        return sorted({float(s.level(s.lo + (s.hi - s.lo) * i / (k - 1))) for i in range(k)})
    return sorted({float(s.level(s.lo + (s.hi - s.lo) * i / s.coarse)) for i in range(1, s.coarse + 1)})


def _grid(s: AdaptiveSettings, a: float, b: float, existing: Sequence[float]) -> list[float]:
    """New levels strictly inside (a, b) where existing levels are further apart than the resolution."""
    width = b - a
    if width <= s.resolution + TIE:
        return []
    if s.integer:
        inside = list(range(math.floor(a) + 1, math.ceil(b)))
        if len(inside) > 3:
            inside = sorted({int(round(a + width * k / 4)) for k in (1, 2, 3)} - {int(a), int(b)})
        candidates = [float(v) for v in inside]
    else:  # on the grid lo + k * resolution, about four steps across the gap
        h = s.resolution * max(1, round(width / 4 / s.resolution))
        first = math.floor((a - s.lo) / h + TIE) + 1
        candidates = [float(s.level(s.lo + h * k)) for k in range(first, first + int(width / h) + 2)
                      if a + TIE < s.lo + h * k < b - TIE]
    taken = sorted(existing)
    out = []
    for c in candidates:
        if all(abs(c - t) > (0.5 if s.integer else s.resolution / 2) for t in taken):
            out.append(c)
            taken.append(c)
    ends = sorted(t for t in existing if a - TIE <= t <= b + TIE)
    adjacent = len(ends) == 2 and abs(ends[0] - a) <= TIE and abs(ends[1] - b) <= TIE
    if not out and not s.integer and adjacent:  # two adjacent levels, no grid point far enough from both
        out.append(float(s.level((a + b) / 2)))
    return out


def plan_round(s: AdaptiveSettings, round_: int, curve: DoseResponse | None, levels: Sequence[float],
               pairs_at: Mapping[float, int], spent: int, slots: int) -> RoundPlan:
    """The next round's decision (module docstring).

    Args:
        s: The settings.
        round_: The round to decide (0: the coarse pass; ``curve`` is then None).
        curve: The curve of ``s.event`` over the rounds so far.
        levels: Every level replayed so far.
        pairs_at: Replays planned so far per level.
        spent: Replays planned so far, in all.
        slots: Replays one level can hold per repeat (the selected traces).
    """
    if round_ == 0 or curve is None:
        first = coarse_levels(s)
        return _fit_budget(s, round_, [(x, s.pairs) for x in first], spent, "coarse pass", {})
    known = _known(curve)
    if round_ > s.max_rounds:
        return RoundPlan(round_, (), "", stop=f"{s.max_rounds} rounds done", known=known)
    points = curve.points
    if not points:
        return RoundPlan(round_, (), "", stop="no effective pair with a reference noise rate", known=known)
    adds: dict[float, int] = {}

    def more(x: float, n: int) -> None:
        adds[x] = max(adds.get(x, 0), n)

    reasons = []
    xs = [p.level for p in points]
    if curve.onset is None:
        top = sorted(levels)[-2:]
        if all(pairs_at.get(x, 0) >= slots for x in top):
            return RoundPlan(round_, (), "", stop=curve.reason or "no threshold in the range", known=known)
        for x in top:
            more(x, max(s.pairs, pairs_at.get(x, 0)))
        reasons.append("no level's excess is above 0 yet: more replays at the top")
    else:
        a, b = _mid_region(s, curve, xs)
        mid_done = (curve.midpoint_width is not None and curve.midpoint_width <= s.resolution + TIE
                    and _crossing_width(curve, xs) <= s.resolution + TIE)
        if not mid_done:
            for x in _grid(s, a, b, levels):
                more(x, s.pairs)
            for x in xs:
                if a - TIE <= x <= b + TIE:
                    more(x, max(s.pairs, pairs_at.get(x, 0)))
            reasons.append(f"midpoint: levels in [{rounded(a)}, {rounded(b)}]")
        low = curve.below if curve.below is not None else s.lo
        onset_done = curve.onset - low <= s.resolution + TIE
        if not onset_done:
            for x in _grid(s, low, curve.onset, levels):
                more(x, s.pairs)
            for end in (curve.below, curve.onset):
                if end is not None:
                    more(end, max(s.pairs, pairs_at.get(end, 0)))
            reasons.append(f"onset: levels in ({rounded(low)}, {rounded(curve.onset)}]")
        if mid_done and onset_done:
            return RoundPlan(round_, (), "", stop="resolution reached", known=known)
    return _fit_budget(s, round_, sorted(adds.items()), spent, "; ".join(reasons), known)


def _mid_region(s: AdaptiveSettings, curve: DoseResponse, xs: Sequence[float]) -> tuple[float, float]:
    """The levels around the half-plateau crossing, widened to the midpoint's interval."""
    m = curve.midpoint.value
    if m is None:  # at or below the smallest level
        a, b = s.lo, xs[0]
    else:
        below = [x for x in xs if x <= m]
        above = [x for x in xs if x >= m]
        a = below[-1] if below else s.lo
        b = above[0] if above else xs[-1]
    ci = curve.midpoint.ci
    if ci is not None:
        a, b = min(a, ci[0]), max(b, ci[1])
    return max(a, s.lo), min(b, s.hi)


def _crossing_width(curve: DoseResponse, xs: Sequence[float]) -> float:
    """How far apart the two levels around the half-plateau crossing are (inf: no crossing)."""
    m = curve.midpoint.value
    if m is None:
        return math.inf
    below = [x for x in xs if x <= m]
    above = [x for x in xs if x >= m]
    return above[0] - below[-1] if below and above else math.inf


def _fit_budget(s: AdaptiveSettings, round_: int, adds: Sequence[tuple[float, int]], spent: int, reason: str,
                known: Mapping[str, Any]) -> RoundPlan:
    """``adds`` cut to the replays left (each level's share in proportion), or the stop."""
    left = s.max_replays - spent
    total = sum(n for _, n in adds)
    if left <= 0 or not adds:
        return RoundPlan(round_, (), "", stop="budget spent" if left <= 0 else "nothing left to place", known=known)
    if total > left:
        scaled = [(x, n * left // total) for x, n in adds]
        short = left - sum(n for _, n in scaled)
        scaled = [(x, n + (1 if k < short else 0)) for k, (x, n) in enumerate(scaled)]
        adds = [(x, n) for x, n in scaled if n > 0]
        reason += f" (cut to the {left} replays left of max_replays {s.max_replays})"
    return RoundPlan(round_, tuple((float(x), int(n)) for x, n in adds), reason, known=known)


def _known(curve: DoseResponse) -> dict[str, Any]:
    return {"midpoint": rounded(curve.midpoint.value),
            "midpoint_ci": None if curve.midpoint.ci is None else [rounded(v) for v in curve.midpoint.ci],
            "plateau": rounded(curve.plateau.value), "onset": curve.onset, "below": curve.below,
            "levels": len(curve.points), "pairs": curve.midpoint.n}
