"""Inline SVG charts for ``report.html``: small, self-contained, readable without colour.

Every chart is one ``<svg>`` element (``role="img"``, a ``<title>``, ``class="plot"`` and a
``data-plot`` name) built from plain strings: no plotting library, nothing fetched. Series
are told apart by marker shape and line dash as well as by colour, bands by a hatch
pattern, and every mark of note carries a text label.

* :func:`interval_chart`: estimates with their intervals on a shared axis (forest plots,
  the gate's arms), with an optional reference band and line;
* :func:`dose_response`: an event rate per magnitude step with its interval, the
  control's rate per step (dashed, hatched band) and the threshold marked;
* :func:`dose_curve`: an adaptive ladder's excess per dose with its interval, the
  isotonic fit and its band, the onset with its bracket and the midpoint with its
  interval marked;
* :func:`heatmap`: a matrix with its value written in every cell;
* :func:`graph`: a pipeline graph in topological layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise

__all__ = ["Interval", "interval_chart", "dose_response", "Step", "dose_curve", "Level", "Marker", "heatmap", "graph",
           "GraphEdge"]

INK = "#222222"
GRID = "#dddddd"
BLUE = "#1f5fa8"
RED = "#b2182b"
ORANGE = "#c46200"
GREY = "#777777"
FONT = "font-family:system-ui,sans-serif"
_HATCH = (
    '<defs><pattern id="{id}" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="{color}" stroke-width="2" stroke-opacity="0.45"/></pattern></defs>'
)


def _a(text: object) -> str:
    return escape(str(text), quote=True)


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _svg(name: str, title: str, width: float, height: float, body: list[str]) -> str:
    return (f'<svg class="plot" data-plot="{_a(name)}" role="img" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {_n(width)} {_n(height)}" width="{_n(width)}" height="{_n(height)}" style="{FONT}">'
            f"<title>{_a(title)}</title>" + "".join(body) + "</svg>")


def _text(x: float, y: float, text: object, *, size: float = 11, anchor: str = "start", color: str = INK,
          weight: str = "normal", extra: str = "") -> str:
    return (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" text-anchor="{anchor}" fill="{color}" '
            f'font-weight="{weight}"{extra}>{_a(text)}</text>')


def _line(x1: float, y1: float, x2: float, y2: float, *, color: str = INK, width: float = 1.0,
          dash: str | None = None) -> str:
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{color}" '
            f'stroke-width="{_n(width)}"{d}/>')


def _marker(shape: str, x: float, y: float, color: str, r: float = 4.5) -> str:
    """A filled circle, an open square, a triangle or a diamond: told apart without colour."""
    if shape == "square":
        return (f'<rect x="{_n(x - r)}" y="{_n(y - r)}" width="{_n(2 * r)}" height="{_n(2 * r)}" fill="white" '
                f'stroke="{color}" stroke-width="2"/>')
    if shape == "triangle":
        pts = f"{_n(x)},{_n(y - r - 1)} {_n(x - r)},{_n(y + r)} {_n(x + r)},{_n(y + r)}"
        return f'<polygon points="{pts}" fill="{color}"/>'
    if shape == "diamond":
        pts = f"{_n(x)},{_n(y - r - 1)} {_n(x + r + 1)},{_n(y)} {_n(x)},{_n(y + r + 1)} {_n(x - r - 1)},{_n(y)}"
        return f'<polygon points="{pts}" fill="white" stroke="{color}" stroke-width="2"/>'
    return f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" fill="{color}"/>'


@dataclass(frozen=True)
class _Scale:
    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.a + (min(max(v, self.lo), self.hi) - self.lo) / span * (self.b - self.a)


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _axis_x(scale: _Scale, y: float, label: str, top: float, *, whole: bool = False) -> list[str]:
    """The x axis; with ``whole``, only its whole-number ticks (when there are two)."""
    out = [_line(scale.a, y, scale.b, y)]
    ticks = _ticks(scale.lo, scale.hi)
    if whole and len(kept := [t for t in ticks if t == int(t)]) >= 2:
        ticks = kept
    for t in ticks:
        x = scale(t)
        out += [_line(x, top, x, y, color=GRID), _line(x, y, x, y + 4), _text(x, y + 16, f"{t:g}", size=10,
                                                                               anchor="middle")]
    return out + [_text((scale.a + scale.b) / 2, y + 32, label, size=11, anchor="middle")]


def _axis_y(scale: _Scale, x: float, label: str, right: float) -> list[str]:
    out = [_line(x, scale.a, x, scale.b)]
    for t in _ticks(scale.lo, scale.hi):
        y = scale(t)
        out += [_line(x, y, right, y, color=GRID), _line(x - 4, y, x, y), _text(x - 7, y + 4, f"{t:g}", size=10,
                                                                                 anchor="end")]
    mid = (scale.a + scale.b) / 2
    return out + [_text(14, mid, label, size=11, anchor="middle", extra=f' transform="rotate(-90 14 {_n(mid)})"')]


# --------------------------------------------------------------------------- interval charts


@dataclass(frozen=True)
class Interval:
    """One row of an interval chart: a label, a value and its interval, a marker shape."""

    label: str
    value: float | None
    lo: float | None = None
    hi: float | None = None
    shape: str = "circle"
    color: str = BLUE
    note: str = ""


def interval_chart(name: str, title: str, rows: Sequence[Interval], *, axis: str,
                   band: tuple[float, float] | None = None, band_label: str = "",
                   line: float | None = None, line_label: str = "", lo: float | None = None,
                   hi: float | None = None, legend: Sequence[tuple[str, str, str]] = ()) -> str:
    """Estimates as markers with interval whiskers, one row each, a shared x axis.

    Args:
        band: A reference interval drawn as a hatched band across the rows.
        line: A reference value drawn as a dashed line (``line_label`` above it).
        lo, hi: The axis range (default: what the values, intervals and references span).
        legend: (shape, colour, text) entries written under the chart.
    """
    label_w = max([60] + [min(260, 6.6 * len(r.label)) for r in rows]) + 12
    note_w = max([0] + [min(200, 6.2 * len(r.note)) for r in rows]) + 10
    plot_w = 380
    row_h = 22
    top = 42
    width = label_w + plot_w + note_w + 20
    height = top + row_h * max(1, len(rows)) + 48 + (18 if legend or band_label else 0)
    values = [v for r in rows for v in (r.value, r.lo, r.hi) if v is not None and math.isfinite(v)]
    values += [v for v in (*(band or ()), line) if v is not None]
    low = lo if lo is not None else min(values + [0.0])
    high = hi if hi is not None else max(values + [low + 1e-9])
    if high - low < 1e-9:
        high = low + 1.0
    pad = (high - low) * 0.04
    scale = _Scale(low - (pad if lo is None else 0), high + (pad if hi is None else 0), label_w, label_w + plot_w)
    bottom = top + row_h * max(1, len(rows))
    body = [_HATCH.format(id=f"{name}-hatch", color=GREY), _text(8, 16, title, size=12.5, weight="bold")]
    body += _axis_x(scale, bottom, axis, top - 6)
    if band is not None:
        x0, x1 = scale(band[0]), scale(band[1])
        body.append(f'<rect x="{_n(x0)}" y="{top - 6}" width="{_n(max(1.0, x1 - x0))}" height="{_n(bottom - top + 6)}" '
                    f'fill="url(#{name}-hatch)" stroke="{GREY}" stroke-width="0.8"><title>{_a(band_label)}</title>'
                    "</rect>")
    if line is not None:
        x = scale(line)
        body += [_line(x, top - 6, x, bottom, color=GREY, width=1.4, dash="5 3"),
                 _text(x + 3, top - 9, line_label, size=9.5, color=GREY)]
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        body.append(_text(label_w - 8, y + 4, r.label, size=10.5, anchor="end"))
        if r.value is None:
            body.append(_text(label_w + 4, y + 4, "no estimate", size=10, color=GREY))
            continue
        if r.lo is not None and r.hi is not None:
            x0, x1 = scale(r.lo), scale(r.hi)
            body += [_line(x0, y, x1, y, color=r.color, width=2), _line(x0, y - 5, x0, y + 5, color=r.color, width=2),
                     _line(x1, y - 5, x1, y + 5, color=r.color, width=2)]
        body.append(_marker(r.shape, scale(r.value), y, r.color))
        if r.note:
            body.append(_text(label_w + plot_w + 10, y + 4, r.note, size=10, color=INK))
    x = label_w
    for shape, color, text in legend:
        body += [_marker(shape, x + 5, height - 12, color, r=4), _text(x + 14, height - 8, text, size=10)]
        x += 30 + 6.2 * len(text)
    if band_label and band is not None:
        body += [f'<rect x="{_n(x)}" y="{_n(height - 18)}" width="11" height="11" fill="url(#{name}-hatch)" '
                 f'stroke="{GREY}"/>', _text(x + 15, height - 8, band_label, size=10)]
        x += 30 + 6.2 * len(band_label)
    return _svg(name, title, max(width, x + 10), height, body)


# --------------------------------------------------------------------------- dose-response


@dataclass(frozen=True)
class Step:
    """One magnitude step (a ladder step or a quantile bin) of a dose-response plot."""

    magnitude: float
    label: str
    rate: float | None
    lo: float | None
    hi: float | None
    control: float | None
    qualifies: bool


def dose_response(name: str, title: str, steps: Sequence[Step], *, control_band: tuple[float, float] | None,
                  threshold: float | None, threshold_label: str, event: str,
                  ticks: Sequence[tuple[float, str, str]] | None = None) -> str:
    """Event rate against magnitude: filled circles (open squares where the step's excess
    over its control does not qualify) with intervals, joined; the control's rate per step
    as a dashed line with triangles; the control replays' interval as a hatched band; the
    threshold as a vertical line labelled with its value. With ``ticks`` (position, name,
    magnitudes) the x axis is one position per step, each named with its magnitudes (a
    ladder's steps span overlapping magnitudes), and ``threshold`` is a position."""
    left, plot_w, top, plot_h = 58, 440, 34, 210
    width, height = left + plot_w + 190, top + plot_h + (62 if ticks is None else 72)
    mags = [s.magnitude for s in steps] + ([threshold] if threshold is not None else [])
    x_lo, x_hi = min(mags + [0.0]), max(mags + [1e-9])
    pad = (x_hi - x_lo) * 0.06 or 0.05
    xs = _Scale(x_lo - pad, x_hi + pad, left, left + plot_w)
    ys = _Scale(0.0, 1.0, top + plot_h, top)
    body = [_HATCH.format(id=f"{name}-hatch", color=GREY), _text(8, 16, title, size=12.5, weight="bold")]
    body += _axis_y(ys, left, f"{event} rate", left + plot_w)
    if ticks is None:
        body += _axis_x(xs, top + plot_h, "magnitude d_i at the target", top)
    else:
        y = top + plot_h
        body.append(_line(xs.a, y, xs.b, y))
        for pos, label, span in ticks:
            x = xs(pos)
            body += [_line(x, top, x, y, color=GRID), _line(x, y, x, y + 4),
                     _text(x, y + 15, label, size=10, anchor="middle"), _text(x, y + 28, span, size=9, anchor="middle",
                                                                              color=GREY)]
        body.append(_text((xs.a + xs.b) / 2, y + 44, "ladder step (its magnitudes d_i at the target)", size=11,
                          anchor="middle"))
    if control_band is not None:
        y0, y1 = ys(control_band[1]), ys(control_band[0])
        body.append(f'<rect x="{left}" y="{_n(y0)}" width="{plot_w}" height="{_n(max(1.0, y1 - y0))}" '
                    f'fill="url(#{name}-hatch)" stroke="{GREY}" stroke-width="0.8"/>')
    ctl = [(xs(s.magnitude), ys(s.control)) for s in steps if s.control is not None]
    for (x0, y0), (x1, y1) in pairwise(ctl):
        body.append(_line(x0, y0, x1, y1, color=GREY, width=1.4, dash="5 3"))
    body += [_marker("triangle", x, y, GREY, r=3.5) for x, y in ctl]
    pts = [(xs(s.magnitude), ys(s.rate)) for s in steps if s.rate is not None]
    for (x0, y0), (x1, y1) in pairwise(pts):
        body.append(_line(x0, y0, x1, y1, color=BLUE, width=1.6))
    for s in steps:
        if s.rate is None:
            continue
        x = xs(s.magnitude)
        if s.lo is not None and s.hi is not None:
            body += [_line(x, ys(s.lo), x, ys(s.hi), color=BLUE, width=1.6),
                     _line(x - 4, ys(s.lo), x + 4, ys(s.lo), color=BLUE, width=1.6),
                     _line(x - 4, ys(s.hi), x + 4, ys(s.hi), color=BLUE, width=1.6)]
        body.append(_marker("circle" if s.qualifies else "square", x, ys(s.rate), BLUE))
        body.append(_text(x, ys(s.rate) - 9, s.label, size=9, anchor="middle", color=INK))
    if threshold is not None:
        x = xs(threshold)
        body += [_line(x, top, x, top + plot_h, color=RED, width=2, dash="2 2"),
                 _text(x + 4, top + 11, threshold_label, size=10, color=RED, weight="bold")]
    elif threshold_label:  # a value the steps' positions cannot place
        body.append(_text(left + 6, top + 11, threshold_label, size=10, color=RED, weight="bold"))
    lx, ly = left + plot_w + 14, top + 8
    legend = [("circle", BLUE, f"{event} rate, excess qualifies"), ("square", BLUE, "rate, does not qualify"),
              ("triangle", GREY, "control rate of the step's traces")]
    for i, (shape, color, text) in enumerate(legend):
        body += [_marker(shape, lx + 5, ly + 18 * i, color, r=4), _text(lx + 14, ly + 18 * i + 4, text, size=9.5)]
    y = ly + 18 * len(legend)
    body += [f'<rect x="{lx}" y="{y - 6}" width="11" height="11" fill="url(#{name}-hatch)" stroke="{GREY}"/>',
             _text(lx + 14, y + 4, "control replays, 95% CI", size=9.5),
             _line(lx, y + 18, lx + 11, y + 18, color=RED, width=2, dash="2 2"),
             _text(lx + 14, y + 22, "threshold (beta)", size=9.5)]
    return _svg(name, title, width, height, body)


# --------------------------------------------------------------------------- dose curve


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
          opacity: float = 1.0) -> str:
    """The interval ``span`` of a marked dose, shaded across the plot's height."""
    x0, x1 = xs(span[0]), xs(span[1])
    return (f'<rect data-mark="{mark}-span" data-lo="{span[0]}" data-hi="{span[1]}" x="{_n(x0)}" y="{_n(top)}" '
            f'width="{_n(max(1.0, x1 - x0))}" height="{_n(bottom - top)}" fill="{fill}" fill-opacity="{opacity}" '
            'stroke="none"/>')


