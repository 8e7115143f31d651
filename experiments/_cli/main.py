"""The ``quiver`` command line.

Exit codes, for every command: 0 done; 1 done, with problems found (failed traces,
bad trace lines); 2 could not run (bad spec or arguments, pipeline not importable,
endpoint down).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from quiver import __version__
from quiver._errors import QuiverError
from quiver._trace import trace_json_schema
from quiver._trace import iter_traces

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_PROBLEMS, EXIT_CANNOT_RUN = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``quiver`` command."""
    parser = argparse.ArgumentParser(
        prog="quiver",
        description=(
            "QUIVER engine: record, analyse and perturb compound LLM pipelines. "
            "Exit codes: 0 done, 1 done with problems found, 2 could not run."
        ),
    )
    parser.add_argument("--version", action="version", version=f"quiver {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    rec = sub.add_parser(
        "record",
        help="run a pipeline over inputs x repeats and write the trace corpus",
        description=(
            "Run the spec's pipeline over its inputs x repeats with bounded concurrency, "
            "retrying LLM calls on 429/5xx/timeouts, and write traces.jsonl, summary.json "
            "and record.log to the output folder. Starts the bundled simulator when the "
            "spec says `llm: simulator`."
        ),
    )
    rec.add_argument("spec", type=Path, help="the YAML spec (see `quiver schema record`)")
    rec.add_argument("--output", help="output folder (overrides the spec's output)")
    rec.add_argument("--repeats", type=int, help="repeats per input (overrides the spec)")
    rec.add_argument("--concurrency", type=int, help="traces at once (overrides the spec)")
    rec.add_argument("--resume", action="store_true", help="keep the traces an interrupted run wrote")
    rec.add_argument("--quiet", action="store_true", help="no progress line")
    rec.set_defaults(handler=_cmd_record)

    sim = sub.add_parser(
        "sim",
        help="serve the OpenAI-compatible LLM simulator on loopback",
        description=(
            "Serve the bundled simulator (/v1/chat/completions, /v1/models) on loopback "
            "until interrupted. It refuses any non-loopback address."
        ),
    )
    sim.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    sim.add_argument("--models", nargs="*", default=[], metavar="MODULE", help="modules registering models")
    sim.add_argument("--nondeterminism", type=float, default=0.0, help="temperature-0 runner-up rate")
    sim.add_argument("--faults", type=Path, help="YAML or JSON file of fault settings (FaultConfig)")
    sim.set_defaults(handler=_cmd_sim)

    schema = sub.add_parser(
        "schema",
        help="print a JSON Schema (trace format, campaign spec, recording spec, graph file)",
        description=(
            "Print the JSON Schema of the trace format, the campaign spec (`quiver run`), the "
            "recording spec (`quiver record`) or the graph YAML, for editors and other tools."
        ),
    )
    schema.add_argument("what", choices=["trace", "spec", "record", "graph"],
                        help="trace, spec (campaigns), record (recordings) or graph")
    schema.set_defaults(handler=_cmd_schema)

    ana = sub.add_parser(
        "analyze",
        help="the observational profile of a corpus: sensitivities, divergence, thresholds",
        description=(
            "Form every same-input pair of the traces, compare them node by node with "
            "type-dispatched distances (texts embedded once each with all-MiniLM-L6-v2, "
            "cached on disk), and estimate edge sensitivities, occurrence-lift, paths, "
            "divergence rates, bifurcation thresholds, noise origins, drift budgets and "
            "impact sets, each with n and a 95%% group-bootstrap CI. Writes profile.json, "
            "report.md and PNG plots to --out."
        ),
    )
    ana.add_argument("traces", type=Path, nargs="+", help="trace files (JSONL, .gz accepted)")
    ana.add_argument("--out", type=Path, required=True, help="output folder")
    ana.add_argument("--graph", type=Path, help="graph YAML (types, roles, edges, loop); the rest is inferred")
    ana.add_argument("--pipeline", help="module:function whose @quiver.node declarations give types and edges")
    ana.add_argument("--golden", type=Path, help="golden JSONL {input_id, node, output} for faithfulness")
    ana.add_argument("--epsilon", type=float, default=0.01, help="distance below which a node is unchanged (0.01)")
    ana.add_argument("--alpha", type=float, action="append", help="level for budgets and impact sets (repeatable; 0.5, 0.8)")
    ana.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of input groups (1000)")
    ana.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    ana.add_argument("--embedder", help="sentence-transformers model name or path (default all-MiniLM-L6-v2)")
    ana.add_argument("--cache", type=Path, help="embedding cache folder (default ~/.cache/quiver/embeddings)")
    ana.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ana.add_argument("--quiet", action="store_true", help="no progress lines")
    ana.set_defaults(handler=_cmd_analyze)

    from .replay import add_replay_parser

    add_replay_parser(sub)
    sub.choices["replay"].set_defaults(handler=_cmd_replay)

    from .run import add_run_parser

    add_run_parser(sub)
    sub.choices["run"].set_defaults(handler=_cmd_run)

    from .run import add_gate_parser

    add_gate_parser(sub)
    sub.choices["gate"].set_defaults(handler=_cmd_gate)

    imp = sub.add_parser(
        "import",
        help="import OpenInference / OTel GenAI / Langfuse spans as a trace corpus",
        description=(
            "Read spans exported by an observability tool and write them as a v1 trace corpus: "
            "one span or observation, one node call; parents from the parent ids, occurrences by "
            "start time, models, prompts, retrieval sets and tool steps into the replay-contract "
            "fields. Attributes that cannot be mapped are kept in each call's tags. Prints what "
            "was mapped and what was not, and every problem (truncated JSON, duplicated span ids, "
            "missing parents) with its location and span id; exit 1 when there were problems."
        ),
    )
    imp.add_argument(
        "format", choices=["openinference", "otel-genai", "langfuse"],
        help="openinference (Arize Phoenix), otel-genai (gen_ai.* spans; Vercel AI SDK ai.* spans) "
             "or langfuse ({trace, observations[]} exports)",
    )
    imp.add_argument("files", type=Path, nargs="+", help="span files: JSON or JSON Lines (.gz accepted)")
    imp.add_argument("--out", type=Path, required=True, help="the trace corpus to write (JSONL)")
    imp.add_argument(
        "--group-by", metavar="KEY",
        help="same-input group key: input (the default: a hash of the root span's input), session, "
             "trace (one group per trace), metadata.KEY or attribute.NAME of the root span",
    )
    imp.add_argument(
        "--node-name", metavar="HOW",
        help="how a node is named: name (the default: the span name), kind+name, or attribute.KEY",
    )
    imp.add_argument("--summary", type=Path, metavar="FILE", help="also write the import summary as JSON here")
    imp.set_defaults(handler=_cmd_import)

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
    exp.set_defaults(handler=_cmd_export)

    val = sub.add_parser(
        "validate",
        help="check trace files line by line",
        description=(
            "Read trace files (JSONL, .gz accepted) and report every line that is not a "
            "valid v1 trace as FILE:LINE: FIELD: REASON. Exit 1 when any line is bad."
        ),
    )
    val.add_argument("files", type=Path, nargs="+", help="trace files")
    val.set_defaults(handler=_cmd_validate)
    return parser


