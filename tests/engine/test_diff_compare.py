"""``quiver diff`` and ``quiver compare`` on deployments that differ by a known cause.

tests/pipelines/deployments.py has one switch per replay-contract dimension (prompt,
model, retrieval, tool). Corpora are recorded with the real client against the session
simulator: the unchanged deployment at two seeds, each single change, and two changes
at once. Then, for every before/after pair of the same input:

* the cause named for a pair whose first divergence is known by construction is the
  changed dimension (at least 95% of them; here all);
* no pair is given a cause that was not changed (sampling-only pairs: only sampling);
* ``compare`` flags exactly the nodes the change reaches, and passes for the same
  deployment at other seeds (20 seed pairs);
* ``diff`` runs on imported Langfuse traces and explains what they carry.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli

from quiver import Trace, compare_corpora, diff_traces, load_traces, write_traces
from quiver.replay import InputItem, LLMClient, Simulator, load_pipeline, record_corpus

TESTS = Path(__file__).parents[1]
CHANGES: dict[str, dict[str, int]] = {
    "base": {}, "prompt": {"prompt": 2}, "model": {"model": 2}, "retrieval": {"retrieval": 2}, "tool": {"tool": 2},
    "retrieval+tool": {"retrieval": 2, "tool": 2},
}
REACHED = {"prompt": {"plan"}, "model": {"answer"}, "retrieval": {"plan"}, "tool": {"lookup", "plan"}}
"""The nodes whose outputs each change moves, by construction of the pipeline."""


@pytest.fixture(scope="module")
def recorder(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fn = load_pipeline(f"{TESTS / 'pipelines' / 'deployments.py'}:pipeline")
    module = sys.modules[fn.__module__]
    inputs = [InputItem(f"q{i}", x) for i, x in enumerate(module.INPUTS)]
    client = LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-test")
    root = tmp_path_factory.mktemp("deployments")

    def record(name: str, seed: int, repeats: int = 3, limit: int | None = None) -> list[Trace]:
        module.DEPLOYMENT.update({"prompt": 1, "model": 1, "retrieval": 1, "tool": 1, **CHANGES[name]})
        out = root / f"{name}-{seed}-{repeats}-{limit}"
        result = record_corpus(fn, pipeline_name="deployments", inputs=inputs[:limit], repeats=repeats,
                               output_dir=out, llm=client, seed=seed, progress_stream=None)
        traces = load_traces(result.traces_path).traces
        assert all(t.status == "ok" for t in traces)
        return traces

    yield record
    module.DEPLOYMENT.update({"prompt": 1, "model": 1, "retrieval": 1, "tool": 1})
    client.close()


@pytest.fixture(scope="module")
def corpora(recorder: Any) -> dict[str, list[Trace]]:
    out = {name: recorder(name, seed=10 + i) for i, name in enumerate(CHANGES)}
    out["base-again"] = recorder("base", seed=99)
    return out


def _cross(before: list[Trace], after: list[Trace]) -> list[tuple[Trace, Trace]]:
    return [(a, b) for a in before for b in after if a.input_id == b.input_id]


def _outcome(t: Trace, node: str) -> Any:
    return [(c.output, c.decision) for c in t.calls if c.node == node]


def _known_cause(a: Trace, b: Trace, change: str) -> str | None:
    """The cause the first divergence must have, when the construction fixes it: every
    node before the change's landing point agrees and the landing node differs."""
    order = ["classify", "search", "lookup", "plan", "answer"]
    land = {"prompt": "plan", "model": "answer", "retrieval": "plan", "tool": "lookup"}[change]
    before = order[: order.index(land)]
    if any(_outcome(a, n) != _outcome(b, n) for n in before) or _outcome(a, land) == _outcome(b, land):
        return None
    if change == "retrieval" and "doc-b" not in a.calls[2].output:
        return None  # the changed document was not retrieved: the plan differs by sampling
    if change == "model" and _outcome(a, "plan") != _outcome(b, "plan"):
        return None
    return change


