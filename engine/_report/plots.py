"""PNG plots of an analysis profile: ratio distributions, the Sigma matrix, the graph.

:func:`write_plots` draws three figures from a profile (the dict written to
``profile.json``):

* ``ratios.png``: per edge, the histogram of the ratios d_j / d_i over the pairs with
  d_i > epsilon (QUIVER.md §3), with lines at 1 and at the mean (sigma) and the median,
  so a bimodal "threshold-sensitive" edge shows as a body below 1 and a tail above; from
  the raw ``ratios`` when the profile carries them, else from ``ratio_histogram``;
* ``sigma_matrix.png``: the matrix Sigma (rows source, columns target), coloured around
  1 (red amplifies, blue absorbs), blank where there is no edge;
* ``graph.png``: the pipeline graph in topological layers, left to right, edges coloured
  by class and labelled with sigma, loop body nodes outlined.

matplotlib is an optional dependency (``quiver-engine[plots]``), imported only here and
only when plotting, with the Agg canvas (no display, no global pyplot state). A node name
is drawn cut to a bounded width with an ellipsis (:func:`~.markup.label`; the tables of
``report.md`` and ``report.html`` give it whole), its line breaks and control characters
made visible and its ``$`` kept out of matplotlib's mathtext, so that no name changes the
figure's size or stops it being drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .markdown import graph_edges, graph_nodes
from .markup import label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch

__all__ = ["write_plots", "PLOT_FILES", "CLASS_COLORS"]

PLOT_FILES = ("ratios.png", "sigma_matrix.png", "graph.png")
DPI = 110
MAX_RATIO_PANELS = 24

CLASS_COLORS: dict[str, str] = {
    "amplifier": "#d62728",
    "absorber": "#1f77b4",
    "near-unity": "#7f7f7f",
    "insensitive": "#b3b3b3",
    "undefined": "#7f7f7f",
}
"""Edge colours by class (shared by the three plots)."""
_LOOP_COLOR = "#ff7f0e"
_NO_EDGE_COLOR = "#eeeeee"
NAME = 30
"""The widest a node name is drawn, in columns (a panel title holds two)."""


def _name(text: object, limit: int = NAME) -> str:
    """A name as a plot label: :func:`~.markup.label`, a ``$`` escaped for mathtext."""
    return label(text, limit).replace("$", r"\$")


def _matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            'write_plots needs matplotlib, an optional dependency: pip install "quiver-engine[plots]"'
        ) from exc


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    # a very large pipeline keeps its layout but is rendered at a lower resolution
    dpi = min(DPI, int(4000 / max(fig.get_size_inches())))
    fig.savefig(path, dpi=dpi, facecolor="white")
    return path


def _edges(profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    edges = profile.get("edges")
    return [e for e in edges if isinstance(e, dict)] if isinstance(edges, list) else []


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


# --------------------------------------------------------------------------- ratios


def _title(ax: Axes, edge: Mapping[str, Any], cls: str) -> None:
    n = edge.get("sigma_n", edge.get("n"))
    count = f"n = {n:,}, " if isinstance(n, int) else ""
    ax.set_title(f"{_name(edge.get('source'), 24)} → {_name(edge.get('target'), 24)}\n{count}{_name(cls)}",
                 fontsize=9.5)


def _mark(ax: Axes, one: float, mean: float | None, median: float | None) -> None:
    ax.axvline(one, color="black", linestyle="--", linewidth=1.1)
    if mean is not None:
        ax.axvline(mean, color="#2ca02c", linewidth=1.8)
    if median is not None:
        ax.axvline(median, color="black", linestyle=":", linewidth=1.4)


def _ratio_panel(ax: Axes, edge: Mapping[str, Any]) -> None:
    """The histogram of the raw ratios, clipped at the 99th percentile."""
    import numpy as np

    values = np.asarray(edge["ratios"], dtype=float)
    values = values[np.isfinite(values)]
    mean = _num(edge.get("sigma"))
    mean = float(values.mean()) if mean is None else mean
    median = _num(edge.get("sigma_median"))
    median = float(np.median(values)) if median is None else median
    top = max(2.0, float(np.quantile(values, 0.99)) * 1.05, mean * 1.1)
    beyond = int((values > top).sum())
    cls = str(edge.get("class") or "undefined")
    ax.hist(values.clip(0, top), bins=40, range=(0, top), color=CLASS_COLORS.get(cls, "#7f7f7f"), alpha=0.75)
    _mark(ax, 1.0, mean, median)
    _title(ax, edge, cls)
    if beyond:
        ax.text(0.98, 0.95, f"+{beyond} > {top:.1f}", transform=ax.transAxes, ha="right", va="top", fontsize=8)
    ax.set_xlim(0, top)


def _histogram_panel(ax: Axes, edge: Mapping[str, Any]) -> None:
    """The stored ``ratio_histogram`` (unequal bins, the last open), one equal-width bar per bin."""
    hist = edge["ratio_histogram"]
    edges, counts = list(hist["edges"]), list(hist["counts"])
    finite = [float(e) for e in edges if e is not None]

    def at(x: float | None) -> float | None:  # a ratio's position on the bin axis
        if x is None:
            return None
        for i, (lo, hi) in enumerate(pairwise(edges)):
            if hi is None or x < hi:
                return i + (0.5 if hi is None else (x - lo) / (hi - lo))
        return float(len(counts))

    cls = str(edge.get("class") or "undefined")
    ax.bar(range(len(counts)), counts, width=1.0, align="edge", color=CLASS_COLORS.get(cls, "#7f7f7f"),
           alpha=0.75, edgecolor="white", linewidth=0.6)
    _mark(ax, at(1.0) or 0.0, at(_num(edge.get("sigma"))), at(_num(edge.get("sigma_median"))))
    _title(ax, edge, cls)
    labels = [f"{e:g}" for e in finite] + (["∞"] if edges[-1] is None else [])
    ax.set_xticks(range(len(labels)), labels, fontsize=7.5)
    ax.set_xlim(0, len(counts))


def _has_ratios(edge: Mapping[str, Any]) -> bool:
    if isinstance(edge.get("ratios"), list) and edge["ratios"]:
        return True
    hist = edge.get("ratio_histogram")
    return isinstance(hist, dict) and sum(hist.get("counts") or []) > 0 and len(hist.get("edges") or []) > 1


def _plot_ratios(profile: Mapping[str, Any], path: Path) -> Path | None:
    edges = [e for e in _edges(profile) if _has_ratios(e)]
    if not edges:
        return None
    edges = sorted(edges, key=lambda e: -(e.get("sigma_n", e.get("n")) or 0))[:MAX_RATIO_PANELS]
    cols = min(4, len(edges))
    rows = math.ceil(len(edges) / cols)
    fig = _figure(3.3 * cols + 0.4, 2.55 * rows + 0.9)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, edge in zip(axes.flat, edges, strict=False):
        if isinstance(edge.get("ratios"), list) and edge["ratios"]:
            _ratio_panel(ax, edge)
        else:
            _histogram_panel(ax, edge)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(edges):]:
        ax.set_visible(False)
    for col in range(cols):  # the lowest visible panel of each column
        visible = [ax for ax in axes[:, col] if ax.get_visible()]
        visible[-1].set_xlabel("d_j / d_i", fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("pairs", fontsize=9)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color="black", linestyle="--", label="ratio 1"),
        Line2D([], [], color="#2ca02c", linewidth=1.8, label="mean (sigma)"),
        Line2D([], [], color="black", linestyle=":", label="median"),
    ]
    fig.legend(handles=handles, loc="upper right", ncol=3, fontsize=9, frameon=False)
    fig.suptitle("Ratio d_j / d_i per edge (pairs with d_i > epsilon)", x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / fig.get_figheight()))
    return _save(fig, path)


# --------------------------------------------------------------------------- Sigma matrix


def _sigma_matrix(profile: Mapping[str, Any], nodes: list[str]) -> tuple[Any, Any, dict[tuple[int, int], Any]]:
    """Sigma (NaN off the edges and on undefined edges), where the edges are, and their n."""
    import numpy as np

    index = {n: i for i, n in enumerate(nodes)}
    k = max(len(nodes), 1)
    sigma = np.full((k, k), np.nan)
    is_edge = np.zeros((k, k), dtype=bool)
    n_of: dict[tuple[int, int], Any] = {}
    for a, b in graph_edges(profile):
        is_edge[index[a], index[b]] = True
    for e in _edges(profile):
        a, b = str(e.get("source")), str(e.get("target"))
        if a in index and b in index:
            i, j = index[a], index[b]
            is_edge[i, j] = True
            n_of[i, j] = e.get("sigma_n", e.get("n"))
            value = _num(e.get("sigma"))
            sigma[i, j] = np.nan if value is None else value
    return sigma, is_edge, n_of


def _annotate(ax: Axes, sigma: Any, is_edge: Any, n_of: dict[tuple[int, int], Any], vmax: float) -> None:
    """sigma (and n, up to 10 nodes) in each edge cell, dark cells in white; undefined edges hatched."""
    show_n = len(sigma) <= 10
    for i, j in zip(*is_edge.nonzero(), strict=True):
        value = float(sigma[i, j])
        if math.isnan(value):
            ax.add_patch(_hatched(i, j))
            ax.text(j, i, "n/a", ha="center", va="center", fontsize=8, color="#555555")
            continue
        light = abs(value - 1.0) < 0.55 * max(1.0, (vmax - 1.0) if value > 1 else 1.0)
        n = n_of.get((i, j))
        label = f"{value:.2f}" + (f"\nn={n}" if show_n and n is not None else "")
        ax.text(j, i, label, ha="center", va="center", fontsize=8.5 if show_n else 7,
                color="black" if light else "white")


def _plot_matrix(profile: Mapping[str, Any], path: Path) -> Path:
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.ticker import MaxNLocator

    nodes = graph_nodes(profile)
    sigma, is_edge, n_of = _sigma_matrix(profile, nodes)
    k = len(sigma)
    finite = sigma[np.isfinite(sigma)]
    vmax = max(2.0, float(finite.max()) if finite.size else 0.0)
    side = max(4.5, 0.8 * k + 2.5)
    fig = _figure(side + 1.2, side)
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(sigma), cmap=colormaps["RdBu_r"].with_extremes(bad=_NO_EDGE_COLOR),
                   norm=TwoSlopeNorm(vcenter=1.0, vmin=0.0, vmax=vmax))
    _annotate(ax, sigma, is_edge, n_of, vmax)
    names = [_name(n) for n in nodes]
    ax.set_xticks(range(k), names, rotation=35, ha="right", fontsize=9)
    ax.set_yticks(range(k), names, fontsize=9)
    ax.set_xlabel("target v_j")
    ax.set_ylabel("source v_i")
    ax.set_title("Edge sensitivity Sigma (grey: no edge; hatched: undefined)", fontsize=10.5)
    ax.set_xticks(np.arange(-0.5, k, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, k, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    above = [t for t in MaxNLocator(5).tick_values(1.0, vmax) if 1.0 < t <= vmax]
    fig.colorbar(im, ax=ax, shrink=0.8, ticks=[0.0, 0.5, 1.0, *above],
                 label="sigma (1 = change passed on unchanged)")
    fig.tight_layout()
    return _save(fig, path)


def _hatched(i: int, j: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", edgecolor="#999999", hatch="///", linewidth=0)


# --------------------------------------------------------------------------- graph


def _layers(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layer of each node over the forward (non-feedback) edges."""
    order = {n: i for i, n in enumerate(nodes)}
    layer = {n: 0 for n in nodes}
    for n in nodes:
        for a, b in edges:
            if b == n and order[a] < order[b]:
                layer[n] = max(layer[n], layer[a] + 1)
    return layer


