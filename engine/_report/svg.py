"""Inline SVG charts for ``report.html``: small, self-contained, readable without colour.

Every chart is one ``<svg>`` element (``role="img"``, a ``<title>``, ``class="plot"`` and a
``data-plot`` name) built from elements of :mod:`.markup` (every name and label escaped,
:func:`chart` takes Markup only): no plotting library, nothing fetched. Series are told
apart by marker shape and line dash as well as by colour, bands by a hatch pattern, and
every mark of note carries a text label. A name (a node, a perturbation) is shortened to
a bounded width with an ellipsis, the whole of it in the label's ``<title>`` (a tooltip);
the ids that ``url(#...)`` refers to are made from a hash of the chart's name
(:func:`~.markup.anchor`), never from the name itself.

* :func:`interval_chart`: estimates with their intervals on a shared axis (forest plots,
  the gate's arms), with an optional reference band and line;
* :func:`dose_response`: an event rate per magnitude step with its interval, the
  control's rate per step (dashed, hatched band) and the threshold marked;
* :func:`heatmap`: a matrix with its value written in every cell;

An adaptive ladder's dose-response curve is drawn from the same parts in :mod:`.curve`,
the pipeline graph in :mod:`.graphsvg`. Labels that could meet another text are placed
with :class:`Boxes` (every text's box estimated from the widest usual face's metrics):
where none of its places is free, a label is left out and its text kept in the mark's
tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from .markup import Markup, anchor, element, label, markup_only

__all__ = ["Interval", "interval_chart", "dose_response", "Step", "heatmap", "chart", "text_width", "Boxes", "Mark",
           "Paired", "paired_chart"]

INK = "#222222"
GRID = "#dddddd"
BLUE = "#1f5fa8"
RED = "#b2182b"
ORANGE = "#c46200"
GREY = "#777777"
FONT = "font-family:system-ui,sans-serif"
NAME = 40
"""The widest a name is written in a chart, in columns (a wide character counts two)."""
_NOTHING = Markup("")


def _hatch(hatch_id: str, color: str) -> Markup:
    """The hatch pattern ``hatch_id`` (an :func:`~.markup.anchor`), drawn in ``color``."""
    line = element("line", x1=0, y1=0, x2=0, y2=6, stroke=color, stroke_width=2, stroke_opacity=0.45)
    return element("defs", element("pattern", line, id=hatch_id, patternUnits="userSpaceOnUse", width=6, height=6,
                                   patternTransform="rotate(45)"))


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def chart(name: str, title: str, width: float, height: float, body: Sequence[Markup]) -> Markup:
    """One ``<svg>`` of ``body``, named ``name`` (``data-plot``) and titled ``title``.

    Raises:
        TypeError: A part of ``body`` is a plain ``str``, not :class:`~.markup.Markup`.
    """
    parts = markup_only(body, "chart()")
    width = max(width, text_width(label(title, 2 * NAME), 12.5, bold=True) + 16)
    return element("svg", element("title", title), *parts, class_="plot", data_plot=name, role="img",
                   xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {_n(width)} {_n(height)}", width=_n(width),
                   height=_n(height), style=FONT)


def _text(x: float, y: float, text: object, *, size: float = 11, anchor: str = "start", color: str = INK,
          weight: str = "normal", limit: int | None = None, **more: object) -> Markup:
    """A ``<text>``; with ``limit``, a name cut to that many columns, whole in its ``<title>``."""
    shown = label(text, limit) if limit is not None else str(text)
    tip = element("title", str(text)) if shown != str(text) else _NOTHING
    return element("text", tip, shown, attrs=more, x=_n(x), y=_n(y), font_size=_n(size), text_anchor=anchor,
                   fill=color, font_weight=weight)


_WIDTHS = {**dict.fromkeys(" .,;:!|'`ijl", 0.32), **dict.fromkeys("ftr()[]{}/\\-", 0.4),
           **dict.fromkeys("abcdeghknopqsuvxyz0123456789_?*", 0.64), **dict.fromkeys("mw%", 0.98),
           **dict.fromkeys("ABCDEFGHJKLNOPQRSTUVXYZ", 0.78), **dict.fromkeys("MW—…", 1.0),
           **dict.fromkeys("=+<>≤≥→←×#~^", 0.84)}
"""Advance widths in em, rounded up from DejaVu Sans (the widest of the usual sans-serif
faces, and what ``system-ui`` is on Debian): a label's box is never smaller than drawn."""


