"""``quiver attribute`` on the support bot: recorded at v1, replayed against the v1 and
the v2-retrieval deployments (a subset of inputs, R = 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quiver.experiments import main

SPECS = Path(__file__).resolve().parents[2] / "experiments" / "support_bot"
INPUTS = ("twoterm-archive-workspace", "twoterm-restore-workspace", "twoterm-lock-board", "twoterm-archive-task",
          "howto-reset-password", "howto-import-trello", "twoterm-mute-task", "twoterm-share-task")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("v1")
    spec = out / "record.yaml"
    records = [json.loads(line) for line in (SPECS / "inputs.jsonl").read_text().splitlines() if line.strip()]
    (out / "inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["input_id"] in INPUTS))
    text = (SPECS / "record.yaml").read_text().replace("pipeline.py", str(SPECS / "pipeline.py"))
    text = text.replace("[sim_models.py]", f"[{SPECS / 'sim_models.py'}]")
    spec.write_text(text.replace("output: runs/support_bot", f"output: {out / 'rec'}"))
    assert main(["record", str(spec), "--quiet", "--repeats", "1"]) == 0
    return out / "rec" / "traces.jsonl"


def _attribute(corpus: Path, spec: str, out: Path) -> dict:
    assert main(["attribute", str(corpus), "--spec", str(SPECS / spec), "--repeats", "2", "--out", str(out)]) == 0
    return json.loads((out / "attribution.json").read_text())["nodes"]


def _contains_zero(entry: dict) -> bool:
    low, high = entry["increment_ci"] or (entry["increment"], entry["increment"])
    return low <= 0 <= high


def test_unchanged_deployment_attributes_nothing_to_retrieval_or_tools(corpus: Path, tmp_path: Path) -> None:
    nodes = _attribute(corpus, "record.yaml", tmp_path)
    for node, found in nodes.items():
        for dim in ("retrieval", "tools"):
            assert _contains_zero(found["increments"][dim]), (node, dim, found["increments"][dim])


def test_v2_index_is_attributed_to_retrieval_at_discovery_and_downstream_only(corpus: Path, tmp_path: Path) -> None:
    nodes = _attribute(corpus, "record_v2_retrieval.yaml", tmp_path)
    for node in ("discovery", "planner"):
        assert nodes[node]["increments"]["retrieval"]["increment_ci"][0] > 0, (node, nodes[node])
    for node in ("rewriter", "signal_analysis", "context_sufficiency", "route"):
        assert nodes[node]["increments"]["retrieval"]["increment"] == 0, (node, nodes[node])
    assert all(_contains_zero(found["increments"]["tools"]) for found in nodes.values())