def _positions(nodes: list[str], edges: list[tuple[str, str]], spacing: float) -> dict[str, tuple[float, float]]:
    """x by layer, y spread within the layer, ordered by the parents' mean height."""
    layer = _layers(nodes, edges)
    pos: dict[str, tuple[float, float]] = {}
    for depth in range(max(layer.values(), default=0) + 1):
        members = [n for n in nodes if layer[n] == depth]

        def height(n: str) -> float:
            ys = [pos[a][1] for a, b in edges if b == n and a in pos]
            return -sum(ys) / len(ys) if ys else 0.0

        members.sort(key=lambda n: (height(n), nodes.index(n)))
        for r, n in enumerate(members):
            pos[n] = (depth * spacing, (len(members) - 1) / 2 * 1.5 - r * 1.5)
    return pos


def _node_label(name: str, info: Mapping[str, Any] | None) -> str:
    if not info:
        return _name(name)
    floor = _num(info.get("noise_floor"))
    extra = [f"noise {floor:.2f}" if floor is not None else "", _name(info.get("origin") or "")]
    detail = " · ".join(x for x in extra if x)
    return f"{_name(name)}\n{detail}" if detail else _name(name)


def _box(ax: Axes, xy: tuple[float, float], label: str, loop: bool, width: float) -> FancyBboxPatch:
    from matplotlib.patches import FancyBboxPatch

    height = 0.62 if "\n" in label else 0.42
    box = FancyBboxPatch(
        (xy[0] - width / 2, xy[1] - height / 2), width, height, boxstyle="round,pad=0.04,rounding_size=0.1",
        facecolor="#fff4e6" if loop else "#f4f6fa", edgecolor=_LOOP_COLOR if loop else "#555555",
        linewidth=2.6 if loop else 1.2, zorder=3,
    )
    ax.add_patch(box)
    name, _, detail = label.partition("\n")
    if detail:
        ax.text(xy[0], xy[1] + 0.1, name, ha="center", va="center", fontsize=10, fontweight="bold", zorder=4)
        ax.text(xy[0], xy[1] - 0.15, detail, ha="center", va="center", fontsize=7.5, color="#444444", zorder=4)
    else:
        ax.text(xy[0], xy[1], name, ha="center", va="center", fontsize=10, fontweight="bold", zorder=4)
    return box


