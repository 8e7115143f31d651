"""The observational profile of a recorded corpus: ``quiver.analyze``.

Implements QUIVER.md §2-§10 on same-input pairs of recorded traces: the graph is
completed from the traces, every same-input pair is formed and compared node by node
(texts embedded once each, cached on disk), and the estimators run on the pair table
with one shared group bootstrap. The result is a :class:`Profile`, whose JSON form is
``profile.json`` (every estimate with its ``_n`` and ``_ci``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiver._distance import Embedder, EmbeddingStore, default_cache_dir, make_embedder
from quiver._errors import QuiverError
from quiver._graph import GraphInference, PipelineGraph, infer_graph, load_graph
from quiver._stats import DEFAULT_RESAMPLES, DEFAULT_SEED, GroupBootstrap, PairTable, build_pairs, group_traces
from quiver._trace import Trace, iter_traces

from .budgets import drift_budget, impact_set
from .divergence import bifurcation_thresholds, deciding_nodes, deterministic_nodes, divergence_rates, noise_origin
from .faithfulness import GoldenLine, faithfulness, golden_texts, load_golden
from .sensitivity import (
    EdgeSensitivity,
    critical_path,
    edge_sensitivity,
    partial_sensitivities,
    path_products,
    transitive_sensitivity,
)

__all__ = ["Profile", "analyze"]

Progress = Callable[[str, int, int], None]
DEFAULT_ALPHAS = (0.5, 0.8)


@dataclass
class Profile:
    """What :func:`analyze` returns.

    Attributes:
        data: The JSON form (``profile.json``).
        table: The pair table the estimates rest on.
        graph: The completed graph.
        edges: The edge sensitivities, by (source, target) (raw ratios included).
    """

    data: dict[str, Any]
    table: PairTable
    graph: PipelineGraph
    edges: dict[tuple[str, str], EdgeSensitivity] = field(default_factory=dict)

    def edge(self, source: str, target: str) -> dict[str, Any]:
        """The JSON row of one edge."""
        rows: list[dict[str, Any]] = self.data["edges"]
        for row in rows:
            if (row["source"], row["target"]) == (source, target):
                return row
        raise KeyError(f"no edge {source} -> {target}; edges: {[(r['source'], r['target']) for r in rows]}")

    def node(self, name: str) -> dict[str, Any]:
        """The JSON row of one node."""
        rows: list[dict[str, Any]] = self.data["nodes"]
        for row in rows:
            if row["node"] == name:
                return row
        raise KeyError(f"no node {name!r}; nodes: {[r['node'] for r in rows]}")

    def to_json(self) -> dict[str, Any]:
        """``profile.json``."""
        return self.data

    def plot_data(self) -> dict[str, Any]:
        """The JSON form with each edge's raw ratios added, for the plots."""
        edges = [
            {**row, "ratios": self.edges[(row["source"], row["target"])].ratios.tolist()}
            for row in self.data["edges"]
        ]
        return {**self.data, "edges": edges}


def _load_traces(traces: Iterable[Trace] | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Trace]:
    items = [traces] if isinstance(traces, (str, os.PathLike)) else list(traces)
    if not items or not all(isinstance(t, (str, os.PathLike)) for t in items):
        return items  # type: ignore[return-value]
    out: list[Trace] = []
    for path in items:
        p = Path(path)  # type: ignore[arg-type]
        if not p.is_file():
            raise QuiverError(f"trace file {p} does not exist")
        loaded = list(iter_traces(p))
        if not loaded:
            raise QuiverError(f"trace file {p} holds no trace; record a corpus into it with `quiver record`")
        out += loaded
    return out