def text_width(text: object, size: float, *, bold: bool = False) -> float:
    """The width ``text`` takes at ``size`` px (an upper bound for the usual sans faces)."""
    em = sum(_WIDTHS.get(ch, 1.0 if _width(ch) == 2 else 0.8) for ch in str(text))
    return em * size * (1.1 if bold else 1.0)


def _width(ch: str) -> int:
    import unicodedata

    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


Box = tuple[float, float, float, float]


class Boxes:
    """The boxes of the texts a chart has drawn, to place the next one where it meets
    none of them and stays inside the chart (``width`` x ``height``)."""

    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.taken: list[Box] = []

    @staticmethod
    def box(x: float, y: float, text: object, size: float, anchor: str = "start", bold: bool = False) -> Box:
        """The box of a text drawn at ``(x, y)`` (its baseline) with ``anchor``."""
        w = text_width(text, size, bold=bold)
        x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
        return (x0 - 1, y - 0.95 * size, x0 + w + 1, y + 0.27 * size)

    def free(self, box: Box) -> bool:
        """Whether ``box`` lies inside the chart and meets no box taken."""
        x0, y0, x1, y1 = box
        if x0 < 0 or y0 < 0 or x1 > self.width or y1 > self.height:
            return False
        return not any(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in self.taken)

    def take(self, box: Box) -> Box:
        self.taken.append(box)
        return box

    def place(self, text: object, size: float, candidates: Sequence[tuple[float, float, str]],
              bold: bool = False) -> tuple[float, float, str] | None:
        """The first of ``candidates`` (x, y, anchor) where ``text`` fits, taken; None: none."""
        for x, y, side in candidates:
            box = self.box(x, y, text, size, side, bold)
            if self.free(box):
                self.take(box)
                return x, y, side
        return None


def _title(title: str) -> Markup:
    """A chart's heading (names in it cut at twice :data:`NAME`)."""
    return _text(8, 16, title, size=12.5, weight="bold", limit=2 * NAME)


def _line(x1: float, y1: float, x2: float, y2: float, *, color: str = INK, width: float = 1.0,
          dash: str | None = None) -> Markup:
    return element("line", x1=_n(x1), y1=_n(y1), x2=_n(x2), y2=_n(y2), stroke=color, stroke_width=_n(width),
                   stroke_dasharray=dash or None)