def _cmd_record(args: argparse.Namespace) -> int:
    from quiver.experiments._config import RecordOverrides, run_record

    overrides = RecordOverrides(
        output=args.output, repeats=args.repeats, concurrency=args.concurrency, resume=args.resume
    )
    _, result = run_record(args.spec, overrides, progress_stream=None if args.quiet else sys.stderr)
    summary = result.summary()
    retries = ", ".join(f"{k} {v}" for k, v in summary["retries"].items()) or "none"
    print(
        f"recorded {summary['traces']} traces ({summary['ok']} ok, {summary['failed']} failed, "
        f"{summary['resumed']} resumed) with {summary['calls']} node calls and "
        f"{summary['llm_calls']} LLM calls in {summary['seconds']:.1f}s; retries: {retries}"
    )
    print(f"corpus: {result.traces_path}\nsummary: {result.summary_path}\nlog: {result.log_path}")
    if result.failed:
        print(f"{result.failed} trace(s) failed; see {result.log_path}", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import run_command

    return run_command(args)


def _cmd_gate(args: argparse.Namespace) -> int:
    from .run import gate_command

    return gate_command(args)


def _cmd_replay(args: argparse.Namespace) -> int:
    from .replay import run_replay

    return run_replay(args)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .analyze import run_analyze

    return run_analyze(args)


def _cmd_sim(args: argparse.Namespace) -> int:
    from quiver.replay import FaultConfig, SimulatorConfig, check_loopback
    from quiver.replay._sim import serve

    check_loopback(args.host)
    faults = FaultConfig()
    if args.faults is not None:
        from quiver._yamlspec import load_spec

        faults = load_spec(FaultConfig, args.faults)
    config = SimulatorConfig(
        host=args.host, port=args.port, models=args.models, nondeterminism=args.nondeterminism, faults=faults
    )
    serve(config)
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    if args.what == "trace":
        schema = trace_json_schema()
    elif args.what == "graph":
        from quiver._graph import PipelineGraph

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **PipelineGraph.model_json_schema()}
    elif args.what == "record":
        from quiver.experiments._config import RecordSpec

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **RecordSpec.model_json_schema()}
    else:
        from quiver.experiments._config import CampaignSpec

        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **CampaignSpec.model_json_schema()}
    print(json.dumps(schema, indent=2))
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from quiver import import_traces

    result = import_traces(args.format, args.files, group_by=args.group_by, node_name=args.node_name)
    written = result.write(args.out)
    summary = result.summary()
    if args.summary is not None:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    mapped, kept = summary["attributes"]["mapped"], summary["attributes"]["kept_in_tags"]
    print(
        f"imported {summary['spans_read']} span(s) from {len(args.files)} file(s) into {written} trace(s) "
        f"({summary['groups']} input group(s)) with {summary['calls']} node call(s); "
        f"attribute keys: {len(mapped)} mapped, {len(kept)} kept in tags"
    )
    if kept:
        top = sorted(kept.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{k} ({n})" for k, n in top[:10])
        more = f" and {len(top) - 10} more (see --summary)" if len(top) > 10 else ""
        print(f"kept in tags: {shown}{more}")
    print(f"corpus: {args.out}")
    for problem in result.problems:
        print(problem, file=sys.stderr)
    if result.problems:
        print(f"{len(result.problems)} problem(s) found; what could be read was imported", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from quiver import write_openinference

    errors: list[QuiverError] = []
    traces = []
    for path in args.traces:
        if not path.is_file():
            raise QuiverError(f"{path}: no such trace file")
        traces += list(iter_traces(path, on_error=errors.append))
    count = write_openinference(args.out, traces, otlp=args.otlp)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"exported {len(traces)} trace(s) as {count} OpenInference span(s) to {args.out}")
    return EXIT_PROBLEMS if errors else EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    bad = total = 0
    for path in args.files:
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            bad += 1
            continue
        errors: list[QuiverError] = []
        count = sum(1 for _ in iter_traces(path, on_error=errors.append))
        for error in errors:
            print(error, file=sys.stderr)
        print(f"{path}: {count} trace(s) valid, {len(errors)} line(s) bad")
        total += count
        bad += len(errors)
    return EXIT_PROBLEMS if bad else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``quiver`` command; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)  # INFO goes to the run's log file only
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except QuiverError as exc:
        print(f"quiver {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except yaml.YAMLError as exc:  # pragma: no cover - load_spec maps these
        print(f"quiver {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"quiver {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
