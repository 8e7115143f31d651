"""``quiver localize SPEC``: which step broke each failing run (see
:mod:`quiver.experiments._localize`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver localize``."""
    loc = sub.add_parser(
        "localize",
        help="which step broke each failing run: failure localisation by counterfactual replay",
        description=(
            "For each failing run of the spec's corpus (its outcome: checks say which fail) and each of its "
            "steps (node calls, in order), replay the run with the step transplanted from a passing run of the "
            "same input (or resampled, for an LLM step with no passing run to take it from) and, as its control, "
            "with the step kept, everything after it re-run live; repeats are added where the answer is not yet "
            "clear, within a budget per failure. A step is decisive when its intervention passes more often than "
            "its control (one-sided Fisher exact test, Bonferroni over the failure's steps, level 0.05); the "
            "earliest decisive step is the failure's cause (Who&When's definition, computed). Each failure is "
            "decisive, undecided (budget spent) or has no single step. Writes localize.json and localize.md to "
            "--output (default OUTPUT/localize of the spec); every replay is committed as it finishes, so "
            "--resume loses none. Imported traces get the observational answer (the first step that differs from "
            "a passing run), said to be one. Exit 0 when done, 2 when it cannot run, 130 when interrupted."
        ),
    )
    loc.add_argument("spec", type=Path, help="a spec with an outcome: block (a campaign or recording spec)")
    loc.add_argument("--output", type=Path, help="the localisation's folder (default: the spec's OUTPUT/localize)")
    loc.add_argument("--trace", action="append", default=[], metavar="ID",
                     help="localise this failing trace only (repeatable; default: every failing trace)")
    loc.add_argument("--max-failures", type=int, metavar="N", help="a seeded sample of N failing traces")
    loc.add_argument("--budget", type=int, metavar="N", help="the most replays per failure (default 60)")
    loc.add_argument("--full-ranking", action="store_true",
                     help="decide every step of every failure, not only up to its first decisive step")
    loc.add_argument("--resume", action="store_true", help="finish an interrupted localisation in --output")
    loc.add_argument("--executor", help="local or ray (default: the spec's executor.kind)")
    loc.add_argument("--address", help="a Ray cluster's address (with --executor ray)")
    loc.add_argument("--plan", action="store_true",
                     help="print the failing runs, their tested steps and the replays and LLM calls of the search's "
                          "first round and at most; send nothing, write nothing")
    loc.add_argument("--quiet", action="store_true", help="no progress lines")
    loc.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver localize``; return the exit code."""
    from quiver._errors import QuiverError
    from quiver._report import localize_findings
    from quiver.experiments._localize import run_localize

    for name in ("max_failures", "budget"):
        value = getattr(args, name)
        if value is not None and value < (1 if name == "max_failures" else 2):
            raise QuiverError(f"--{name.replace('_', '-')} must be at least {1 if name == 'max_failures' else 2}; "
                              f"got {value}")
    if args.plan:
        from quiver.experiments._localize import plan_localize

        print(plan_localize(args.spec, output=args.output, traces=args.trace, max_failures=args.max_failures,
                            budget=args.budget), end="")
        return EXIT_OK
    result = run_localize(args.spec, output=args.output, traces=args.trace, max_failures=args.max_failures,
                          full_ranking=args.full_ranking, budget=args.budget, resume=args.resume,
                          executor=args.executor, address=args.address,
                          progress_stream=None if args.quiet else sys.stderr)
    data = result.data
    resumed = f" ({result.resumed} of them committed by the run it resumes)" if result.resumed else ""
    print(f"localised {data['localized']} of {data['failing']} failing runs with {data['replays']} replays{resumed} "
          f"in {result.seconds:.1f}s")
    print("What the localisation found:")
    for line in localize_findings(data):
        print(f"* {line}")
    for path in result.files:
        print(path)
    return EXIT_OK
