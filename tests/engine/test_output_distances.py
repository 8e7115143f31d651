"""Distances of many output pairs at once (``output_distances``, ``output_texts``) and
the pair table built from them, against the pair-by-pair definitions.

Both must give the same numbers bit for bit: the analysis computes each node's
distinct comparisons column by column, a replay pairs one trace at a time with
:func:`output_distance`, and a profile and a campaign of the same traces must agree.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from typing import Any

import numpy as np
from hypothesis import given, strategies as st

from quiver import NodeCall, PipelineGraph, Trace
from quiver._canonical import canonical_json
from quiver._distance import output_distance, output_distances, output_texts, texts_to_compare
from quiver._graph import FieldSpec, NodeSpec
from quiver._stats import build_pairs, group_traces
from tests.fuzzing import FUZZ

WORDS = ["refund", "order", "late", "the", "a", "policy", "ship", "box"]


def words(a: str, b: str) -> float:
    """A deterministic text distance with inexact floats: word-set Jaccard, shifted
    and scaled so that the clip to [0, 1] acts on some pairs."""
    wa, wb = set(a.split()), set(b.split())
    jaccard = 1.0 - len(wa & wb) / len(wa | wb) if wa | wb else 0.0
    return jaccard * 1.1 - 0.03


class Batched:
    """The same text distance, also offering ``distances`` (as an EmbeddingStore does)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, a: str, b: str) -> float:
        return words(a, b)

    def distances(self, pairs: list[tuple[str, str]]) -> list[float]:
        self.batches.append(len(pairs))
        return [0.0 if a == b else words(a, b) for a, b in pairs]


TYPES = {
    "text": st.text(alphabet=" abc", max_size=6) | st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join),
    "categorical": st.sampled_from(["x", "y", 1, 1.0, True, None]),
    "bool": st.booleans(),
    "numeric": st.sampled_from([0, 1, 2.5, -3.0, 1e-12, 7]),
    "list": st.lists(st.sampled_from([1, 2, 3, "1"]), max_size=4),
    "set": st.lists(st.sampled_from(["p", "q", "r"]), max_size=3),
    "mapping": st.dictionaries(st.sampled_from(["k", "j"]), st.sampled_from(WORDS), max_size=2),
    "json": st.recursive(st.sampled_from([None, 1, "late order", True, 2.5]),
                         lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("ab"), inner,
                                                                                     max_size=2), max_leaves=4),
}


@st.composite
def node_and_outputs(draw: st.DrawFn) -> tuple[NodeSpec, list[Any]]:
    """A node (fields of several types and weights, or a whole output) and distinct
    outputs of it as parsed from canonical JSON: fields missing, None, a non-dict
    output now and then."""
    if draw(st.booleans()):
        kind = draw(st.sampled_from(sorted(TYPES)))
        node = NodeSpec(output=FieldSpec(type=kind))
        values = draw(st.lists(TYPES[kind] | st.none(), min_size=2, max_size=7))
    else:
        names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=4, unique=True))
        roles = {name: draw(st.sampled_from(["routing", "context", "observability"])) for name in names}
        node = NodeSpec(fields={n: FieldSpec(type=n, role=roles[n]) for n in names})  # type: ignore[arg-type]
        values = []
        for _ in range(draw(st.integers(2, 7))):
            if draw(st.integers(0, 9)) == 0:
                values.append("not a dict")
                continue
            present = draw(st.lists(st.sampled_from(names), unique=True))
            values.append({n: draw(TYPES[n] | st.none()) for n in present})
    distinct = list(dict.fromkeys(canonical_json(v) for v in values))
    return node, [json.loads(v) for v in distinct]


@given(case=node_and_outputs(), seed=st.integers(0, 2**16))
@FUZZ
def test_many_pairs_at_once_give_the_pair_by_pair_numbers_bit_for_bit(
    case: tuple[NodeSpec, list[Any]], seed: int
) -> None:
    node, outputs = case
    rng = random.Random(seed)
    pairs = [(rng.randrange(len(outputs)), rng.randrange(len(outputs))) for _ in range(12)]
    left, right = [i for i, _ in pairs], [j for _, j in pairs]
    for text in (words, Batched()):
        total, fields = output_distances(node, outputs, left, right, text)
        for k, (i, j) in enumerate(pairs):
            expected, per_field = output_distance(node, outputs[i], outputs[j], words)
            assert total[k] == expected, (outputs[i], outputs[j])
            for name, column in fields.items():
                if name in per_field:
                    assert column[k] == per_field[name]
                else:
                    assert math.isnan(column[k])
    wanted = {pair for i, j in pairs for pair in texts_to_compare(node, outputs[i], outputs[j])}
    listed = output_texts(node, outputs, left, right)
    assert set(listed) == wanted
    assert len(listed) == len(set(listed)) or node.fields is None or any(
        f.type in ("mapping", "json") for f in node.fields.values()
    )  # plain text fields list each distinct pair of values once


def test_a_text_distance_that_takes_many_pairs_gets_each_text_field_in_one_call() -> None:
    node = NodeSpec(fields={"answer": FieldSpec(type="text"), "label": FieldSpec(type="categorical")})
    outputs = [{"answer": f"the order {w}", "label": w[0]} for w in WORDS]
    left, right = zip(*itertools.combinations(range(len(outputs)), 2), strict=True)
    batched = Batched()
    total, _ = output_distances(node, outputs, left, right, batched)
    assert batched.batches == [len(left)]  # every answer differs: one call with all of them
    pairs = zip(left, right, strict=True)
    assert list(total) == [output_distance(node, outputs[i], outputs[j], words)[0] for i, j in pairs]


