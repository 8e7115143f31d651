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
* :func:`graph`: a pipeline graph in topological layers.

An adaptive ladder's dose-response curve is drawn from the same parts in :mod:`.curve`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from .markup import Markup, anchor, element, label, markup_only

__all__ = ["Interval", "interval_chart", "dose_response", "Step", "heatmap", "graph", "GraphEdge", "chart"]

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
    label_w = max([60] + [min(260, 6.6 * len(label(r.label, NAME))) for r in rows]) + 12
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
    hatch = anchor(name, "hatch")
    body = [_hatch(hatch, GREY), _title(title)]
    body += _axis_x(scale, bottom, axis, top - 6)
    if band is not None:
        x0, x1 = scale(band[0]), scale(band[1])
        body.append(element("rect", element("title", band_label), x=_n(x0), y=top - 6, width=_n(max(1.0, x1 - x0)),
                            height=_n(bottom - top + 6), fill=f"url(#{hatch})", stroke=GREY, stroke_width=0.8))
    if line is not None:
        x = scale(line)
        body += [_line(x, top - 6, x, bottom, color=GREY, width=1.4, dash="5 3"),
                 _text(x + 3, top - 9, line_label, size=9.5, color=GREY)]
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        body.append(_text(label_w - 8, y + 4, r.label, size=10.5, anchor="end", limit=NAME))
        if r.value is None:
            body.append(_text(label_w + 4, y + 4, "no estimate", size=10, color=GREY))
            continue
        if r.lo is not None and r.hi is not None:
            x0, x1 = scale(r.lo), scale(r.hi)
            body += [_line(x0, y, x1, y, color=r.color, width=2), _line(x0, y - 5, x0, y + 5, color=r.color, width=2),
                     _line(x1, y - 5, x1, y + 5, color=r.color, width=2)]
        body.append(_marker(r.shape, scale(r.value), y, r.color))
        if r.note:
            body.append(_text(label_w + plot_w + 10, y + 4, r.note, size=10, color=INK, limit=NAME))
    x = label_w
    for shape, color, text in legend:
        body += [_marker(shape, x + 5, height - 12, color, r=4), _text(x + 14, height - 8, text, size=10)]
        x += 30 + 6.2 * len(text)
    if band_label and band is not None:
        body += [_box(x, height - 18, 11, 11, f"url(#{hatch})", stroke=GREY),
                 _text(x + 15, height - 8, band_label, size=10)]
        x += 30 + 6.2 * len(band_label)
    return chart(name, title, max(width, x + 10), height, body)


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
    ladder's steps span overlapping magnitudes), and ``threshold`` is a position."""
    left, plot_w, top, plot_h = 58, 440, 34, 210
    width, height = left + plot_w + 190, top + plot_h + (62 if ticks is None else 72)
    mags = [s.magnitude for s in steps] + ([threshold] if threshold is not None else [])
    x_lo, x_hi = min(mags + [0.0]), max(mags + [1e-9])
    pad = (x_hi - x_lo) * 0.06 or 0.05
    xs = _Scale(x_lo - pad, x_hi + pad, left, left + plot_w)
    ys = _Scale(0.0, 1.0, top + plot_h, top)
    hatch = anchor(name, "hatch")
    body = [_hatch(hatch, GREY), _title(title)]
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
        body.append(_box(left, y0, plot_w, max(1.0, y1 - y0), f"url(#{hatch})", stroke=GREY, stroke_width=0.8))
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
        body.append(_text(x, ys(s.rate) - 9, s.label, size=9, anchor="middle", color=INK, limit=NAME // 2))
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
    body += [_box(lx, y - 6, 11, 11, f"url(#{hatch})", stroke=GREY),
             _text(lx + 14, y + 4, "control replays, 95% CI", size=9.5),
             _line(lx, y + 18, lx + 11, y + 18, color=RED, width=2, dash="2 2"),
             _text(lx + 14, y + 22, "threshold (beta)", size=9.5)]
    return chart(name, title, width, height, body)


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
    label_w = max([40] + [6.6 * len(label(r, NAME)) for r in rows]) + 14
    cell_w = max([54] + [6.4 * len(label(c, _COLUMN)) + 8 for c in cols])
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
          sources: Sequence[str] = (), inferred_nodes: Sequence[str] = (), loop: Sequence[str] = ()) -> Markup:
    """The pipeline graph, left to right in topological layers (``nodes`` in topological
    order). Amplifying edges are red, thick and labelled "amplifies"; inferred edges
    dashed; bifurcation sources drawn with a double border and a "bifurcation source"
    label; inferred nodes labelled "(inferred)"; loop-body nodes with a dotted border.
    Node names are cut at :data:`NAME` columns."""
    layer = _layers(nodes, edges)
    depth = max(layer.values(), default=0) + 1
    members = {d: [n for n in nodes if layer[n] == d] for d in range(depth)}
    box_w = max([90] + [7.0 * len(label(n, NAME)) + 20 for n in nodes])
    box_h, gap_x, gap_y, top = 40, 120, 40, 40
    tallest = max((len(m) for m in members.values()), default=1)
    width = 20 + depth * (box_w + gap_x) + 10
    height = top + tallest * (box_h + gap_y) + 60
    pos: dict[str, tuple[float, float]] = {}
    for d, ms in members.items():
        offset = (tallest - len(ms)) * (box_h + gap_y) / 2
        for k, n in enumerate(ms):
            pos[n] = (20 + d * (box_w + gap_x), top + offset + k * (box_h + gap_y))
    arrow = anchor(name, "arrow")
    head = element("path", d="M0,0 L10,5 L0,10 z", fill="context-stroke")
    body = [element("defs", element("marker", head, id=arrow, viewBox="0 0 10 10", refX=10, refY=5, markerWidth=9,
                                    markerHeight=9, markerUnits="userSpaceOnUse", orient="auto-start-reverse")),
            _title(title)]
    for e in edges:
        if e.source not in pos or e.target not in pos:
            continue
        body.append(_edge(arrow, e, pos, box_w, box_h))
    src, inf, lp = set(sources), set(inferred_nodes), set(loop)
    for n, (x, y) in pos.items():
        body.append(_node(n, x, y, box_w, box_h, n in src, n in inf, n in lp))
    ly = height - 22
    legend: list[tuple[str, float, str | None, str]] = [
        (RED, 3.0, None, "amplifies (σ > 1)"), (INK, 1.4, None, "other edge"), (GREY, 1.4, "5 4", "inferred")]
    x = 20.0
    for color, w, style, text in legend:
        body += [_line(x, ly, x + 26, ly, color=color, width=w, dash=style), _text(x + 31, ly + 4, text, size=10)]
        x += 45 + 6.2 * len(text)
    body.append(_text(x, ly + 4, "double red border: bifurcation source; dotted border: loop body", size=10))
    return chart(name, title, max(width, x + 390), height, body)


def _node(n: str, x: float, y: float, box_w: float, box_h: float, source: bool, inferred: bool,
          loop: bool) -> Markup:
    """A node's box: a double red border for a bifurcation source, dotted for the loop
    body, and its name (cut at :data:`NAME` columns) over what it is."""
    parts = [_box(x, y, box_w, box_h, "#f4f6fa", rx=6, stroke=RED if source else INK,
                  stroke_width=2.5 if source else 1.2, stroke_dasharray="3 3" if loop else None)]
    if source:
        parts.append(_box(x + 3, y + 3, box_w - 6, box_h - 6, "none", rx=4, stroke=RED, stroke_width=1))
    sub = "; ".join(s for s in ("bifurcation source" if source else "", "(inferred)" if inferred else "") if s)
    parts.append(_text(x + box_w / 2, y + (16 if sub else 24), n, size=11.5, anchor="middle", weight="bold",
                       limit=NAME))
    if sub:
        parts.append(_text(x + box_w / 2, y + 31, sub, size=9, anchor="middle", color=RED if source else GREY))
    return element("g", *parts, data_node=n)


def _edge(arrow: str, e: GraphEdge, pos: Mapping[str, tuple[float, float]], box_w: float, box_h: float) -> Markup:
    (x0, y0), (x1, y1) = pos[e.source], pos[e.target]
    amp = e.cls == "amplifier"
    color = RED if amp else (GREY if e.inferred else INK)
    dash = "5 4" if e.inferred else None
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
    line = element("path", d=path, fill="none", stroke=color, stroke_width=width, stroke_dasharray=dash,
                   marker_end=f"url(#{arrow})")
    text = _text(lx, ly, label, size=9, anchor="middle", color=RED if amp else INK, paint_order="stroke",
                 stroke="white", stroke_width=3)
    return element("g", line, text, data_edge=f"{e.source}->{e.target}", data_class=e.cls,
                   data_inferred=str(e.inferred).lower())