@pytest.mark.parametrize("change", ["prompt", "model", "retrieval", "tool"])
def test_diff_names_the_changed_dimension_for_pairs_known_by_construction(
    corpora: dict[str, list[Trace]], change: str,
) -> None:
    known = right = 0
    for a, b in _cross(corpora["base"], corpora[change]):
        truth = _known_cause(a, b, change)
        if truth is None:
            continue
        known += 1
        first = diff_traces(a, b).first
        right += first is not None and first.cause == truth
    assert known >= 10, known
    assert right >= 0.95 * known, (change, right, known)


@pytest.mark.parametrize("change", ["prompt", "model", "retrieval", "tool", "retrieval+tool", "base-again"])
def test_diff_never_names_a_cause_that_was_not_changed(corpora: dict[str, list[Trace]], change: str) -> None:
    allowed = {"sampling", *CHANGES.get(change, {})}
    causes = [d.first.cause for d in (diff_traces(a, b) for a, b in _cross(corpora["base"], corpora[change]))
              if d.first is not None]
    assert causes and set(causes) <= allowed, (change, sorted(set(causes)))
    within = [diff_traces(a, b).first for a, b in _cross(corpora["base"], corpora["base"]) if a is not b]
    assert {f.cause for f in within if f is not None} == {"sampling"}


def test_retrieval_drift_is_inherited_from_the_retrieval_call(corpora: dict[str, list[Trace]]) -> None:
    pairs = [diff_traces(a, b) for a, b in _cross(corpora["base"], corpora["retrieval"])]
    drift = [d.first for d in pairs if d.first is not None and d.first.cause == "retrieval"]
    assert drift
    for f in drift:
        assert (f.node, f.inherited, f.origin, f.chain[0]) == ("plan", True, "search#0", "search#0")
        assert any(e.kind == "index drift" and "doc-b" in e.detail for e in f.evidence)


@pytest.mark.parametrize("change", ["prompt", "model", "retrieval", "tool"])
def test_compare_flags_exactly_the_nodes_the_change_reaches(corpora: dict[str, list[Trace]], change: str) -> None:
    result = compare_corpora(corpora["base"], corpora[change], resamples=400)
    assert set(result.reached) == REACHED[change]
    assert result.less_consistent == []
    dimension = {"prompt": "prompt template", "model": "model", "retrieval": "retrieval", "tool": "tool"}[change]
    assert any(line.startswith(dimension) for lines in result.data["changes"].values() for line in lines)


def test_compare_passes_for_the_same_deployment_at_other_seeds(recorder: Any) -> None:
    recordings = [recorder("base", seed=1000 + seed, repeats=3, limit=6) for seed in range(21)]
    passed = 0
    for seed in range(20):  # seed s against seed s + 1
        result = compare_corpora(recordings[seed], recordings[seed + 1], resamples=300, seed=seed)
        passed += not result.less_consistent and not result.reached
    assert passed >= 19, passed


def test_compare_cli_writes_json_markdown_junit_and_exits_by_consistency(
    corpora: dict[str, list[Trace]], tmp_path: Path,
) -> None:
    for name in ("base", "base-again", "prompt"):
        write_traces(tmp_path / f"{name}.jsonl", corpora[name])
    same = run_cli(["compare", str(tmp_path / "base.jsonl"), str(tmp_path / "base-again.jsonl"),
                    "--out", str(tmp_path / "same"), "--resamples", "300"])
    assert same.code == 0, same.stderr
    data = json.loads((tmp_path / "same" / "compare.json").read_text())
    assert data["verdict"] == "pass" and data["reached"] == []
    assert "quiver compare: PASS" in (tmp_path / "same" / "compare.md").read_text()
    assert 'failures="0"' in (tmp_path / "same" / "junit.xml").read_text()
    changed = run_cli(["compare", str(tmp_path / "base.jsonl"), str(tmp_path / "prompt.jsonl"),
                       "--out", str(tmp_path / "prompt"), "--resamples", "300"])
    assert changed.code == 0 and "Reached by the change: `plan`" in changed.stdout
    missing = run_cli(["compare", str(tmp_path / "nope.jsonl"), str(tmp_path / "base.jsonl"), "--out",
                       str(tmp_path / "x")])
    assert missing.code == 2 and "does not exist" in missing.error_lines()[0]


