"""An observational profile written out: ``profile.json``, ``report.md``, the plots and
``report.html``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from quiver._observational import Profile

from .markdown import write_report

__all__ = ["write_profile"]


def write_profile(profile: Profile, out: Path, *, plots: bool = True) -> list[Path]:
    """Write profile.json, report.md, (when matplotlib is there) the plots, and report.html
    into ``out``.

    Returns:
        The files written, ``profile.json`` first.
    """
    out.mkdir(parents=True, exist_ok=True)
    profile_path = out / "profile.json"
    profile_path.write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    images: list[Path] = []
    if plots:
        from .plots import write_plots

        try:
            images = write_plots(profile.plot_data(), out)
        except ImportError as exc:  # matplotlib is optional
            print(f"analyze: no plots: {exc}", file=sys.stderr)
    report = write_report(profile.to_json(), out, images=[p.name for p in images])
    from .html import write_html

    page = write_html(out, "analysis")
    return [profile_path, report, *images, page]