def _arrow(ax: Axes, a: tuple[float, float], b: tuple[float, float], boxes: tuple[Any, Any], rad: float,
           edge: Mapping[str, Any] | None) -> None:
    from matplotlib.patches import FancyArrowPatch

    cls = str((edge or {}).get("class") or "undefined")
    sigma = _num((edge or {}).get("sigma"))
    width = 1.2 if sigma is None else min(4.0, 1.0 + 1.5 * sigma)
    arrow = FancyArrowPatch(
        a, b, patchA=boxes[0], patchB=boxes[1], arrowstyle="-|>", mutation_scale=15,
        connectionstyle=f"arc3,rad={rad}", color=CLASS_COLORS.get(cls, "#7f7f7f"), linewidth=width,
        linestyle="--" if cls == "undefined" else "-", zorder=2, shrinkA=2, shrinkB=2,
    )
    ax.add_patch(arrow)
    # the label sits on the curve's midpoint: mid + rad/2 * (dy, -dx) for arc3
    dx, dy = b[0] - a[0], b[1] - a[1]
    mx, my = (a[0] + b[0]) / 2 + rad / 2 * dy, (a[1] + b[1]) / 2 - rad / 2 * dx
    text = "σ n/a" if sigma is None else f"σ {sigma:.2f}"
    ax.text(mx, my, text, ha="center", va="center", fontsize=8, zorder=5, color="#222222",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9})


