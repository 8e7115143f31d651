"""``quiver run`` and ``quiver gate``: the command lines of a perturbation campaign (see
``_campaign``) and of the pre-deployment check (see ``_gate``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_run_parser", "run_command", "add_gate_parser", "gate_command"]

EXIT_OK, EXIT_PROBLEMS = 0, 1


def add_run_parser(sub: Any) -> None:
    """Register ``quiver run``."""
    run = sub.add_parser(
        "run",
        help="run a perturbation campaign from a YAML spec (record, replay, estimate, report)",
        description=(
            "Record (or load) the baseline corpus, analyse it, replay every selected trace "
            "with each perturbation (upstream frozen, downstream live) on the local or Ray "
            "executor, commit every pair to the ledger as it finishes, and write pairs.jsonl, "
            "replays.jsonl, campaign.json (interventional estimates with n and CIs), report.md "
            "and summary.json to the spec's output folder. A killed campaign resumes with "
            "--resume. Exit 1 when pairs failed or diverged, a negative control failed, or the "
            "budget stopped the run."
        ),
    )
    run.add_argument("spec", type=Path, help="the campaign spec (see `quiver schema spec`)")
    run.add_argument("--resume", action="store_true", help="finish an interrupted campaign from its ledger")
    run.add_argument("--executor", choices=["local", "ray"], help="override the spec's executor.kind")
    run.add_argument("--address", help="a Ray cluster address (with --executor ray)")
    run.add_argument("--output", help="output folder (overrides the spec's output)")
    run.add_argument("--quiet", action="store_true", help="no progress lines")


def run_command(args: argparse.Namespace) -> int:
    """Run ``quiver run``; return the exit code."""
    from quiver.experiments._campaign import run_campaign

    result = run_campaign(
        args.spec, resume=args.resume, executor=args.executor, address=args.address, output=args.output,
        progress_stream=None if args.quiet else sys.stderr,
    )
    status = ", ".join(f"{k} {v}" for k, v in sorted(result.status.items())) or "none"
    retries = ", ".join(f"{k} {v}" for k, v in sorted(result.retries.items())) or "none"
    print(
        f"{result.done} of {result.jobs} pairs ({result.resumed} from the ledger; {status}) on the "
        f"{result.executor} executor in {result.seconds:.1f}s; {result.llm_calls} LLM calls; retries: {retries}"
    )
    out = result.output
    if result.stopped_by_budget:
        print(f"stopped by the budget; `quiver run {args.spec} --resume` with a larger budget finishes it",
              file=sys.stderr)
        return EXIT_PROBLEMS
    if not result.complete:
        print("the campaign did not finish; `--resume` continues it", file=sys.stderr)
        return EXIT_PROBLEMS
    campaign = json.loads((out / "campaign.json").read_text(encoding="utf-8"))
    for p in campaign["perturbations"]:
        control = p.get("negative_control") or {}
        verdict = {True: "passed", False: "FAILED", None: "n/a"}[control.get("passed")]
        print(f"  {p['id']:<22} pairs {p['pairs']:>5}  effective {p['effective']:>5}  no-op {p['noop']:>5}  "
              f"negative control {verdict}")
    for name in ("campaign.json", "pairs.jsonl", "report.md", "summary.json"):
        print(out / name)
    problems = result.status.get("failed", 0) + result.status.get("diverged", 0)
    if problems or result.negative_control_failed:
        if result.negative_control_failed:
            print(f"negative control failed for {', '.join(result.negative_control_failed)}", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def add_gate_parser(sub: Any) -> None:
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
    gate.add_argument("--output", type=Path, help="the gate's folder (default: the spec's gate.output, else OUTPUT/gate)")
    gate.add_argument("--probes", type=int, help="probes per candidate (overrides gate.probes, default 50)")
    gate.add_argument("--repeats", type=int, help="replays per probe and arm (overrides gate.repeats, default 2)")
    gate.add_argument("--alpha", type=float, help="level of the impact sets and drift budgets (overrides gate.alpha)")
    gate.add_argument("--seed", type=int, help="seed of the probes and replays (overrides gate.seed)")
    gate.add_argument("--quiet", action="store_true", help="no progress lines")


def gate_command(args: argparse.Namespace) -> int:
    """Run ``quiver gate``; return the exit code (0 pass, 1 fail)."""
    from quiver.experiments._gate import parse_candidates, run_gate

    result = run_gate(
        args.spec, parse_candidates(args.candidate), profile_dir=args.profile, output=args.output,
        probes=args.probes, repeats=args.repeats, alpha=args.alpha, seed=args.seed,
        progress_stream=None if args.quiet else sys.stderr,
    )
    print((result.output / "gate.md").read_text(encoding="utf-8"))
    for path in result.files:
        print(path)
    return result.exit_code
