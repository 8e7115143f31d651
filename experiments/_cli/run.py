"""``quiver run SPEC``: the command line of a perturbation campaign (see
:mod:`quiver.experiments._campaign`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_PROBLEMS, LazyChoices

__all__ = ["add_parser", "command"]


def _executors() -> list[str]:
    from quiver.replay import registered_executors

    return list(registered_executors())


def add_parser(sub: Any) -> None:
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
            "--resume (failed replays kept as they are); --retry-failed resumes and runs the "
            "failed replays again. A resume refuses a ledger whose replays were made with other "
            "parameters, files or pipeline code, and a damaged ledger (exit 2: move it aside and "
            "resume, its replays are run again). Exit 1 when pairs failed or diverged, a negative "
            "control failed, or the budget stopped the run."
        ),
    )
    run.add_argument("spec", type=Path, help="the campaign spec (see `quiver schema spec`)")
    run.add_argument("--resume", action="store_true", help="finish an interrupted campaign from its ledger")
    run.add_argument("--retry-failed", action="store_true",
                     help="resume, and run again the replays the ledger holds as failed (and only those)")
    run.add_argument("--executor", choices=LazyChoices(_executors), metavar="KIND",
                     help="a registered executor (%(choices)s; others plug in through the quiver.executors "
                          "entry points); overrides the spec's executor.kind")
    run.add_argument("--address", help="a Ray cluster address (with --executor ray)")
    run.add_argument("--output", help="output folder (overrides the spec's output)")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument("--plan", action="store_true",
                     help="print the replays, LLM calls, tokens and cost (at the spec's prices:) the campaign will "
                          "take, per perturbation, per control and in all, and whether they exceed the budget; "
                          "send no LLM call and write nothing (exit 1 when the plan exceeds the budget)")
    run.set_defaults(handler=command)


def plan(args: argparse.Namespace) -> int:
    """``quiver run SPEC --plan``: print the campaign's plan; 1 when it exceeds the budget."""
    from quiver.experiments._campaign import CampaignRun, plan_campaign

    run = CampaignRun.load(args.spec, output=args.output, stream=None, warn=_warn)
    campaign = plan_campaign(run)
    print(campaign.render())
    _say_skipped(len(run.skipped))
    return EXIT_OK if campaign.budget_stop() is None and not run.skipped else EXIT_PROBLEMS


def _warn(message: str) -> None:
    print(f"quiver run: warning: {message}", file=sys.stderr)


def _say_skipped(skipped: int) -> None:
    if skipped:
        print(f"quiver run: {skipped} bad baseline line(s) skipped (named above); `quiver validate` lists them",
              file=sys.stderr)


WRITTEN = ("campaign.json", "pairs.jsonl", "replays.jsonl", "examples.json", "report.md", "report.html", "summary.json",
           "ledger.sqlite")
"""The files of a finished campaign, as ``quiver run`` lists them (with their sizes)."""


def _already_complete(result: Any, args: argparse.Namespace) -> int:
    """A resume of a finished campaign: nothing done, and the problems it finished with
    said again (exit 1 while there are any, as when it finished)."""
    status, failed = result.status, result.status.get("failed", 0)
    problems = [f"{failed} failed: `quiver run {args.spec} --retry-failed` runs them again" if failed else "",
                f"{status['diverged']} diverged" if status.get("diverged") else "",
                f"negative control failed for {', '.join(result.negative_control_failed)}"
                if result.negative_control_failed else "",
                f"{result.skipped_lines} bad baseline line(s) skipped" if result.skipped_lines else ""]
    said = "; ".join(p for p in problems if p)
    print(f"already complete: {result.done} replays in {result.output / 'ledger.sqlite'}"
          f"{f' ({said})' if said else ''}; nothing to do")
    return EXIT_PROBLEMS if said else EXIT_OK


