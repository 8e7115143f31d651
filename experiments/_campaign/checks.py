"""What can be checked of a campaign spec before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quiver._errors import QuiverError, SpecError
from quiver._graph import PipelineGraph, load_graph
from quiver._yamlspec import load_yaml_with_lines
from quiver.experiments._config import CampaignSpec
from quiver.perturbations import ANY_VALUE, make_operator
from quiver.replay import declared_graph, load_pipeline

__all__ = ["check_spec"]


def check_spec(spec: CampaignSpec, path: Path) -> tuple[Any, PipelineGraph | None]:
    """Everything that can be checked before anything runs: the pipeline imports, the
    graph and baseline files exist, and every perturbation names a node, a field and
    values the graph knows (when it declares them). Returns the pipeline function and
    the declared graph.

    Raises:
        SpecError: naming the file, the line and the field path, and what would be valid.
    """
    _, lines = load_yaml_with_lines(path)
    base_dir = path.parent

    def fail(where: tuple[Any, ...], reason: str) -> SpecError:
        line = next((lines[where[:i]] for i in range(len(where), 0, -1) if where[:i] in lines), None)
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
        return SpecError(str(path), line, dotted, reason)

    try:
        fn = load_pipeline(spec.pipeline, base_dir)
    except QuiverError as exc:
        raise fail(("pipeline",), str(exc)) from None
    for key in ("baseline", "graph"):
        value = getattr(spec, key)
        if value is not None and not (base_dir / value).is_file():
            raise fail((key,), f"no file at {base_dir / value}")
    graph = load_graph(base_dir / spec.graph) if spec.graph else declared_graph()
    if not graph.nodes:
        return fn, None
    for i, p in enumerate(spec.perturbations):
        if p.node not in graph.nodes:
            raise fail(("perturbations", i, "node"),
                       f"unknown node {p.node!r}; the graph's nodes are {', '.join(sorted(graph.nodes))}")
        node = graph.nodes[p.node]
        for step in p.steps():
            for touch in make_operator(p.op, step).fields_touched():
                field_name, value = touch.field, touch.value
                top = field_name.split(".")[0]
                if node.fields is not None and top not in node.fields:
                    raise fail(("perturbations", i, "params"),
                               f"node {p.node!r} has no field {top!r}; its fields are {', '.join(node.fields)}")
                spec_f = node.fields.get(top) if node.fields is not None else None
                cats = spec_f.categories if spec_f is not None else None
                if cats and value is not ANY_VALUE and value not in cats:
                    raise fail(("perturbations", i, "params"),
                               f"{value!r} is not a category of {p.node}.{top}; its categories are "
                               f"{', '.join(map(str, cats))}")
    return fn, graph
