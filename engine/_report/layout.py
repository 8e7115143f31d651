"""A layered (Sugiyama-style) layout of a directed graph, top to bottom, with a slot of
its own for every edge label.

The steps are those of Sugiyama, Tagawa and Toda (1981) as Graphviz's ``dot`` takes
them, kept small:

1. **Cycles**: an edge that points back in the given node order (a loop's feedback) is
   reversed for the layout and drawn back up; a self-loop is left out of the layering.
2. **Layers**: each node on the longest path from a source, at rank ``2 * layer``.
3. **Label slots**: every edge is split into a chain of dummy nodes, one per rank it
   crosses; the first dummy (the odd rank right after its source) holds the edge's label
   and is as wide as it. Labels therefore never meet each other nor a node: the
   ordering and spacing below keep every slot of a rank apart.
4. **Order**: barycentre sweeps down and up the ranks, keeping the order with the fewest
   crossings.
5. **Coordinates**: each rank packed left to right, then pulled toward the mean of its
   neighbours a few times, never closer than a gap.

The layout knows sizes only (each node's and label's width and height, given by the
caller); :mod:`.graphsvg` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

__all__ = ["Layout", "Placed", "Route", "layered"]


@dataclass(frozen=True)
class Placed:
    """A box of the layout: its centre, width and height."""

    x: float
    y: float
    w: float
    h: float

    @property
    def left(self) -> float:
        return self.x - self.w / 2

    @property
    def top(self) -> float:
        return self.y - self.h / 2


@dataclass(frozen=True)
class Route:
    """An edge as laid out: the points it passes (source end first), its label's box."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]
    label: Placed | None
    back: bool


@dataclass
class Layout:
    """Where everything goes: node boxes, edge routes, the drawing's size."""

    nodes: dict[str, Placed] = field(default_factory=dict)
    routes: list[Route] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0


@dataclass
class _Item:
    key: str
    w: float
    h: float
    rank: int
    x: float = 0.0


GAP_X = 16.0
"""The least horizontal space between two boxes of a rank."""
GAP_Y = 14.0
"""The space between two ranks."""


