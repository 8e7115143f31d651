"""``quiver report RUN_DIR``: rebuild a folder's reports from the JSON files already there.

What the folder is, is read from what it holds (:func:`quiver._report.detect`):

* a campaign folder (``campaign.json``): ``observational/report.md`` and ``report.html``
  from ``observational/profile.json``, then ``report.md`` and ``report.html``;
* an analysis folder (``profile.json``): ``report.md`` and ``report.html``;
* a gate folder (``gate.json``): ``gate.md`` and ``report.html``.

Nothing is estimated again and no plot is drawn again: the Markdown links the PNG plots
that are there. Exit 2 (one line) when the folder holds none of those files, or one that
cannot be read.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import EXIT_OK

__all__ = ["add_parser", "command", "rebuild"]


def add_parser(sub: Any) -> None:
    """Register ``quiver report``."""
    rep = sub.add_parser(
        "report",
        help="rebuild report.html and report.md of a run, analysis or gate folder from its JSON",
        description=(
            "Rebuild the reports of a folder written by `quiver run` (campaign.json), `quiver analyze` "
            "(profile.json) or `quiver gate` (gate.json) from the JSON files there: report.html (one "
            "self-contained page) and report.md (gate.md for a gate). Nothing is estimated again. Exit 2 "
            "when the folder holds none of those files."
        ),
    )
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a campaign, analysis or gate folder")
    rep.set_defaults(handler=command)


def rebuild(folder: Path) -> list[Path]:
    """Write the folder's reports again; returns the files written.

    Raises:
        QuiverError: The folder holds no report JSON, or one that cannot be read.
    """
    from quiver._errors import QuiverError
    from quiver._report import detect

    kind = detect(folder)
    try:
        return _rebuild(folder, kind)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        source = {"campaign": "campaign.json", "gate": "gate.json", "localize": "localize.json"}.get(kind,
                                                                                                   "profile.json")
        raise QuiverError(f"{folder / source}: not as the command that writes it writes it ({type(exc).__name__}: "
                          f"{str(exc)[:200]}); write it again with that command") from None


def _rebuild(folder: Path, kind: str) -> list[Path]:
    from quiver._outdir import write_text
    from quiver._report import PLOT_FILES, campaign_markdown, read_json, write_html, write_report

    written: list[Path] = []
    if kind == "localize":
        from quiver._report import localize_markdown

        data = read_json(folder / "localize.json")
        return [write_text(folder / "localize.md", localize_markdown(data)), write_html(folder, "localize")]
    if kind == "gate":
        from quiver.experiments._gate import gate_markdown

        data = read_json(folder / "gate.json")
        return [write_text(folder / "gate.md", gate_markdown(data)), write_html(folder, "gate")]
    if kind == "campaign":
        obs = folder / "observational"
        observational = ""
        if (obs / "profile.json").is_file():
            profile = read_json(obs / "profile.json")
            written += [write_report(profile, obs, images=[n for n in PLOT_FILES if (obs / n).is_file()]),
                        write_html(obs, "analysis")]
            observational = (obs / "report.md").read_text(encoding="utf-8")
        path = write_text(folder / "report.md", campaign_markdown(read_json(folder / "campaign.json"), observational))
        return [*written, path, write_html(folder, "campaign")]
    profile = read_json(folder / "profile.json")
    return [write_report(profile, folder, images=[n for n in PLOT_FILES if (folder / n).is_file()]),
            write_html(folder, "analysis")]


def command(args: argparse.Namespace) -> int:
    """Run ``quiver report``; return the exit code."""
    for path in rebuild(args.run_dir):
        print(path)
    return EXIT_OK