def analyze(
    traces: Iterable[Trace] | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    graph: PipelineGraph | str | os.PathLike[str] | None = None,
    *,
    golden: Sequence[GoldenLine] | str | os.PathLike[str] | None = None,
    epsilon: float = 0.01,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    embedder: Embedder | str | Callable[[list[str]], Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Profile:
    """The observational profile of a corpus (QUIVER.md §2-§10).

    Args:
        traces: Traces, or trace files.
        graph: A graph (or a graph YAML file); what it leaves out is inferred.
        golden: Golden expected outputs (or a golden JSONL file) for faithfulness.
        epsilon: The distance below which a node counts as unchanged.
        alphas: Levels for drift budgets and impact sets.
        resamples: Bootstrap resamples of input groups.
        seed: The bootstrap's seed.
        embedder: The text embedder: None (all-MiniLM-L6-v2), a model name or path,
            an :class:`~quiver.Embedder`, or a function from texts to vectors.
        cache_dir: The embedding cache (default :func:`default_cache_dir`).
        progress: Called as ``progress(stage, done, total)``.
    """
    t0 = time.perf_counter()
    corpus = _load_traces(traces)
    if not corpus:
        raise QuiverError("no traces to analyse: the input holds no trace; record a corpus with `quiver record`")
    base = load_graph(Path(graph)) if isinstance(graph, (str, os.PathLike)) else graph
    groups, failed = group_traces(corpus)
    ok = [t for ts in groups.values() for t in ts]
    full, inference = infer_graph(ok, base)
    golden_lines = load_golden(golden) if isinstance(golden, (str, os.PathLike)) else list(golden or [])
    store = EmbeddingStore(make_embedder(embedder), Path(cache_dir) if cache_dir is not None else default_cache_dir())
    try:
        def text(texts: Iterable[str]) -> Any:
            needed = list(texts) + (golden_texts(golden_lines, corpus, full) if golden_lines else [])
            store.ensure(needed, progress=(lambda n: progress("embedding", n, len(needed))) if progress else None)
            return store  # a TextDistance that also takes many pairs at once

        table = build_pairs(groups, full, text, progress=progress)
        faith = faithfulness(golden_lines, corpus, full, store.distance) if golden_lines else []
        stats = dict(store.stats)
    finally:
        store.close()
    if progress:
        progress("estimates", 0, 1)
    data, edges = _estimates(table, full, epsilon, alphas, resamples, seed,
                             deterministic_nodes(ok, full), deciding_nodes(ok, full))
    if progress:
        progress("estimates", 1, 1)
    data = {
        "traces": len(corpus), "failed_traces": failed, "groups": len(groups),
        "paired_groups": int(sum(len(ts) > 1 for ts in groups.values())),
        "pairs": table.n_pairs, "epsilon": epsilon, "alphas": list(alphas), "resamples": resamples, "seed": seed,
        "graph": _graph_json(full, inference),
        "embedding": {"model": getattr(store.embedder, "name", "?"), **stats},
        **data, "faithfulness": faith, "seconds": round(time.perf_counter() - t0, 3),
    }
    return Profile(data, table, full, edges)


def _graph_json(graph: PipelineGraph, inference: GraphInference) -> dict[str, Any]:
    """The completed graph; ``inferred`` says what came from the traces (nodes, fields,
    roles, and each inferred edge, for the report to draw dashed)."""
    out = graph.model_dump(mode="json", exclude_none=True)
    out["edges"] = [list(e) for e in graph.edges]
    out["inferred"] = inference.model_dump(mode="json")
    out["inferred"]["inferred_edge_list"] = [list(e) for e in inference.inferred_edge_list]
    return out


def _estimates(
    table: PairTable, graph: PipelineGraph, epsilon: float, alphas: Sequence[float], resamples: int, seed: int,
    deterministic: set[str], deciding: set[str],
) -> tuple[dict[str, Any], dict[tuple[str, str], EdgeSensitivity]]:
    boot = GroupBootstrap(table.group, len(table.groups), resamples=resamples, seed=seed)
    nodes = list(table.nodes)
    edge_list = [(a, b) for a, b in graph.edges if a != b and a in nodes and b in nodes]
    edges = {(a, b): edge_sensitivity(table, a, b, boot, epsilon) for a, b in edge_list}
    sigmas = {e: r.sigma.value for e, r in edges.items()}
    noise = {n: noise_origin(table, graph, n, boot, epsilon, deterministic=n in deterministic) for n in nodes}
    betas = {n: bifurcation_thresholds(table, n, boot, epsilon, can_decide=n in deciding) for n in nodes}
    paths = path_products(graph, sigmas)
    critical = critical_path(paths)
    rates = divergence_rates(table, boot, epsilon)
    partials = [
        partial_sensitivities(table, n, graph.parents(n), boot).to_json()
        for n in nodes if len([p for p in graph.parents(n) if p in nodes]) >= 2
    ]
    budgets = [
        drift_budget(table, a, b, alpha, noise[b].noise_floor.value or 0.0, epsilon, boot=boot).to_json()
        for (a, b) in edge_list for alpha in alphas
    ]
    beta_values = {n: t.beta_shape.value for n, t in betas.items()}
    impacts = [
        impact_set(graph, n, alpha, sigmas, beta_values, None, epsilon=epsilon).to_json()
        for n in nodes for alpha in alphas
    ]
    data = {
        "edges": [edges[e].to_json() for e in edge_list],
        "partials": partials,
        "nodes": [_node_json(noise[n].to_json(), betas[n].to_json()) for n in nodes],
        "divergence": _divergence_json(rates),
        "paths": [p.to_json() for p in paths],
        "paths_truncated": paths.truncated,
        "critical_path": critical.to_json() if critical else None,
        "transitive": [
            _transitive_json(t.to_json()) for t in transitive_sensitivity(table, graph, sigmas, boot, epsilon)
        ],
        "budgets": budgets,
        "impact_sets": impacts,
    }
    return data, edges


def _node_json(noise: dict[str, Any], betas: dict[str, Any]) -> dict[str, Any]:
    renamed = {("noise_floor" + k[len("d_noise"):] if k.startswith("d_noise") else k): v for k, v in noise.items()}
    renamed["origin"] = renamed.pop("verdict")
    return {**renamed, **betas}


def _divergence_json(rates: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"n_pairs": rates.n_pairs}
    for key, est in (("D_iter", rates.iter), ("D_shape", rates.shape), ("D_output", rates.output),
                     ("D_output_only", rates.output_only), ("D_struct", rates.struct)):
        out.update(est.as_dict(key))
    return out


def _transitive_json(row: dict[str, Any]) -> dict[str, Any]:
    out = {("sigma" + k[len("sigma_measured"):] if k.startswith("sigma_measured") else k): v for k, v in row.items()}
    out["path_product"] = out.pop("sigma_path_max")
    return out