def _points(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{_n(x)},{_n(y)}" for x, y in points)


def _marker(shape: str, x: float, y: float, color: str, r: float = 4.5) -> Markup:
    """A filled circle, an open square, a triangle or a diamond: told apart without colour."""
    if shape == "square":
        return element("rect", x=_n(x - r), y=_n(y - r), width=_n(2 * r), height=_n(2 * r), fill="white",
                       stroke=color, stroke_width=2)
    if shape == "triangle":
        return element("polygon", points=_points([(x, y - r - 1), (x - r, y + r), (x + r, y + r)]), fill=color)
    if shape == "diamond":
        pts = _points([(x, y - r - 1), (x + r + 1, y), (x, y + r + 1), (x - r - 1, y)])
        return element("polygon", points=pts, fill="white", stroke=color, stroke_width=2)
    return element("circle", cx=_n(x), cy=_n(y), r=_n(r), fill=color)


def _box(x: float, y: float, w: float, h: float, fill: str, **more: object) -> Markup:
    return element("rect", attrs={"x": _n(x), "y": _n(y), "width": _n(w), "height": _n(h), "fill": fill, **more})


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


def _axis_x(scale: _Scale, y: float, label: str, top: float, *, whole: bool = False) -> list[Markup]:
    """The x axis; with ``whole``, only its whole-number ticks (when there are two)."""
    out = [_line(scale.a, y, scale.b, y)]
    ticks = _ticks(scale.lo, scale.hi)
    if whole and len(kept := [t for t in ticks if t == int(t)]) >= 2:
        ticks = kept
    for t in ticks:
        x = scale(t)
        out += [_line(x, top, x, y, color=GRID), _line(x, y, x, y + 4), _text(x, y + 16, f"{t:g}", size=10,
                                                                               anchor="middle")]
    return out + [_text((scale.a + scale.b) / 2, y + 32, label, size=11, anchor="middle", limit=2 * NAME)]


def _axis_y(scale: _Scale, x: float, label: str, right: float) -> list[Markup]:
    out = [_line(x, scale.a, x, scale.b)]
    for t in _ticks(scale.lo, scale.hi):
        y = scale(t)
        out += [_line(x, y, right, y, color=GRID), _line(x - 4, y, x, y), _text(x - 7, y + 4, f"{t:g}", size=10,
                                                                                 anchor="end")]
    mid = (scale.a + scale.b) / 2
    return out + [_text(14, mid, label, size=11, anchor="middle", limit=NAME, transform=f"rotate(-90 14 {_n(mid)})")]


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
                   hi: float | None = None, legend: Sequence[tuple[str, str, str]] = ()) -> Markup:
    """Estimates as markers with interval whiskers, one row each, a shared x axis; each
    row's label cut at :data:`NAME` columns.

    Args:
        band: A reference interval drawn as a hatched band across the rows.
        line: A reference value drawn as a dashed line (``line_label`` above it).
        lo, hi: The axis range (default: what the values, intervals and references span).
        legend: (shape, colour, text) entries written under the chart.
    """
    label_w = max([60.0] + [text_width(label(r.label, NAME), 10.5) for r in rows]) + 14
    note_w = max([0.0] + [text_width(label(r.note, NAME), 10) for r in rows]) + 14
    plot_w, row_h, top = 380, 22, 46
    bottom = top + row_h * max(1, len(rows))
    entries = [(shape, color, text, 14 + text_width(text, 10)) for shape, color, text in legend]
    if band_label and band is not None:
        entries.append(("band", GREY, band_label, 15 + text_width(band_label, 10)))
    lines = _legend_lines(entries, label_w + plot_w + note_w - 8)
    width = label_w + plot_w + note_w + 10
    height = bottom + 42 + 18 * len(lines)
    scale = _range_scale(rows, band, line, lo, hi, label_w, label_w + plot_w)
    hatch = anchor(name, "hatch")
    boxes = Boxes(width, height)
    body = [_hatch(hatch, GREY), _title(title)]
    boxes.take(boxes.box(8, 16, label(title, 2 * NAME), 12.5, bold=True))
    body += _axis_x(scale, bottom, axis, top - 6)
    if band is not None:
        x0, x1 = scale(band[0]), scale(band[1])
        body.append(element("rect", element("title", band_label), x=_n(x0), y=top - 6, width=_n(max(1.0, x1 - x0)),
                            height=_n(bottom - top + 6), fill=f"url(#{hatch})", stroke=GREY, stroke_width=0.8))
    if line is not None:
        x = scale(line)
        body.append(_line(x, top - 6, x, bottom, color=GREY, width=1.4, dash="5 3"))
        spot = boxes.place(line_label, 9.5, [(x + 3, top - 9, "start"), (x - 3, top - 9, "end")])
        if spot is not None:
            body.append(_text(spot[0], spot[1], line_label, size=9.5, color=GREY, anchor=spot[2]))
    for i, r in enumerate(rows):
        body += _interval_row(r, top + row_h * i + row_h / 2, scale, label_w, plot_w)
    body += _legend(lines, label_w, bottom + 52, hatch)
    return chart(name, title, width, height, body)