def _vertical(xs: _Scale, m: Marker, top: float, bottom: float, color: str, dash: str, mark: str, label_y: float,
              anchor: str) -> str:
    """A marked dose's line, its label on the side ``anchor`` asks for unless it would
    leave the plot there."""
    x = xs(m.dose)
    wide = 6.5 * len(m.label) + 6
    if anchor == "end" and x - wide < 0:
        anchor = "start"
    elif anchor == "start" and x + wide > xs.b:
        anchor = "end"
    return (f'<g data-mark="{mark}" data-value="{m.dose}" data-x="{_n(x)}">'
            + _line(x, top, x, bottom, color=color, width=2, dash=dash)
            + _text(x + (4 if anchor == "start" else -4), label_y, m.label, size=10, anchor=anchor, color=color,
                    weight="bold", extra=' paint-order="stroke" stroke="white" stroke-width="3"') + "</g>")


def _curve_levels(xs: _Scale, ys: _Scale, levels: Sequence[Level]) -> list[str]:
    """The band, the fit and the levels' excesses (area of the marker in proportion to n)."""
    body = []
    banded = [lv for lv in levels if lv.band is not None]
    if banded:
        upper = [f"{_n(xs(lv.dose))},{_n(ys(lv.band[1]))}" for lv in banded if lv.band is not None]
        lower = [f"{_n(xs(lv.dose))},{_n(ys(lv.band[0]))}" for lv in reversed(banded) if lv.band is not None]
        body.append(f'<polygon data-mark="band" points="{" ".join(upper + lower)}" fill="{BLUE}" fill-opacity="0.16" '
                    f'stroke="{BLUE}" stroke-opacity="0.35" stroke-width="0.8"/>')
    fitted = [f"{_n(xs(lv.dose))},{_n(ys(lv.fit))}" for lv in levels if lv.fit is not None]
    if fitted:
        body.append(f'<polyline data-mark="fit" points="{" ".join(fitted)}" fill="none" stroke="{BLUE}" '
                    'stroke-width="2"/>')
    largest = max(max((lv.n for lv in levels), default=1), 1)
    for lv in levels:
        if lv.value is None:
            continue
        x, r = xs(lv.dose), 2.5 + 3.5 * math.sqrt(max(lv.n, 0) / largest)
        tip = f"{lv.label}: excess {lv.value:+.3f}" + (f" [{lv.lo:+.3f}, {lv.hi:+.3f}]" if lv.lo is not None
                                                       and lv.hi is not None else "") + f", n = {lv.n:,}"
        parts = [f'<g data-level="{lv.dose}" data-n="{lv.n}" data-value="{lv.value}" data-x="{_n(x)}">'
                 f"<title>{_a(tip)}</title>"]
        if lv.lo is not None and lv.hi is not None:
            parts += [_line(x, ys(lv.lo), x, ys(lv.hi), color=INK, width=1.2),
                      _line(x - 3, ys(lv.lo), x + 3, ys(lv.lo), color=INK, width=1.2),
                      _line(x - 3, ys(lv.hi), x + 3, ys(lv.hi), color=INK, width=1.2)]
        if lv.qualifies:
            parts.append(f'<circle cx="{_n(x)}" cy="{_n(ys(lv.value))}" r="{_n(r)}" fill="{INK}" fill-opacity="0.8"/>')
        else:
            parts.append(f'<circle cx="{_n(x)}" cy="{_n(ys(lv.value))}" r="{_n(r)}" fill="white" stroke="{INK}" '
                         'stroke-width="1.5"/>')
        body.append("".join(parts) + "</g>")
    return body


