"""The pipeline graph: nodes with typed output fields, edges, and the loop.

A :class:`PipelineGraph` says how each node's output is compared (QUIVER.md §1-§2):
every field has a type (categorical, bool, numeric, set, list, text, mapping, json, or
one registered with :func:`quiver.register_kernel`) and a role (routing = weight 2,
context = 1, observability = 0; no role = context). It comes from a YAML file (a
public contract, :func:`load_graph`), from the pipeline's decorators
(``quiver.replay.declared_graph``), or from the recorded traces (:func:`infer_graph`:
edges from the recorded parents, types from the values). Whatever a YAML file leaves
out is inferred from the traces and reported as inferred.

YAML form::

    nodes:
      signal:
        fields:
          turn_type: {type: categorical, role: routing,
                      categories: [question, followup, complaint, smalltalk]}
          is_small_talk: {type: bool, role: routing}
      discovery:
        output: {type: set}          # a whole output of one type
    edges: [[signal, planner], [discovery, planner]]
    loop: {body: [planner, executor], k_max: 5}   # optional
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quiver._errors import SpecError
from quiver._trace import Trace

__all__ = [
    "Role",
    "ROLE_WEIGHTS",
    "FieldSpec",
    "NodeSpec",
    "LoopSpec",
    "PipelineGraph",
    "load_graph",
    "infer_graph",
    "infer_field",
    "GraphInference",
]

Role = Literal["routing", "context", "observability"]
ROLE_WEIGHTS: dict[str, float] = {"routing": 2.0, "context": 1.0, "observability": 0.0}
"""Relative field weights by role (QUIVER.md §2), normalised per level."""

_SHORT_TEXT = 32
_MAX_CATEGORIES = 12


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def _registered_types(schema: dict[str, Any]) -> None:
    """JSON Schema of ``FieldSpec.type``: the types registered when the schema is made."""
    from quiver._distance import registered_kernels  # not at the top: _distance imports this module

    schema["enum"] = list(registered_kernels())


class FieldSpec(_Model):
    """How one output field (or a whole output) is compared."""

    type: str = Field(json_schema_extra=_registered_types)
    """categorical, bool, numeric, set, list, text, mapping, json, or a type registered
    with ``quiver.register_kernel``."""
    role: Role = "context"
    """routing (weight 2), context (1) or observability (0)."""
    categories: list[Any] | None = None
    """For categorical fields (and registered types that read them): the declared classes, in order."""
    order: Literal["edit", "rank"] = "edit"
    """For lists: normalised edit distance, or a rank distance when order carries meaning."""
    weight: float | None = Field(default=None, ge=0)
    """An explicit weight instead of the role's (normalised with the others)."""
    fields: dict[str, FieldSpec] | None = None
    """For json fields: types of nested keys (the rest is inferred per value)."""

    @field_validator("type")
    @classmethod
    def _registered_type(cls, value: str) -> str:
        from quiver._distance import KernelError, get_kernel  # not at the top: _distance imports this module

        try:
            get_kernel(value)
        except KernelError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def effective_weight(self) -> float:
        """The field's weight before normalisation."""
        return self.weight if self.weight is not None else ROLE_WEIGHTS[self.role]


class NodeSpec(_Model):
    """A node's output: named typed fields, or one whole output of one type."""

    fields: dict[str, FieldSpec] | None = None
    """The output's fields (the output is a JSON object)."""
    output: FieldSpec | None = None
    """The whole output's type, for outputs that are not objects of fields."""

    @model_validator(mode="after")
    def _one_form(self) -> NodeSpec:
        if self.fields is not None and self.output is not None:
            raise ValueError("give either 'fields' (an object output) or 'output' (a whole output), not both")
        return self


class LoopSpec(_Model):
    """The pipeline's controller loop."""

    body: list[str]
    """Nodes that run once per iteration."""
    k_max: int = Field(ge=1)
    """The iteration bound."""


class PipelineGraph(_Model):
    """Nodes with typed outputs, directed edges, and the loop."""

    nodes: dict[str, NodeSpec] = Field(default_factory=dict)
    """Node name -> its output spec."""
    edges: list[tuple[str, str]] = Field(default_factory=list)
    """(parent, child) pairs; loop feedback edges (a node to itself or back into the
    loop body) are kept here and left out of path products."""
    loop: LoopSpec | None = None
    """The controller loop, when there is one."""

    @model_validator(mode="after")
    def _known_nodes(self) -> PipelineGraph:
        known = set(self.nodes)
        for i, (a, b) in enumerate(self.edges):
            for name in (a, b):
                if name not in known:
                    raise ValueError(_unknown(f"edges[{i}]", name, known))
        for name in self.loop.body if self.loop else []:
            if name not in known:
                raise ValueError(_unknown("loop.body", name, known))
        return self

    def parents(self, node: str) -> list[str]:
        """Parents of ``node`` along the graph's edges, without self-loops."""
        return [a for a, b in self.edges if b == node and a != node]

    def children(self, node: str) -> list[str]:
        """Children of ``node`` along the graph's edges, without self-loops."""
        return [b for a, b in self.edges if a == node and a != b]

    def dag_edges(self) -> list[tuple[str, str]]:
        """The edges without loop feedback: self-loops and edges closing a cycle."""
        order = {n: i for i, n in enumerate(self.topological_order())}
        return [(a, b) for a, b in self.edges if a != b and order[a] < order[b]]

    def topological_order(self) -> list[str]:
        """Nodes in an order where parents come first (cycles broken by recorded order)."""
        pending = {n: set(self.parents(n)) for n in self.nodes}
        order: list[str] = []
        while pending:
            ready = [n for n, ps in pending.items() if not (ps & set(pending))]
            if not ready:  # a cycle (loop feedback): take the first in declaration order
                ready = [next(iter(pending))]
            for n in ready:
                order.append(n)
                del pending[n]
        return order


