"""An observational profile written out: ``profile.json``, ``report.md``, the plots and
``report.html``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from quiver._observational import Profile
from quiver._outdir import make_folder, real_path, write_text

from .markdown import write_report

__all__ = ["write_profile"]


def write_profile(profile: Profile, out: Path, *, plots: bool = True) -> list[Path]:
    """Write profile.json, report.md, (when matplotlib is there) the plots, and report.html
    into ``out``.

    Returns:
        The files written, ``profile.json`` first.
    """
    make_folder(out)
    profile_path = write_text(out / "profile.json", json.dumps(profile.to_json(), indent=2) + "\n")
    images: list[Path] = []
    if plots:
        from .plots import PLOT_FILES, write_plots

        for name in PLOT_FILES:  # matplotlib opens its files itself: no link that leaves the folder there
            real_path(out / name)
        try:
            images = write_plots(profile.plot_data(), out)
        except ImportError as exc:  # matplotlib is optional
            print(f"analyze: no plots: {exc}", file=sys.stderr)
    report = write_report(profile.to_json(), out, images=[p.name for p in images])
    from .html import write_html

    page = write_html(out, "analysis")
    return [profile_path, report, *images, page]