def _range_scale(rows: Sequence[Interval], band: tuple[float, float] | None, line: float | None,
                 lo: float | None, hi: float | None, a: float, b: float) -> _Scale:
    values = [v for r in rows for v in (r.value, r.lo, r.hi) if v is not None and math.isfinite(v)]
    values += [v for v in (*(band or ()), line) if v is not None]
    low = lo if lo is not None else min(values + [0.0])
    high = hi if hi is not None else max(values + [low + 1e-9])
    if high - low < 1e-9:
        high = low + 1.0
    pad = (high - low) * 0.04
    return _Scale(low - (pad if lo is None else 0), high + (pad if hi is None else 0), a, b)


def _interval_row(r: Interval, y: float, scale: _Scale, label_w: float, plot_w: float) -> list[Markup]:
    body = [_text(label_w - 8, y + 4, r.label, size=10.5, anchor="end", limit=NAME)]
    if r.value is None:
        return body + [_text(label_w + 4, y + 4, "no estimate", size=10, color=GREY)]
    if r.lo is not None and r.hi is not None:
        x0, x1 = scale(r.lo), scale(r.hi)
        body += [_line(x0, y, x1, y, color=r.color, width=2), _line(x0, y - 5, x0, y + 5, color=r.color, width=2),
                 _line(x1, y - 5, x1, y + 5, color=r.color, width=2)]
    body.append(_marker(r.shape, scale(r.value), y, r.color))
    if r.note:
        body.append(_text(label_w + plot_w + 10, y + 4, r.note, size=10, color=INK, limit=NAME))
    return body


_Entry = tuple[str, str, str, float]


def _legend_lines(entries: Sequence[_Entry], room: float) -> list[list[_Entry]]:
    """The legend's entries (shape, colour, text, width) on as many lines as ``room`` needs."""
    lines: list[list[_Entry]] = []
    used = room
    for e in entries:
        if used + e[3] + 16 > room and (lines == [] or lines[-1]):
            lines.append([])
            used = 0.0
        lines[-1].append(e)
        used += e[3] + 16
    return lines


def _legend(lines: Sequence[Sequence[_Entry]], x0: float, y0: float,
            hatch: str) -> list[Markup]:
    body: list[Markup] = []
    for k, entries in enumerate(lines):
        x, y = x0, y0 + 18 * k
        for shape, color, text, w in entries:
            if shape == "band":
                body += [_box(x, y - 10, 11, 11, f"url(#{hatch})", stroke=GREY), _text(x + 15, y, text, size=10)]
            else:
                body += [_marker(shape, x + 5, y - 4, color, r=4), _text(x + 14, y, text, size=10)]
            x += w + 16
    return body


@dataclass(frozen=True)
class Mark:
    """One estimate of a row of :func:`paired_chart`."""

    value: float | None
    lo: float | None
    hi: float | None
    shape: str
    color: str


@dataclass(frozen=True)
class Paired:
    """A row of :func:`paired_chart`: its label, its marks (drawn one under the other),
    and a note at its right in ``note_color``."""

    label: str
    marks: tuple[Mark, ...]
    note: str = ""
    note_color: str = INK


