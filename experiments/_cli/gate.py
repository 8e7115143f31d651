"""``quiver gate SPEC --candidate ID=PATH``: the command line of the pre-deployment check
(see :mod:`quiver.experiments._gate`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_PROBLEMS, checked_override

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver gate``."""
    gate = sub.add_parser(
        "gate",
        help="check prompt template changes before deployment (pass / fail / re-evaluate)",
        description=(
            "Replay a probe set from the spec's baseline with each candidate template in force at "
            "the node that renders it (everything upstream served from the recording), and again "
            "with the current template (its own noise floor). Compare d_i, the D_shape and D_iter "
            "rates and every downstream node's distance (means over probes with 95%% intervals; "
            "candidate minus current paired replay by replay). Fail (exit 1) when d_i exceeds the "
            "node's beta_shape or the D_shape or D_iter rate rises beyond its interval; otherwise "
            "pass (exit 0) and list the nodes to re-evaluate (the impact set). Exit 2 when the gate "
            "could not run. Writes gate.json, gate.md and junit.xml, and prints gate.md."
        ),
    )
    gate.add_argument("spec", type=Path, help="the campaign spec (see `quiver schema spec`; its gate: block)")
    gate.add_argument("--candidate", action="append", default=[], metavar="TEMPLATE_ID=PATH",
                      help="a candidate template file for a template id (repeatable)")
    gate.add_argument("--profile", type=Path,
                      help="a `quiver run` folder with the last campaign's profile (default: the spec's output "
                           "folder when a campaign ran there, else the observational part is run first)")
    gate.add_argument("--output", type=Path,
                      help="the gate's folder (default: the spec's gate.output, else OUTPUT/gate)")
    gate.add_argument("--probes", type=int, help="probes per candidate (overrides gate.probes, default 50)")
    gate.add_argument("--repeats", type=int, help="replays per probe and arm (overrides gate.repeats, default 2)")
    gate.add_argument("--alpha", type=float, help="level of the impact sets and drift budgets (overrides gate.alpha)")
    gate.add_argument("--seed", type=int, help="seed of the probes and replays (overrides gate.seed)")
    gate.add_argument("--quiet", action="store_true", help="no progress lines")
    gate.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver gate``; return the exit code (0 pass, 1 fail)."""
    from quiver.experiments._config import GateSpec
    from quiver.experiments._gate import parse_candidates, run_gate

    probes, repeats, alpha, seed = (checked_override(GateSpec, name, getattr(args, name), f"--{name}")
                                    for name in ("probes", "repeats", "alpha", "seed"))
    result = run_gate(
        args.spec, parse_candidates(args.candidate), profile_dir=args.profile, output=args.output,
        probes=probes, repeats=repeats, alpha=alpha, seed=seed,
        progress_stream=None if args.quiet else sys.stderr,
    )
    print((result.output / "gate.md").read_text(encoding="utf-8"))
    for path in result.files:
        print(path)
    return EXIT_OK if result.passed else EXIT_PROBLEMS
