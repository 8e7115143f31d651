"""A perturbation that did not land is *not applied*: never effective, never no-op.

The pipeline of ``tests/pipelines/landing.py`` gives each operator inputs on which it
lands and inputs on which it cannot: a field only some outputs hold, a template only
some calls render, an LLM request only some calls send through a client the engine
captures. Recorded twice (four inputs, one of each combination), then one campaign runs a
perturbation of each operator. Each perturbation must land on exactly the traces where
it can (checked on the replays' target reports and on the requests the simulator
received), count the others as ``not_applied`` in ``campaign.json`` (in no stratum), and
the run must end with exit 1 and one line per such perturbation saying why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli

from quiver.experiments._campaign.stored import whole_rows

RUN_SECONDS = 180.0
"""The longest one command may take here on a loaded 2-core machine."""
PIPELINES = Path(__file__).parents[1] / "pipelines"

INPUTS = [
    {"id": "urgent-templated", "question": "my bill is wrong", "urgent": True, "templated": True, "hidden": False},
    {"id": "plain-hidden", "question": "hello there", "urgent": False, "templated": False, "hidden": True},
    {"id": "urgent-raw", "question": "bill me later", "urgent": True, "templated": False, "hidden": False},
    {"id": "templated-hidden", "question": "where is it", "urgent": False, "templated": True, "hidden": True},
]
ALL = {i["id"] for i in INPUTS}
LANDS = {  # perturbation id -> the inputs it can land on
    "urgency-override": ALL,  # it sets a field the graph declares, where the output lacks it too
    "urgency-flip": {"urgent-templated", "urgent-raw"},
    "flag-flip": {"urgent-templated", "urgent-raw"},
    "score-shift": {"urgent-templated", "urgent-raw"},
    "tags-drop": {"urgent-templated", "urgent-raw"},
    "note-keyword": {"urgent-templated", "urgent-raw"},
    "draft-swap": {"urgent-templated", "templated-hidden"},
    "lookup-hot": {"urgent-templated", "urgent-raw"},
}

RECORD = """\
pipeline: {pipelines}/landing.py:pipeline
llm: {{simulator: {{}}, model: sim-echo}}
inputs: inputs.jsonl
repeats: 2
output: {out}
"""

CAMPAIGN = """\
pipeline: {pipelines}/landing.py:pipeline
llm: {{simulator: {{}}, model: sim-echo}}
baseline: {baseline}
perturbations:
  - {{id: urgency-override, node: classify, op: override, params: {{set: {{urgency: low}}}}}}
  - {{id: urgency-flip, node: classify, op: categorical_flip, params: {{field: urgency, to: low, allow_unseen: true}}}}
  - {{id: flag-flip, node: classify, op: bool_flip, params: {{field: flagged}}}}
  - {{id: score-shift, node: classify, op: numeric_edit, params: {{field: score, action: shift, amount: 0.5}}}}
  - {{id: tags-drop, node: classify, op: list_edit, params: {{field: tags, action: remove, count: 1}}}}
  - {{id: note-keyword, node: classify, op: text_edit, params: {{field: note, action: add_keyword, keywords: [asap]}}}}
  - {{id: draft-swap, node: draft, op: prompt_swap, params: {{template: landing_draft, variant: draft_terse.txt}}}}
  - {{id: lookup-hot, node: lookup, op: param_change, params: {{temperature: 0.9}}}}
replay: {{repeats: 1, controls: 0, downstream: live}}
analysis: {{resamples: 100, permutations: 100, cache_dir: {embeddings}}}
output: {out}
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    root = tmp_path_factory.mktemp("landing")
    (root / "inputs.jsonl").write_text("".join(json.dumps(i) + "\n" for i in INPUTS), encoding="utf-8")
    (root / "draft_terse.txt").write_text("[system]\nDraft it in three words.\n[user]\n{question}\n", encoding="utf-8")
    (root / "record.yaml").write_text(RECORD.format(pipelines=PIPELINES, out=root / "rec"), encoding="utf-8")
    done = run_cli(["record", str(root / "record.yaml"), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stderr
    spec = root / "campaign.yaml"
    spec.write_text(CAMPAIGN.format(pipelines=PIPELINES, baseline=root / "rec" / "traces.jsonl",
                                    embeddings=root / "embeddings", out=root / "run"), encoding="utf-8")
    return root, run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)


def _replays(run: Path) -> dict[Any, dict[str, Any]]:
    """Each replay as the ledger holds it, by (perturbation id, input id, repeat)."""
    rows = list(whole_rows(run / "ledger.sqlite", run.parent / "rec" / "traces.jsonl").values())
    return {(r["perturbation_id"], r["trace"]["input_id"], r["trace"]["repeat"]): r for r in rows}


def test_each_perturbation_lands_exactly_where_it_can(campaign: tuple[Path, Any]) -> None:
    root, _ = campaign
    replays = _replays(root / "run")
    assert len(replays) == len(LANDS) * len(INPUTS) * 2
    for (pid, input_id, _), replay in replays.items():
        target = replay["target"]
        assert target["landed"] is (input_id in LANDS[pid]), (pid, input_id, target)
        assert (target.get("not_landed") is None) is (input_id in LANDS[pid])


@pytest.mark.parametrize("pid", sorted(LANDS))
def test_what_did_not_land_is_not_applied_in_campaign_json(campaign: tuple[Path, Any], pid: str) -> None:
    root, _ = campaign
    data = json.loads((root / "run" / "campaign.json").read_text(encoding="utf-8"))
    entry = next(p for p in data["perturbations"] if p["id"] == pid)
    assert entry["not_applied"] == 2 * (len(INPUTS) - len(LANDS[pid])), entry
    assert entry["effective"] + entry["noop"] == 2 * len(LANDS[pid]), entry
    assert sum(entry["not_applied_reasons"].values()) == entry["not_applied"]
    rows = [json.loads(line) for line in (root / "run" / "pairs.jsonl").read_text().splitlines()]
    not_applied = {r["trace_id"].split("/")[-2] for r in rows if r["perturbation_id"] == pid
                   and r["stratum"] == "not_applied"}
    assert not_applied == {i["id"] for i in INPUTS} - LANDS[pid]


def test_the_run_says_why_and_exits_1(campaign: tuple[Path, Any]) -> None:
    _, done = campaign
    assert done.code == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "replays not applied" in line]
    assert len(lines) == sum(lands != ALL for lands in LANDS.values()), lines
    by_id = {pid: next(line for line in lines if f"'{pid}'" in line) for pid in LANDS if LANDS[pid] != ALL}
    assert "template 'landing_draft'" in by_id["draft-swap"]
    assert "temperature=0.9" in by_id["lookup-hot"]
    assert "urgency" in by_id["urgency-flip"] and "'urgency-override'" not in "".join(lines)