def _unknown(where: str, name: str, known: Iterable[str]) -> str:
    return f"{where}: unknown node {name!r}; known nodes: {', '.join(sorted(known)) or 'none'}"


def load_graph(path: str | Path) -> PipelineGraph:
    """Read a graph YAML file; errors name the file, the line and the field."""
    from quiver._yamlspec import load_yaml_with_lines, validate_spec  # YAML loads with the first graph file

    p = Path(path)
    data, lines = load_yaml_with_lines(p)
    if not isinstance(data, dict):
        raise SpecError(str(p), lines.get(()), None, "a graph file is a mapping with nodes, edges and loop")
    if isinstance(data.get("nodes"), dict):
        data["nodes"] = {k: (v if v is not None else {}) for k, v in data["nodes"].items()}
    return validate_spec(PipelineGraph, data, file=str(p), lines=lines)


# --------------------------------------------------------------------------- inference


class GraphInference(BaseModel):
    """What :func:`infer_graph` filled in, for the report."""

    inferred_nodes: list[str] = Field(default_factory=list)
    """Nodes whose output spec came from the recorded values."""
    inferred_fields: dict[str, dict[str, str]] = Field(default_factory=dict)
    """node -> field -> inferred type, for every inferred field (``output`` = whole)."""
    inferred_edges: bool = False
    """True when the edges came from the recorded parents."""


def infer_field(values: Iterable[Any]) -> FieldSpec:
    """The type that fits a field's recorded values (None values are ignored).

    bool -> bool; numbers -> numeric; strings -> categorical when at most 12 distinct
    short (<= 32 characters) values occur, else text; lists of scalars -> list; lists
    of objects, and objects -> json.
    """
    seen = [v for v in values if v is not None]
    if not seen:
        return FieldSpec(type="json")
    if all(isinstance(v, bool) for v in seen):
        return FieldSpec(type="bool")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        return FieldSpec(type="numeric")
    if all(isinstance(v, str) for v in seen):
        distinct = set(seen)
        short = all(len(v) <= _SHORT_TEXT for v in distinct)
        if short and len(distinct) <= _MAX_CATEGORIES:
            return FieldSpec(type="categorical")
        return FieldSpec(type="text")
    if all(isinstance(v, list) for v in seen):
        items = [x for v in seen for x in v]
        if all(isinstance(x, (str, int, float, bool)) for x in items):
            return FieldSpec(type="list")
    return FieldSpec(type="json")


def _node_values(traces: Iterable[Trace]) -> tuple[dict[str, list[Any]], set[tuple[str, str]], list[str]]:
    outputs: dict[str, list[Any]] = defaultdict(list)
    edges: set[tuple[str, str]] = set()
    order: list[str] = []
    for trace in traces:
        by_id = {c.call_id: c.node for c in trace.calls}
        for call in trace.calls:
            if call.node not in outputs:
                order.append(call.node)
            outputs[call.node].append(call.output)
            edges.update((by_id[p], call.node) for p in call.parents if p in by_id)
    return outputs, edges, order


def _infer_node(values: list[Any]) -> tuple[NodeSpec, dict[str, str]]:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, Mapping) for v in present):
        keys: list[str] = []
        for v in present:
            keys += [k for k in v if k not in keys]
        fields = {k: infer_field(v.get(k) for v in present) for k in keys}
        return NodeSpec(fields=fields), {k: f.type for k, f in fields.items()}
    spec = infer_field(values)
    return NodeSpec(output=spec), {"output": spec.type}


def infer_graph(traces: Iterable[Trace], base: PipelineGraph | None = None) -> tuple[PipelineGraph, GraphInference]:
    """Complete ``base`` (or build a graph) from recorded traces.

    Node specs the base leaves out are inferred from the values; fields a base node
    declares are kept, fields it does not are inferred. Edges come from the base when
    it has any, else from the recorded parents. A base node never seen in the traces is
    an error (a misspelt name would silently analyse nothing).
    """
    traces = list(traces)
    outputs, edges, order = _node_values(traces)
    base = base or PipelineGraph()
    missing = [n for n in base.nodes if n not in outputs]
    if missing:
        raise SpecError(
            None, None, "nodes",
            f"node(s) {', '.join(missing)} of the graph never ran in the traces; recorded nodes: "
            f"{', '.join(sorted(outputs)) or 'none'}",
        )
    report = GraphInference(inferred_edges=not base.edges)
    nodes: dict[str, NodeSpec] = {}
    for name in order:
        declared = base.nodes.get(name)
        inferred, types = _infer_node(outputs[name])
        if declared is None or (declared.fields is None and declared.output is None):
            nodes[name] = inferred
            report.inferred_nodes.append(name)
            report.inferred_fields[name] = types
        elif declared.fields is not None:
            extra = {k: v for k, v in (inferred.fields or {}).items() if k not in declared.fields}
            nodes[name] = NodeSpec(fields={**declared.fields, **extra})
            if extra:
                report.inferred_fields[name] = {k: v.type for k, v in extra.items()}
        else:
            nodes[name] = declared
    edge_list = list(base.edges) if base.edges else sorted(edges, key=lambda e: (order.index(e[0]), order.index(e[1])))
    graph = PipelineGraph(nodes=nodes, edges=edge_list, loop=base.loop)
    return graph, report
