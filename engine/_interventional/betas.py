"""Interventional bifurcation thresholds of a campaign: beta_shape and beta_iter.

QUIVER.md §7 (Def. 10, A.8, B.3), computed per perturbation for
:func:`~quiver._interventional.campaign_estimates`. Choices QUIVER.md leaves open,
made here:

* **Betas.** Pairs: the perturbation's effective ok rows with a magnitude. Bins: with a
  ladder, one bin per ``step``, ordered by the median magnitude of its pairs (a ladder
  need not be listed in increasing strength; ties by step). Without a ladder, quantile
  bins of the magnitudes: ``k = min(5, n // 5)`` bins (one when n < 10), filled in
  increasing magnitude with tied magnitudes kept in one bin, each closed once it holds
  n / k pairs; a last bin of fewer than 5 pairs is merged into the one before.
  A bin qualifies when the lower end of the 95% interval of its excess over the control
  (below) is above 0. The bins are tested *step-down*, from the largest magnitude:
  while the bins qualify the search goes on to the next smaller one, and it stops at
  the first that does not. ``value`` is the smallest magnitude *that bifurcated* in the
  last bin reached (an observed threshold, never a bin edge no pair sat on); none when
  the largest bin does not qualify. This is the fixed-sequence test of a minimum
  effective dose (Hsu and Berger 1999): a threshold response is ordered (what changes
  decisions at one magnitude does at larger ones), and testing in that order keeps the
  chance of a false threshold at the one-sided 2.5% of a single test, where taking the
  first qualifying bin from below would have about 12% over five bins (measured on
  support_bot: a rewriter bin at 0.010-0.019 qualified with +0.065 [+0.015, +0.114] while
  the bins above it did not). ``max_non_bifurcating`` is the largest magnitude without
  the beta's own event (no D_shape for beta_shape, D_iter = 0 for beta_iter).
  ``upper_bound`` counts effective pairs with magnitude strictly below ``value``.
  ``raw_min`` carries the group-bootstrap interval of a minimum (one-sided by
  construction, as the observational beta); ``value`` has no interval (a bootstrap of
  the whole bin search would nest two bootstraps): the bins' rates and excesses, the
  IQR and ``upper_bound`` say how firm it is.
  Each bin also reports ``inputs`` (its input groups, the unit its intervals resample)
  and ``inputs_above_control`` (those whose mean paired excess is above 0): an excess
  carried by few inputs has a wide interval however many replays each input gets.
* **Control rate, matched trace by trace.** A bin's rate is compared with the noise of
  *its own traces*. A campaign runs control replays of each target (the target served
  as recorded for output operators, run live unchanged for execution operators,
  everything downstream live: the same replays as the perturbations', minus the
  perturbation). For each effective pair the reference ``o(i)`` is the rate of the
  event over the control replays of its baseline trace; for a trace without control
  replays, the observational rate over the same-input pairs of its input (which
  resamples the whole pipeline, upstream of the target as well, so where upstream
  nodes are noisy it overstates a replay's noise and the test is conservative). The
  bin's excess is the group-bootstrap mean of ``event_i - o(i)`` over its pairs with a
  reference: a paired difference, resampled with the same input groups, so the mix of
  traces in the bin cancels. ``control_rate`` of a bin is the mean of ``o(i)``,
  ``control_n`` its pairs with a reference, ``control`` says which references it used.
  Why not the no-op stratum, as §7 first suggests: which pairs a continuous operator
  leaves unchanged depends on the input (a prompt swap changes nothing for a small-talk
  message with an empty rewrite), so the no-op stratum is a different kind of trace
  from the effective bins, with a different noise (measured on support_bot: no-op
  D_shape 0.03-0.09 against 0.12-0.21 in effective bins below the threshold), and an
  unmatched control lets the bins' own noise pass for an effect. When no pair of a bin
  has a reference, the bin falls back to the perturbation's no-op stratum, else the
  observational rate over every pair. ``control_replays`` of a perturbation summarises
  its control's rows (counts, rates, downstream means)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from quiver._observational import group_minimum
from quiver._stats import Estimate, GroupBootstrap, PairTable, rounded

from .columns import TIE, Columns, Event, difference, mask
from .reader import Reader, estimate_json

__all__ = ["Threshold", "ThresholdBin", "beta", "MIN_BIN_PAIRS", "QUANTILE_BINS", "UPPER_BOUND_PAIRS", "MATCHED",
           "MATCHED_CONTROLS", "MATCHED_MIXED"]

MIN_BIN_PAIRS = 5
"""The fewest pairs of a quantile bin of magnitudes."""
QUANTILE_BINS = 5
"""The most quantile bins (quintiles)."""
UPPER_BOUND_PAIRS = 10
"""Fewer effective pairs than this below ``value`` make it an upper bound (§7)."""


@dataclass(frozen=True)
class _Control:
    source: Literal["noop", "observational"] | None
    rate: Estimate


MATCHED = "observational, same inputs"
"""``control`` of a bin held against the observational noise of its own inputs."""
MATCHED_CONTROLS = "control replays, same traces"
"""``control`` of a bin held against the control replays of its own traces."""
MATCHED_MIXED = "control replays, else observational"
"""``control`` of a bin whose traces have control replays only in part."""


def _matched_source(from_controls: np.ndarray) -> str:
    return MATCHED_CONTROLS if from_controls.all() else MATCHED if not from_controls.any() else MATCHED_MIXED


def _control(cols: Columns, boot: GroupBootstrap, event: Event, obs_rate: Estimate) -> _Control:
    """The perturbation-wide control: for bins none of whose inputs has observational pairs."""
    noop = cols.stratum == "noop"
    if noop.any():
        return _Control("noop", boot.rate(cols.event(event), noop))
    if obs_rate.value is not None:
        return _Control("observational", obs_rate)
    return _Control(None, Estimate.empty())


@dataclass(frozen=True)
class _Reference:
    """Per pair, the noise rate it is held against, and where each came from."""

    rate: np.ndarray
    """NaN: no reference (the bin falls back to the perturbation-wide control)."""
    from_controls: np.ndarray
    """True where the rate is the pair's trace's control replays."""


def _references(cols: Columns, table: PairTable, event: Event, control: Columns | None) -> _Reference:
    """The control replays' rate of ``event`` for the pair's baseline trace; for traces
    without control replays, the observational rate of the pair's input."""
    rate = _input_noise(cols, table, event)
    placebo = np.zeros(len(cols.trace), dtype=bool)
    if control is not None and control.trace:
        fired = control.event(event).astype(np.float64)
        k: dict[str, float] = {}
        n: dict[str, int] = {}
        for t, f in zip(control.trace, fired, strict=True):
            k[t] = k.get(t, 0.0) + f
            n[t] = n.get(t, 0) + 1
        for i, t in enumerate(cols.trace):
            if t in n:
                rate[i], placebo[i] = k[t] / n[t], True
    return _Reference(rate, placebo)


