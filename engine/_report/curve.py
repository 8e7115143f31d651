"""An adaptive ladder's dose-response curve for ``report.html`` (:func:`dose_curve`): per
level its excess over the controls with its interval, the isotonic fit and its band, the
onset with its bracket and the midpoint with its interval marked. Drawn from the parts of
:mod:`.svg`, as its charts are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .markup import Markup, anchor, element, label
from .svg import (
    _NOTHING,
    BLUE,
    GREY,
    INK,
    NAME,
    ORANGE,
    RED,
    _axis_x,
    _axis_y,
    _box,
    _hatch,
    _line,
    _n,
    _points,
    _Scale,
    _text,
    _title,
    chart,
)

__all__ = ["dose_curve", "Level", "Marker"]


@dataclass(frozen=True)
class Level:
    """One level of an adaptive ladder's dose-response curve: its excess with the
    interval and n, the fit there and the fit's band."""

    dose: float
    label: str
    n: int
    value: float | None
    lo: float | None
    hi: float | None
    fit: float | None
    band: tuple[float, float] | None
    qualifies: bool


@dataclass(frozen=True)
class Marker:
    """A dose marked on a dose curve: a vertical line at ``dose`` labelled ``label``, and
    the interval ``span`` (``(lo, hi)``) shaded behind it."""

    dose: float
    label: str
    span: tuple[float, float] | None = None


_LARGEST = 1e15
"""The largest magnitude a dose curve draws (beyond it, or not finite: left out)."""


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) or abs(x) > _LARGEST else float(x)


def _drawable(levels: Sequence[Level], marks: Sequence[Marker | None]) -> tuple[list[Level], list[Marker | None]]:
    """The levels and marks with every number that cannot be drawn left out."""
    def pair(p: tuple[float, float] | None) -> tuple[float, float] | None:
        return None if p is None or _finite(p[0]) is None or _finite(p[1]) is None else (float(p[0]), float(p[1]))

    out = [Level(lv.dose, lv.label, lv.n, _finite(lv.value), _finite(lv.lo), _finite(lv.hi), _finite(lv.fit),
                 pair(lv.band), lv.qualifies) for lv in levels if _finite(lv.dose) is not None]
    kept = [None if m is None or _finite(m.dose) is None else Marker(m.dose, m.label, pair(m.span)) for m in marks]
    return out, kept


def _dose_domain(levels: Sequence[Level], marks: Sequence[Marker | None],
                 x_range: tuple[float, float] | None) -> tuple[float, float]:
    xs = [lv.dose for lv in levels] + [v for m in marks if m is not None for v in (m.dose, *(m.span or ()))]
    xs += list(x_range or ())
    lo, hi = min(xs, default=0.0), max(xs, default=1.0)
    return (lo, hi) if hi - lo > 1e-12 else (lo - 0.5, hi + 0.5)


def _excess_domain(levels: Sequence[Level], half: float | None) -> tuple[float, float]:
    ys = [v for lv in levels for v in (lv.value, lv.lo, lv.hi, lv.fit, *(lv.band or ())) if v is not None]
    ys += [half] if half is not None else []
    lo, hi = min(ys + [0.0]), max(ys + [0.0])
    return (lo, hi) if hi - lo > 1e-12 else (lo, lo + 1.0)


def _span(xs: _Scale, mark: str, span: tuple[float, float], top: float, bottom: float, fill: str,
          opacity: float = 1.0) -> Markup:
    """The interval ``span`` of a marked dose, shaded across the plot's height."""
    x0, x1 = xs(span[0]), xs(span[1])
    return element("rect", data_mark=f"{mark}-span", data_lo=span[0], data_hi=span[1], x=_n(x0), y=_n(top),
                   width=_n(max(1.0, x1 - x0)), height=_n(bottom - top), fill=fill, fill_opacity=opacity,
                   stroke="none")


