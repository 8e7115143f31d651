"""The dose-response of adaptive ladders in the campaign report: a Markdown section and
the curves drawn for ``report.html``.

An adaptive ladder (``ladder: {adaptive: {...}}``) searches one operator parameter, the
dose, in rounds; ``campaign.json`` gives the perturbation an ``adaptive`` object
(:class:`~quiver._interventional.AdaptiveEstimates`): per event its curve of excess
path-change rates over the control replays, the isotonic fit with its band, the
plateau, the midpoint (the dose at half the plateau) and the onset with its bracket
``(below, onset]`` (see :mod:`quiver._interventional.dose`). A campaign without an
adaptive ladder gets neither the section nor a curve.

Estimates are written as the rest of the report writes them (``value [lo, hi]`` with 3
decimals, excesses signed); a dose (a level, the onset and the level below it) is
written with 3 decimals, or with as many as it has up to 6 (a level on a grid finer than
0.001 stays exact), or as a whole number for a whole-number parameter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quiver._stats import DASH, Estimate, fmt, fmt_n

from . import curve
from .markdown import _table, fmt_est
from .markup import Markup, md_code, md_text

if TYPE_CHECKING:
    from quiver._interventional import AdaptiveEstimates, CampaignEstimates, DoseResponse, PerturbationEstimates
    from quiver._interventional.dose import RoundPlan

__all__ = ["adaptive_section", "adaptive_charts", "fmt_dose", "TITLE"]

TITLE = "Dose-response (adaptive ladders)"
_CURVES = (("beta_shape", "D_shape"), ("beta_iter", "D_iter"), ("outcome", "outcome"))
_EVENT_TEXT = {"D_shape": "D_shape > 0", "D_iter": "D_iter > 0", "outcome": "outcome not passing"}


def _what(event: str) -> str:
    """The event as the curves' labels say it."""
    return "failure" if event == "outcome" else event


def fmt_dose(x: Any, *, integer: bool = False) -> str:
    """A dose: a whole number for a whole-number parameter, else 3 decimals, or up to 6
    when it has them (``—`` for none)."""
    v = _real(x)
    if v is None:
        return DASH
    if not math.isfinite(v):
        return fmt(v)
    if integer:
        return f"{round(x):,}"
    text = f"{v:.6f}".rstrip("0")
    head, _, tail = text.partition(".")
    return fmt(v) if len(tail) <= 3 else f"{head}.{tail}"


def _real(x: Any) -> float | None:
    """``x`` as a float (an integer past the floats' range: an infinity); None when it is
    not a number."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _count(x: Any) -> str:
    """A count the JSON gives unchecked (the settings, what a round knew): ``fmt_n``, or
    ``∞`` / ``—`` for a number that is not finite."""
    v = _real(x)
    return fmt(v) if v is not None and not math.isfinite(v) else fmt_n(x)


def _integer(a: AdaptiveEstimates) -> bool:
    return bool(a.settings.get("integer"))


def _est(e: Estimate, *, signed: bool = False) -> str:
    return fmt_est(e.as_dict("x"), "x", signed=signed)


def _curve(a: AdaptiveEstimates, key: str) -> DoseResponse | None:
    return a.curve(dict(_CURVES)[key])


def _same_curve(a: AdaptiveEstimates) -> bool:
    """Whether the D_iter curve is the D_shape curve, level for level."""
    return dataclasses.replace(a.beta_iter, event="D_shape") == a.beta_shape


# --------------------------------------------------------------------------- Markdown


def _below(a: AdaptiveEstimates, onset: Any, below: Any) -> float | None:
    """The lower end of the onset's bracket: the level under it, or when it is the
    smallest level the range's low end (the zero dose the control replays stand for);
    None when the onset is the range's low end itself."""
    b, x, lo = _real(below), _real(onset), _real(a.settings.get("lo"))
    if b is not None:
        return b
    return lo if lo is not None and x is not None and lo < x else None


def _bracket(a: AdaptiveEstimates, onset: Any, below: Any) -> str:
    """``onset in (below, onset]``, or ``onset (the smallest dose)``."""
    integer = _integer(a)
    low, text = _below(a, onset, below), fmt_dose(onset, integer=integer)
    return f"{text} (the smallest dose)" if low is None else f"{text} in ({fmt_dose(low, integer=integer)}, {text}]"


def _onset(a: AdaptiveEstimates, d: DoseResponse) -> str:
    return DASH if d.onset is None else _bracket(a, d.onset, d.below)


