"""Distribution faithfulness: production outputs against golden expected outputs.

QUIVER.md §10 (Principle 1, A.10, B.5). A golden file holds JSON lines
``{"input_id": ..., "node": ..., "output": ...}``: what a node should output on an
input. For each golden line, every production call of that node in the traces of that
input is compared with the golden output by the node's type-dispatched distance. Per
node and per field the gap is the mean distance; the node's gap is the mean over its
fields, with the closest and the farthest field named. For categorical and bool
fields the KL form D_KL(P_prod || P_eval) is given too.

[engine] The KL divergence uses additive smoothing of 0.5 per category (over the
union of the categories seen in either distribution and the declared ones), so that a
category absent from one side gives a large but finite value.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from quiver._canonical import canonical_json
from quiver._distance import TextDistance, output_distance, texts_to_compare
from quiver._errors import SpecError
from quiver._graph import PipelineGraph
from quiver._trace import Trace

__all__ = ["GoldenLine", "load_golden", "faithfulness", "golden_texts"]

GoldenLine = tuple[str, str, Any]
"""(input_id, node, expected output)."""

_SMOOTHING = 0.5


def load_golden(path: str | os.PathLike[str]) -> list[GoldenLine]:
    """Read a golden file; a bad line is an error naming the file and the line."""
    p = Path(path)
    out: list[GoldenLine] = []
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SpecError(str(p), lineno, None, f"not UTF-8 (byte {exc.start + 1} of the line)") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpecError(str(p), lineno, None, f"not valid JSON: {exc.msg}") from None
            except RecursionError:
                raise SpecError(str(p), lineno, None, "nested too deeply to be read") from None
            missing = [k for k in ("input_id", "node", "output") if not isinstance(obj, dict) or k not in obj]
            if missing:
                raise SpecError(str(p), lineno, None,
                                f"a golden line needs input_id, node and output; missing {', '.join(missing)}")
            out.append((str(obj["input_id"]), str(obj["node"]), obj["output"]))
    if not out:
        raise SpecError(str(p), None, None, "the golden file holds no lines")
    return out


def _production(traces: Iterable[Trace]) -> dict[tuple[str, str], list[Any]]:
    prod: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for trace in traces:
        if trace.status != "ok":
            continue
        for call in trace.calls:
            prod[(trace.input_id, call.node)].append(call.output)
    return prod


def _comparisons(
    golden: Sequence[GoldenLine], prod: dict[tuple[str, str], list[Any]], graph: PipelineGraph
) -> list[tuple[str, Any, Any]]:
    unknown = sorted({node for _, node, _ in golden if node not in graph.nodes})
    if unknown:
        raise SpecError(None, None, "golden",
                        f"golden lines name node(s) {', '.join(unknown)} that the graph does not have; "
                        f"its nodes: {', '.join(graph.nodes)}")
    return [(node, out, expected) for input_id, node, expected in golden for out in prod.get((input_id, node), [])]


def golden_texts(golden: Sequence[GoldenLine], traces: Sequence[Trace], graph: PipelineGraph) -> list[str]:
    """Every text the faithfulness comparisons need embedded."""
    texts: dict[str, None] = {}
    for node, out, expected in _comparisons(golden, _production(traces), graph):
        for s, t in texts_to_compare(graph.nodes[node], out, expected):
            texts[s] = None
            texts[t] = None
    return list(texts)


def _kl(prod: Counter[str], golden: Counter[str], categories: Iterable[str]) -> float:
    support = set(prod) | set(golden) | set(categories)
    n_p = sum(prod.values()) + _SMOOTHING * len(support)
    n_g = sum(golden.values()) + _SMOOTHING * len(support)
    return sum(
        ((prod[c] + _SMOOTHING) / n_p) * math.log(((prod[c] + _SMOOTHING) / n_p) / ((golden[c] + _SMOOTHING) / n_g))
        for c in support
    )


def _category_counts(
    golden: Sequence[GoldenLine], prod: dict[tuple[str, str], list[Any]], graph: PipelineGraph
) -> dict[tuple[str, str], tuple[Counter[str], Counter[str]]]:
    """Per categorical/bool field: value counts in production and in the golden file."""
    counts: dict[tuple[str, str], tuple[Counter[str], Counter[str]]] = {}
    for input_id, node, expected in golden:
        for f, spec in (graph.nodes[node].fields or {}).items():
            if spec.type not in ("categorical", "bool"):
                continue
            prod_c, gold_c = counts.setdefault((node, f), (Counter(), Counter()))
            gold_c[canonical_json(_get(expected, f))] += 1
            prod_c.update(canonical_json(_get(out, f)) for out in prod.get((input_id, node), []))
    return counts


def _get(output: Any, field: str) -> Any:
    return output.get(field) if isinstance(output, dict) else None


def faithfulness(
    golden: Sequence[GoldenLine], traces: Sequence[Trace], graph: PipelineGraph, text: TextDistance
) -> list[dict[str, Any]]:
    """Per node: the gap, its n, the min and max field, and per-field distance, n and KL."""
    per_field: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    prod = _production(traces)
    for node, out, expected in _comparisons(golden, prod, graph):
        for f, v in output_distance(graph.nodes[node], out, expected, text)[1].items():
            per_field[node][f].append(v)
    categories = _category_counts(golden, prod, graph)
    return [_node_row(node, fields, graph, categories) for node, fields in sorted(per_field.items())]


def _node_row(
    node: str,
    fields: dict[str, list[float]],
    graph: PipelineGraph,
    categories: dict[tuple[str, str], tuple[Counter[str], Counter[str]]],
) -> dict[str, Any]:
    means = {f: sum(v) / len(v) for f, v in fields.items() if v}
    declared = graph.nodes[node].fields or {}
    field_rows: dict[str, dict[str, Any]] = {}
    for f, mean in means.items():
        row: dict[str, Any] = {"distance": round(mean, 6), "n": len(fields[f])}
        if (node, f) in categories:
            names = [canonical_json(c) for c in (declared[f].categories or [])]
            row["kl"] = round(_kl(*categories[(node, f)], names), 6)
        field_rows[f] = row
    return {
        "node": node,
        "gap": round(sum(means.values()) / len(means), 6) if means else None,
        "n": max((len(v) for v in fields.values()), default=0),
        "min_field": min(means, key=lambda f: means[f]) if means else None,
        "max_field": max(means, key=lambda f: means[f]) if means else None,
        "fields": field_rows,
    }