def _vertical(xs: _Scale, m: Marker, top: float, bottom: float, color: str, dash: str, mark: str, label_y: float,
              side: str) -> Markup:
    """A marked dose's line, its label on the side ``anchor`` asks for unless it would
    leave the plot there."""
    x = xs(m.dose)
    wide = 6.5 * len(label(m.label, NAME)) + 6
    if side == "end" and x - wide < 0:
        side = "start"
    elif side == "start" and x + wide > xs.b:
        side = "end"
    return element("g", _line(x, top, x, bottom, color=color, width=2, dash=dash),
                   _text(x + (4 if side == "start" else -4), label_y, m.label, size=10, anchor=side, color=color,
                         weight="bold", limit=NAME, paint_order="stroke", stroke="white", stroke_width=3),
                   data_mark=mark, data_value=m.dose, data_x=_n(x))


def _curve_levels(xs: _Scale, ys: _Scale, levels: Sequence[Level]) -> list[Markup]:
    """The band, the fit and the levels' excesses (area of the marker in proportion to n)."""
    body = []
    banded = [lv for lv in levels if lv.band is not None]
    if banded:
        upper = [(xs(lv.dose), ys(lv.band[1])) for lv in banded if lv.band is not None]
        lower = [(xs(lv.dose), ys(lv.band[0])) for lv in reversed(banded) if lv.band is not None]
        body.append(element("polygon", data_mark="band", points=_points(upper + lower), fill=BLUE, fill_opacity=0.16,
                            stroke=BLUE, stroke_opacity=0.35, stroke_width=0.8))
    fitted = [(xs(lv.dose), ys(lv.fit)) for lv in levels if lv.fit is not None]
    if fitted:
        body.append(element("polyline", data_mark="fit", points=_points(fitted), fill="none", stroke=BLUE,
                            stroke_width=2))
    largest = max(max((lv.n for lv in levels), default=1), 1)
    for lv in levels:
        if lv.value is None:
            continue
        x, r = xs(lv.dose), 2.5 + 3.5 * math.sqrt(max(lv.n, 0) / largest)
        tip = f"{lv.label}: excess {lv.value:+.3f}" + (f" [{lv.lo:+.3f}, {lv.hi:+.3f}]" if lv.lo is not None
                                                       and lv.hi is not None else "") + f", n = {lv.n:,}"
        parts = [element("title", tip)]
        if lv.lo is not None and lv.hi is not None:
            parts += [_line(x, ys(lv.lo), x, ys(lv.hi), color=INK, width=1.2),
                      _line(x - 3, ys(lv.lo), x + 3, ys(lv.lo), color=INK, width=1.2),
                      _line(x - 3, ys(lv.hi), x + 3, ys(lv.hi), color=INK, width=1.2)]
        parts.append(_dot(x, ys(lv.value), r, lv.qualifies))
        body.append(element("g", *parts, data_level=lv.dose, data_n=lv.n, data_value=lv.value, data_x=_n(x)))
    return body


def _dot(x: float, y: float, r: float, filled: bool) -> Markup:
    """A level's marker: filled where its excess qualifies, open where it does not."""
    if filled:
        return element("circle", cx=_n(x), cy=_n(y), r=_n(r), fill=INK, fill_opacity=0.8)
    return element("circle", cx=_n(x), cy=_n(y), r=_n(r), fill="white", stroke=INK, stroke_width=1.5)


def _curve_legend(hatch: str, x: float, y: float, half: float | None) -> list[Markup]:
    """The legend, one row per kind of mark, from ``(x, y)`` down."""
    def box(fill: str, opacity: float = 1.0, stroke: str = "none") -> Callable[[float], Markup]:
        return lambda yy: _box(x, yy - 6, 11, 11, fill, fill_opacity=opacity, stroke=stroke)

    rows: list[tuple[Callable[[float], Markup], str]] = [
        (lambda yy: _dot(x + 5, yy, 4.5, True), "excess, 95% CI above 0"),
        (lambda yy: _dot(x + 5, yy, 4.5, False), "excess, 95% CI not above 0"),
        (lambda yy: _NOTHING, "(marker area in proportion to n)"),
        (lambda yy: _line(x, yy, x + 11, yy, color=BLUE, width=2), "isotonic fit"),
        (box(BLUE, 0.16, BLUE), "the fit's pointwise 95% band"),
        (lambda yy: _line(x + 5, yy - 6, x + 5, yy + 5, color=RED, width=2, dash="4 3"), "onset"),
        (box(f"url(#{hatch})", stroke=RED), "its bracket (below, onset]"),
        (lambda yy: _line(x + 5, yy - 6, x + 5, yy + 5, color=ORANGE, width=2), "midpoint"),
        (box(ORANGE, 0.18), "its 95% interval"),
    ]
    if half is not None:
        rows.append((lambda yy: _line(x, yy, x + 11, yy, color=GREY, width=1.5, dash="1 3"), "half the plateau"))
    out = []
    for i, (draw, text) in enumerate(rows):
        yy = y + 17 * i
        out += [draw(yy), _text(x + 16, yy + 4, text, size=9.5)]
    return out


