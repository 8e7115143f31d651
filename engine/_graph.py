"""The pipeline graph: nodes with typed output fields, edges, and the loop.

A :class:`PipelineGraph` says how each node's output is compared (QUIVER.md §1-§2):
every field has a type (categorical, bool, numeric, set, list, text, mapping, json, or
one registered with :func:`quiver.register_kernel`) and a role (routing = weight 2,
context = 1, observability = 0; no role = context). It comes from a YAML file (a
public contract, :func:`load_graph`), from the pipeline's decorators
(``quiver.replay.declared_graph``), or from the recorded traces (:func:`infer_graph`:
edges from the recorded parents, types from the values, routing roles from the recorded
decisions). Whatever a YAML file leaves out is inferred from the traces and reported as
inferred: nodes it does not name, their fields, and the edges the recorded parents add
to the ones it declares (``infer: false`` keeps the declared edges alone).

YAML form::

    nodes:
      signal:
        fields:
          turn_type: {type: categorical, role: routing,
                      categories: [question, followup, complaint, smalltalk]}
          is_small_talk: {type: bool, role: routing}
      discovery:
        output: {type: set}          # a whole output of one type
    edges: [[signal, planner], [discovery, planner]]   # added to the recorded ones
    infer: true                  # false: these edges only, none from the recorded parents
    loop: {body: [planner, executor], k_max: 5}   # optional
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quiver._canonical import canonical_json
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
    "routing_fields",
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
    infer: bool = True
    """Whether the edges the traces' recorded parents show are added to ``edges`` (the
    default); false: ``edges`` is the whole edge list."""

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

    def over(self, declared: PipelineGraph) -> PipelineGraph:
        """This graph (a graph file) completed by the pipeline's declarations: the nodes
        it does not name (an integration declares its agents' and tools' nodes) and their
        edges. What this graph says of a node stands; with ``infer: false`` it is the
        whole graph, as it says."""
        if not self.infer or not declared.nodes:
            return self
        nodes = {**{k: v for k, v in declared.nodes.items() if k not in self.nodes}, **self.nodes}
        edges = list(dict.fromkeys([*map(tuple, self.edges), *map(tuple, declared.edges)]))
        return self.model_copy(update={"nodes": nodes, "edges": edges})

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
    """True when some edges came from the recorded parents."""
    inferred_edge_list: list[tuple[str, str]] = Field(default_factory=list)
    """The edges that came from the recorded parents (not declared), in graph order."""
    inferred_roles: dict[str, dict[str, str]] = Field(default_factory=dict)
    """node -> field -> role, for inferred fields whose role was inferred from the
    recorded decisions (``routing``; the other inferred fields are context)."""


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
    declares are kept, fields it does not are inferred, with roles from
    :func:`routing_fields` (context otherwise). The edges are the base's declared ones
    followed by the recorded parents' edges it does not declare, unless the base says
    ``infer: false``. A base node never seen in the traces is an error (a misspelt
    name would silently analyse nothing).
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
    report = GraphInference()
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
    routing = routing_fields(traces, nodes)
    for name, fields in report.inferred_fields.items():
        chosen = [f for f in fields if f in routing.get(name, set())]
        if chosen:
            nodes[name] = _with_role(nodes[name], chosen, "routing")
            report.inferred_roles[name] = {f: "routing" for f in chosen}
    recorded = sorted(edges, key=lambda e: (order.index(e[0]), order.index(e[1])))
    added = [e for e in recorded if e not in set(base.edges)] if base.infer else []
    report.inferred_edge_list = added
    report.inferred_edges = bool(added)
    graph = PipelineGraph(nodes=nodes, edges=[*base.edges, *added], loop=base.loop, infer=base.infer)
    return graph, report


def _with_role(spec: NodeSpec, names: list[str], role: Role) -> NodeSpec:
    if spec.fields is not None:
        return NodeSpec(fields={k: v.model_copy(update={"role": role}) if k in names else v
                                for k, v in spec.fields.items()})
    assert spec.output is not None  # an inferred node has fields or a whole output
    return NodeSpec(output=spec.output.model_copy(update={"role": role}))


# --------------------------------------------------------------------------- routing roles

_DISCRETE = ("categorical", "bool")


def routing_fields(traces: Iterable[Trace], nodes: Mapping[str, NodeSpec]) -> dict[str, set[str]]:
    """The fields the recorded decisions show to be routing fields (QUIVER.md §2).

    * Every field of a ``router`` node (a node with a call of kind ``router``): its
      output is the routing logic's.
    * A categorical or bool field f of a node P is routing when the decisions of a gate
      g taken by a node R depend on it: P is R itself or a recorded parent of R's call,
      and two calls of R anywhere in the traces took different arms of g while their P
      outputs differed in f and agreed on every other categorical and bool field of P
      (the arm changed when f changed, nothing else of P's discrete fields did). A field
      whose value alone picks the arm meets this as soon as two of its values occur;
      fields that pick it only together (``urgent and negative``) meet it when the corpus
      holds two calls one field apart on either side of the boundary.

    Text, numeric, list and json fields are never judged routing from data: a decision
    that depends on them cannot be told from one that merely correlates with them.
    A whole output counts as one field named ``output``. Returns node -> field names.
    """
    out: dict[str, set[str]] = defaultdict(set)
    discrete = {name: _discrete_fields(spec) for name, spec in nodes.items()}
    seen: dict[tuple[str, str, str], set[tuple[tuple[str, ...], str]]] = defaultdict(set)
    for trace in traces:
        by_id = {c.call_id: c for c in trace.calls}
        for call in trace.calls:
            if call.kind == "router" and call.node in nodes:
                out[call.node].update(_field_names(nodes[call.node]))
            sources = [call, *(by_id[p] for p in call.parents if p in by_id)]
            for gate, arm in call.decision.items():
                for src in sources:
                    if discrete.get(src.node):
                        values = _discrete_values(src.output, discrete[src.node])
                        seen[(gate, call.node, src.node)].add((values, canonical_json(arm)))
    for (_, _, source), observed in seen.items():
        for i, name in enumerate(discrete[source]):
            if _arm_follows(observed, i):
                out[source].add(name)
    return dict(out)


def _field_names(spec: NodeSpec) -> list[str]:
    return list(spec.fields) if spec.fields is not None else ["output"]


def _discrete_fields(spec: NodeSpec) -> list[str]:
    if spec.fields is not None:
        return [k for k, f in spec.fields.items() if f.type in _DISCRETE]
    return ["output"] if spec.output is not None and spec.output.type in _DISCRETE else []


def _discrete_values(output: Any, names: list[str]) -> tuple[str, ...]:
    if names == ["output"] and not isinstance(output, Mapping):
        return (canonical_json(output),)
    row = output if isinstance(output, Mapping) else {}
    return tuple(canonical_json(row.get(k)) for k in names)


def _arm_follows(observed: set[tuple[tuple[str, ...], str]], i: int) -> bool:
    """Two observations that differ in value i and in the arm, and agree elsewhere."""
    by_rest: dict[tuple[str, ...], set[tuple[str, str]]] = defaultdict(set)
    for values, arm in observed:
        by_rest[values[:i] + values[i + 1:]].add((values[i], arm))
    return any(
        a[0] != b[0] and a[1] != b[1]
        for group in by_rest.values() for a in group for b in group
    )
