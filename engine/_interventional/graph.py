"""One graph for a campaign's pairs and its estimates (QUIVER.md §6, §13).

A node the pairs give a distance to must be a node the estimates can list downstream
of a target, so both read one :class:`CampaignGraph`. It starts as the baseline's graph
(the declared graph, a spec's ``graph:`` file or the pipeline's decorators, cut to the
nodes the baseline ran and completed from its traces: the graph the observational
profile reads) and takes in, as the replays are paired, every node a replay ran that no
baseline trace did (a branch only a perturbation takes):

* its spec is the declared one; a node declared without types, or not declared, is
  left for pairing to infer from the values: it does not move the node's distance,
  which in a pair with its baseline is 1 wherever the replay ran it (a call in one
  trace only counts 1) and None elsewhere;
* its edges are the declared edges between it and the graph's nodes when the
  declared graph has edges, else the recorded parents of the replays (its calls'
  parents, and the calls it fed), gathered from every replay, not only the first
  that ran it;
* it joins the loop body when the declared loop lists it.

Replays add nodes and their edges, never an edge between two nodes the baseline ran:
a campaign whose baseline ran every node keeps the baseline's graph, the object
itself, and every number read from it. A path through a new node can make a baseline
node downstream of another (that is what the replays showed); the baseline's own edges
keep their standing: the graph lists the baseline's nodes first, in its topological
order, so a cycle a new node closes is broken where the baseline broke its own, and
each edge between two baseline nodes stays a path edge or loop feedback as it was.

The new nodes follow in the order the replays first ran them, and the replays are
taken in their given order (a campaign: job order, block by block), so the graph is
the same on every executor, in any order of completion and after a resume; cut into
other blocks, the same replays give the same nodes in the same order and the same
edges.
"""

from __future__ import annotations

from collections.abc import Iterable

from quiver._graph import LoopSpec, NodeSpec, PipelineGraph
from quiver._trace import Trace

from .pairing import Replayed

__all__ = ["CampaignGraph"]


class CampaignGraph:
    """The graph a campaign (or a gate) pairs its replays with and estimates from.

    Args:
        baseline: The baseline's graph (every node the baseline ran).
        declared: The declared graph, uncut: what the declaration says of nodes the
            baseline did not run (None: nothing is declared).
    """

    def __init__(self, baseline: PipelineGraph, declared: PipelineGraph | None = None) -> None:
        self.graph = baseline
        """The graph so far: the baseline's, and the nodes replays took in."""
        self.declared = declared if declared is not None else PipelineGraph()
        self.baseline_nodes = frozenset(baseline.nodes)
        self._order = baseline.topological_order()

    @property
    def reached(self) -> list[str]:
        """The nodes only replays ran, in the order they were taken in."""
        return [n for n in self.graph.nodes if n not in self.baseline_nodes]

    def take_in(self, results: Iterable[Replayed]) -> PipelineGraph:
        """Take in the nodes the replays ran that the graph lacks, with their edges; the
        graph after (the same object when nothing was new). Only the replays
        :func:`~quiver._interventional.pair_results` measures count: an ok replay of an
        ok baseline."""
        traces = [r.trace for r in results if r.trace.status == "ok" and r.baseline.status == "ok"]
        return self.take_in_ran(_ran(traces), _recorded_edges(traces))

    def take_in_ran(self, ran: Iterable[str], recorded: Iterable[tuple[str, str]]) -> PipelineGraph:
        """:meth:`take_in` from what the replays ran (nodes in order of first call) and
        their recorded (parent, node) edges, as :meth:`parts` gives them."""
        new = [n for n in dict.fromkeys(ran) if n not in self.graph.nodes]
        nodes = {**self.graph.nodes, **{n: self.declared.nodes.get(n, NodeSpec()) for n in new}}
        candidates = self.declared.edges if self.declared.edges else [tuple(e) for e in recorded]
        edges = list(self.graph.edges)
        for a, b in candidates:
            if a in nodes and b in nodes and (a, b) not in edges and not {a, b} <= self.baseline_nodes:
                edges.append((a, b))
        if not new and len(edges) == len(self.graph.edges):
            return self.graph
        # the baseline's nodes first, in its topological order: where a new node closes a
        # cycle through them, the cycle is broken where the baseline broke its own, so
        # every edge between them keeps its direction (or stays loop feedback)
        order = [*self._order, *(n for n in nodes if n not in self.baseline_nodes)]
        self.graph = PipelineGraph(nodes={n: nodes[n] for n in order}, edges=edges, loop=self._loop(nodes))
        return self.graph

    @staticmethod
    def parts(results: Iterable[Replayed]) -> tuple[list[str], list[tuple[str, str]]]:
        """What :meth:`take_in` reads of ``results``: the nodes they ran and their recorded edges."""
        traces = [r.trace for r in results if r.trace.status == "ok" and r.baseline.status == "ok"]
        return _ran(traces), _recorded_edges(traces)

    def _loop(self, nodes: Iterable[str]) -> LoopSpec | None:
        """The loop, its body grown by the declared body nodes now in the graph."""
        loop, declared = self.graph.loop, self.declared.loop
        if declared is None:
            return loop
        body = list(loop.body) if loop is not None else []
        body += [n for n in declared.body if n in nodes and n not in body]
        if not body:
            return loop
        return LoopSpec(body=body, k_max=loop.k_max if loop is not None else declared.k_max)


def _ran(traces: Iterable[Trace]) -> list[str]:
    """The nodes that ran in ``traces``, in order of first call."""
    return list(dict.fromkeys(c.node for t in traces for c in t.calls))


def _recorded_edges(traces: Iterable[Trace]) -> list[tuple[str, str]]:
    """(parent node, node) of every recorded parent, in order of first sight."""
    out: dict[tuple[str, str], None] = {}
    for trace in traces:
        by_id = {c.call_id: c.node for c in trace.calls}
        for call in trace.calls:
            for p in call.parents:
                if p in by_id:
                    out[(by_id[p], call.node)] = None
    return list(out)