def _rads(edges: list[tuple[str, str]], nodes: list[str],
          pos: Mapping[str, tuple[float, float]]) -> dict[tuple[str, str], float]:
    """Curvature per edge: straight between adjacent layers; an edge skipping layers bends
    away from the middle row (alternating on it); a loop feedback edge bends below."""
    layer = _layers(nodes, edges)
    order = {n: i for i, n in enumerate(nodes)}
    rads: dict[tuple[str, str], float] = {}
    side = 1.0
    for a, b in edges:
        if order[a] > order[b]:
            rads[a, b] = -0.45 if layer[a] != layer[b] else 0.45
        elif layer[b] - layer[a] == 1:
            rads[a, b] = 0.0
        else:
            height = pos[a][1] + pos[b][1]
            up = height > 1e-9 or (abs(height) <= 1e-9 and side > 0)
            side = -side if abs(height) <= 1e-9 else side
            rads[a, b] = -0.3 if up else 0.3
    return rads


def _legend(ax: Axes, loop: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], color=CLASS_COLORS[c], linewidth=2.2, linestyle="--" if c == "undefined" else "-", label=c)
        for c in ("amplifier", "absorber", "near-unity", "insensitive", "undefined")
    ]
    if loop:
        handles.append(Patch(facecolor="#fff4e6", edgecolor=_LOOP_COLOR, linewidth=2.2, label="loop body"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False,
              title="edge class", title_fontsize=9)


def _plot_graph(profile: Mapping[str, Any], path: Path) -> Path:
    nodes = graph_nodes(profile)
    edges = graph_edges(profile)
    by_edge = {(str(e.get("source")), str(e.get("target"))): e for e in _edges(profile)}
    edges += [e for e in by_edge if e not in edges and e[0] in nodes and e[1] in nodes]
    info = {str(n.get("node")): n for n in profile.get("nodes") or [] if isinstance(n, dict)}
    loop_spec = (profile.get("graph") or {}).get("loop") or {}
    loop = set(loop_spec.get("body") or []) if isinstance(loop_spec, dict) else set()
    labels = {n: _node_label(n, info.get(n)) for n in nodes}
    width = max([0.9] + [0.085 * max(len(s) for s in labels[n].split("\n")) + 0.3 for n in nodes])
    spacing = width + 1.3
    pos = _positions(nodes, edges, spacing)
    rads = _rads(edges, nodes, pos)
    xs = [p[0] for p in pos.values()] or [0.0]
    ys = [p[1] for p in pos.values()] or [0.0]
    x0, x1 = min(xs) - width / 2 - 0.3, max(xs) + width / 2 + 0.3
    if x1 - x0 < 5.0:  # room for the title
        x0, x1 = x0 - (5.0 - (x1 - x0)) / 2, x1 + (5.0 - (x1 - x0)) / 2
    y0, y1 = min(ys) - 1.4, max(ys) + 1.2
    if y1 - y0 < 4.0:
        y0, y1 = y0 - (4.0 - (y1 - y0)) / 2, y1 + (4.0 - (y1 - y0)) / 2
    # one data unit is one inch: the drawing, a legend band on the right, a title band on top
    fig_w, fig_h = x1 - x0 + 1.8, y1 - y0 + 0.5
    fig = _figure(fig_w, fig_h)
    ax = fig.add_axes((0.0, 0.0, (x1 - x0) / fig_w, (y1 - y0) / fig_h))
    boxes = {n: _box(ax, pos[n], labels[n], n in loop, width) for n in nodes}
    for a, b in edges:
        if a == b:
            _self_loop(ax, pos[a], by_edge.get((a, b)))
            continue
        _arrow(ax, pos[a], pos[b], (boxes[a], boxes[b]), rads[a, b], by_edge.get((a, b)))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.text(0.1 / fig_w, 1 - 0.15 / fig_h, "Pipeline graph: edges coloured by class, width by sigma",
             ha="left", va="top", fontsize=11)
    _legend(ax, bool(loop))
    return _save(fig, path)


def _self_loop(ax: Axes, xy: tuple[float, float], edge: Mapping[str, Any] | None) -> None:
    from matplotlib.patches import FancyArrowPatch

    cls = str((edge or {}).get("class") or "undefined")
    a, b = (xy[0] + 0.15, xy[1] + 0.3), (xy[0] - 0.15, xy[1] + 0.3)
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, connectionstyle="arc3,rad=1.8",
                                 color=CLASS_COLORS.get(cls, "#7f7f7f"), zorder=2))


# --------------------------------------------------------------------------- entry point


def write_plots(profile: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``ratios.png``, ``sigma_matrix.png`` and ``graph.png`` into ``out_dir``.

    The ratio grid shows at most 24 edges (those with the most pairs) and is not
    written when no edge has ratios.

    Args:
        profile: The analysis profile (the dict written to ``profile.json``).
        out_dir: The folder to write into (created if needed).

    Returns:
        The paths written, in the order above.

    Raises:
        ImportError: matplotlib is not installed (``pip install "quiver-engine[plots]"``).
    """
    _matplotlib()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _plot_ratios(profile, out / PLOT_FILES[0]),
        _plot_matrix(profile, out / PLOT_FILES[1]),
        _plot_graph(profile, out / PLOT_FILES[2]),
    ]
    return [p for p in written if p is not None]