def paired_chart(name: str, title: str, rows: Sequence[Paired], *, axis: str, line: float | None = None,
                 line_label: str = "", legend: Sequence[tuple[str, str, str]] = ()) -> Markup:
    """Several estimates per row (say sigma observed and sigma under intervention of one
    edge) with their intervals, one under the other, on a shared axis; each row's note
    (a verdict) at its right."""
    marks = max((len(r.marks) for r in rows), default=1)
    row_h = 10 + 9 * marks
    label_w = max([60.0] + [text_width(label(r.label, NAME), 10.5) for r in rows]) + 14
    note_w = max([0.0] + [text_width(r.note, 10, bold=True) for r in rows]) + 16
    plot_w, top = 400, 46
    bottom = top + row_h * max(1, len(rows))
    entries = [(shape, color, text, 14 + text_width(text, 10)) for shape, color, text in legend]
    lines = _legend_lines(entries, label_w + plot_w + note_w - 8)
    width, height = label_w + plot_w + note_w + 10, bottom + 42 + 18 * len(lines)
    flat = [Interval("", m.value, m.lo, m.hi) for r in rows for m in r.marks]
    scale = _range_scale(flat, None, line, 0.0, None, label_w, label_w + plot_w)
    body = [_title(title), *_axis_x(scale, bottom, axis, top - 6)]
    if line is not None:
        x = scale(line)
        body += [_line(x, top - 6, x, bottom, color=GREY, width=1.4, dash="5 3"),
                 _text(x + 3, top - 10, line_label, size=9.5, color=GREY)]
    for i, r in enumerate(rows):
        y0 = top + row_h * i
        body.append(_text(label_w - 8, y0 + row_h / 2 + 4, r.label, size=10.5, anchor="end", limit=NAME))
        for k, m in enumerate(r.marks):
            y = y0 + 9 + 9 * k
            if m.value is None:
                continue
            if m.lo is not None and m.hi is not None:
                body += [_line(scale(m.lo), y, scale(m.hi), y, color=m.color, width=1.8),
                         _line(scale(m.lo), y - 3, scale(m.lo), y + 3, color=m.color, width=1.8),
                         _line(scale(m.hi), y - 3, scale(m.hi), y + 3, color=m.color, width=1.8)]
            body.append(_marker(m.shape, scale(m.value), y, m.color, r=3.8))
        if r.note:
            body.append(_text(label_w + plot_w + 12, y0 + row_h / 2 + 4, r.note, size=10, color=r.note_color,
                              weight="bold"))
        if i:
            body.append(_line(label_w - 4, y0, label_w + plot_w + note_w, y0, color=GRID))
    body += _legend(lines, label_w, bottom + 52, "")
    return chart(name, title, width, height, body)


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
                  ticks: Sequence[tuple[float, str, str]] | None = None) -> Markup:
    """Event rate against magnitude: filled circles (open squares where the step's excess
    over its control does not qualify) with intervals, joined; the control's rate per step
    as a dashed line with triangles; the control replays' interval as a hatched band; the
    threshold as a vertical line labelled with its value. With ``ticks`` (position, name,
    magnitudes) the x axis is one position per step, each named with its magnitudes (a
    ladder's steps span overlapping magnitudes), and ``threshold`` is a position. The
    legend is right of the plot; every label inside it is placed where it meets no other
    text (:class:`Boxes`), or left out (the step's name stays in its marker's tooltip)."""
    legend = [("circle", BLUE, f"{event} rate, excess qualifies"), ("square", BLUE, "rate, does not qualify"),
              ("triangle", GREY, "control rate of the step's traces"), ("band", GREY, "control replays, 95% CI"),
              ("threshold", RED, "threshold (beta)")]
    left, plot_w, top, plot_h = 58, 440, 34, 210
    legend_w = max(text_width(text, 9.5) for _, _, text in legend) + 30
    width, height = left + plot_w + legend_w + 8, top + plot_h + (62 if ticks is None else 72)
    mags = [s.magnitude for s in steps] + ([threshold] if threshold is not None else [])
    x_lo, x_hi = min(mags + [0.0]), max(mags + [1e-9])
    pad = (x_hi - x_lo) * 0.06 or 0.05
    xs = _Scale(x_lo - pad, x_hi + pad, left, left + plot_w)
    ys = _Scale(0.0, 1.0, top + plot_h, top)
    hatch = anchor(name, "hatch")
    boxes = Boxes(width, height)
    for region in ((0, top + plot_h + 1, width, height), (0, 0, left - 2, height),
                   (left + plot_w + 2, 0, width, height), Boxes.box(8, 16, label(title, 2 * NAME), 12.5, bold=True)):
        boxes.take(region)
    body = [_hatch(hatch, GREY), _title(title)]
    body += _axis_y(ys, left, f"{event} rate", left + plot_w)
    body += _axis_x(xs, top + plot_h, "magnitude d_i at the target", top) if ticks is None else \
        _step_axis(xs, top, top + plot_h, ticks)
    if control_band is not None:
        y0, y1 = ys(control_band[1]), ys(control_band[0])
        body.append(_box(left, y0, plot_w, max(1.0, y1 - y0), f"url(#{hatch})", stroke=GREY, stroke_width=0.8))
    ctl = [(xs(s.magnitude), ys(s.control)) for s in steps if s.control is not None]
    for (x0, y0), (x1, y1) in pairwise(ctl):
        body.append(_line(x0, y0, x1, y1, color=GREY, width=1.4, dash="5 3"))
    body += [_marker("triangle", x, y, GREY, r=3.5) for x, y in ctl]
    pts = [(xs(s.magnitude), ys(s.rate)) for s in steps if s.rate is not None]
    for (x0, y0), (x1, y1) in pairwise(pts):
        body.append(_line(x0, y0, x1, y1, color=BLUE, width=1.6))
    body += _threshold(xs(threshold) if threshold is not None else None, threshold_label, top, plot_h, left, boxes)
    for s in steps:
        body += _step_marks(s, xs(s.magnitude), ys, boxes)
    body += _side_legend(legend, left + plot_w + 14, top + 8, hatch)
    return chart(name, title, width, height, body)


