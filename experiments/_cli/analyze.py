"""``quiver analyze``: a corpus in, profile.json, report.md and plots out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:
    from quiver._graph import PipelineGraph
    from quiver._trace import Trace

__all__ = ["add_parser", "command"]


def _base_graph(args: argparse.Namespace, traces: list[Trace]) -> PipelineGraph | None:
    from quiver._graph import load_graph

    if args.graph is not None:
        return load_graph(args.graph)
    if args.pipeline:
        from quiver.replay import declared_graph, load_pipeline

        load_pipeline(args.pipeline, Path.cwd())
        return _ran_only(declared_graph(), traces)
    return None


def _ran_only(graph: PipelineGraph, traces: list[Trace]) -> PipelineGraph:
    """The declared types of the nodes that ran in these traces (not a branch never
    taken, nor a node of another pipeline in the same module). Edges are left to the
    recorded parents, which already hold every declared ``parents=``."""
    from quiver._graph import PipelineGraph

    ran = {c.node for t in traces for c in t.calls}
    return PipelineGraph(nodes={n: spec for n, spec in graph.nodes.items() if n in ran})


def add_parser(sub: Any) -> None:
    """Register ``quiver analyze``."""
    ana = sub.add_parser(
        "analyze",
        help="the observational profile of a corpus: sensitivities, divergence, thresholds",
        description=(
            "Form every same-input pair of the traces, compare them node by node with "
            "type-dispatched distances (texts embedded once each with all-MiniLM-L6-v2, "
            "cached on disk), and estimate edge sensitivities, occurrence-lift, paths, "
            "divergence rates, bifurcation thresholds, noise origins, drift budgets and "
            "impact sets, each with n and a 95% group-bootstrap CI. Writes profile.json, "
            "report.md and PNG plots to --out (its files are replaced when it holds them already). "
            "A trace line that cannot be read is skipped with one warning naming FILE:LINE "
            "(exit 1 at the end); a corpus in which no line reads is exit 2."
        ),
    )
    ana.add_argument("traces", type=Path, nargs="+", help="trace files (JSONL, .gz accepted)")
    ana.add_argument("--out", type=Path, required=True, help="output folder")
    ana.add_argument("--graph", type=Path, help="graph YAML (types, roles, edges, loop); the rest is inferred")
    ana.add_argument("--pipeline", help="module:function whose @quiver.node declarations give types and edges")
    ana.add_argument("--golden", type=Path, help="golden JSONL {input_id, node, output} for faithfulness")
    ana.add_argument("--epsilon", type=float, default=0.01, help="distance below which a node is unchanged (0.01)")
    ana.add_argument("--alpha", type=float, action="append",
                     help="level for budgets and impact sets (repeatable; 0.5, 0.8)")
    ana.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of input groups (1000)")
    ana.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    ana.add_argument("--embedder", help="sentence-transformers model name or path (default all-MiniLM-L6-v2)")
    ana.add_argument("--cache", type=Path, help="embedding cache folder (default ~/.cache/quiver/embeddings)")
    ana.add_argument("--by-outcome", action="store_true",
                     help="also analyse the passing and the failing traces apart (their outcome: see the spec's "
                          "outcome checks), into OUT/by-outcome/pass and OUT/by-outcome/fail, and compare each "
                          "edge's sensitivity and each node's divergence between them (by-outcome.json)")
    ana.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ana.add_argument("--quiet", action="store_true", help="no progress lines")

    ana.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver analyze`` from parsed arguments; returns the exit code."""
    from quiver._compare import first_divergence_table
    from quiver._observational import analyze
    from quiver._progress import StageProgress
    from quiver._report import write_profile
    from quiver._trace import check_trace_file, read_corpus

    for path in args.traces:
        check_trace_file(path)  # a missing file, a folder: one line, before any work
    if args.golden is not None and not args.golden.is_file():
        from quiver._errors import QuiverError

        what = "is a folder" if args.golden.is_dir() else "does not exist"
        raise QuiverError(f"golden file {args.golden} {what}; give a JSONL file of {{input_id, node, output}} lines")
    progress = StageProgress("analyze", None if args.quiet else sys.stderr)
    kwargs: dict[str, Any] = {
        "epsilon": args.epsilon, "resamples": args.resamples, "seed": args.seed,
        "embedder": args.embedder, "cache_dir": args.cache,
        "progress": progress, "golden": args.golden,
    }
    if args.alpha:
        kwargs["alphas"] = args.alpha
    traces, skipped = read_corpus(args.traces, lambda m: print(f"quiver analyze: warning: {m}", file=sys.stderr))
    progress.say(f"{len(traces)} traces read; pairing them and embedding their texts (the embedding model "
                 f"{args.embedder or 'all-MiniLM-L6-v2'} loads first when a text is not in the cache)")
    profile = analyze(traces, _base_graph(args, traces), **kwargs)
    profile.data["first_divergence"] = first_divergence_table(traces, resamples=args.resamples, seed=args.seed).data
    progress.say(f"writing the profile{', the report and the plots' if not args.no_plots else ' and the report'} "
                 f"to {args.out}")
    written = write_profile(profile, args.out, plots=not args.no_plots)
    data = profile.to_json()
    emb = data["embedding"]
    print(
        f"analysed {data['traces']} traces in {data['groups']} input groups: {data['pairs']} pairs, "
        f"{len(data['edges'])} edges, {len(data['nodes'])} nodes in {data['seconds']:.1f}s; "
        f"texts embedded {emb.get('embedded', 0)} of {emb.get('needed', 0)} needed"
    )
    for path in written:
        print(path)
    if args.by_outcome:
        _by_outcome(args, traces, kwargs, profile.graph)
    from quiver._report import HTML_FILE, analysis_findings, findings_console

    print("\n".join(findings_console(analysis_findings(data), "the analysis", args.out / HTML_FILE)))
    if skipped:
        print(f"quiver analyze: {skipped} bad trace line(s) skipped (named above); `quiver validate` lists them",
              file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _by_outcome(args: argparse.Namespace, traces: list[Trace], kwargs: dict[str, Any], graph: PipelineGraph) -> None:
    """``--by-outcome``: the passing and the failing traces analysed apart, and compared."""
    import json

    from quiver._errors import QuiverError
    from quiver._interventional import seen_part
    from quiver._observational import analyze
    from quiver._outdir import write_text
    from quiver._report import write_profile
    from quiver._stats import fmt

    judged = [t for t in traces if t.outcome is not None]
    if not judged:
        raise QuiverError("--by-outcome: no trace carries an outcome; record with a spec's outcome: checks, or "
                          "import with --outcome SPEC")
    parts: dict[str, dict[str, Any]] = {}
    for status in ("pass", "fail"):
        subset = [t for t in judged if (t.outcome.status == "pass") == (status == "pass")]  # type: ignore[union-attr]
        if len({t.input_id for t in subset}) == 0:
            continue
        try:
            part = analyze(subset, seen_part(graph, subset), **kwargs)
        except QuiverError as exc:  # too few same-input pairs among them, say
            print(f"quiver analyze: by outcome: the {status}ing traces ({len(subset)}) were not analysed: {exc}",
                  file=sys.stderr)
            continue
        write_profile(part, args.out / "by-outcome" / status, plots=False)
        parts[status] = part.to_json()
    rows = _compared_edges(parts)
    write_text(args.out / "by-outcome.json", json.dumps({"edges": rows, "traces": {k: v["traces"] for k, v in
                                                                                   parts.items()}}, indent=2) + "\n")
    counts = ", ".join(f"{status} {data['traces']} traces" for status, data in parts.items())
    print(f"by outcome: {counts}; {args.out / 'by-outcome.json'}")
    for row in rows:
        cells = [f"{k} {fmt(row[k]['sigma'])} {_ci(row[k]['sigma_ci'])} (n = {row[k]['n']})" for k in ("pass", "fail")
                 if k in row]
        print(f"  {row['source']} -> {row['target']}: sigma " + "; ".join(cells))


def _ci(ci: Any) -> str:
    from quiver._stats import fmt

    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "[—, —]"


def _compared_edges(parts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per edge, its sensitivity among the passing and among the failing traces."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for status, data in parts.items():
        for edge in data["edges"]:
            key = (edge["source"], edge["target"])
            row = rows.setdefault(key, {"source": key[0], "target": key[1]})
            row[status] = {"sigma": edge.get("sigma"), "sigma_ci": edge.get("sigma_ci"), "n": edge.get("n"),
                           "lambda": edge.get("lambda"), "lambda_ci": edge.get("lambda_ci")}
    return [rows[k] for k in sorted(rows)]