def _layers(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> tuple[dict[str, int], set[int]]:
    """Each node's layer, and the indices of the edges reversed (they point back)."""
    index = {n: i for i, n in enumerate(nodes)}
    back = {i for i, (a, b) in enumerate(edges) if a != b and index[a] > index[b]}
    layer = dict.fromkeys(nodes, 0)
    for n in nodes:  # in the given (topological) order
        for i, (a, b) in enumerate(edges):
            src, dst = (b, a) if i in back else (a, b)
            if dst == n and src != n:
                layer[n] = max(layer[n], layer[src] + 1)
    return layer, back


def _crossings(order: Sequence[list[str]], links: Mapping[str, list[str]]) -> int:
    total = 0
    for upper, lower in pairwise(order):
        pos = {k: i for i, k in enumerate(lower)}
        segs = [(i, pos[t]) for i, k in enumerate(upper) for t in links.get(k, ()) if t in pos]
        total += sum(1 for j, (a, b) in enumerate(segs) for c, d in segs[j + 1:] if (a - c) * (b - d) < 0)
    return total


def _sweep(order: list[list[str]], down: Mapping[str, list[str]], up: Mapping[str, list[str]]) -> None:
    """Barycentre ordering, down then up, in place."""
    for ranks, near in ((range(1, len(order)), up), (range(len(order) - 2, -1, -1), down)):
        for r in ranks:
            ref = order[r - 1] if near is up else order[r + 1]
            pos = {k: i for i, k in enumerate(ref)}
            order[r] = [k for _, _, k in sorted((_centre(near, pos, k, i), i, k) for i, k in enumerate(order[r]))]


def _centre(near: Mapping[str, list[str]], pos: Mapping[str, int], key: str, i: int) -> float:
    """The mean position of ``key``'s neighbours (``i``, its own, when it has none)."""
    xs = [pos[n] for n in near.get(key, ()) if n in pos]
    return sum(xs) / len(xs) if xs else float(i)


def _order(ranks: list[list[str]], down: Mapping[str, list[str]], up: Mapping[str, list[str]]) -> list[list[str]]:
    best, fewest = [list(r) for r in ranks], _crossings(ranks, down)
    current = [list(r) for r in ranks]
    for _ in range(8):
        _sweep(current, down, up)
        count = _crossings(current, down)
        if count < fewest:
            best, fewest = [list(r) for r in current], count
    return best


def _settle(order: list[list[str]], items: Mapping[str, _Item], down: Mapping[str, list[str]],
            up: Mapping[str, list[str]]) -> None:
    """Coordinates by the priority method (Sugiyama et al., §4): each rank packed and
    centred, then a few sweeps down and up in which every item moves toward the mean of
    its neighbours in the rank it is reached from, in order of priority (an edge's
    dummy first, so long edges run straight; then the most connected), pushing only the
    items of lower priority and never closer than ``GAP_X``."""
    widest = max((sum(items[k].w + GAP_X for k in row) for row in order), default=0.0)
    for row in order:
        x = (widest - sum(items[k].w + GAP_X for k in row)) / 2
        for k in row:
            items[k].x = x + items[k].w / 2
            x += items[k].w + GAP_X
    for near in (up, down, up, down, up):
        for row in (order if near is up else list(reversed(order))):
            _priority_pass([items[k] for k in row], near, items)


def _priority_pass(row: list[_Item], near: Mapping[str, list[str]], items: Mapping[str, _Item]) -> None:
    wanted = {}
    for i, it in enumerate(row):
        xs = [items[n].x for n in near.get(it.key, ())]
        if xs:
            wanted[i] = sum(xs) / len(xs)
    rank = sorted(wanted, key=lambda i: (not row[i].key.startswith("\x00"), -len(near.get(row[i].key, ())), i))
    fixed: set[int] = set()
    for i in rank:
        _move(row, i, wanted[i], fixed)
        fixed.add(i)


def _gap(a: _Item, b: _Item) -> float:
    return (a.w + b.w) / 2 + GAP_X


def _move(row: list[_Item], i: int, target: float, fixed: set[int]) -> None:
    """Move ``row[i]`` toward ``target``, as far as the fixed items allow, pushing the others."""
    if target > row[i].x:
        room, k = float("inf"), i
        for j in range(i + 1, len(row)):
            k_gap = sum(_gap(row[m - 1], row[m]) for m in range(i + 1, j + 1))
            if j in fixed:
                room = row[j].x - k_gap
                break
        row[i].x = min(target, room)
        for k in range(i + 1, len(row)):
            row[k].x = max(row[k].x, row[k - 1].x + _gap(row[k - 1], row[k]))
    else:
        room = float("-inf")
        for j in range(i - 1, -1, -1):
            k_gap = sum(_gap(row[m], row[m + 1]) for m in range(j, i))
            if j in fixed:
                room = row[j].x + k_gap
                break
        row[i].x = max(target, room)
        for k in range(i - 1, -1, -1):
            row[k].x = min(row[k].x, row[k + 1].x - _gap(row[k], row[k + 1]))


def layered(nodes: Sequence[str], edges: Sequence[tuple[str, str]], sizes: Mapping[str, tuple[float, float]],
            labels: Sequence[tuple[float, float]]) -> Layout:
    """Lay out ``nodes`` (in topological order: an edge pointing back is a feedback edge)
    and ``edges``, node ``n`` as large as ``sizes[n]`` and edge ``i``'s label as
    ``labels[i]`` (width, height). Self-loops get no route (the caller draws them beside
    their node, whose size should leave room)."""
    layer, back = _layers(nodes, edges)
    items = {n: _Item(n, *sizes[n], rank=2 * layer[n]) for n in nodes}
    down: dict[str, list[str]] = {}
    up: dict[str, list[str]] = {}
    chains: list[list[str]] = []
    for i, (a, b) in enumerate(edges):
        if a == b:
            chains.append([])
            continue
        src, dst = (b, a) if i in back else (a, b)
        chain = [src]
        for r in range(items[src].rank + 1, items[dst].rank):
            key = f"\x00{i}:{r}"
            w, h = labels[i] if r == items[src].rank + 1 else (2.0, 2.0)
            items[key] = _Item(key, w, h, rank=r)
            chain.append(key)
        chain.append(dst)
        for u, v in pairwise(chain):
            down.setdefault(u, []).append(v)
            up.setdefault(v, []).append(u)
        chains.append(chain)
    depth = max((it.rank for it in items.values()), default=0) + 1
    ranks: list[list[str]] = [[] for _ in range(depth)]
    for k, it in items.items():
        ranks[it.rank].append(k)
    order = _order(ranks, down, up)
    _settle(order, items, down, up)
    return _place(order, items, chains, edges, back)


def _place(order: list[list[str]], items: Mapping[str, _Item], chains: list[list[str]],
           edges: Sequence[tuple[str, str]], back: set[int]) -> Layout:
    heights = [max((items[k].h for k in row), default=0.0) for row in order]
    left = min((it.x - it.w / 2 for it in items.values()), default=0.0)
    ys, y = [], 0.0
    for h in heights:
        ys.append(y + h / 2)
        y += h + GAP_Y
    out = Layout(width=max((it.x + it.w / 2 for it in items.values()), default=0.0) - left, height=y - GAP_Y)
    placed = {k: Placed(it.x - left, ys[it.rank], it.w, it.h) for k, it in items.items()}
    out.nodes = {k: p for k, p in placed.items() if not k.startswith("\x00")}
    for i, chain in enumerate(chains):
        a, b = edges[i]
        if not chain:
            out.routes.append(Route(a, b, (), None, False))
            continue
        points = [(placed[k].x, placed[k].y) for k in chain]
        label = placed[chain[1]] if len(chain) > 2 else None
        if i in back:
            points.reverse()
        out.routes.append(Route(a, b, tuple(points), label, i in back))
    return out
