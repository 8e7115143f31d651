"""``quiver diff A B`` (two traces) and ``quiver diff CORPUS`` (every same-input pair):
the first divergent call and its cause (see :mod:`quiver._diff`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:
    from quiver._trace import Trace

__all__ = ["add_parser", "command", "load_one_trace", "read_traces"]

_EXPORT_LIMIT = 64 * 2**20
"""The largest file read whole to tell a span export from a damaged trace corpus."""


def add_parser(sub: Any) -> None:
    """Register ``quiver diff``."""
    diff = sub.add_parser(
        "diff",
        help="why two runs diverged: the first divergent call and its cause",
        description=(
            "With two arguments (FILE:TRACE_ID, or a file holding one trace): align the calls of the two "
            "traces by (node, occurrence), find the first call in program order whose output, decisions, "
            "error or tool calls differ (Responses API function calls, chat tool_calls, Anthropic tool_use: a "
            "handoff of an agent SDK is one), and explain it from the recorded context: inherited from an "
            "ancestor whose own context differs, perturbation (a replay's perturbed target), prompt (template "
            "or fragment), model (name, served version, sampling parameters; the tools offered are an input), "
            "retrieval (index drift, ranking change, document set), tool (same arguments, other response: live "
            "data), input, or sampling (every recorded input identical: another answer, another handoff, other "
            "tool arguments); unexplained when nothing recorded shows why. Then the consequences: context "
            "differences at calls the divergence reached, nodes and decisions that changed, D_iter, D_shape, "
            "D_struct. With one argument (a corpus): every same-input pair, counted by first "
            "divergent node x cause x origin with rates, the share of D_shape > 0 pairs each explains and "
            "95% group-bootstrap intervals. Exit 0 when done, 2 when it cannot run."
        ),
    )
    diff.add_argument("traces", nargs="+", metavar="TRACES",
                      help="A B (FILE:TRACE_ID or a one-trace file, each) or one CORPUS file")
    diff.add_argument("--json", action="store_true", help="print JSON instead of text")
    diff.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of input groups (1000)")
    diff.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    diff.set_defaults(handler=command)


def _file_and_id(arg: str) -> tuple[Path, str | None]:
    """``FILE`` or ``FILE:TRACE_ID`` (the longest existing file prefix before a colon wins)."""
    if Path(arg).is_file():
        return Path(arg), None
    for i in range(len(arg) - 1, 0, -1):
        if arg[i] == ":" and Path(arg[:i]).is_file():
            return Path(arg[:i]), arg[i + 1:]
    return Path(arg), None


def export_hint(path: Path) -> str | None:
    """When ``path`` holds one JSON document (a span export, pretty-printed) rather than
    JSON Lines of traces: what to run first. None otherwise."""
    try:
        if path.suffix == ".gz" or path.stat().st_size > _EXPORT_LIMIT:
            return None
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    from quiver._trace import DELTA_KEY

    if not isinstance(document, (dict, list)) or (isinstance(document, dict) and ("calls" in document
                                                                                 or DELTA_KEY in document)):
        return None  # a trace (on one line, whole or as a replay's difference) whose own error says more
    return (f"{path} is one JSON document, not a trace corpus (JSON Lines, one trace a line): import a span "
            f"export first, quiver import langfuse|openinference|otel-genai {path} --out traces.jsonl, and give "
            "the traces it writes")


def read_traces(path: Path, command: str) -> tuple[list[Trace], int]:
    """Every readable trace of the corpus ``path`` and how many lines were skipped, by
    the rule of every command that reads a corpus (a bad line is named once and costs
    only itself). A span export is refused with the import to run instead of one
    warning per line."""
    from quiver._errors import QuiverError
    from quiver._trace import check_trace_file, read_corpus

    check_trace_file(path)
    hint = export_hint(path)
    if hint is not None:
        raise QuiverError(hint)
    return read_corpus([path], lambda m: print(f"quiver {command}: warning: {m}", file=sys.stderr))


def load_one_trace(arg: str) -> tuple[Trace, int]:
    """The trace ``arg`` names (``FILE:TRACE_ID``, or the one trace of ``FILE``) and
    the number of bad lines skipped in its file."""
    path, trace_id = _file_and_id(arg)
    traces, skipped = read_traces(path, "diff")
    return _find(path, trace_id, traces), skipped


def _find(path: Path, trace_id: str | None, traces: list[Trace]) -> Trace:
    from quiver._errors import QuiverError
    from quiver._trace import printable

    if trace_id is None:
        if len(traces) > 1:
            raise QuiverError(f"{path} holds more than one trace: name one as {path}:TRACE_ID, or give the "
                              "file alone to diff every same-input pair")
        return traces[0]
    for t in traces:
        if t.trace_id == trace_id:
            return t
    raise QuiverError(f"{path} has no trace with id '{printable(trace_id)}' ({len(traces)} trace(s) read); "
                      "ids are the trace_id field of each line")


def command(args: argparse.Namespace) -> int:
    """Run ``quiver diff``; return the exit code."""
    from quiver._errors import QuiverError

    if args.resamples < 1:
        raise QuiverError(f"--resamples {args.resamples}: give at least 1")
    if len(args.traces) == 2:
        return _pair(args)
    if len(args.traces) == 1:
        return _corpus(args)
    raise QuiverError(f"{len(args.traces)} arguments: give two traces (A B) or one corpus file")


def _pair(args: argparse.Namespace) -> int:
    from quiver._diff import diff_traces

    (a, skipped_a), (b, skipped_b) = (load_one_trace(x) for x in args.traces)
    result = diff_traces(a, b)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        sys.stdout.write(result.render())
    return EXIT_PROBLEMS if skipped_a or skipped_b else EXIT_OK


def _corpus(args: argparse.Namespace) -> int:
    from quiver._compare import first_divergence_markdown, first_divergence_table
    from quiver._errors import QuiverError

    path = Path(args.traces[0])
    traces, skipped = read_traces(path, "diff")
    table = first_divergence_table(traces, resamples=args.resamples, seed=args.seed)
    if table.data["pairs"] == 0:
        raise QuiverError(f"{path}: no input group has two ok traces, so there is no same-input pair to diff; "
                          "give two traces as A B, or record with repeats >= 2")
    if args.json:
        print(json.dumps({**table.data, "pair_diffs": [d.to_json() for d in table.pairs]}, indent=2))
    else:
        print("\n".join(first_divergence_markdown(table.data)).rstrip())
    return EXIT_PROBLEMS if skipped else EXIT_OK