def _input_noise(cols: Columns, table: PairTable, event: Event) -> np.ndarray:
    """Per pair of ``cols``, the observational rate of ``event`` over its input's same-input pairs (NaN: none)."""
    fired = (np.asarray(table.d_shape, dtype=bool) if event == "D_shape"
             else np.asarray(table.d_iter) > 0).astype(np.float64)
    group = np.asarray(table.group, dtype=np.int64)
    n = np.bincount(group, minlength=len(table.groups)).astype(np.float64)
    k = np.bincount(group, weights=fired, minlength=len(table.groups))
    rate = {name: k[i] / n[i] for i, name in enumerate(table.groups) if n[i] > 0}
    by_group = np.array([rate.get(g, np.nan) for g in cols.groups], dtype=np.float64)
    return by_group[cols.group] if cols.group.size else np.zeros(0)


def _quantile_bins(magnitude: np.ndarray) -> list[np.ndarray]:
    """Index arrays of quantile bins of ``magnitude`` (see the module docstring)."""
    n = magnitude.size
    if n == 0:
        return []
    k = max(1, min(QUANTILE_BINS, n // MIN_BIN_PAIRS))
    order = np.argsort(magnitude, kind="stable")
    values = magnitude[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])  # runs of tied magnitudes
    ends = np.r_[starts[1:], n]
    bins: list[list[int]] = [[]]
    for s, e in zip(starts, ends, strict=True):
        if len(bins[-1]) >= n / k:
            bins.append([])
        bins[-1] += order[s:e].tolist()
    if len(bins) > 1 and len(bins[-1]) < MIN_BIN_PAIRS:  # too small a last bin joins the one before it
        last = bins.pop()
        bins[-1] += last
    return [np.array(sorted(b), dtype=np.int64) for b in bins]


def _ladder_bins(step: np.ndarray, magnitude: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(step, index array) per ladder step, ordered by the step's median magnitude."""
    steps = sorted(set(step.tolist()))
    bins = [(s, np.flatnonzero(step == s)) for s in steps]
    return sorted(bins, key=lambda b: (float(np.median(magnitude[b[1]])), b[0]))


@dataclass(frozen=True)
class ThresholdBin:
    """One magnitude bin of a threshold's step-down search (module docstring).

    Attributes:
        bin: Its index, in increasing magnitude.
        step: The ladder step (None for a quantile bin).
        lo: The smallest magnitude in it.
        hi: The largest magnitude in it.
        n: Its effective pairs.
        n_events: Those with the threshold's event.
        inputs: Its input groups (the unit its intervals resample).
        inputs_above_control: Input groups whose mean paired excess is above 0 (None:
            no pair has a matched reference).
        rate: The event rate.
        control: Which references the control rate used (``MATCHED``, ``MATCHED_CONTROLS``,
            ``MATCHED_MIXED``, ``noop``, ``observational``, or None: none).
        control_rate: The control rate (written with its n as ``control_n``).
        excess: The rate minus the control, paired where the pairs have a reference.
        qualifies: Whether the lower end of the excess's interval is above 0.
    """

    bin: int
    step: int | None
    lo: float
    hi: float
    n: int
    n_events: int
    inputs: int
    inputs_above_control: int | None
    rate: Estimate
    control: str | None
    control_rate: Estimate
    excess: Estimate
    qualifies: bool

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: the estimates as ``name``, ``name_ci``, ``name_n`` (``control_n``)."""
        return {
            "bin": self.bin, "step": self.step, "lo": self.lo, "hi": self.hi, "n": self.n, "n_events": self.n_events,
            "inputs": self.inputs, "inputs_above_control": self.inputs_above_control, **self.rate.as_dict("rate"),
            "control": self.control, **estimate_json(self.control_rate, "control_rate", "control_n"),
            **self.excess.as_dict("excess"), "qualifies": self.qualifies,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "bin") -> ThresholdBin:
        """The bin as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        return cls(
            bin=r.integer("bin"), step=r.opt_integer("step"), lo=r.number("lo"), hi=r.number("hi"), n=r.integer("n"),
            n_events=r.integer("n_events"), inputs=r.integer("inputs"),
            inputs_above_control=r.opt_integer("inputs_above_control"), rate=r.estimate("rate"),
            control=r.opt_string("control"), control_rate=r.estimate("control_rate", "control_n"),
            excess=r.estimate("excess"), qualifies=r.boolean("qualifies"),
        )


@dataclass(frozen=True)
class Threshold:
    """An interventional bifurcation threshold, beta_shape or beta_iter (QUIVER.md §7; Def. 10, B.3).

    Attributes:
        value: The smallest magnitude that bifurcated in the last bin the step-down
            test reached (None: no threshold, see ``reason``).
        reason: Why there is no value (None when there is one).
        raw_min: The paper's estimator: the smallest magnitude among effective pairs
            with the event, with the group-bootstrap interval of a minimum.
        n: Effective pairs with a magnitude.
        n_events: Those with the event.
        iqr: The interquartile range of the magnitudes with the event.
        max_non_bifurcating: The largest magnitude without the event.
        upper_bound: Fewer than ``UPPER_BOUND_PAIRS`` effective pairs below ``value``
            (None without a value).
        n_below: Effective pairs strictly below ``value`` (None without a value).
        bin_rule: ``ladder`` or ``quantile``.
        control: Which references the overall control rate used (as a bin's).
        control_rate: The overall control rate (written with its n as ``control_n``).
        bins: The bins, in increasing magnitude.
    """

    value: float | None
    reason: str | None
    raw_min: Estimate
    n: int
    n_events: int
    iqr: tuple[float, float] | None
    max_non_bifurcating: float | None
    upper_bound: bool | None
    n_below: int | None
    bin_rule: Literal["ladder", "quantile"]
    control: str | None
    control_rate: Estimate
    bins: tuple[ThresholdBin, ...]

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: the estimates as ``name``, ``name_ci``, ``name_n`` (``control_n``)."""
        return {
            "value": self.value, "reason": self.reason, **self.raw_min.as_dict("raw_min"), "n": self.n,
            "n_events": self.n_events, "iqr": None if self.iqr is None else list(self.iqr),
            "max_non_bifurcating": self.max_non_bifurcating, "upper_bound": self.upper_bound, "n_below": self.n_below,
            "bin_rule": self.bin_rule, "control": self.control,
            **estimate_json(self.control_rate, "control_rate", "control_n"), "bins": [b.to_json() for b in self.bins],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "threshold") -> Threshold:
        """The threshold as :meth:`to_json` writes it (its estimates without draws)."""
        r = Reader(data, where)
        rule = r.string("bin_rule")
        if rule not in ("ladder", "quantile"):
            raise r.wrong("bin_rule", "'ladder' or 'quantile'")
        return cls(
            value=r.opt_number("value"), reason=r.opt_string("reason"), raw_min=r.estimate("raw_min"),
            n=r.integer("n"), n_events=r.integer("n_events"), iqr=r.pair("iqr"),
            max_non_bifurcating=r.opt_number("max_non_bifurcating"), upper_bound=r.opt_boolean("upper_bound"),
            n_below=r.opt_integer("n_below"), bin_rule="ladder" if rule == "ladder" else "quantile",
            control=r.opt_string("control"), control_rate=r.estimate("control_rate", "control_n"),
            bins=r.read_all("bins", ThresholdBin.from_json),
        )


def beta(cols: Columns, boot: GroupBootstrap, event: Event, ladder: bool, obs_rate: Estimate,
         table: PairTable, control: Columns | None) -> Threshold:
    """Interventional beta_shape or beta_iter (QUIVER.md §7; Def. 10, B.3)."""
    eff = np.flatnonzero((cols.stratum == "effective") & np.isfinite(cols.magnitude))
    mag, fired = cols.magnitude[eff], cols.event(event)[eff]
    ref = _references(cols, table, event, control)
    fallback = _control(cols, boot, event, obs_rate)
    matched = eff[np.isfinite(ref.rate[eff])]
    if matched.size:
        source: str | None = _matched_source(ref.from_controls[matched])
        overall = boot.mean(ref.rate, mask(len(cols.group), matched))
    else:
        source, overall = fallback.source, fallback.rate
    binned = _ladder_bins(cols.step[eff], mag) if ladder else [(None, b) for b in _quantile_bins(mag)]
    bins = tuple(_bin(i, step, eff[idx], cols, boot, event, ref, fallback) for i, (step, idx) in enumerate(binned))
    first = step_down(bins)
    reason = _reason(eff, fired, event, source, first, bins)
    value = None
    if reason is None and first is not None:
        idx = eff[binned[first][1]]
        value = float(cols.magnitude[idx[cols.event(event)[idx]]].min())
    below = None if value is None else int((mag < value).sum())
    return Threshold(
        value=rounded(value), reason=reason,
        raw_min=group_minimum(cols.magnitude, mask(len(cols.group), eff[fired]), boot),
        n=int(eff.size), n_events=int(fired.sum()), iqr=_iqr(mag[fired]),
        max_non_bifurcating=rounded(float(mag[~fired].max())) if (~fired).any() else None,
        upper_bound=None if below is None else below < UPPER_BOUND_PAIRS, n_below=below,
        bin_rule="ladder" if ladder else "quantile", control=source, control_rate=overall, bins=bins,
    )


class _Qualifying(Protocol):
    @property
    def qualifies(self) -> bool: ...


def step_down(bins: Sequence[_Qualifying]) -> int | None:
    """The last bin the step-down test reaches: from the largest magnitude while the bins
    qualify (a threshold's bins, or a dose-response curve's levels)."""
    first = None
    for i in range(len(bins) - 1, -1, -1):
        if not bins[i].qualifies:
            break
        first = i
    return first


def _iqr(magnitudes: np.ndarray) -> tuple[float, float] | None:
    """The interquartile range of the bifurcating magnitudes (None: there are none)."""
    if not magnitudes.size:
        return None
    lo, hi = np.percentile(magnitudes, [25, 75])
    return round(float(lo), 6), round(float(hi), 6)


def _reason(eff: np.ndarray, fired: np.ndarray, event: Event, source: str | None, first: int | None,
            bins: Sequence[ThresholdBin]) -> str | None:
    """Why a threshold has no value (None when it has one)."""
    if eff.size == 0:
        return "no effective pair with a magnitude"
    if not fired.any():
        return f"no effective pair had {event} > 0"
    if source is None:
        return ("no control rate: no effective pair's trace has control replays or its input "
                "observational pairs, the no-op stratum is empty and the observational table has no pair")
    if first is None:
        return _no_bin_reason(bins)
    return None


def _bin(i: int, step: int | None, idx: np.ndarray, cols: Columns, boot: GroupBootstrap, event: Event,
         ref: _Reference, fallback: _Control) -> ThresholdBin:
    """One magnitude bin: its event rate and its excess over the control (module docstring)."""
    fired = cols.event(event)
    size = len(cols.group)
    rate = boot.rate(fired, mask(size, idx))
    noise = ref.rate
    matched = idx[np.isfinite(noise[idx])]
    if matched.size:
        source: str | None = _matched_source(ref.from_controls[matched])
        control = boot.mean(noise, mask(size, matched))
        excess = boot.mean(fired.astype(np.float64) - np.nan_to_num(noise), mask(size, matched))
    else:
        source, control = fallback.source, fallback.rate
        excess = difference(rate, control)
    # above 0 beyond round-off: an excess of exactly 0 can come out as 1e-17
    qualifies = (excess.value is not None and excess.value > TIE and excess.ci is not None and excess.ci[0] > TIE)
    mags = cols.magnitude[idx]
    return ThresholdBin(
        bin=i, step=step, lo=round(float(mags.min()), 6), hi=round(float(mags.max()), 6), n=int(idx.size),
        n_events=int(fired[idx].sum()), inputs=int(np.unique(cols.group[idx]).size),
        inputs_above_control=_inputs_above(cols.group[matched], fired[matched].astype(np.float64) - noise[matched])
        if matched.size else None,
        rate=rate, control=source, control_rate=control, excess=excess, qualifies=bool(qualifies),
    )


def _inputs_above(group: np.ndarray, diff: np.ndarray) -> int:
    """How many input groups have a mean paired excess above 0: the groups the bin's
    excess rests on (its interval resamples these groups, not the pairs)."""
    total = np.bincount(group, weights=diff)
    count = np.bincount(group)
    seen = count > 0
    return int((total[seen] / count[seen] > TIE).sum())


def _no_bin_reason(bins: Sequence[ThresholdBin]) -> str:
    top = bins[-1]
    excess = top.excess.as_dict("excess")
    ci = excess["excess_ci"] or [None, None]
    lower = [b for b in bins[:-1] if b.qualifies]
    return (
        f"the step-down test stops at the largest-magnitude bin (bin {top.bin}, magnitudes {top.lo}-"
        f"{top.hi}, n = {top.n}): its excess over the control rate {rounded(top.control_rate.value)} is "
        f"{excess['excess']} [{ci[0]}, {ci[1]}], not above 0"
        + (f" ({top.inputs_above_control} of its {top.inputs} inputs bifurcated more often than their "
           "controls; the interval resamples inputs)" if top.inputs_above_control is not None else "")
        + (f"; smaller bins that qualified on their own ({', '.join(str(b.bin) for b in lower)}) are not "
           "taken for a threshold below a larger magnitude that is not one" if lower else "")
    )
