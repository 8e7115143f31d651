"""``quiver attribute`` on the support bot: recorded at v1, replayed against the v1
deployment and against each single v2 change (a subset of inputs, R = 2). The inputs
include the seven whose planner decision the v2 model moves (``deployment_truth model``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzing import run_cli
from spec_paths import absolute_checks_text

from quiver.experiments import main

SPECS = Path(__file__).resolve().parents[2] / "experiments" / "support_bot"
INPUTS = ("twoterm-archive-workspace", "twoterm-restore-workspace", "twoterm-lock-board", "twoterm-archive-task",
          "howto-reset-password", "howto-import-trello", "twoterm-mute-task", "twoterm-share-task",
          "web-eu-outage", "web-down-now", "followup-export-mobile", "followup-recurring-two-weeks",
          "followup-token-limit", "near2-storage-export-months", "near1-export-12-months")
UPSTREAM_OF_PLANNER = ("rewriter", "signal_analysis", "context_sufficiency", "route")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("v1")
    spec = out / "record.yaml"
    records = [json.loads(line) for line in (SPECS / "inputs.jsonl").read_text().splitlines() if line.strip()]
    (out / "inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["input_id"] in INPUTS))
    text = (SPECS / "record.yaml").read_text().replace("pipeline.py", str(SPECS / "pipeline.py"))
    text = absolute_checks_text(text.replace("[sim_models.py]", f"[{SPECS / 'sim_models.py'}]"), SPECS)
    spec.write_text(text.replace("output: runs/support_bot", f"output: {out / 'rec'}"))
    assert main(["record", str(spec), "--quiet", "--repeats", "1"]) == 0
    return out / "rec" / "traces.jsonl"


def _attribute(corpus: Path, spec: str, out: Path, *dims: str) -> dict[str, Any]:
    extra = ["--dimensions", ",".join(dims)] if dims else []
    argv = ["attribute", str(corpus), "--spec", str(SPECS / spec), "--repeats", "2", "--out", str(out), *extra]
    assert main(argv) == 0
    found: dict[str, Any] = json.loads((out / "attribution.json").read_text())
    return found


def _contains_zero(entry: dict[str, Any]) -> bool:
    low, high = entry["increment_ci"] or (entry["increment"], entry["increment"])
    return bool(low <= 0 <= high)


def test_unchanged_deployment_attributes_nothing_to_any_dimension(corpus: Path, tmp_path: Path) -> None:
    found = _attribute(corpus, "record.yaml", tmp_path)
    assert found["conditions"] == ["frozen", "sampling", "retrieval", "tools", "prompt", "model"]
    assert found["reproduced"] == len(INPUTS)
    nodes = found["nodes"]
    for node, entry in nodes.items():
        for dim in ("retrieval", "tools", "prompt", "model"):
            assert _contains_zero(entry["increments"][dim]), (node, dim, entry["increments"][dim])
            # today's requests are the recorded ones: each replay is sampling's, call for call
            assert entry["increments"][dim]["increment"] == 0, (node, dim)
    # sampling is live (the simulator's nondeterminism moves some outputs), frozen is not
    assert any(entry["rates"]["sampling"]["rate"] > 0 for entry in nodes.values())
    assert all(entry["rates"]["frozen"]["rate"] == 0 for entry in nodes.values())
    # every request of a dimension's condition is one sampling sent: the cache answers it
    calls = found["llm_calls"]
    assert calls["frozen"] == 0 and calls["sampling"] > 0
    assert all(calls[d] == 0 for d in ("retrieval", "tools", "prompt", "model")), calls
    md = (tmp_path / "attribution.md").read_text()
    assert "| node | rate sampling | rate retrieval | rate tools | rate prompt | rate model |" in md


def test_v2_index_is_attributed_to_retrieval_at_discovery_and_downstream_only(corpus: Path, tmp_path: Path) -> None:
    nodes = _attribute(corpus, "record_v2_retrieval.yaml", tmp_path, "retrieval", "tools")["nodes"]
    for node in ("discovery", "planner"):
        assert nodes[node]["increments"]["retrieval"]["increment_ci"][0] > 0, (node, nodes[node])
    for node in UPSTREAM_OF_PLANNER:
        assert nodes[node]["increments"]["retrieval"]["increment"] == 0, (node, nodes[node])
    assert all(_contains_zero(found["increments"]["tools"]) for found in nodes.values())


def test_v2_prompt_is_attributed_to_prompt_at_the_composer_only(corpus: Path, tmp_path: Path) -> None:
    found = _attribute(corpus, "record_v2_prompt.yaml", tmp_path, "prompt")
    nodes = found["nodes"]
    composer = nodes["composer"]
    assert composer["increments"]["prompt"]["increment_ci"][0] > 0, composer
    # sampling sends the recorded prompt, so today's template does not leak into it
    assert composer["rates"]["sampling"]["rate"] < composer["rates"]["prompt"]["rate"]
    for node, entry in nodes.items():
        if node != "composer":
            assert entry["increments"]["prompt"]["increment"] == 0, (node, entry)
    assert 0 < found["llm_calls"]["prompt"] < found["llm_calls"]["sampling"]


def test_v2_model_is_attributed_to_model_at_the_planner_and_not_upstream(corpus: Path, tmp_path: Path) -> None:
    nodes = _attribute(corpus, "record_v2_model.yaml", tmp_path, "model")["nodes"]
    assert nodes["planner"]["increments"]["model"]["increment_ci"][0] > 0, nodes["planner"]
    for node in UPSTREAM_OF_PLANNER:
        assert nodes[node]["increments"]["model"]["increment"] == 0, (node, nodes[node])


@pytest.mark.parametrize("dims", ["", "prompt,prompt", "sampling", "retrieval,weather", " , "])
def test_dimensions_that_do_not_exist_are_refused_in_one_line(corpus: Path, tmp_path: Path, dims: str) -> None:
    result = run_cli(["attribute", str(corpus), "--spec", str(SPECS / "record.yaml"), "--dimensions", dims,
                      "--out", str(tmp_path)])
    assert result.code == 2
    [line] = result.error_lines()
    assert "--dimensions" in line and "retrieval,tools,prompt,model" in line, line
    assert not (tmp_path / "attribution.json").exists()


def _campaign_spec(folder: Path, corpus: Path, attribution: str) -> Path:
    """A campaign on four inputs of the corpus, recorded twice each, at the v2 prompt."""
    spec = folder / "campaign.yaml"
    lines = corpus.parent.parent.joinpath("inputs.jsonl").read_text().splitlines()
    (folder / "inputs.jsonl").write_text("\n".join(lines[:4]) + "\n")
    spec.write_text(
        f"pipeline: {SPECS / 'pipeline.py'}:run_v2_prompt\n"
        "name: support_bot\n"
        f"llm: {{simulator: {{models: [{SPECS / 'sim_models.py'}], nondeterminism: 0.15}}, "
        "model: support-bot-planner, params: {temperature: 0, seed: 42}}\n"
        f"inputs: {folder / 'inputs.jsonl'}\nrepeats: 2\n"
        "seed: 0\n"
        f"graph: {SPECS / 'graph.yaml'}\n"
        "perturbations:\n"
        "  - {id: cs-override, node: context_sufficiency, op: override, params: {set: {sufficient: true}}}\n"
        "replay: {controls: 0}\n"
        "analysis: {resamples: 200}\n"
        f"attribution: {attribution}\n"
        f"output: {folder / 'run'}\n",
        encoding="utf-8",
    )
    return spec


@pytest.fixture
def hashing_embedder() -> Iterator[None]:
    """The campaign's analysis embeds texts with a hash instead of a model (what is
    tested here is the attribution written after it)."""
    import quiver._observational.profile as profile
    import quiver.experiments._campaign.run as campaign_run
    from quiver._distance.embed import FunctionEmbedder

    def vectors(texts: list[str]) -> Any:
        digests = [hashlib.sha256(t.encode("utf-8", "replace")).digest()[:16] for t in texts]
        return np.array([list(d) for d in digests], dtype=float).reshape(len(texts), 16)

    with pytest.MonkeyPatch.context() as mp:
        for module in (profile, campaign_run):
            mp.setattr(module, "make_embedder", lambda spec: FunctionEmbedder(vectors, name="attribute-sha256"))
        yield


def test_campaign_attribution_block_writes_the_attribution_of_its_baseline(
    corpus: Path, tmp_path: Path, hashing_embedder: None,
) -> None:
    spec = _campaign_spec(tmp_path, corpus, "{dimensions: [prompt, model], repeats: 2, traces: 6}")
    assert main(["run", str(spec), "--quiet"]) == 0
    found = json.loads((tmp_path / "run" / "attribution" / "attribution.json").read_text())
    assert found["conditions"] == ["frozen", "sampling", "prompt", "model"] and found["repeats"] == 2
    assert found["reproduced"] == 6
    # the baseline was recorded by the same deployment: nothing to attribute
    for node, entry in found["nodes"].items():
        assert entry["increments"]["prompt"]["increment"] == 0 and entry["increments"]["prompt"]["increment_n"] == 12
        assert entry["increments"]["model"]["increment"] == 0, node
    assert found["llm_calls"]["sampling"] > 0 and found["llm_calls"]["prompt"] == 0
    assert (tmp_path / "run" / "attribution" / "attribution.md").is_file()


@pytest.mark.parametrize(("block", "field"), [
    ("{dimensions: [weather]}", "attribution.dimensions"),
    ("{dimensions: [prompt, prompt]}", "attribution.dimensions"),
    ("{dimensions: []}", "attribution.dimensions"),
    ("{repeats: 0}", "attribution.repeats"),
    ("{repeats: '3'}", "attribution.repeats"),
    ("{traces: 0}", "attribution.traces"),
    ("{sampling: true}", "attribution.sampling"),
])
def test_campaign_attribution_block_is_strict(corpus: Path, tmp_path: Path, block: str, field: str) -> None:
    result = run_cli(["run", str(_campaign_spec(tmp_path, corpus, block)), "--quiet"])
    assert result.code == 2
    [line] = result.error_lines()
    assert field in line and "campaign.yaml:" in line, line
    assert not (tmp_path / "run" / "attribution").exists()
