"""A field type added from outside the engine: one kernel, one ``register_kernel`` call.

The ``ordinal`` type is defined here only: ``|rank(a) - rank(b)| / (k - 1)`` over the
field's declared ``categories``. Registered, it is a valid type in a graph file, the
distances compare it, the analysis reports its per-field distances, and the schema of
graph files lists it; unregistered, it is gone again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import quiver
from quiver import FieldSpec, FieldTypeError, NodeCall, NodeSpec, PipelineGraph, QuiverError, SpecError, Trace
from quiver._distance import (
    Kernel,
    KernelError,
    TextDistance,
    output_distance,
    output_texts,
    register_kernel,
    registered_kernels,
    unregister_kernel,
    value_distance,
)
from quiver._graph import load_graph

BUILT_IN = ["categorical", "bool", "numeric", "set", "list", "text", "mapping", "json"]
LEVELS = ["low", "medium", "high", "critical"]

GRAPH_YAML = """\
nodes:
  triage:
    fields:
      urgency: {type: ordinal, role: routing, categories: [low, medium, high, critical]}
      note: {type: text}
  reply:
    output: {type: categorical}
edges: [[triage, reply]]
"""


def ordinal(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    """|rank(a) - rank(b)| / (k - 1) over the declared categories."""
    levels = list(spec.categories or [])
    for v in (a, b):
        if not isinstance(v, str):
            raise FieldTypeError("ordinal", v, path)
        if v not in levels:
            raise QuiverError(f"field {path!r}: {v!r} is not one of the declared levels {levels}")
    if len(levels) < 2:
        return 0.0
    return abs(levels.index(a) - levels.index(b)) / (len(levels) - 1)


def never(a: str, b: str) -> float:
    raise AssertionError(f"the text distance was called with {a!r}, {b!r}")


def words(a: str, b: str) -> float:
    """A deterministic text distance: Jaccard distance of the word sets."""
    wa, wb = set(a.split()), set(b.split())
    return 1.0 - len(wa & wb) / len(wa | wb) if wa | wb else 0.0


@pytest.fixture
def ordinal_type() -> Iterator[Kernel]:
    """The ordinal type, registered for one test and removed after it."""
    kernel = register_kernel("ordinal", ordinal, uses_text=False, description="|rank(a) - rank(b)| / (k - 1)")
    try:
        yield kernel
    finally:
        unregister_kernel("ordinal")


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "graph.yaml"
    path.write_text(GRAPH_YAML)
    return path


# --------------------------------------------------------------------------- registering


def test_the_new_type_is_listed_after_the_built_in_ones(ordinal_type: Kernel) -> None:
    kernels = registered_kernels()
    assert list(kernels) == [*BUILT_IN, "ordinal"]
    assert kernels["ordinal"] == Kernel("ordinal", ordinal, False, "|rank(a) - rank(b)| / (k - 1)")
    assert [k for k in BUILT_IN if kernels[k].uses_text] == ["text", "mapping", "json"]
    schema = PipelineGraph.model_json_schema()["$defs"]["FieldSpec"]["properties"]["type"]
    assert schema["enum"] == [*BUILT_IN, "ordinal"]


def test_the_type_leaves_with_its_registration() -> None:
    register_kernel("ordinal", ordinal, uses_text=False)
    assert FieldSpec(type="ordinal").type == "ordinal"
    assert unregister_kernel("ordinal").fn is ordinal
    assert list(registered_kernels()) == BUILT_IN
    with pytest.raises(ValidationError, match="unknown field type 'ordinal'"):
        FieldSpec(type="ordinal")
    assert PipelineGraph.model_json_schema()["$defs"]["FieldSpec"]["properties"]["type"]["enum"] == BUILT_IN


# --------------------------------------------------------------------------- distances


def test_a_graph_file_declares_the_new_type_and_the_distances_use_it(
    ordinal_type: Kernel, graph_file: Path
) -> None:
    graph = load_graph(graph_file)
    triage = graph.nodes["triage"]
    urgency = (triage.fields or {})["urgency"]
    assert (urgency.type, urgency.categories, urgency.effective_weight) == ("ordinal", LEVELS, 2.0)

    assert value_distance(urgency, "low", "critical", never) == 1.0
    assert value_distance(urgency, "medium", "high", never) == pytest.approx(1 / 3)
    assert value_distance(urgency, "high", "high", never) == 0.0
    assert value_distance(urgency, None, "high", never) == 1.0  # missing vs present, before any kernel

    a = {"urgency": "low", "note": "printer jammed again"}
    b = {"urgency": "high", "note": "printer on fire"}
    total, per_field = output_distance(triage, a, b, words)
    assert per_field == {"urgency": pytest.approx(2 / 3), "note": pytest.approx(0.8)}  # 1 - 1/5 shared words
    assert total == pytest.approx((2 * 2 / 3 + 1 * 0.8) / 3)  # routing weighs 2, context 1
    assert output_texts(triage, [a, b], [0], [1]) == [(a["note"], b["note"])]  # the ordinal field needs no text


def test_the_new_kernel_reports_values_of_the_wrong_kind(ordinal_type: Kernel) -> None:
    node = NodeSpec(fields={"urgency": FieldSpec(type="ordinal", categories=LEVELS)})
    with pytest.raises(FieldTypeError, match=r"^field 'urgency': declared ordinal, but the value is a int"):
        output_distance(node, {"urgency": 3}, {"urgency": "low"}, never)


def _trace(input_id: str, r: int, urgency: str, note: str) -> Trace:
    calls = [
        NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source",
                 output={"ticket": input_id}),
        NodeCall(call_id="c1", node="triage", occurrence=0, call_path="triage#0", kind="llm", parents=["c0"],
                 output={"urgency": urgency, "note": note}),
        NodeCall(call_id="c2", node="reply", occurrence=0, call_path="reply#0", kind="llm", parents=["c1"],
                 output="escalate" if urgency in ("high", "critical") else "answer"),
    ]
    return Trace(trace_id=f"{input_id}/{r}", run_id="r", pipeline="helpdesk", input_id=input_id, repeat=r,
                 inputs={"ticket": input_id}, calls=calls, output=calls[2].output)


RUNS = {
    "t1": [("low", "printer jammed"), ("low", "printer jammed"), ("medium", "printer jammed twice")],
    "t2": [("high", "server down"), ("critical", "server down since noon"), ("high", "server down")],
    "t3": [("low", "password reset"), ("critical", "password reset"), ("medium", "reset the password")],
}


def test_analyze_reports_the_distances_of_the_new_type(ordinal_type: Kernel, graph_file: Path,
                                                       tmp_path: Path) -> None:
    batches: list[list[str]] = []

    def letters(texts: list[str]) -> list[list[float]]:
        batches.append(list(texts))
        return [[float(t.count(c)) for c in "abcdefghijklmnopqrstuvwxyz "] for t in texts]

    traces = [_trace(t, r, *run) for t, runs in RUNS.items() for r, run in enumerate(runs)]
    profile = quiver.analyze(traces, graph_file, embedder=quiver.FunctionEmbedder(letters, name="letters"),
                             cache_dir=tmp_path / "cache", resamples=50)

    assert profile.to_json()["graph"]["nodes"]["triage"]["fields"]["urgency"]["type"] == "ordinal"
    urgency = {t.trace_id: (t.calls[1].output or {})["urgency"] for t in traces}
    expected = [abs(LEVELS.index(urgency[a]) - LEVELS.index(urgency[b])) / 3 for a, b in profile.table.trace_ids]
    assert profile.table.fields["triage"]["urgency"].tolist() == pytest.approx(expected)
    assert sorted(set(expected)) == [0.0, 1 / 3, 2 / 3, 1.0]
    # every note was embedded in one batch, before the distances: none on the spot
    assert len(batches) == 1
    assert set(batches[0]) == {note for runs in RUNS.values() for _, note in runs}
    assert profile.to_json()["embedding"]["embedded"] == len(batches[0])


# --------------------------------------------------------------------------- errors


def test_an_unknown_type_in_a_graph_file_names_the_registered_ones(ordinal_type: Kernel, tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH_YAML.replace("type: ordinal", "type: ordinl"))
    with pytest.raises(SpecError) as info:
        load_graph(path)
    assert str(info.value).startswith(
        f"{path}:4: nodes.triage.fields.urgency.type: unknown field type 'ordinl'; the registered types are "
        "categorical, bool, numeric, set, list, text, mapping, json, ordinal (a new one registers with "
        "quiver.register_kernel"
    )


def test_a_taken_name_is_refused(ordinal_type: Kernel) -> None:
    def reversed_ordinal(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
        return ordinal(spec, b, a, text, path)

    with pytest.raises(KernelError, match=r"^field type name 'ordinal' is already registered by the kernel "
                                          r".*\.ordinal \(uses_text=False\); .*reversed_ordinal"):
        register_kernel("ordinal", reversed_ordinal, uses_text=False)
    with pytest.raises(KernelError, match="already registered"):
        register_kernel("ordinal", ordinal, uses_text=True)
    assert register_kernel("ordinal", ordinal, uses_text=False) is ordinal_type  # the same again: a no-op
    with pytest.raises(KernelError, match="field type name 'text' is already registered"):
        register_kernel("text", reversed_ordinal, uses_text=True)
    with pytest.raises(KernelError, match="field type 'text' is built in and cannot be unregistered"):
        unregister_kernel("text")
    assert registered_kernels()["ordinal"] is ordinal_type


def test_uses_text_must_be_said() -> None:
    with pytest.raises(TypeError, match="uses_text"):
        register_kernel("ordinal", ordinal)  # type: ignore[call-arg]
    with pytest.raises(KernelError, match="uses_text must be True .* or False .*; got 'no'"):
        register_kernel("ordinal", ordinal, uses_text="no")  # type: ignore[arg-type]
    assert "ordinal" not in registered_kernels()


def test_a_kernel_that_breaks_its_contract_is_reported() -> None:
    def quietly_textual(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
        return text(str(a), str(b))

    def too_far(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
        return 2.0

    register_kernel("quietly_textual", quietly_textual, uses_text=False)
    register_kernel("too_far", too_far, uses_text=False)
    try:
        node = NodeSpec(fields={"x": FieldSpec(type="quietly_textual"), "y": FieldSpec(type="too_far")})
        with pytest.raises(KernelError, match=r"^field 'x': the kernel of field type 'quietly_textual' called the "
                                              r"text distance, but it was registered with uses_text=False"):
            output_distance(node, {"x": "a"}, {"x": "b"}, words)
        with pytest.raises(KernelError, match=r"^field 'y': the kernel of field type 'too_far' returned 2\.0 for "
                                              r"'a' and 'b'; a distance is a number in \[0, 1\]"):
            output_distance(node, {"y": "a"}, {"y": "b"}, words)
    finally:
        unregister_kernel("quietly_textual")
        unregister_kernel("too_far")


# --------------------------------------------------------------------------- entry points

ORDINAL_PLUGIN = """
    from quiver._distance import FieldTypeError, Kernel

    def ordinal(spec, a, b, text, path):
        levels = list(spec.categories or [])
        for v in (a, b):
            if v not in levels:
                raise FieldTypeError("ordinal", v, path)
        return abs(levels.index(a) - levels.index(b)) / max(len(levels) - 1, 1)

    ORDINAL = Kernel("ordinal", ordinal, uses_text=False, description="|rank(a) - rank(b)| / (k - 1)")
"""


def test_a_third_party_type_comes_in_through_its_entry_point_when_a_graph_names_it(
    plugins: Callable[[str, str, str], None], graph_file: Path
) -> None:
    plugins("toy_kernels", ORDINAL_PLUGIN, "[quiver.kernels]\nordinal = toy_kernels:ORDINAL\n")
    graph = load_graph(graph_file)  # validating 'type: ordinal' loads the entry points
    urgency = (graph.nodes["triage"].fields or {})["urgency"]
    assert value_distance(urgency, "low", "high", never) == pytest.approx(2 / 3)
    assert registered_kernels()["ordinal"].fn.__module__ == "toy_kernels"


def test_a_broken_entry_point_is_reported_and_hides_nothing(
    plugins: Callable[[str, str, str], None], graph_file: Path, tmp_path: Path
) -> None:
    plugins("toy_kernels", ORDINAL_PLUGIN,
            "[quiver.kernels]\nordinal = toy_kernels:ORDINAL\nbroken = no_such_module:KERNEL\n")
    assert "ordinal" in registered_kernels() and "broken" not in registered_kernels()
    path = tmp_path / "g.yaml"
    path.write_text(GRAPH_YAML.replace("note: {type: text}", "note: {type: broken}"))
    with pytest.raises(SpecError, match=r"g\.yaml:5: nodes\.triage\.fields\.note\.type: field type 'broken' could "
                                        r"not be loaded from entry point 'broken = no_such_module:KERNEL': "
                                        r"ModuleNotFoundError"):
        load_graph(path)
