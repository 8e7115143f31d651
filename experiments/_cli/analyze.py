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
    from quiver._report import HTML_FILE, analysis_findings, findings_console

    print("\n".join(findings_console(analysis_findings(data), "the analysis", args.out / HTML_FILE)))
    if skipped:
        print(f"quiver analyze: {skipped} bad trace line(s) skipped (named above); `quiver validate` lists them",
              file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK
