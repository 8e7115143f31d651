"""An observational profile written out: ``profile.json``, ``report.md``, the plots and
``report.html``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from quiver._observational import Profile
from quiver._outdir import make_folder, real_path, write_text

from .markdown import REPORT_FILE, write_report

__all__ = ["write_profile"]


def write_profile(profile: Profile, out: Path, *, plots: bool = True) -> list[Path]:
    """Write profile.json, report.md, (when matplotlib is there) the plots, and report.html
    into ``out``.

    Returns:
        The files written, ``profile.json`` first.
    """
    from .html import HTML_FILE, write_html
    from .plots import PLOT_FILES, write_plots

    make_folder(out)
    for name in (REPORT_FILE, HTML_FILE, *(PLOT_FILES if plots else ())):  # refused before anything is written
        real_path(out / name)  # (matplotlib opens the plots itself)
    profile_path = write_text(out / "profile.json", json.dumps(profile.to_json(), indent=2) + "\n")
    images: list[Path] = []
    if plots:
        try:
            images = write_plots(profile.plot_data(), out)
        except ImportError as exc:  # matplotlib is optional
            print(f"analyze: no plots: {exc}", file=sys.stderr)
    report = write_report(profile.to_json(), out, images=[p.name for p in images])
    page = write_html(out, "analysis")
    return [profile_path, report, *images, page]