def _step_axis(xs: _Scale, top: float, y: float, ticks: Sequence[tuple[float, str, str]]) -> list[Markup]:
    out = [_line(xs.a, y, xs.b, y)]
    for pos, name, span in ticks:
        x = xs(pos)
        out += [_line(x, top, x, y, color=GRID), _line(x, y, x, y + 4),
                _text(x, y + 15, name, size=10, anchor="middle"),
                _text(x, y + 28, span, size=9, anchor="middle", color=GREY)]
    return out + [_text((xs.a + xs.b) / 2, y + 44, "ladder step (its magnitudes d_i at the target)", size=11,
                        anchor="middle")]


def _threshold(x: float | None, text: str, top: float, plot_h: float, left: float, boxes: Boxes) -> list[Markup]:
    """The threshold's line and its label, right of the line, else left of it, lower if need be."""
    out = [] if x is None else [_line(x, top, x, top + plot_h, color=RED, width=2, dash="2 2")]
    if not text:
        return out
    at = x if x is not None else left + 2
    spots = [(at + 4, top + 11 + k * 14, "start") for k in range(4)]
    spots += [(at - 4, top + 11 + k * 14, "end") for k in range(4)] if x is not None else []
    spot = boxes.place(text, 10, spots, bold=True)
    if spot is None:
        return out
    return out + [_text(spot[0], spot[1], text, size=10, color=RED, weight="bold", anchor=spot[2])]


