"""``quiver import`` and ``quiver export``: traces written by other tools, in and out."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, EXIT_PROBLEMS, LazyChoices

if TYPE_CHECKING:
    from quiver._trace import Redactor

__all__ = ["add_parser", "run_import", "run_export"]


def _formats() -> list[str]:
    from quiver._importers import registered_formats

    return ["auto", *registered_formats()]


def add_parser(sub: Any) -> None:
    """Register ``quiver import`` and ``quiver export``."""
    imp = sub.add_parser(
        "import",
        help="import OpenInference / OTel GenAI / Langfuse spans as a trace corpus",
        description=(
            "Read spans exported by an observability tool and write them as a v1 trace corpus: "
            "one span or observation, one node call; parents from the parent ids, occurrences by "
            "start time, models, prompts, retrieval sets and tool steps into the replay-contract "
            "fields; an LLM call's output is its reply. Files: OTLP/JSON or OTLP protobuf, the OTel SDK's "
            "span.to_json() objects (console or file exporter: one after another, an array or JSON Lines), "
            "OTel JS spans, Phoenix exports, Langfuse exports; a span written when it starts and again when it "
            "ends is one span. Attributes that cannot be mapped are kept in each call's tags. Prints what "
            "was mapped and what was not, a reconciliation line (the spans by kind and what each became), "
            "and every problem (truncated JSON, duplicated span ids, missing parents) with its location and "
            "span id; exit 1 when there were problems. A file in another format than the one named, or of no "
            "known span shape, is refused in one line (exit 2). Secrets and "
            "e-mail addresses in the spans are removed before anything is written (--redact)."
        ),
    )
    imp.add_argument(
        "format", choices=LazyChoices(_formats), metavar="FORMAT",
        help="a registered format (%(choices)s): openinference for OpenInference instrumentations and Arize "
             "Phoenix, otel-genai for gen_ai.*, Vercel AI SDK ai.*, OpenLLMetry and Langfuse SDK spans, langfuse "
             "for {trace, observations[]} exports, auto for the one the files' spans are in; others plug in "
             "through the quiver.importers entry points",
    )
    imp.add_argument("files", type=Path, nargs="+",
                     help="span files: JSON, JSON Lines, concatenated JSON objects or OTLP protobuf (.gz accepted)")
    imp.add_argument("--out", type=Path, required=True, help="the trace corpus to write (JSONL)")
    imp.add_argument(
        "--group-by", metavar="KEY",
        help="same-input group key: input (the default: a hash of the root span's input), session, "
             "trace (one group per trace), metadata.KEY or attribute.NAME of the root span, or resource.KEY "
             "of the resource the spans came from (resource.service.name)",
    )
    imp.add_argument(
        "--node-name", metavar="HOW",
        help="how a node is named: name (the default: the span name), kind+name, or attribute.KEY",
    )
    imp.add_argument("--summary", type=Path, metavar="FILE", help="also write the import summary as JSON here")
    imp.add_argument(
        "--redact", type=Path, metavar="FILE.yaml",
        help="what is removed from the traces, the summary and the console before anything is written: a YAML "
             "file with a redact: block as in a spec (a spec itself will do; its other keys are not read): "
             "patterns, literals, fields, and each built-in kind switched on or off. Without it, the built-in "
             "rules apply: API keys and tokens, private keys, passwords in URLs and in password=/secret=/token= "
             "assignments, bearer tokens, JWTs, e-mail addresses, ... (README, Redaction)",
    )
    imp.add_argument(
        "--outcome", type=Path, metavar="SPEC.yaml",
        help="run the outcome checks of a spec (its outcome: block; its llm: block for judges) on every imported "
             "trace whose source gave no outcome (Langfuse scores, eval.NAME.label/score annotations and rewards "
             "are read without it), and print the pass rate",
    )
    imp.add_argument(
        "--dspy-program", type=Path, metavar="FILE",
        help="openinference spans of a DSPy program: the JSON its program.save(FILE) wrote, so that each "
             "predictor's call is named by its attribute path (router, hops.gen_query) as "
             "quiver.integrations.dspy names it; without it, by its signature",
    )

    imp.set_defaults(handler=run_import)

    exp = sub.add_parser(
        "export",
        help="export a trace corpus as OpenInference spans",
        description=(
            "Write traces as OpenInference spans (JSON Lines, one span a line, or one OTLP/JSON "
            "request with --otlp) for Arize Phoenix and other OpenTelemetry tools. quiver.* "
            "attributes carry what OpenInference has no attribute for, so `quiver import "
            "openinference` gives the traces back. Exit 1 when a trace line could not be read."
        ),
    )
    exp.add_argument("format", choices=["openinference"], help="the span format (openinference)")
    exp.add_argument("traces", type=Path, nargs="+", help="trace files (JSONL, .gz accepted)")
    exp.add_argument("--out", type=Path, required=True, help="the span file to write")
    exp.add_argument("--otlp", action="store_true", help="write one OTLP/JSON export request instead of JSON Lines")

    exp.set_defaults(handler=run_export)


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A file that cannot be written is one error naming it (not a traceback)."""
    from quiver import QuiverError
    from quiver._errors import OutputError

    way_out = "give a file in a folder you can write to"
    try:
        yield
    except OutputError as exc:  # the writer's own words (a link, a full disk), with the way out
        raise exc.with_way_out(way_out) from None
    except OSError as exc:
        raise QuiverError(f"cannot write {path}: {exc.strerror or exc}; {way_out}") from None


