"""``quiver compare BEFORE AFTER``: per-node divergence baselines of two corpora over the
same inputs, their shift, and what changed (see :mod:`quiver._compare`). Writes
compare.json, compare.md and junit.xml; exit 1 when a node became less consistent."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .common import EXIT_OK, EXIT_PROBLEMS

__all__ = ["add_parser", "command", "compare_markdown", "compare_junit"]


def add_parser(sub: Any) -> None:
    """Register ``quiver compare``."""
    cmp = sub.add_parser(
        "compare",
        help="divergence baselines of two deployments: per-node rates, their shift, what changed",
        description=(
            "Two corpora recorded over the same inputs (two deployments, two weeks of imported traces). Per "
            "node: the within-corpus divergence rate of each (same-input pairs of that corpus whose outputs, "
            "decisions, tool calls or call counts at the node differ), the across-corpus rate (one trace from "
            "each), the shift of the within rate (after - before) and the excess of the across rate over the "
            "within rates, with 95% intervals from one bootstrap over the shared inputs; what changed, read from "
            "the recorded context (template hashes, model versions and sampling parameters, the tools offered, "
            "retrieval content hashes, tool responses); and where the across pairs first diverge, by cause. "
            "A node is reached by the change "
            "when its excess lies above 0, less consistent when its shift does (both at the family-wise 5% "
            "level, Bonferroni over nodes). Writes compare.json, compare.md and junit.xml to --out and prints "
            "compare.md. Exit 1 when a node became less consistent, 0 otherwise, 2 when it cannot run."
        ),
    )
    cmp.add_argument("before", type=Path, help="the baseline corpus (JSONL, .gz accepted)")
    cmp.add_argument("after", type=Path, help="the corpus to compare with it")
    cmp.add_argument("--out", type=Path, required=True, help="output folder")
    cmp.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of inputs (1000)")
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    cmp.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver compare``; return the exit code."""
    from quiver._compare import compare_corpora
    from quiver._errors import QuiverError
    from quiver._outdir import make_folder, write_text

    if args.resamples < 1:
        raise QuiverError(f"--resamples {args.resamples}: give at least 1")
    from .diff import read_traces

    (before, skipped_before), (after, skipped_after) = (read_traces(Path(p), "compare")
                                                        for p in (args.before, args.after))
    result = compare_corpora(before, after, resamples=args.resamples, seed=args.seed)
    data = {**result.to_json(), "before": str(args.before), "after": str(args.after)}
    try:
        make_folder(args.out)
        files = [write_text(args.out / "compare.json", json.dumps(data, indent=2) + "\n"),
                 write_text(args.out / "compare.md", compare_markdown(data)),
                 write_text(args.out / "junit.xml", compare_junit(data))]
    except OSError as exc:
        raise QuiverError(f"--out {args.out}: cannot write there: {exc.strerror or exc}") from None
    print(files[1].read_text(encoding="utf-8"))
    for path in files:
        print(path)
    from quiver._report import compare_findings, findings_console

    print("\n".join(findings_console(compare_findings(data), "the comparison", files[1])))
    return EXIT_PROBLEMS if result.less_consistent or skipped_before or skipped_after else EXIT_OK


def _est(row: Mapping[str, Any], name: str, signed: bool = False) -> str:
    from quiver._stats import fmt_est

    text: str = fmt_est(row, name, signed=signed)
    return text


def compare_markdown(data: Mapping[str, Any]) -> str:
    """The comparison as Markdown, fit for a pull-request comment."""
    from quiver._compare import first_divergence_markdown
    from quiver._report import md_code, md_table, md_text

    verdict = "FAIL" if data["less_consistent"] else "PASS"
    p = data["pairs"]
    lines = [f"## quiver compare: {verdict}", "",
             f"{md_code(data.get('before', 'before'))} -> {md_code(data.get('after', 'after'))}: {data['inputs']} "
             "inputs in both "
             f"({data['inputs_before_only']} before only, {data['inputs_after_only']} after only); {p['before']} "
             f"pairs within before, {p['after']} within after, {p['across']} across. Rates with 95% intervals "
             "(bootstrap over inputs); flags at the family-wise 5% level.", ""]
    from quiver._report import compare_findings

    lines += ["**What was found:**", "", *(f"- {f.markdown()}" for f in compare_findings(data)), ""]
    headers = ["node", "within before", "within after", "shift", "across", "excess over within", "reached",
               "less consistent"]
    rows = [[md_text(r["node"]), _est(r, "within_before"), _est(r, "within_after"), _est(r, "shift", True),
             _est(r, "across"), _est(r, "excess", True), "yes" if r["reached"] else "",
             "**yes**" if r["less_consistent"] else ""] for r in data["nodes"]]
    lines += md_table(headers, rows, "lrrrrrcc")
    lines.append("")
    if data["less_consistent"]:
        lines += ["**Less consistent** (the within-corpus divergence rate rose): "
                  + ", ".join(md_code(n) for n in data["less_consistent"]), ""]
    lines += ["Reached by the change: " + (", ".join(md_code(n) for n in data["reached"]) or "no node"), ""]
    if data["changes"]:
        lines += ["### What changed (recorded context)", ""]
        lines += [f"- {md_code(node)}: {md_text(c)}" for node, cs in data["changes"].items() for c in cs] + [""]
    else:
        lines += ["The recorded contexts (templates, models, documents, tool responses) are the same.", ""]
    section = first_divergence_markdown(data["first_divergence_across"])
    if section:
        lines += ["### Across pairs: first divergence", *section[2:]]
    return "\n".join(lines).rstrip() + "\n"


def compare_junit(data: Mapping[str, Any]) -> str:
    """The comparison as JUnit XML: one test case per node, failing when it became less consistent."""
    from quiver._report import xml_text

    cases = []
    for r in data["nodes"]:
        name = quoteattr(xml_text(r["node"]))
        if r["less_consistent"]:
            text = (f"within-corpus divergence rate {_est(r, 'within_before')} -> {_est(r, 'within_after')} "
                    f"(shift {_est(r, 'shift', True)})")
            cases.append(f'  <testcase classname="quiver.compare" name={name}>\n'
                         f'    <failure message={quoteattr(text)} type="compare">{escape(text)}</failure>\n'
                         "  </testcase>")
        else:
            out = escape(xml_text(("reached by the change; " if r["reached"] else "") + "; ".join(r["changes"])))
            cases.append(f'  <testcase classname="quiver.compare" name={name}>\n'
                         f'    <system-out>{out}</system-out>\n  </testcase>')
    failures = len(data["less_consistent"])
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuite name="quiver compare" tests="{len(data["nodes"])}" failures="{failures}" errors="0">\n'
            + "\n".join(cases) + "\n</testsuite>\n")