def _step_marks(s: Step, x: float, ys: _Scale, boxes: Boxes) -> list[Markup]:
    """A step's whiskers, marker and name (above, below, right or left of it: where it fits)."""
    if s.rate is None:
        return []
    out = []
    if s.lo is not None and s.hi is not None:
        out += [_line(x, ys(s.lo), x, ys(s.hi), color=BLUE, width=1.6),
                _line(x - 4, ys(s.lo), x + 4, ys(s.lo), color=BLUE, width=1.6),
                _line(x - 4, ys(s.hi), x + 4, ys(s.hi), color=BLUE, width=1.6)]
    y = ys(s.rate)
    shown = label(s.label, NAME // 2)
    out.append(element("g", element("title", s.label), _marker("circle" if s.qualifies else "square", x, y, BLUE)))
    spot = boxes.place(shown, 9, [(x, y - 9, "middle"), (x, y + 17, "middle"), (x + 8, y + 3, "start"),
                                  (x - 8, y + 3, "end")])
    if spot is not None:
        out.append(_text(spot[0], spot[1], s.label, size=9, anchor=spot[2], color=INK, limit=NAME // 2))
    return out


def _side_legend(entries: Sequence[tuple[str, str, str]], lx: float, ly: float, hatch: str) -> list[Markup]:
    out: list[Markup] = []
    for i, (shape, color, text) in enumerate(entries):
        y = ly + 18 * i
        if shape == "band":
            out.append(_box(lx, y - 6, 11, 11, f"url(#{hatch})", stroke=GREY))
        elif shape == "threshold":
            out.append(_line(lx, y, lx + 11, y, color=RED, width=2, dash="2 2"))
        else:
            out.append(_marker(shape, lx + 5, y, color, r=4))
        out.append(_text(lx + 14, y + 4, text, size=9.5))
    return out


# --------------------------------------------------------------------------- heatmap


def _shade(v: float, lo: float, hi: float) -> tuple[str, str]:
    """A light-to-dark blue fill for ``v`` and the text colour that reads on it."""
    t = 0.0 if hi - lo < 1e-12 else (min(max(v, lo), hi) - lo) / (hi - lo)
    r, g, b = (int(247 + (8 - 247) * t), int(251 + (48 - 251) * t), int(255 + (107 - 255) * t))
    return f"#{r:02x}{g:02x}{b:02x}", ("white" if t > 0.55 else INK)


def heatmap(name: str, title: str, rows: Sequence[str], cols: Sequence[str],
            values: Mapping[tuple[str, str], float | None], *, digits: int = 2, lo: float | None = None,
            hi: float | None = None, empty: str = "", hatched: Sequence[tuple[str, str]] = ()) -> Markup:
    """A matrix of cells shaded by value, each value written in its cell; a missing cell is
    blank (``empty`` written in it), a ``hatched`` one crossed by the hatch pattern. Row
    names are cut at :data:`NAME` columns, column names at three quarters of it."""
    label_w = max([40.0] + [text_width(label(r, NAME), 10.5) for r in rows]) + 14
    cell_w = max([54.0] + [text_width(label(c, _COLUMN), 10) + 10 for c in cols])
    cell_h, top = 26, 50
    width, height = label_w + cell_w * len(cols) + 20, top + cell_h * len(rows) + 18
    known = [v for v in values.values() if v is not None and math.isfinite(v)]
    low = lo if lo is not None else min(known, default=0.0)
    high = hi if hi is not None else max(known, default=1.0)
    hatch = anchor(name, "hatch")
    body = [_hatch(hatch, GREY), _title(title)]
    for j, c in enumerate(cols):
        body.append(_text(label_w + cell_w * j + cell_w / 2, top - 8, c, size=10, anchor="middle", limit=_COLUMN))
    for i, r in enumerate(rows):
        y = top + cell_h * i
        body.append(_text(label_w - 8, y + cell_h / 2 + 4, r, size=10.5, anchor="end", limit=NAME))
        for j, c in enumerate(cols):
            x = label_w + cell_w * j
            v = values.get((r, c))
            if (r, c) in hatched:
                body.append(_box(x, y, cell_w, cell_h, f"url(#{hatch})", stroke="white"))
            if v is None or not math.isfinite(v):
                body += [_box(x, y, cell_w, cell_h, "none", stroke=GRID),
                         _text(x + cell_w / 2, y + cell_h / 2 + 4, empty, size=9.5, anchor="middle", color=GREY)]
                continue
            fill, ink = _shade(v, low, high)
            body += [_box(x, y, cell_w, cell_h, fill, stroke="white"),
                     _text(x + cell_w / 2, y + cell_h / 2 + 4, f"{v:.{digits}f}", size=10.5, anchor="middle",
                           color=ink)]
    return chart(name, title, width, height, body)


_COLUMN = NAME * 3 // 4