def _size(n: float) -> str:
    for unit in ("bytes", "KB", "MB"):
        if n < 1024:
            return f"{int(n):,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def command(args: argparse.Namespace) -> int:
    """Run ``quiver run``; return the exit code."""
    if args.plan:
        return plan(args)
    from quiver.experiments._campaign import failure_lines, not_applied_lines, run_campaign

    result = run_campaign(
        args.spec, resume=args.resume, retry_failed=args.retry_failed, executor=args.executor,
        address=args.address, output=args.output, progress_stream=None if args.quiet else sys.stderr, warn=_warn,
    )
    if result.already_complete:
        return _already_complete(result, args)
    status = ", ".join(f"{k} {v}" for k, v in sorted(result.status.items())) or "none"
    retries = ", ".join(f"{k} {v}" for k, v in sorted(result.retries.items())) or "none"
    again = f", {result.retried} failed run again" if result.retried else ""
    print(
        f"{result.done} of {result.jobs} pairs ({result.resumed} from the ledger{again}; {status}) on the "
        f"{result.executor} executor in {result.seconds:.1f}s; {result.llm_calls} LLM calls; retries: {retries}"
    )
    out = result.output
    _say_skipped(result.skipped_lines)
    if result.failed_kept:
        print(f"{result.failed_kept} failed replay(s) from the ledger kept as they are; "
              f"`quiver run {args.spec} --retry-failed` runs them again", file=sys.stderr)
    if result.stopped_by_budget:
        output = f" --output {args.output}" if args.output else ""
        print(f"stopped by the budget ({result.budget_stop}); `quiver run {args.spec}{output} --resume` with a larger "
              "budget: finishes it", file=sys.stderr)
        return EXIT_PROBLEMS
    if not result.complete:
        print("the campaign did not finish; `--resume` continues it", file=sys.stderr)
        return EXIT_PROBLEMS
    for p in result.estimates.perturbations if result.estimates is not None else ():
        verdict = {True: "passed", False: "FAILED", None: "n/a"}[p.negative_control.passed]
        not_applied = f"  not applied {p.counts.not_applied:>5}" if p.counts.not_applied else ""
        print(f"  {p.id:<22} pairs {p.counts.pairs:>5}  effective {p.counts.effective:>5}  "
              f"no-op {p.counts.noop:>5}  failed {p.counts.failed:>5}{not_applied}  negative control {verdict}")
        if p.adaptive is not None:
            print(f"  {'':<22} {_adaptive_line(p.adaptive)}")
    for line in failure_lines(result.failures):
        print(line)
    for name in WRITTEN:
        if (out / name).is_file():
            print(f"{out / name}  ({_size((out / name).stat().st_size)})")
    _say_found(out)
    for line in not_applied_lines(result):
        print(f"quiver run: {line}", file=sys.stderr)
    problems = (result.status.get("failed", 0) + result.status.get("diverged", 0) + result.skipped_lines
                + sum(sum(c.values()) for c in result.not_landed.values()))
    if result.status.get("failed", 0):
        print(f"{result.status['failed']} of {result.done} replays FAILED (reasons above; each in "
              f"{out / 'campaign.log'} when this run made it): the estimates leave them out", file=sys.stderr)
    if problems or result.negative_control_failed:
        if result.negative_control_failed:
            print(f"negative control failed for {', '.join(result.negative_control_failed)}", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _say_found(out: Path) -> None:
    """What the campaign found, in sentences, and where its report is."""
    from quiver._report import campaign_findings, findings_console, read_json

    print("\n".join(findings_console(campaign_findings(read_json(out / "campaign.json")), "the campaign",
                                      out / "report.html")))


def _adaptive_line(a: Any) -> str:
    """An adaptive ladder's answer in one line: the followed curve's midpoint and onset
    (D_shape's, or the outcome's), what it spent."""
    curve = a.followed
    param = a.settings.get("param", "dose")
    mid = curve.midpoint
    midpoint = ("none" if mid.value is None else
                f"{mid.value:.4g}" + (f" [{mid.ci[0]:.4g}, {mid.ci[1]:.4g}]" if mid.ci else " (no interval)"))
    if curve.onset is None:
        onset = "none"
    else:
        above = f"(above {curve.below:g})" if curve.below is not None else "(the smallest level)"
        onset = f"{curve.onset:g} {above}"
    rounds = sum(1 for r in a.rounds if r.add)
    event = "outcome failure" if curve.event == "outcome" else curve.event
    return (f"adaptive {param}: {event} midpoint {midpoint}, onset {onset}; {a.replays} replays, {len(a.levels)} "
            f"levels, {rounds} round(s); {a.stopped or 'not finished'}")