def _note(d: DoseResponse) -> str:
    notes = [md_text(d.reason)] if d.reason else []
    if d.midpoint.value is not None and d.midpoint.ci is None:
        notes.append(f"no midpoint interval: defined in {fmt(d.defined)} of the resamples (under 0.950)")
    return "; ".join(notes)


def _summary(a: AdaptiveEstimates) -> list[str]:
    rows = []
    for key, event in _CURVES:
        d = _curve(a, key)
        if d is None:
            continue
        followed = " (followed)" if a.settings.get("event", "D_shape") == event else ""
        rows.append([key + followed, _EVENT_TEXT[event], _est(d.midpoint), fmt_n(d.midpoint.n), fmt(d.defined),
                     _est(d.plateau, signed=True), _onset(a, d), fmt(d.onset_d), _note(d)])
    headers = ["curve", "event", "midpoint [95% CI]", "n", "defined", "plateau [95% CI]", "onset in (below, onset]",
               "onset d_i", "note"]
    return _table(headers, rows, "llrrrrrrl")


def _known(a: AdaptiveEstimates, known: Mapping[str, Any]) -> str:
    parts = []
    if known.get("midpoint") is not None:
        ci = known.get("midpoint_ci")
        parts.append("midpoint " + fmt_est({"m": known["midpoint"], "m_ci": ci}, "m"))
    if known.get("onset") is not None:
        parts.append(f"onset {_bracket(a, known['onset'], known.get('below'))}")
    if known.get("pairs") is not None:
        parts.append(f"{_count(known['pairs'])} pairs over {_count(known.get('levels'))} levels")
    return "; ".join(parts) or DASH


def _round_row(a: AdaptiveEstimates, r: RoundPlan) -> list[str]:
    integer = _integer(a)
    added = ", ".join(f"{fmt_dose(x, integer=integer)} ({fmt_n(n)})" for x, n in r.add) or DASH
    reason = "; ".join(md_text(x) for x in (r.reason, f"stop: {r.stop}" if r.stop else "") if x) or DASH
    return [str(r.round), added, reason, _known(a, r.known)]


def _rounds(a: AdaptiveEstimates) -> list[str]:
    return _table(["round", "levels added (replays)", "reason", "known when decided"],
                  [_round_row(a, r) for r in a.rounds], "rlll")


def _points(a: AdaptiveEstimates, d: DoseResponse) -> list[str]:
    integer = _integer(a)
    rows = [[fmt_dose(x.level, integer=integer), fmt_n(x.n), fmt_n(x.inputs), fmt_n(x.n_events),
             _est(x.excess, signed=True), fmt(x.fit, signed=True),
             DASH if x.band is None else f"[{fmt(x.band[0], signed=True)}, {fmt(x.band[1], signed=True)}]",
             "yes" if x.qualifies else "no"]
            for x in d.points]
    headers = [md_text(d.param), "n", "inputs", "events", "excess [95% CI]", "fit", "band", "qualifies"]
    return _table(headers, rows, "rrrrrrrl")


def _settings(a: AdaptiveEstimates) -> str:
    s, integer = a.settings, _integer(a)
    added = sum(1 for r in a.rounds if r.add)
    stopped = f"stopped: {md_text(a.stopped)}" if a.stopped else "the search did not finish"
    return (f"Resolution {fmt_dose(s.get('resolution'), integer=integer)}; {fmt_n(a.replays)} replays of at most "
            f"{_count(s.get('max_replays'))} over {fmt_n(len(a.levels))} levels in {fmt_n(added)} round(s); "
            f"{stopped}.")


def _perturbation(p: PerturbationEstimates, a: AdaptiveEstimates) -> list[str]:
    s, integer = a.settings, _integer(a)
    lines = [f"### {md_code(p.id)}: {md_text(a.beta_shape.param)} of {md_text(p.op)} at {md_text(p.node)}, over "
             f"[{fmt_dose(s.get('lo'), integer=integer)}, {fmt_dose(s.get('hi'), integer=integer)}]", "",
             _settings(a), ""]
    lines += _summary(a) + ["", f"{md_code(p.id)} rounds:", ""] + _rounds(a) + [""]
    for key, event in _CURVES:
        d = _curve(a, key)
        if d is None:
            continue
        if key == "beta_iter" and _same_curve(a):
            lines += [f"{md_code(p.id)} beta_iter curve ({event} excess over controls): the same as beta_shape's, "
                      "level for level.", ""]
            continue
        lines += [f"{md_code(p.id)} {key} curve ({_what(event)} excess over controls):", ""] + _points(a, d)
        lines += [""]
    return lines


