"""``quiver show RUN_DIR PAIR_ID``: what happened in one pair of a campaign.

Prints the pair's input, its target's fields before and after, the two runs' calls side
by side with the first divergent call marked and its cause (as ``quiver diff`` explains
it: the perturbation at the perturbed target and at what it reached), each node's
distance and a word-level diff of the final output (see :mod:`quiver._report.examples`).
``--list`` lists the pair ids by perturbation and stratum (``--perturbation`` and
``--stratum`` narrow it). Exit 2 (one line) when the folder, the pair or its traces
cannot be found.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .common import EXIT_OK

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver show``."""
    show = sub.add_parser(
        "show",
        help="what happened in one pair of a campaign: input, target before and after, path, output diff",
        description=(
            "Show one pair of a finished `quiver run` folder: the input, the target's fields before and after "
            "the perturbation, the calls of the baseline and of the replay side by side with the first divergent "
            "call marked and its cause (as `quiver diff` explains it: the perturbation, named with its "
            "parameters, at the perturbed target and at what it reached), each node's distance, and a "
            "word-level diff of the final output. PAIR_ID is a pair's job id (report.html's example pairs "
            "show theirs; --list lists them all). "
            "Exit 2 when the folder, the pair or its traces cannot be found."
        ),
    )
    show.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                      help="a campaign's folder (`quiver run`), or a localisation's (`quiver localize`: PAIR_ID is a "
                           "failing trace's id; its decisive step, and the failing run beside the intervention that "
                           "made it pass)")
    show.add_argument("pair_id", nargs="?", metavar="PAIR_ID", help="the pair's id (its job id in pairs.jsonl)")
    show.add_argument("--list", action="store_true", help="list the pair ids by perturbation and stratum")
    show.add_argument("--perturbation", metavar="ID", help="with --list: this perturbation's (or control's) only")
    show.add_argument("--stratum", help="with --list: this stratum only (effective, noop, not_applied, failed, "
                                        "control)")
    show.add_argument("--json", action="store_true", help="print the pair as JSON")
    show.set_defaults(handler=command)


def _listing(args: argparse.Namespace) -> int:
    from quiver._errors import QuiverError
    from quiver._report import list_pairs, visible

    found = list_pairs(args.run_dir)
    if args.perturbation is not None and args.perturbation not in found:
        raise QuiverError(f"--perturbation {visible(args.perturbation)[:80]}: {args.run_dir} has no such perturbation; "
                          f"its perturbations and controls are {', '.join(visible(p) for p in found)}")
    shown = 0
    for pid, strata in found.items():
        if args.perturbation is not None and pid != args.perturbation:
            continue
        for stratum, ids in strata.items():
            if args.stratum is not None and stratum != args.stratum:
                continue
            print(f"{visible(pid)}  {stratum} ({len(ids):,}):")
            print("\n".join(f"  {visible(i)}" for i in ids))
            shown += len(ids)
    if not shown:
        raise QuiverError(f"no pair of {args.run_dir} is in stratum '{visible(args.stratum or '')[:40]}': the strata "
                          "are effective, noop, not_applied, failed and control")
    return EXIT_OK


def command(args: argparse.Namespace) -> int:
    """Run ``quiver show``; return the exit code."""
    from quiver._errors import QuiverError

    if not args.run_dir.is_dir():
        raise QuiverError(f"{args.run_dir} is not a folder: give the folder of a `quiver run`")
    if (args.run_dir / "localize.json").is_file():  # a `quiver localize` folder: PAIR_ID is a failing trace
        from quiver.experiments._localize import localize_listing, localize_view

        if args.list or args.pair_id is None:
            print(localize_listing(args.run_dir), end="")
        else:
            print(localize_view(args.run_dir, args.pair_id), end="")
        return EXIT_OK
    if args.list:
        return _listing(args)
    if args.pair_id is None:
        raise QuiverError(f"give a PAIR_ID: `quiver show {args.run_dir} --list` lists them, and report.html's example "
                          "pairs show theirs")
    from quiver._report import find_pair

    pair = find_pair(args.run_dir, args.pair_id)
    print(json.dumps(pair.to_json(), indent=2, ensure_ascii=False) if args.json else pair.render(), end="" if not
          args.json else "\n")
    return EXIT_OK