def _judged(spec_path: Path, traces: list[Any]) -> list[Any]:
    """The traces with the spec's outcome checks run on those whose source gave none (its
    ``outcome:`` block; its ``llm:`` block, default the simulator, for judges)."""
    from quiver import QuiverError
    from quiver._outcome import has_judge
    from quiver._yamlspec import load_yaml_with_lines, validate_spec
    from quiver.experiments._config import RecordSpec, check_outcome_inputs, open_llm, outcome_runner

    data, lines = load_yaml_with_lines(spec_path)
    if not isinstance(data, dict) or "outcome" not in data:
        raise QuiverError(f"--outcome {spec_path}: the spec has no outcome: block")
    blocks = {"pipeline": "-:-", "inputs": [{}], "llm": data.get("llm", "simulator"), "outcome": data["outcome"]}
    spec = validate_spec(RecordSpec, blocks, file=str(spec_path), lines=lines)
    check_outcome_inputs(spec, [t.inputs for t in traces if t.outcome is None], spec_file=str(spec_path),
                         what="imported traces")
    runner = outcome_runner(spec, spec_path.parent, None, spec_file=str(spec_path))
    assert runner is not None
    judged = contextlib.nullcontext(None) if not has_judge(runner.check) else \
        open_llm(spec.llm, spec_path.parent, probe=False)  # the simulator or the endpoint only for a judge
    with judged as client:
        runner.with_client(client)
        return [t if t.outcome is not None else t.model_copy(update={"outcome": runner.evaluate(t)}) for t in traces]


def _print_outcome(traces: list[Any]) -> None:
    """The imported traces' pass rate, when they carry outcomes."""
    from quiver._outcome import pass_rate, pass_rate_line

    rate = pass_rate(traces)
    if rate is not None:
        sources = sorted({t.outcome.source or "the spec's checks" for t in traces if t.outcome is not None})
        print(f"outcome: {pass_rate_line(rate)}; from {', '.join(sources)}")


def run_import(args: argparse.Namespace) -> int:
    """Run ``quiver import``; return the exit code."""
    from quiver import QuiverError, import_traces
    from quiver._outdir import make_folder, write_text

    if args.dspy_program is not None and args.format not in ("openinference", "auto"):
        raise QuiverError(f"--dspy-program names DSPy predictors in openinference spans, not in {args.format} "
                          "spans; drop it or import with the openinference format")
    redactor = _redactor(args.redact)
    result = import_traces(args.format, args.files, group_by=args.group_by, node_name=args.node_name,
                           dspy_program=args.dspy_program)
    if args.outcome is not None:
        result.traces = _judged(args.outcome, result.traces)
    with _writing(args.out):
        written = result.write(args.out, redactor=redactor)
    summary = redactor.data(result.summary())  # the file and the console lines alike
    if args.summary is not None:
        with _writing(args.summary):
            make_folder(args.summary.parent)
            write_text(args.summary, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    mapped, kept = summary["attributes"]["mapped"], summary["attributes"]["kept_in_tags"]
    detected = f" as {result.format}" if args.format == "auto" else ""
    print(
        f"imported {summary['spans_read']} span(s) from {len(args.files)} file(s){detected} into {written} trace(s) "
        f"({summary['groups']} input group(s)) with {summary['calls']} node call(s); "
        f"attribute keys: {len(mapped)} mapped, {len(kept)} kept in tags"
    )
    print(redactor.text(result.reconciliation.line()))
    for note in result.notes:
        print(redactor.text(f"note: {note}"))
    if kept:
        top = sorted(kept.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k} ({n})" for k, n in top[:10])
        more = f" and {len(top) - 10} more (see --summary)" if len(top) > 10 else ""
        print(f"kept in tags: {shown}{more}")
    _print_outcome(result.traces)
    print(f"corpus: {args.out}")
    for problem in result.problems:
        print(redactor.text(str(problem)), file=sys.stderr)
    if result.problems:
        print(f"{len(result.problems)} problem(s) found; what could be read was imported", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _redactor(path: Path | None) -> Redactor:
    """What an import removes: the ``redact:`` block of the YAML file ``path`` (a spec's
    will do; its other keys are not read), or the built-in rules."""
    from pydantic import BaseModel, ConfigDict

    from quiver._trace import RedactionConfig, Redactor
    from quiver._yamlspec import load_spec

    if path is None:
        return Redactor()

    class RedactBlock(BaseModel):
        model_config = ConfigDict(extra="ignore")
        redact: RedactionConfig

    return Redactor(load_spec(RedactBlock, path).redact)


def run_export(args: argparse.Namespace) -> int:
    """Run ``quiver export``; return the exit code."""
    from quiver import QuiverError, iter_traces, write_openinference

    errors: list[QuiverError] = []
    traces = []
    for path in args.traces:
        if not path.is_file():
            raise QuiverError(f"{path}: no such trace file")
        traces += list(iter_traces(path, on_error=errors.append))
    with _writing(args.out):
        count = write_openinference(args.out, traces, otlp=args.otlp)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"exported {len(traces)} trace(s) as {count} OpenInference span(s) to {args.out}")
    return EXIT_PROBLEMS if errors else EXIT_OK
