"""``quiver attribute TRACES --spec SPEC``: which dimension each node's divergence comes from.

Replays the traces against the spec's pipeline and endpoint with every dimension frozen
(each must reproduce), with LLM sampling live (the recorded requests sent again), and
with retrieval, tools, prompt and model live in turn on top of sampling (``--dimensions``
chooses which), ``--repeats`` times each (:func:`quiver.experiments.attribute`); writes
``attribution.json`` and ``attribution.md`` to ``--out``. Exit 1 when a trace does not
reproduce frozen or a line of the corpus cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_PROBLEMS, checked_override

__all__ = ["add_parser", "command"]

DIMENSION_CONDITIONS = ("retrieval", "tools", "prompt", "model")
"""``quiver.experiments._attribute.DIMENSION_CONDITIONS``, spelt out: the CLI imports no
engine module before a command runs."""


def add_parser(sub: Any) -> None:
    """Register ``quiver attribute``."""
    att = sub.add_parser(
        "attribute",
        help="attribute each node's divergence to sampling, retrieval, tools, prompt or model by replay",
        description=(
            "Replay recorded traces with every dimension frozen, with model sampling live (the recorded "
            "requests sent again), then with retrieval, tools, prompt and model live in turn against the "
            "spec's current pipeline; per node the divergence rate of each condition (replays whose outputs, "
            "decisions, tool calls or call count at the node differ from the recording) and the increment "
            "over sampling, with 95% intervals."
        ),
    )
    att.add_argument("traces", type=Path, help="the recorded corpus (traces.jsonl)")
    att.add_argument("--spec", type=Path, required=True, help="the recording spec: pipeline and llm")
    att.add_argument("--repeats", type=int, default=3, help="replays per trace and live condition (default 3)")
    att.add_argument(
        "--dimensions", default=",".join(DIMENSION_CONDITIONS), metavar="DIMS",
        help=f"the dimensions to unfreeze in turn, comma-separated (default {','.join(DIMENSION_CONDITIONS)})",
    )
    att.add_argument("--out", type=Path, default=Path("runs/attribution"), help="output folder")
    att.add_argument("--quiet", action="store_true", help="no progress line")
    att.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver attribute``; return the exit code."""
    from quiver._outdir import OutputFolder, mark_folder, output_errors
    from quiver._trace import read_corpus
    from quiver._yamlspec import load_spec
    from quiver.experiments._attribute import attribute, write_attribution
    from quiver.experiments._config import RecordSpec, open_llm
    from quiver.replay import load_pipeline

    repeats = checked_override(RecordSpec, "repeats", args.repeats, "--repeats")
    dimensions = _dimensions(args.dimensions)
    spec = load_spec(RecordSpec, args.spec)
    traces, skipped = read_corpus([args.traces], lambda m: print(f"quiver attribute: warning: {m}", file=sys.stderr))
    fn = load_pipeline(spec.pipeline, args.spec.parent)
    with output_errors(args.out, "nothing is kept to resume", "run it again"), \
            OutputFolder(args.out, "attribute", flag="--out"):
        with open_llm(spec.llm, args.spec.parent) as client:
            result = attribute(traces, fn, client=client, repeats=repeats or 3, dimensions=dimensions,
                               seed=spec.seed, concurrency=spec.concurrency,
                               progress_stream=None if args.quiet else sys.stderr,
                               threshold=spec.fidelity.threshold, where=str(args.spec))
        mark_folder(args.out, "attribute")
        js, md = write_attribution(result, args.out)
    print(f"{result.reproduced} traces reproduced frozen, {len(result.not_reproduced)} did not; "
          f"LLM calls by condition: {result.llm_calls}")
    print(f"attribution: {js}\nreport: {md}")
    from quiver._report import attribution_findings, findings_console

    print("\n".join(findings_console(attribution_findings(result.to_json()), "the attribution", md)))
    if skipped:
        print(f"quiver attribute: {skipped} bad trace line(s) skipped (named above); `quiver validate` lists them",
              file=sys.stderr)
    return EXIT_PROBLEMS if result.not_reproduced or skipped else EXIT_OK


def _dimensions(text: str) -> list[str]:
    """``--dimensions``: some of the dimensions, comma-separated, none twice."""
    from quiver._errors import QuiverError

    dims = [d.strip() for d in text.split(",") if d.strip()]
    wrong = [d for d in dims if d not in DIMENSION_CONDITIONS]
    if not dims or wrong or len(set(dims)) != len(dims):
        what = f"{wrong[0]!r} is not a dimension" if wrong else "a dimension given twice" if dims else "none given"
        raise QuiverError(
            f"--dimensions {text!r}: {what}; give some of {','.join(DIMENSION_CONDITIONS)}, comma-separated"
        )
    return dims