def _curve_legend(name: str, x: float, y: float, half: float | None) -> list[str]:
    """The legend, one row per kind of mark, from ``(x, y)`` down."""
    def box(fill: str, opacity: float = 1.0, stroke: str = "none") -> Callable[[float], str]:
        return lambda yy: (f'<rect x="{_n(x)}" y="{_n(yy - 6)}" width="11" height="11" fill="{fill}" '
                           f'fill-opacity="{opacity}" stroke="{stroke}"/>')

    rows: list[tuple[Callable[[float], str], str]] = [
        (lambda yy: f'<circle cx="{_n(x + 5)}" cy="{_n(yy)}" r="4.5" fill="{INK}" fill-opacity="0.8"/>',
         "excess, 95% CI above 0"),
        (lambda yy: f'<circle cx="{_n(x + 5)}" cy="{_n(yy)}" r="4.5" fill="white" stroke="{INK}" stroke-width="1.5"/>',
         "excess, 95% CI not above 0"),
        (lambda yy: "", "(marker area in proportion to n)"),
        (lambda yy: _line(x, yy, x + 11, yy, color=BLUE, width=2), "isotonic fit"),
        (box(BLUE, 0.16, BLUE), "the fit's pointwise 95% band"),
        (lambda yy: _line(x + 5, yy - 6, x + 5, yy + 5, color=RED, width=2, dash="4 3"), "onset"),
        (box(f"url(#{name}-hatch)", stroke=RED), "its bracket (below, onset]"),
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
               x_range: tuple[float, float] | None = None, whole: bool = False) -> str:
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
    body = [_HATCH.format(id=f"{name}-hatch", color=RED), _text(8, 16, title, size=12.5, weight="bold")]
    body += _axis_y(ys, left, y_label, left + plot_w) + _axis_x(xs, bottom, x_label, top, whole=whole)
    if onset is not None and onset.span is not None:
        body.append(_span(xs, "onset", onset.span, top, bottom, f"url(#{name}-hatch)"))
    if midpoint is not None and midpoint.span is not None:
        body.append(_span(xs, "midpoint", midpoint.span, top, bottom, ORANGE, 0.18))
    if y_lo < 0 < y_hi:
        body.append(_line(left, ys(0.0), left + plot_w, ys(0.0), color=GREY, width=1))
    if half is not None:
        body.append(f'<g data-mark="half" data-value="{half}">'
                    + _line(left, ys(half), left + plot_w, ys(half), color=GREY, width=1.5, dash="1 3")
                    + _text(left + plot_w - 4, ys(half) - 4, f"plateau/2 = {half:.3f}", size=9.5, anchor="end",
                            color=GREY) + "</g>")
    if not levels:
        body.append(_text(left + plot_w / 2, top + plot_h / 2, "no level has effective pairs with a reference",
                          size=11, anchor="middle", color=GREY))
    body += _curve_levels(xs, ys, levels)
    if onset is not None:
        body.append(_vertical(xs, onset, top, bottom, RED, "4 3", "onset", top - 4, "end"))
    if midpoint is not None:
        body.append(_vertical(xs, midpoint, top, bottom, ORANGE, "", "midpoint", top + 10, "start"))
    body += _curve_legend(name, left + plot_w + 16, top + 6, half)
    return _svg(name, title, width, height, body)


