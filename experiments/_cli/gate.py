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
            "rates and every downstream node's distance (means over probes with 95% intervals; "
            "candidate minus current paired replay by replay). Fail (exit 1) when d_i exceeds the "
            "node's beta_shape or the D_shape or D_iter rate rises beyond its interval; otherwise "
            "pass (exit 0) and list the nodes to re-evaluate (the impact set). Exit 2 when the gate "
            "could not run. Writes gate.json, gate.md and junit.xml, and prints gate.md."
            " Each input is tested too: the gate fails when an input's path changes in the candidate's replays "
            "beyond its current-template rate (exact tests per input, Holm over the inputs); all the tests together "
            "fail a candidate that changes nothing with probability at most --familywise (default 0.05)."
        ),
    )
    gate.add_argument("spec", type=Path, help="the campaign spec (see `quiver schema spec`; its gate: block)")
    gate.add_argument("--candidate", action="append", default=[], metavar="ID=PATH",
                      help="a candidate, repeatable: TEMPLATE_ID=PATH, a template file for a registered template, "
                           "or NODE/SELECTOR=PATH, a text file for a prompt written inline in the node's calls "
                           "(SELECTOR: ROLE[#N], contains:TEXT or fragment:HEX; it must pick one message of each "
                           "recorded request)")
    gate.add_argument("--profile", type=Path,
                      help="a `quiver run` folder with the last campaign's profile (default: the spec's output "
                           "folder when a campaign ran there, else the observational part is run first)")
    gate.add_argument("--output", type=Path,
                      help="the gate's folder (default: the spec's gate.output, else OUTPUT/gate)")
    gate.add_argument("--probes", type=int,
                      help="probe traces per candidate, drawn stratified by input (overrides gate.probes; default one "
                           "per input)")
    gate.add_argument("--repeats", type=int,
                      help="replays per probe and arm (overrides gate.repeats; default the fewest at which a complete "
                           "change of one input fails the per-input test)")
    gate.add_argument("--familywise", type=float,
                      help="familywise level of the verdict's tests, in (0, 1) (overrides gate.familywise, default "
                           "0.05)")
    gate.add_argument("--alpha", type=float, help="level of the impact sets and drift budgets (overrides gate.alpha)")
    gate.add_argument("--seed", type=int, help="seed of the probes and replays (overrides gate.seed)")
    gate.add_argument("--quiet", action="store_true", help="no progress lines")
    gate.add_argument("--plan", action="store_true",
                      help="print the replays (probes x repeats x 2 arms), LLM calls, tokens and cost (at the spec's "
                           "prices:) the gate will take, per candidate and in all; send no LLM call and write nothing")
    gate.set_defaults(handler=command)


def _warn(message: str) -> None:
    print(f"quiver gate: warning: {message}", file=sys.stderr)


def _say_skipped(skipped: int) -> None:
    if skipped:
        print(f"quiver gate: {skipped} bad baseline line(s) skipped (named above); `quiver validate` lists them",
              file=sys.stderr)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver gate``; return the exit code (0 pass, 1 fail)."""
    from quiver.experiments._config import GateSpec
    from quiver.experiments._gate import parse_candidates, run_gate

    probes, repeats, alpha, seed, familywise = (checked_override(GateSpec, name, getattr(args, name), f"--{name}")
                                                for name in ("probes", "repeats", "alpha", "seed", "familywise"))
    candidates = parse_candidates(args.candidate)
    if args.plan:
        return plan(args, candidates, probes=probes, repeats=repeats, alpha=alpha, seed=seed, familywise=familywise)
    result = run_gate(
        args.spec, candidates, profile_dir=args.profile, output=args.output,
        probes=probes, repeats=repeats, alpha=alpha, seed=seed, familywise=familywise,
        progress_stream=None if args.quiet else sys.stderr, warn=_warn,
    )
    print((result.output / "gate.md").read_text(encoding="utf-8"))
    data = result.data
    print(f"{data['replays']:,} gate replays in {data['seconds']:.1f}s; {data['llm_calls']:,} LLM calls "
          "(counted on the wire)")
    for path in result.files:
        print(path)
    _say_found(result.output)
    _say_skipped(result.skipped_lines)
    return EXIT_OK if result.passed and not result.skipped_lines else EXIT_PROBLEMS


def _say_found(out: Path) -> None:
    """What the gate found, in sentences, and where its report is."""
    from quiver._report import findings_console, gate_findings, read_json

    print("\n".join(findings_console(gate_findings(read_json(out / "gate.json")), "the gate", out / "report.html")))


def plan(args: argparse.Namespace, candidates: dict[str, Path], **overrides: Any) -> int:
    """``quiver gate SPEC --candidate ... --plan``: print the gate's plan (exit 1 when a
    baseline line was skipped)."""
    from quiver.experiments._campaign import CampaignRun
    from quiver.experiments._gate import gate_settings, plan_gate

    run = CampaignRun.load(args.spec, stream=None, warn=_warn)
    settings = gate_settings(run, output=args.output, **overrides)
    found, planned = plan_gate(run, candidates, settings, profile_dir=args.profile)
    print(found.render())
    for c in planned:
        print(f"the gate: {c.design(settings.familywise)}")
    print(f"the gate: probes x replays per probe x 2 arms (candidate; current template, its control) per candidate, "
          f"seed {settings.seed}; nothing was written")
    _say_skipped(len(run.skipped))
    return EXIT_PROBLEMS if run.skipped else EXIT_OK
