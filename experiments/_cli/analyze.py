"""``quiver analyze``: a corpus in, profile.json, report.md and plots out."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from quiver._observational import Profile, analyze
from quiver._graph import PipelineGraph, load_graph
from quiver._report import write_report

__all__ = ["run_analyze", "write_profile"]


class _StageProgress:
    """Progress lines per stage (embedding, distances, estimates) on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._last: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.quiet:
            return
        with self._lock:
            now = time.monotonic()
            if done < total and now - self._last.get(stage, 0.0) < 2.0:
                return
            self._last[stage] = now
            elapsed = now - self._t0
            print(f"analyze: {stage} {done}/{total}  elapsed {elapsed:.0f}s", file=sys.stderr, flush=True)


def _base_graph(args: argparse.Namespace) -> PipelineGraph | None:
    if args.graph is not None:
        return load_graph(args.graph)
    if args.pipeline:
        from quiver.replay import declared_graph, load_pipeline

        load_pipeline(args.pipeline, Path.cwd())
        return _ran_only(declared_graph(), args.traces)
    return None


def _ran_only(graph: PipelineGraph, files: list[Path]) -> PipelineGraph:
    """The declared types of the nodes that ran in these traces (not a branch never
    taken, nor a node of another pipeline in the same module). Edges are left to the
    recorded parents, which already hold every declared ``parents=``."""
    from quiver._trace import iter_traces

    ran = {c.node for path in files if path.is_file() for t in iter_traces(path) for c in t.calls}
    return PipelineGraph(nodes={n: spec for n, spec in graph.nodes.items() if n in ran})


def write_profile(profile: Profile, out: Path, *, plots: bool = True) -> list[Path]:
    """Write profile.json, report.md and (when matplotlib is there) the plots."""
    out.mkdir(parents=True, exist_ok=True)
    profile_path = out / "profile.json"
    profile_path.write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    images: list[Path] = []
    if plots:
        from quiver._report import write_plots

        try:
            images = write_plots(profile.plot_data(), out)
        except ImportError as exc:  # matplotlib is optional
            print(f"analyze: no plots: {exc}", file=sys.stderr)
    report = write_report(profile.to_json(), out, images=[p.name for p in images])
    return [profile_path, report, *images]


def run_analyze(args: argparse.Namespace) -> int:
    """Run ``quiver analyze`` from parsed arguments; returns the exit code."""
    kwargs: dict[str, Any] = {
        "epsilon": args.epsilon, "resamples": args.resamples, "seed": args.seed,
        "embedder": args.embedder, "cache_dir": args.cache,
        "progress": _StageProgress(args.quiet), "golden": args.golden,
    }
    if args.alpha:
        kwargs["alphas"] = args.alpha
    profile = analyze([str(p) for p in args.traces], _base_graph(args), **kwargs)
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
    return 0