# --------------------------------------------------------------------------- heatmap


def _shade(v: float, lo: float, hi: float) -> tuple[str, str]:
    """A light-to-dark blue fill for ``v`` and the text colour that reads on it."""
    t = 0.0 if hi - lo < 1e-12 else (min(max(v, lo), hi) - lo) / (hi - lo)
    r, g, b = (int(247 + (8 - 247) * t), int(251 + (48 - 251) * t), int(255 + (107 - 255) * t))
    return f"#{r:02x}{g:02x}{b:02x}", ("white" if t > 0.55 else INK)


def heatmap(name: str, title: str, rows: Sequence[str], cols: Sequence[str],
            values: Mapping[tuple[str, str], float | None], *, digits: int = 2, lo: float | None = None,
            hi: float | None = None, empty: str = "", hatched: Sequence[tuple[str, str]] = ()) -> str:
    """A matrix of cells shaded by value, each value written in its cell; a missing cell is
    blank (``empty`` written in it), a ``hatched`` one crossed by the hatch pattern."""
    label_w = max([40] + [6.6 * len(r) for r in rows]) + 14
    cell_w = max([54] + [6.4 * len(c) + 8 for c in cols])
    cell_h, top = 26, 50
    width, height = label_w + cell_w * len(cols) + 20, top + cell_h * len(rows) + 18
    known = [v for v in values.values() if v is not None and math.isfinite(v)]
    low = lo if lo is not None else min(known, default=0.0)
    high = hi if hi is not None else max(known, default=1.0)
    body = [_HATCH.format(id=f"{name}-hatch", color=GREY), _text(8, 16, title, size=12.5, weight="bold")]
    for j, c in enumerate(cols):
        body.append(_text(label_w + cell_w * j + cell_w / 2, top - 8, c, size=10, anchor="middle"))
    for i, r in enumerate(rows):
        y = top + cell_h * i
        body.append(_text(label_w - 8, y + cell_h / 2 + 4, r, size=10.5, anchor="end"))
        for j, c in enumerate(cols):
            x = label_w + cell_w * j
            v = values.get((r, c))
            if (r, c) in hatched:
                body.append(f'<rect x="{_n(x)}" y="{y}" width="{_n(cell_w)}" height="{cell_h}" '
                            f'fill="url(#{name}-hatch)" stroke="white"/>')
            if v is None or not math.isfinite(v):
                body += [f'<rect x="{_n(x)}" y="{y}" width="{_n(cell_w)}" height="{cell_h}" fill="none" '
                         f'stroke="{GRID}"/>', _text(x + cell_w / 2, y + cell_h / 2 + 4, empty, size=9.5,
                                                      anchor="middle", color=GREY)]
                continue
            fill, ink = _shade(v, low, high)
            body += [f'<rect x="{_n(x)}" y="{y}" width="{_n(cell_w)}" height="{cell_h}" fill="{fill}" '
                     f'stroke="white"/>',
                     _text(x + cell_w / 2, y + cell_h / 2 + 4, f"{v:.{digits}f}", size=10.5, anchor="middle",
                           color=ink)]
    return _svg(name, title, width, height, body)


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class GraphEdge:
    """An edge of the drawn graph: its class, sigma and whether it was inferred."""

    source: str
    target: str
    cls: str = "undefined"
    sigma: float | None = None
    inferred: bool = False


