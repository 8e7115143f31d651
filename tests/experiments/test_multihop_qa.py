"""The multi-hop QA demo (the paper's DSPy cross-check, §5.5) as a user runs it.

The corpus is recorded once, by the ``quiver`` command from the repository root with
the bundled spec (the simulator started by the spec), and analysed with the bundled
graph file, as the demo's README says.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

import quiver
from quiver.experiments.multihop_qa.pipeline import BM25
from quiver.replay import InputItem, LLMClient, Simulator, SimulatorConfig, load_pipeline, record_corpus

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "experiments" / "multihop_qa"
DATA = DEMO / "data" / "hotpot_dev_distractor_v1_100.json"
QUIVER = shutil.which("quiver")
CHAIN = ["generate_query_1", "retrieve_1", "generate_query_2", "retrieve_2", "generate_answer"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("multihop") / "run"
    proc = run("record", "experiments/multihop_qa/record.yaml", "--output", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out / "traces.jsonl"


@pytest.fixture(scope="module")
def traces(corpus: Path) -> list[quiver.Trace]:
    return list(quiver.iter_traces(corpus))


@pytest.fixture(scope="module")
def profile(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> quiver.Profile:
    return quiver.analyze(corpus, graph=DEMO / "graph.yaml", cache_dir=tmp_path_factory.mktemp("embeddings"))


def output(trace: quiver.Trace, node: str) -> object:
    return next(c.output for c in trace.calls if c.node == node)


# --------------------------------------------------------------------------- the bundle


def test_the_inputs_are_the_hotpotqa_slice_with_its_attribution() -> None:
    records = json.loads(DATA.read_text(encoding="utf-8"))
    lines = [json.loads(line) for line in (DEMO / "inputs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(lines) == 103
    assert [line["input_id"] for line in lines] == [r["_id"] for r in records]
    assert [line["inputs"] for line in lines] == [{"question": r["question"], "question_id": r["_id"]} for r in records]
    notice = (DEMO / "data" / "NOTICE.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in notice and "Yang" in notice and "acmyu/CS592LLM-Project" in notice


def test_the_graph_file_declares_the_chain() -> None:
    graph = quiver.load_graph(DEMO / "graph.yaml")
    assert graph.edges == list(itertools.pairwise(CHAIN))
    types = {name: spec.output.type for name, spec in graph.nodes.items() if spec.output is not None}
    assert types == {
        "generate_query_1": "text", "retrieve_1": "set", "generate_query_2": "text",
        "retrieve_2": "set", "generate_answer": "text",
    }


def test_bm25_scores_follow_okapi_with_k1_1_5_and_b_0_75() -> None:
    index = BM25(["apple banana", "apple apple cherry", "durian"])
    # idf(apple) = ln(1 + 1.5/2.5), idf(cherry) = ln(1 + 2.5/1.5); avg length 2;
    # doc 1: apple tf 2, cherry tf 1, length 3 -> k1 (1 - b + b * 3/2) = 2.0625.
    assert index.score("apple cherry", 1) == pytest.approx(
        0.4700036 * 2 * 2.5 / (2 + 2.0625) + 0.9808293 * 2.5 / (1 + 2.0625)
    )
    assert [i for i, _ in index.top_k("apple cherry", 3)] == [1, 0, 2]
    assert index.top_k("nothing matches", 2) == [(0, 0.0), (1, 0.0)]  # ties keep document order


# --------------------------------------------------------------------------- recording


def test_the_spec_records_every_question_three_times(traces: list[quiver.Trace]) -> None:
    assert len(traces) == 309 and all(t.status == "ok" for t in traces)
    repeats: dict[str, list[int]] = defaultdict(list)
    for t in traces:
        repeats[t.input_id].append(t.repeat)
    assert len(repeats) == 103 and all(sorted(r) == [0, 1, 2] for r in repeats.values())


def test_every_trace_is_the_five_node_chain(traces: list[quiver.Trace]) -> None:
    for trace in traces:
        calls = [c for c in trace.calls if c.node != "input"]
        assert [c.node for c in calls] == CHAIN
        assert [c.kind for c in calls] == ["llm", "retrieval", "llm", "retrieval", "llm"]
        ids = {c.node: c.call_id for c in calls}
        for parent, child in itertools.pairwise(calls):
            assert ids[parent.node] in child.parents
        assert all(c.decision in (None, {}) for c in trace.calls)


def test_retrieval_calls_record_their_ranked_passages(traces: list[quiver.Trace]) -> None:
    for call in (c for t in traces for c in t.calls if c.kind == "retrieval"):
        assert call.output == [d.doc_id for d in call.retrieval]
        assert [d.rank for d in call.retrieval] == list(range(len(call.output)))
        assert 2 <= len(call.output) <= 3
        scores = [d.score for d in call.retrieval]
        assert scores == sorted(scores, reverse=True)


def test_llm_calls_record_their_template_and_sampling(traces: list[quiver.Trace]) -> None:
    for call in (c for t in traces for c in t.calls if c.kind == "llm"):
        assert call.prompt.template_id == f"multihop_qa.{call.node}"
        assert call.model.name.startswith("multihop-") and call.model.params["temperature"] == 0.7


def test_recording_in_process_gives_the_same_corpus(traces: list[quiver.Trace], tmp_path: Path) -> None:
    lines = (DEMO / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    items = [InputItem.from_record(json.loads(line)) for line in lines]
    fn = load_pipeline("quiver.experiments.multihop_qa.pipeline:run")
    config = SimulatorConfig(models=["quiver.experiments.multihop_qa.sim_models"], nondeterminism=0.05)
    with Simulator(config) as sim:
        client = LLMClient(base_url=sim.url, model="multihop-query", api_key="sk-test", params={"temperature": 0.7})
        try:
            result = record_corpus(
                fn, pipeline_name="multihop_qa", inputs=items, repeats=3, output_dir=tmp_path,
                llm=client, concurrency=4, seed=0, progress_stream=None,
            )
        finally:
            client.close()
    again = [(t.input_id, t.repeat, [c.output for c in t.calls]) for t in quiver.iter_traces(result.traces_path)]
    expected = [(t.input_id, t.repeat, [c.output for c in t.calls]) for t in traces[:12]]
    assert again == expected


# --------------------------------------------------------------------------- analysis


def test_a_chain_has_no_structural_divergence(profile: quiver.Profile) -> None:
    divergence = profile.data["divergence"]
    assert divergence["n_pairs"] == 309
    assert divergence["D_iter"] == divergence["D_shape"] == divergence["D_struct"] == 0.0


def test_repeats_still_differ_in_value(profile: quiver.Profile) -> None:
    divergence = profile.data["divergence"]
    assert divergence["D_output"] > 0.5
    assert divergence["D_output_only"] == divergence["D_output"]


def test_the_reader_absorbs_changes_in_the_retrieved_passages(profile: quiver.Profile) -> None:
    edge = profile.edge("retrieve_2", "generate_answer")
    assert edge["class"] == "absorber" and edge["n"] >= 50
    assert edge["sigma"] < 1 and edge["sigma_ci"][1] < 1


def answer_passages(trace: quiver.Trace) -> str:
    prompt = next(c.prompt for c in trace.calls if c.node == "generate_answer")
    return prompt.assembled[-1].content.split("Passages:", 1)[1]


def test_the_answer_stays_while_the_key_passage_is_retrieved(traces: list[quiver.Trace]) -> None:
    gold = {r["_id"]: r["answer"] for r in json.loads(DATA.read_text(encoding="utf-8"))}

    def holds_answer(trace: quiver.Trace) -> bool:
        answer = gold[trace.input_id]
        return answer not in ("yes", "no") and answer.lower() in answer_passages(trace).lower()

    groups: dict[str, list[quiver.Trace]] = defaultdict(list)
    for t in traces:
        groups[t.input_id].append(t)
    pairs = [
        (a, b) for ts in groups.values() for a, b in itertools.combinations(ts, 2)
        if set(output(a, "retrieve_2")) != set(output(b, "retrieve_2")) and holds_answer(a) and holds_answer(b)
    ]
    same = sum(output(a, "generate_answer") == output(b, "generate_answer") for a, b in pairs)
    assert len(pairs) >= 30 and same >= 0.75 * len(pairs)


def test_the_first_query_amplifies_into_its_retrieval(profile: quiver.Profile) -> None:
    edge = profile.edge("generate_query_1", "retrieve_1")
    assert edge["class"] == "amplifier" and edge["sigma_ci"][0] > 1


# --------------------------------------------------------------------------- replay


def test_replay_check_reproduces_every_trace(corpus: Path, tmp_path: Path) -> None:
    proc = run(
        "replay", str(corpus), "--pipeline", "experiments/multihop_qa/pipeline.py:run", "--check",
        "--out", str(tmp_path / "check"), "--quiet",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = sum(1 for _ in quiver.iter_traces(corpus))
    assert f"{n} of {n} traces reproduce exactly" in proc.stdout
    report = json.loads((tmp_path / "check" / "check.json").read_text())
    assert report["traces"] == report["reproduced"] == n and report["diverged"] == []
    replayed = list(quiver.iter_traces(tmp_path / "check" / "replayed.jsonl"))
    recorded = list(quiver.iter_traces(corpus))
    strip = lambda t: [c.model_dump(exclude={"started_at", "ended_at"}) for c in t.calls]  # noqa: E731
    assert [strip(t) for t in replayed] == [strip(t) for t in recorded]