def test_compare_exits_1_when_a_node_became_less_consistent(
    corpora: dict[str, list[Trace]], tmp_path: Path,
) -> None:
    noisy = [t.model_copy(deep=True) for t in corpora["base-again"]]
    for t in noisy:  # a tool that now carries a timestamp: every response differs
        for c in t.calls:
            if c.node == "lookup" and c.tool is not None:
                c.output = {**c.output, "at": t.repeat}
                c.tool.response_hash = f"sha256:{t.repeat}"
    write_traces(tmp_path / "before.jsonl", corpora["base"])
    write_traces(tmp_path / "after.jsonl", noisy)
    result = run_cli(["compare", str(tmp_path / "before.jsonl"), str(tmp_path / "after.jsonl"),
                      "--out", str(tmp_path / "out"), "--resamples", "300"])
    assert result.code == 1, result.stdout
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert data["less_consistent"] == ["lookup"]
    assert '<failure message="within-corpus divergence rate' in (tmp_path / "out" / "junit.xml").read_text()


def test_diff_cli_explains_a_pair_and_a_corpus(corpora: dict[str, list[Trace]], tmp_path: Path) -> None:
    a, b = next((a, b) for a, b in _cross(corpora["base"], corpora["prompt"])
                if (d := diff_traces(a, b).first) is not None and d.cause == "prompt")
    write_traces(tmp_path / "two.jsonl", [a, b])
    write_traces(tmp_path / "one.jsonl", [a])
    text = run_cli(["diff", f"{tmp_path / 'two.jsonl'}:{a.trace_id}", f"{tmp_path / 'two.jsonl'}:{b.trace_id}"])
    assert text.code == 0 and "first divergence: plan#0" in text.stdout and "cause: prompt" in text.stdout
    assert "+[user] Prefer acting over answering." in text.stdout
    same = run_cli(["diff", str(tmp_path / "one.jsonl"), str(tmp_path / "one.jsonl"), "--json"])
    assert same.code == 0 and json.loads(same.stdout)["first_divergence"] is None
    write_traces(tmp_path / "corpus.jsonl", corpora["base"])
    table = run_cli(["diff", str(tmp_path / "corpus.jsonl"), "--json", "--resamples", "200"])
    data = json.loads(table.stdout)
    assert table.code == 0 and data["pairs"] == 36 and {r["cause"] for r in data["rows"]} == {"sampling"}
    unknown = run_cli(["diff", f"{tmp_path / 'two.jsonl'}:nope", str(tmp_path / "one.jsonl")])
    assert unknown.code == 2 and "has no trace with id 'nope'" in unknown.error_lines()[0]
    many = run_cli(["diff", str(tmp_path / "two.jsonl"), str(tmp_path / "one.jsonl")])
    assert many.code == 2 and "more than one trace" in many.error_lines()[0]


def test_diff_explains_imported_langfuse_traces(tmp_path: Path) -> None:
    out = tmp_path / "lf.jsonl"
    imported = run_cli(["import", "langfuse", str(TESTS / "data" / "traces" / "langfuse" /
                                                  "agno-2025-06-11.trace.json"), "--out", str(out)])
    assert imported.code == 0, imported.stderr
    (trace,) = load_traces(out).traces
    llm = next(c for c in trace.calls if c.kind == "llm" and c.model is not None and c.output is not None)
    resampled = trace.model_copy(deep=True)
    twin = next(c for c in resampled.calls if c.call_id == llm.call_id)
    twin.output = "another answer"
    first = diff_traces(trace, resampled).first
    assert first is not None and (first.node, first.cause) == (llm.node, "sampling")
    upgraded = resampled.model_copy(deep=True)
    twin = next(c for c in upgraded.calls if c.call_id == llm.call_id)
    assert twin.model is not None
    twin.model.version = "gpt-4o-mini-2099"
    first = diff_traces(trace, upgraded).first
    assert first is not None and first.cause == "model" and "gpt-4o-mini-2099" in first.evidence[0].detail
    write_traces(tmp_path / "b.jsonl", [upgraded])
    cli = run_cli(["diff", str(out), str(tmp_path / "b.jsonl")])
    assert cli.code == 0 and "cause: model" in cli.stdout
