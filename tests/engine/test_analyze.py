"""quiver.analyze on real text outputs: embeddings once, cached; faithfulness; pairing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from quiver import NodeCall, PipelineGraph, Trace, analyze, texts_to_compare
from quiver._distance import output_texts

SENTENCES = [
    "Your invoice was charged twice this month.",
    "We refunded the duplicate charge on your invoice.",
    "Reset your password from the account settings page.",
    "The export server is down for maintenance tonight.",
    "Please update the billing address on your plan.",
]


def _trace(input_id: str, r: int, answer: str, label: str) -> Trace:
    calls = [
        NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source", output={"q": input_id}),
        NodeCall(call_id="c1", node="classify", occurrence=0, call_path="classify#0", kind="llm", parents=["c0"],
                 output={"label": label, "note": "constant note"}),
        NodeCall(call_id="c2", node="compose", occurrence=0, call_path="compose#0", kind="llm", parents=["c1"],
                 output=answer),
    ]
    return Trace(trace_id=f"{input_id}/{r}", run_id="r", pipeline="p", input_id=input_id, repeat=r,
                 inputs={"q": input_id}, calls=calls, output=answer)


@pytest.fixture(scope="module")
def corpus() -> list[Trace]:
    rng = random.Random(0)
    return [
        _trace(f"g{g}", r, rng.choice(SENTENCES), rng.choice(["billing", "bug"])) for g in range(12) for r in range(3)
    ]


def test_a_second_analysis_makes_no_embedding_call(corpus: list[Trace], tmp_path: Path) -> None:
    first = analyze(corpus, cache_dir=tmp_path, resamples=200)
    second = analyze(corpus, cache_dir=tmp_path, resamples=200)
    needed = {s for a, b in _text_pairs(corpus) for s in (a, b)}
    assert first.to_json()["embedding"]["embedded"] == len(needed) > 0
    assert second.to_json()["embedding"]["embedded"] == 0
    assert second.to_json()["embedding"]["cache_hits"] == len(needed)
    assert first.to_json()["edges"] == second.to_json()["edges"]


def _text_pairs(corpus: list[Trace]) -> set[tuple[str, str]]:
    by_group: dict[str, list[str]] = {}
    for t in corpus:
        by_group.setdefault(t.input_id, []).append(t.calls[2].output)
    return {(a, b) for xs in by_group.values() for i, a in enumerate(xs) for b in xs[i + 1:] if a != b}


def test_identical_texts_never_need_a_vector(tmp_path: Path) -> None:
    traces = [_trace(f"g{g}", r, SENTENCES[g % 5], "bug") for g in range(4) for r in range(3)]
    profile = analyze(traces, cache_dir=tmp_path, resamples=100)
    assert profile.to_json()["embedding"]["needed"] == 0 and profile.to_json()["embedding"]["embedded"] == 0
    assert profile.to_json()["divergence"]["D_output"] == 0.0


def test_profile_json_has_the_documented_shape(corpus: list[Trace], tmp_path: Path) -> None:
    data = analyze(corpus, cache_dir=tmp_path, resamples=200).to_json()
    json.dumps(data)  # plain JSON
    assert data["pairs"] == 12 * 3 and data["epsilon"] == 0.01
    edge = next(e for e in data["edges"] if (e["source"], e["target"]) == ("classify", "compose"))
    for key in ("n", "sigma", "sigma_ci", "sigma_n", "sigma_median", "frac_ratio_below_1",
                "frac_ratio_above_1_5", "ratio_max", "lambda", "lambda_ci", "lambda_n", "class"):
        assert key in edge, key
    node = next(n for n in data["nodes"] if n["node"] == "compose")
    for key in ("noise_floor", "noise_floor_ci", "noise_floor_n", "origin", "beta_shape", "beta_iter",
                "bifurcation_source"):
        assert key in node, key
    for key in ("D_iter", "D_shape", "D_output", "D_output_only", "D_struct"):
        assert f"{key}_ci" in data["divergence"] and data["divergence"][f"{key}_n"] == 36
    assert {"paths", "transitive", "budgets", "impact_sets", "graph"} <= set(data)


def test_faithfulness_against_a_golden_file(corpus: list[Trace], tmp_path: Path) -> None:
    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n".join(json.dumps({"input_id": f"g{g}", "node": "classify",
                                            "output": {"label": "billing", "note": "constant note"}})
                                for g in range(12)) + "\n")
    data = analyze(corpus, golden=golden, cache_dir=tmp_path, resamples=100).to_json()
    (row,) = data["faithfulness"]
    labels = [t.calls[1].output["label"] for t in corpus]
    share_bug = labels.count("bug") / len(labels)
    assert row["node"] == "classify" and row["n"] == 36
    assert row["fields"]["label"]["distance"] == pytest.approx(share_bug)
    assert row["fields"]["note"]["distance"] == 0.0
    assert row["gap"] == pytest.approx(share_bug / 2)
    assert (row["min_field"], row["max_field"]) == ("note", "label")
    assert row["fields"]["label"]["kl"] > 0


@pytest.mark.parametrize(
    ("spec", "a", "b"),
    [
        ({"output": {"type": "text"}}, "one text", "another text"),
        ({"output": {"type": "text"}}, "same", "same"),
        ({"fields": {"t": {"type": "text"}, "c": {"type": "categorical"}}}, {"t": "a", "c": "x"}, {"t": "b", "c": "y"}),
        ({"fields": {"t": {"type": "text"}}}, {"t": "a"}, {}),
        ({"fields": {"t": {"type": "text"}}}, "not a dict", {"t": "b"}),
        ({"fields": {"m": {"type": "mapping"}, "t": {"type": "text"}}},
         {"m": {"k": "v one"}, "t": "x"}, {"m": {"k": "v two", "j": "w"}, "t": "y"}),
        ({"output": {"type": "json"}}, {"a": ["x" * 40], "b": 1}, {"a": ["y" * 40], "b": 2}),
        ({"output": {"type": "list"}}, [1, 2], [2, 1]),
    ],
)
def test_the_quick_text_collector_matches_the_distance_exactly(spec: dict[str, Any], a: Any, b: Any) -> None:
    node = PipelineGraph(nodes={"n": spec}).nodes["n"]
    assert output_texts(node, [a, b], [0], [1]) == texts_to_compare(node, a, b)


def test_a_golden_file_with_bad_bytes_or_deep_nesting_names_its_line(tmp_path: Path) -> None:
    from quiver._errors import SpecError
    from quiver._observational import load_golden

    good = json.dumps({"input_id": "g0", "node": "classify", "output": "x"})
    for name, bad in (("bytes", b"\xff\xfe not text\n"), ("deep", b"[" * 100_000 + b"]" * 100_000 + b"\n")):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(good.encode() + b"\n" + bad)
        with pytest.raises(SpecError) as err:
            load_golden(path)
        assert err.value.line == 2 and str(path) in str(err.value)