def _layers(nodes: Sequence[str], edges: Sequence[GraphEdge]) -> dict[str, int]:
    order = {n: i for i, n in enumerate(nodes)}
    layer = dict.fromkeys(nodes, 0)
    for n in nodes:
        for e in edges:
            if e.target == n and e.source in order and order[e.source] < order[n]:
                layer[n] = max(layer[n], layer[e.source] + 1)
    return layer


def graph(name: str, title: str, nodes: Sequence[str], edges: Sequence[GraphEdge], *,
          sources: Sequence[str] = (), inferred_nodes: Sequence[str] = (), loop: Sequence[str] = ()) -> str:
    """The pipeline graph, left to right in topological layers (``nodes`` in topological
    order). Amplifying edges are red, thick and labelled "amplifies"; inferred edges
    dashed; bifurcation sources drawn with a double border and a "bifurcation source"
    label; inferred nodes labelled "(inferred)"; loop-body nodes with a dotted border."""
    layer = _layers(nodes, edges)
    depth = max(layer.values(), default=0) + 1
    members = {d: [n for n in nodes if layer[n] == d] for d in range(depth)}
    box_w = max([90] + [7.0 * len(n) + 20 for n in nodes])
    box_h, gap_x, gap_y, top = 40, 120, 40, 40
    tallest = max((len(m) for m in members.values()), default=1)
    width = 20 + depth * (box_w + gap_x) + 10
    height = top + tallest * (box_h + gap_y) + 60
    pos: dict[str, tuple[float, float]] = {}
    for d, ms in members.items():
        offset = (tallest - len(ms)) * (box_h + gap_y) / 2
        for k, n in enumerate(ms):
            pos[n] = (20 + d * (box_w + gap_x), top + offset + k * (box_h + gap_y))
    body = ['<defs><marker id="' + name + '-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" '
            'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>',
            _text(8, 16, title, size=12.5, weight="bold")]
    for e in edges:
        if e.source not in pos or e.target not in pos:
            continue
        body.append(_edge(name, e, pos, box_w, box_h))
    src, inf, lp = set(sources), set(inferred_nodes), set(loop)
    for n, (x, y) in pos.items():
        stroke = RED if n in src else INK
        dash = ' stroke-dasharray="3 3"' if n in lp else ""
        body.append(f'<g data-node="{_a(n)}"><rect x="{_n(x)}" y="{_n(y)}" width="{_n(box_w)}" height="{box_h}" '
                    f'rx="6" fill="#f4f6fa" stroke="{stroke}" stroke-width="{2.5 if n in src else 1.2}"{dash}/>')
        if n in src:
            body.append(f'<rect x="{_n(x + 3)}" y="{_n(y + 3)}" width="{_n(box_w - 6)}" height="{box_h - 6}" rx="4" '
                        f'fill="none" stroke="{RED}" stroke-width="1"/>')
        sub = "; ".join(s for s in ("bifurcation source" if n in src else "", "(inferred)" if n in inf else "") if s)
        body.append(_text(x + box_w / 2, y + (16 if sub else 24), n, size=11.5, anchor="middle", weight="bold"))
        if sub:
            body.append(_text(x + box_w / 2, y + 31, sub, size=9, anchor="middle", color=RED if n in src else GREY))
        body.append("</g>")
    ly = height - 22
    legend: list[tuple[str, float, str | None, str]] = [
        (RED, 3.0, None, "amplifies (σ > 1)"), (INK, 1.4, None, "other edge"), (GREY, 1.4, "5 4", "inferred")]
    x = 20.0
    for color, w, style, text in legend:
        body += [_line(x, ly, x + 26, ly, color=color, width=w, dash=style), _text(x + 31, ly + 4, text, size=10)]
        x += 45 + 6.2 * len(text)
    body.append(_text(x, ly + 4, "double red border: bifurcation source; dotted border: loop body", size=10))
    return _svg(name, title, max(width, x + 390), height, body)


