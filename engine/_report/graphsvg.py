"""The pipeline graph as an inline SVG, laid out in layers (:func:`~.layout.layered`),
top to bottom so that it fits a page's width.

Each edge is labelled with its sigma in a slot of its own (so no label meets another or
a node): red, thick and labelled for an amplifying edge, dashed for one inferred from
the traces; a loop's feedback edge goes back up. Node boxes say their name (cut at
:data:`~.svg.NAME` columns, whole in a tooltip), a double red border marks a bifurcation
source, a dotted one the loop body, "(inferred)" a node inferred from the traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .layout import Placed, Route, layered
from .markup import Markup, anchor, element, label
from .svg import GREY, INK, NAME, RED, _box, _line, _n, _text, _title, chart, text_width

__all__ = ["GraphEdge", "graph"]

_NAME_SIZE = 12.0
_SUB_SIZE = 9.5
_EDGE_SIZE = 10.0
_PAD = 14.0
_TOP = 30.0


@dataclass(frozen=True)
class GraphEdge:
    """An edge of the drawn graph: its class, sigma and whether it was inferred."""

    source: str
    target: str
    cls: str = "undefined"
    sigma: float | None = None
    inferred: bool = False


def _edge_label(e: GraphEdge) -> str:
    """``σ 1.27``, and ``amplifies`` for an amplifier; nothing for an edge without sigma
    (no pair where its source changed), which the legend says."""
    if e.sigma is None:
        return ""
    return f"σ {e.sigma:.2f}" + (" amplifies" if e.cls == "amplifier" else "")


def _sub(source: bool, inferred: bool) -> str:
    return "; ".join(s for s in ("bifurcation source" if source else "", "(inferred)" if inferred else "") if s)


def _size(n: str, sub: str, loop: str | None) -> tuple[float, float]:
    w = max(text_width(label(n, NAME), _NAME_SIZE, bold=True), text_width(sub, _SUB_SIZE)) + 24
    extra = 30 + text_width(loop, _EDGE_SIZE) if loop else 0.0  # a self-loop and its label, right of the box
    return w + extra, 44.0 if sub else 34.0


def graph(name: str, title: str, nodes: Sequence[str], edges: Sequence[GraphEdge], *,
          sources: Sequence[str] = (), inferred_nodes: Sequence[str] = (), loop: Sequence[str] = ()) -> Markup:
    """The pipeline graph (``nodes`` in topological order: an edge pointing back is a
    loop's feedback)."""
    known = set(nodes)
    drawn = [e for e in edges if e.source in known and e.target in known]
    src, inf, lp = set(sources), set(inferred_nodes), set(loop)
    loops = {e.source: _edge_label(e) for e in drawn if e.source == e.target and _edge_label(e)}
    sizes = {n: _size(n, _sub(n in src, n in inf), loops.get(n)) for n in nodes}
    labels = [(text_width(text, _EDGE_SIZE) + 6, _EDGE_SIZE * 1.4) if (text := _edge_label(e)) else (2.0, 2.0)
              for e in drawn]
    lay = layered(list(nodes), [(e.source, e.target) for e in drawn], sizes, labels)
    legend = _legend_texts()
    width = max(lay.width + 2 * _PAD, max(_line_width(line) for line in legend) + 2 * _PAD)
    height = _TOP + lay.height + 18 * len(legend) + 22
    dx, dy = _PAD + (width - 2 * _PAD - lay.width) / 2, _TOP
    arrow = anchor(name, "arrow")
    head = element("path", d="M0,0 L10,5 L0,10 z", fill="context-stroke")
    body = [element("defs", element("marker", head, id=arrow, viewBox="0 0 10 10", refX=10, refY=5, markerWidth=9,
                                    markerHeight=9, markerUnits="userSpaceOnUse", orient="auto-start-reverse")),
            _title(title)]
    boxes = {n: _shifted(p, dx, dy, loops.get(n)) for n, p in lay.nodes.items()}
    ports = _ports(drawn, lay.routes, boxes, dx)
    for i, (e, route) in enumerate(zip(drawn, lay.routes, strict=True)):
        body.append(_edge(arrow, e, route, boxes, dx, dy, ports.get(i)))
    for n in nodes:
        body.append(_node(n, boxes[n], n in src, n in inf, n in lp))
    body += _legend(legend, _TOP + lay.height + 22)
    return chart(name, title, width, height, body)


def _ports(edges: Sequence[GraphEdge], routes: Sequence[Route], boxes: dict[str, Placed],
           dx: float) -> dict[int, tuple[float, float]]:
    """Where each edge leaves its source's box and enters its target's (x of each): the
    edges of a side spread along it, in the order of where they go, so that a node's
    many edges do not start from one point."""
    sides: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for i, (e, r) in enumerate(zip(edges, routes, strict=True)):
        if e.source == e.target or len(r.points) < 2:
            continue
        first, last = r.points[1][0] + dx, r.points[-2][0] + dx
        sides.setdefault((e.source, "top" if r.back else "bottom"), []).append((first, i))
        sides.setdefault((e.target, "bottom" if r.back else "top"), []).append((last, -1 - i))
    out: dict[int, list[float]] = {}
    for (node, _), found in sides.items():
        b = boxes[node]
        span = min(b.w - 16, 14.0 * (len(found) - 1))
        for k, (_, i) in enumerate(sorted(found)):
            x = b.x - span / 2 + (span * k / (len(found) - 1) if len(found) > 1 else span / 2)
            out.setdefault(i if i >= 0 else -1 - i, [0.0, 0.0])[0 if i >= 0 else 1] = x
    return {i: (a, b) for i, (a, b) in out.items()}


def _shifted(p: Placed, dx: float, dy: float, loop: str | None) -> Placed:
    """A node's box moved onto the page, without the room its self-loop takes."""
    extra = 30 + text_width(loop, _EDGE_SIZE) if loop else 0.0
    return Placed(p.x + dx - extra / 2, p.y + dy, p.w - extra, p.h)


def _node(n: str, b: Placed, source: bool, inferred: bool, loop: bool) -> Markup:
    parts = [_box(b.left, b.top, b.w, b.h, "#f4f6fa", rx=6, stroke=RED if source else INK,
                  stroke_width=2.5 if source else 1.2, stroke_dasharray="3 3" if loop else None)]
    if source:
        parts.append(_box(b.left + 3, b.top + 3, b.w - 6, b.h - 6, "none", rx=4, stroke=RED, stroke_width=1))
    sub = _sub(source, inferred)
    parts.append(_text(b.x, b.y + (-2 if sub else 4.5), n, size=_NAME_SIZE, anchor="middle", weight="bold",
                       limit=NAME))
    if sub:
        parts.append(_text(b.x, b.y + 14, sub, size=_SUB_SIZE, anchor="middle", color=RED if source else GREY))
    return element("g", *parts, data_node=n)


def _path(points: Sequence[tuple[float, float]]) -> str:
    """A smooth vertical path through ``points``."""
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{_n(x0)},{_n(y0)}"]
    px, py = x0, y0
    for x, y in rest:
        my = (py + y) / 2
        d.append(f"C{_n(px)},{_n(my)} {_n(x)},{_n(my)} {_n(x)},{_n(y)}")
        px, py = x, y
    return " ".join(d)


def _edge(arrow: str, e: GraphEdge, route: Route, boxes: dict[str, Placed], dx: float, dy: float,
          ports: tuple[float, float] | None) -> Markup:
    amp = e.cls == "amplifier"
    color = RED if amp else (GREY if e.inferred else INK)
    text = _edge_label(e)
    a, b = boxes[e.source], boxes[e.target]
    if e.source == e.target:
        x, y = a.left + a.w, a.y
        d = f"M{_n(x)},{_n(y - 8)} C{_n(x + 26)},{_n(y - 22)} {_n(x + 26)},{_n(y + 22)} {_n(x)},{_n(y + 8)}"
        lx, ly = x + 28 + text_width(text, _EDGE_SIZE) / 2, y + 4
    else:
        inner = [(x + dx, y + dy) for x, y in route.points[1:-1]]
        xa, xb = ports or (a.x, b.x)
        start = (xa, a.top) if route.back else (xa, a.top + a.h)
        end = (xb, b.top + b.h) if route.back else (xb, b.top)
        d = _path([start, *inner, end])
        lab = route.label
        lx, ly = (lab.x + dx, lab.y + dy + _EDGE_SIZE * 0.35) if lab is not None else ((a.x + b.x) / 2,
                                                                                      (a.y + b.y) / 2)
    line = element("path", d=d, fill="none", stroke=color, stroke_width=3.0 if amp else 1.4,
                   stroke_dasharray="5 4" if e.inferred else None, marker_end=f"url(#{arrow})")
    words = _text(lx, ly, text, size=_EDGE_SIZE, anchor="middle", color=RED if amp else INK, paint_order="stroke",
                  stroke="white", stroke_width=3) if text else Markup("")
    return element("g", line, words, data_edge=f"{e.source}->{e.target}", data_class=e.cls,
                   data_inferred=str(e.inferred).lower())


_LegendLine = list[tuple[str | None, float, str | None, str]]


def _legend_texts() -> list[_LegendLine]:
    """The legend's lines: (colour of a line sample or None, its width, its dash, text)."""
    return [[(RED, 3.0, None, "amplifies (σ > 1)"), (INK, 1.4, None, "other edge"), (GREY, 1.4, "5 4", "inferred")],
            [(None, 0.0, None, "no label: no sigma (its source never changed)")],
            [(None, 0.0, None, "double red border: bifurcation source; dotted border: loop body")]]


def _line_width(line: _LegendLine) -> float:
    return sum((31 if color else 0) + text_width(text, 10) + 14 for color, _, _, text in line)


def _legend(lines: Sequence[_LegendLine], y: float) -> list[Markup]:
    out: list[Markup] = []
    for k, line in enumerate(lines):
        x = _PAD
        for color, w, style, text in line:
            if color is not None:
                out.append(_line(x, y + 18 * k, x + 26, y + 18 * k, color=color, width=w, dash=style))
                x += 31
            out.append(_text(x, y + 18 * k + 4, text, size=10))
            x += text_width(text, 10) + 14
    return out
