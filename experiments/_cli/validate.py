"""``quiver validate``: trace files checked line by line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_PROBLEMS

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver validate``."""
    val = sub.add_parser(
        "validate",
        help="check trace files line by line",
        description=(
            "Read trace files (JSONL, .gz accepted) and report every line that is not a "
            "valid v1 trace as FILE:LINE: FIELD: REASON: not UTF-8, not JSON, nested too deeply, "
            "a field of the wrong type, call ids used twice, parents that are unknown, the call "
            "itself or a cycle. A damaged .gz gives the lines before the damage and one error. "
            "Exit 1 when any line or file is bad."
        ),
    )
    val.add_argument("files", type=Path, nargs="+", help="trace files")
    val.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver validate``; return the exit code."""
    from quiver import QuiverError, iter_traces

    bad = 0
    for path in args.files:
        errors: list[QuiverError] = []
        try:
            count = sum(1 for _ in iter_traces(path, on_error=errors.append))
        except QuiverError as exc:  # the file cannot be opened at all
            print(exc, file=sys.stderr)
            bad += 1
            continue
        for error in errors:
            print(error, file=sys.stderr)
        print(f"{path}: {count} trace(s) valid, {len(errors)} line(s) bad")
        bad += len(errors)
    return EXIT_PROBLEMS if bad else EXIT_OK