def _edge(name: str, e: GraphEdge, pos: Mapping[str, tuple[float, float]], box_w: float, box_h: float) -> str:
    (x0, y0), (x1, y1) = pos[e.source], pos[e.target]
    amp = e.cls == "amplifier"
    color = RED if amp else (GREY if e.inferred else INK)
    dash = ' stroke-dasharray="5 4"' if e.inferred else ""
    width = 3.0 if amp else 1.4
    label = ("σ n/a" if e.sigma is None else f"σ {e.sigma:.2f}") + (" amplifies" if amp else "")
    label += " (inferred)" if e.inferred else ""
    if e.source == e.target:
        cx, cy = x0 + box_w / 2, y0
        path = (f"M{_n(cx - 12)},{_n(cy)} C{_n(cx - 30)},{_n(cy - 34)} {_n(cx + 30)},{_n(cy - 34)} "
                f"{_n(cx + 12)},{_n(cy)}")
        lx, ly = cx, cy - 30
    elif x1 > x0:
        sx, sy, tx, ty = x0 + box_w, y0 + box_h / 2, x1, y1 + box_h / 2
        mx = (sx + tx) / 2
        path = f"M{_n(sx)},{_n(sy)} C{_n(mx)},{_n(sy)} {_n(mx)},{_n(ty)} {_n(tx)},{_n(ty)}"
        lx, ly = mx, (sy + ty) / 2 - 4
    else:  # a feedback edge: below the boxes, right to left
        sx, sy, tx, ty = x0 + box_w / 2, y0 + box_h, x1 + box_w / 2, y1 + box_h
        low = max(sy, ty) + 28
        path = f"M{_n(sx)},{_n(sy)} C{_n(sx)},{_n(low)} {_n(tx)},{_n(low)} {_n(tx)},{_n(ty)}"
        lx, ly = (sx + tx) / 2, low - 2
    return (f'<g data-edge="{_a(e.source)}->{_a(e.target)}" data-class="{_a(e.cls)}" '
            f'data-inferred="{str(e.inferred).lower()}"><path d="{path}" fill="none" stroke="{color}" '
            f'stroke-width="{width}"{dash} marker-end="url(#{name}-arrow)"/>'
            + _text(lx, ly, label, size=9, anchor="middle", color=RED if amp else INK,
                    extra=' paint-order="stroke" stroke="white" stroke-width="3"') + "</g>")