def dose_curve(name: str, title: str, levels: Sequence[Level], *, x_label: str, y_label: str,
               onset: Marker | None = None, midpoint: Marker | None = None, half: float | None = None,
               x_range: tuple[float, float] | None = None, whole: bool = False) -> Markup:
    """An adaptive ladder's dose-response: per level its excess over the controls as a
    marker (filled where its interval lies above 0, area in proportion to n) with its
    interval, the isotonic fit as a line through the levels with its pointwise band
    shaded, the onset as a dashed red line with its bracket ``onset.span`` hatched, the
    midpoint as an orange line with its interval shaded, and ``half`` (half the plateau)
    as a dotted horizontal line. The x axis spans ``x_range`` (the searched range) and
    every mark; the marks carry ``data-mark`` and ``data-value``, the levels
    ``data-level`` and ``data-n``, and both ``data-x``, their position; ``whole``: the
    doses are whole numbers (ticks only at them). A number that is
    not finite or larger than 1e15 in magnitude is left out."""
    left, plot_w, top, plot_h = 60, 520, 40, 230
    width, height = left + plot_w + 230, top + plot_h + 56
    levels, (onset, midpoint) = _drawable(levels, (onset, midpoint))
    half = _finite(half)
    x_range = x_range if x_range is not None and all(_finite(x) is not None for x in x_range) else None
    bottom = top + plot_h
    lo, hi = _dose_domain(levels, (onset, midpoint), x_range)
    pad = (hi - lo) * 0.03
    xs = _Scale(lo - pad, hi + pad, left, left + plot_w)
    y_lo, y_hi = _excess_domain(levels, half)
    ys = _Scale(y_lo, y_hi + (y_hi - y_lo) * 0.04, bottom, top)
    hatch = anchor(name, "hatch")
    body = [_hatch(hatch, RED), _title(title)]
    body += _axis_y(ys, left, y_label, left + plot_w) + _axis_x(xs, bottom, x_label, top, whole=whole)
    if onset is not None and onset.span is not None:
        body.append(_span(xs, "onset", onset.span, top, bottom, f"url(#{hatch})"))
    if midpoint is not None and midpoint.span is not None:
        body.append(_span(xs, "midpoint", midpoint.span, top, bottom, ORANGE, 0.18))
    if y_lo < 0 < y_hi:
        body.append(_line(left, ys(0.0), left + plot_w, ys(0.0), color=GREY, width=1))
    if half is not None:
        body.append(element("g", _line(left, ys(half), left + plot_w, ys(half), color=GREY, width=1.5, dash="1 3"),
                            _text(left + plot_w - 4, ys(half) - 4, f"plateau/2 = {half:.3f}", size=9.5, anchor="end",
                                  color=GREY), data_mark="half", data_value=half))
    if not levels:
        body.append(_text(left + plot_w / 2, top + plot_h / 2, "no level has effective pairs with a reference",
                          size=11, anchor="middle", color=GREY))
    body += _curve_levels(xs, ys, levels)
    if onset is not None:
        body.append(_vertical(xs, onset, top, bottom, RED, "4 3", "onset", top - 4, "end"))
    if midpoint is not None:
        body.append(_vertical(xs, midpoint, top, bottom, ORANGE, "", "midpoint", top + 10, "start"))
    body += _curve_legend(hatch, left + plot_w + 16, top + 6, half)
    return chart(name, title, width, height, body)
