"""Checks of a rendered page, shared by the report tests: every text of every chart
inside its chart and over no other text (bounding boxes as Chromium draws them), and
screenshots of the first screen and of each section.

A page is checked with every ``<details>`` opened, so that the charts and pairs folded in
them are drawn too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOLERANCE = 1.0
"""Pixels two boxes may share (a glyph's box is taller than its ink; anti-aliasing)."""

_BOXES = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const own = e => Array.from(e.childNodes).filter(c => c.nodeType === 3).map(c => c.data).join('').trim();
  return Array.from(document.querySelectorAll('svg.plot')).map(svg => {
    const s = svg.getBoundingClientRect();
    const texts = Array.from(svg.querySelectorAll('text')).filter(t => own(t)).map(t => {
      const r = t.getBoundingClientRect();
      return {text: own(t), x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
    });
    return {plot: svg.dataset.plot, x0: s.left, y0: s.top, x1: s.right, y1: s.bottom, texts: texts};
  });
}"""


def text_problems(page: Any) -> list[str]:
    """What is wrong with the texts of the page's charts: one line per text outside its
    chart and per two texts that overlap."""
    problems = []
    for chart in page.evaluate(_BOXES):
        texts = chart["texts"]
        for t in texts:
            if (t["x0"] < chart["x0"] - TOLERANCE or t["x1"] > chart["x1"] + TOLERANCE
                    or t["y0"] < chart["y0"] - TOLERANCE or t["y1"] > chart["y1"] + TOLERANCE):
                problems.append(f"{chart['plot']}: {t['text']!r} outside the chart")
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                dx = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
                dy = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
                if dx > TOLERANCE and dy > TOLERANCE:
                    problems.append(f"{chart['plot']}: {a['text']!r} over {b['text']!r} ({dx:.1f} x {dy:.1f} px)")
    return problems


def text_count(page: Any) -> int:
    """How many texts the page's charts hold (the check above looked at as many)."""
    return sum(len(c["texts"]) for c in page.evaluate(_BOXES))


_SECTIONS = """() => Array.from(document.querySelectorAll('h2')).map(h => {
  const r = h.getBoundingClientRect();
  return {title: h.textContent, top: r.top + window.scrollY};
})"""


def screenshots(page: Any, folder: Path, name: str) -> list[Path]:
    """The first screen as ``NAME-0-first-screen.png`` and, from each ``<h2>`` on, one
    screen each (``NAME-1-what-was-found.png``, ...), into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    height = page.viewport_size["height"]
    width = page.viewport_size["width"]
    shots = [folder / f"{name}-0-first-screen.png"]
    page.screenshot(path=str(shots[0]))
    full = page.evaluate("() => document.documentElement.scrollHeight")
    for i, section in enumerate(page.evaluate(_SECTIONS), 1):
        slug = "".join(ch if ch.isalnum() else "-" for ch in section["title"].lower()).strip("-")[:40]
        path = folder / f"{name}-{i}-{slug}.png"
        top = max(0.0, min(section["top"] - 8, full - height))
        page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": top, "width": width, "height": height})
        shots.append(path)
    return shots