# --------------------------------------------------------------------------- the pair table


def thought(rng: random.Random) -> dict[str, str]:
    """A plan's thought, left out of a third of its outputs."""
    return {"thought": rng.choice(WORDS[:3])} if rng.random() < 2 / 3 else {}


def _corpus(seed: int) -> list[Trace]:
    """Traces of a loop: ``plan`` runs 0 to 3 times, ``tool`` only in some traces, a
    decision per plan call; few distinct outputs, so pairs repeat comparisons."""
    rng = random.Random(seed)
    traces = []
    for g in range(5):
        for r in range(rng.randint(1, 5)):
            calls = [NodeCall(call_id="c0", node="ask", occurrence=0, call_path="ask#0", kind="llm",
                              output={"text": rng.choice(["the late order", "a refund", "the box"]),
                                      "urgent": rng.random() < 0.3})]
            for k in range(rng.randint(0, 3)):
                action = rng.choice(["EXECUTE", "COMPOSE"])
                calls.append(NodeCall(call_id=f"p{k}", node="plan", occurrence=k, call_path=f"plan#{k}", kind="llm",
                                      parents=["c0"], output={"action": action, **thought(rng)},
                                      decision={"action": action}))
            if rng.random() < 0.5:
                calls.append(NodeCall(call_id="t0", node="tool", occurrence=0, call_path="tool#0", kind="tool",
                                      parents=["c0"], output=rng.sample([1, 2, 3, 4], rng.randint(1, 3))))
            traces.append(Trace(trace_id=f"g{g}/{r}", run_id="r", pipeline="p", input_id=f"g{g}", repeat=r,
                                inputs={}, calls=calls, output=None))
    return traces


GRAPH = PipelineGraph(nodes={
    "ask": {"fields": {"text": {"type": "text"}, "urgent": {"type": "bool", "role": "routing"}}},
    "plan": {"fields": {"action": {"type": "categorical", "role": "routing"}, "thought": {"type": "text"}}},
    "tool": {"output": {"type": "list"}},
    "unused": {"output": {"type": "text"}},
}, edges=[("ask", "plan"), ("ask", "tool")])


def _expected(a: Trace, b: Trace, node: str) -> tuple[float, dict[str, float]]:
    """QUIVER.md §6 [engine], written out: occurrences aligned, one side only counts 1."""
    spec = GRAPH.nodes[node]
    xs = [c.output for c in sorted(a.calls, key=lambda c: c.occurrence) if c.node == node]
    ys = [c.output for c in sorted(b.calls, key=lambda c: c.occurrence) if c.node == node]
    names = list(spec.fields) if spec.fields is not None else ["output"]
    totals, per_field = [], {f: [] for f in names}  # type: dict[str, list[float]]
    for k in range(max(len(xs), len(ys))):
        if k >= len(xs) or k >= len(ys):
            totals.append(1.0)
            for f in names:
                per_field[f].append(1.0)
        else:
            x, y = sorted([xs[k], ys[k]], key=canonical_json)
            d, fs = output_distance(spec, x, y, words)
            totals.append(d)
            for f, v in fs.items():
                per_field[f].append(v)
    return (sum(totals) / len(totals) if totals else math.nan), {f: sum(v) / len(v) for f, v in per_field.items() if v}


def test_the_pair_table_matches_the_definition_pair_by_pair() -> None:
    for seed in range(6):
        traces = _corpus(seed)
        groups, _ = group_traces(traces)
        asked: list[str] = []
        table = build_pairs(groups, GRAPH, lambda texts, asked=asked: (asked.extend(texts), Batched())[1])
        by_id = {t.trace_id: t for t in traces}
        expected_pairs = [(a.trace_id, b.trace_id) for ts in groups.values() for a, b in itertools.combinations(ts, 2)]
        assert table.trace_ids == expected_pairs
        assert len(asked) == len(set(asked))
        for row, (ia, ib) in enumerate(table.trace_ids):
            a, b = by_id[ia], by_id[ib]
            for col, node in enumerate(table.nodes):
                ran = (sum(c.node == node for c in a.calls), sum(c.node == node for c in b.calls))
                assert tuple(table.counts[row, col]) == ran
                total, fields = _expected(a, b, node)
                if ran == (0, 0):
                    assert math.isnan(table.d[row, col])
                    continue
                assert table.d[row, col] == total, (seed, row, node)
                for f, column in table.fields[node].items():
                    assert column[row] == fields[f] if f in fields else math.isnan(column[row])
            shape = {(c.node, c.occurrence, canonical_json(c.decision)) for c in a.calls if c.decision} != {
                (c.node, c.occurrence, canonical_json(c.decision)) for c in b.calls if c.decision}
            ran_a, ran_b = {c.node for c in a.calls}, {c.node for c in b.calls}
            assert table.d_shape[row] == shape
            assert table.d_struct[row] == (ran_a != ran_b)
            assert table.d_iter[row] == sum(
                abs(sum(c.node == n for c in a.calls) - sum(c.node == n for c in b.calls)) for n in ran_a | ran_b)
        assert np.isnan(table.col("unused")).all()