def adaptive_section(c: CampaignEstimates) -> list[str]:
    """The report's section on adaptive ladders (none when no perturbation has one)."""
    adaptive = [(p, p.adaptive) for p in c.perturbations if p.adaptive is not None]
    if not adaptive:
        return []
    lines = [f"## {TITLE}", "",
             "*How to read this:* an adaptive ladder searched one parameter of its operator (the dose) in rounds, "
             "placing levels where the excess path-change rate over the control replays leaves 0 and where it "
             "crosses half its plateau. Per level, the excess is the mean of the event minus its reference noise "
             "rate (the control replays of the same trace), with its 95% interval; the curve is the isotonic "
             "(non-decreasing) fit of the excesses, with its pointwise 95% band; the plateau is the fit at the "
             "largest level. The *midpoint* is the dose at which the fit reaches half the plateau, with the "
             "percentile interval of the refitted resamples (shown when at least 0.950 of them have one: "
             "*defined*). The *onset* is the lowest level the step-down test reaches from the largest level while "
             "a level's excess interval lies above 0: it lies in (below, onset], below being the level under it "
             "(the range's low end, the zero dose the control replays stand for, when it is the smallest level); "
             "onset d_i is the smallest target change that bifurcated there. With outcome checks the same curve "
             "is drawn of the replays whose outcome does not pass (the *outcome* curve, its reference the control "
             "replays' failure rate on the same trace): its onset is the dose from which answers break beyond "
             "control. The curve the search placed its levels by is marked *followed*. The plots are in "
             "`report.html`.", ""]
    for p, a in adaptive:
        lines += _perturbation(p, a)
    return lines


# --------------------------------------------------------------------------- the curves


def _chart(p: PerturbationEstimates, a: AdaptiveEstimates, d: DoseResponse, key: str, event: str) -> Markup:
    integer = _integer(a)
    levels = [curve.Level(x.level, f"{d.param} {fmt_dose(x.level, integer=integer)}", x.n, x.excess.value,
                        x.excess.ci[0] if x.excess.ci else None, x.excess.ci[1] if x.excess.ci else None, x.fit,
                        x.band, x.qualifies) for x in d.points]
    onset = None
    if d.onset is not None:
        onset = curve.Marker(d.onset, f"onset {fmt_dose(d.onset, integer=integer)}",
                           (low, d.onset) if (low := _below(a, d.onset, d.below)) is not None else None)
    midpoint = None
    if d.midpoint.value is not None:
        midpoint = curve.Marker(d.midpoint.value, f"midpoint {fmt(d.midpoint.value)}", d.midpoint.ci)
    half = d.plateau.value / 2 if d.plateau.value is not None and d.plateau.value > 0 else None
    lo, hi = _real(a.settings.get("lo")), _real(a.settings.get("hi"))
    span = (lo, hi) if lo is not None and hi is not None else None
    return curve.dose_curve(f"adaptive-{p.id}-{key}", f"{p.id}: {_what(event)} dose-response over {d.param}",
                          levels, x_label=f"{d.param} (the dose of {p.op} at {p.node})",
                          y_label=f"excess {_what(event)} rate over controls", onset=onset, midpoint=midpoint,
                          half=half, x_range=span, whole=integer)


def _caption(a: AdaptiveEstimates, d: DoseResponse) -> str:
    mid = "no midpoint" if d.midpoint.value is None else f"midpoint {_est(d.midpoint)}"
    onset = "no onset" if d.onset is None else f"onset {_onset(a, d)}"
    why = f" ({d.reason})" if d.reason else ""
    return (f"Excess {_what(d.event)} rate over the control replays per level, with 95% intervals (marker area in "
            f"proportion to n), the isotonic fit and its band; {mid}, {onset}{why}; dotted: half the plateau "
            f"{_est(d.plateau, signed=True)}.")


def adaptive_charts(c: CampaignEstimates) -> list[tuple[Markup, str]]:
    """``(svg, caption)`` of every adaptive ladder's curves: D_shape's, D_iter's when it
    is not the same curve, and the outcome's when the replays carry outcomes."""
    out = []
    for p in c.perturbations:
        a = p.adaptive
        if a is None:
            continue
        for key, event in _CURVES:
            d = _curve(a, key)
            if d is None or (key == "beta_iter" and _same_curve(a)):
                continue
            out.append((_chart(p, a, d, key, event), _caption(a, d)))
    return out
