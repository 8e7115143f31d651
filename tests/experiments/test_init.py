"""``quiver init`` on every bundled demo: the specs it writes are valid, plan and run, and
the nodes it lists are the nodes ``quiver record`` records, with the same kinds.

Each demo runs on its first two inputs (``quiver init`` once on each; the record spec it
wrote, at two repeats; the campaign on that baseline), against the bundled simulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzing import run_cli
from spec_paths import absolute_checks

import quiver

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
DEMOS = ["quickstart", "support_bot", "multihop_qa", "langgraph_agent", "dspy_multihop", "agents_example"]
SECONDS = 600.0


def _init_args(demo: str) -> tuple[list[str], dict[str, Any]]:
    """``quiver init`` arguments that run the demo as its record spec names it, and that llm block."""
    spec = yaml.safe_load((EXPERIMENTS / demo / "record.yaml").read_text(encoding="utf-8"))
    models = [str(EXPERIMENTS / demo / m) for m in spec["llm"]["simulator"]["models"]]
    file, fn = spec["pipeline"].split(":")
    args = [str(EXPERIMENTS / demo / file) + ":" + fn, "--model", spec["llm"]["model"]]
    for model in models:
        args += ["--sim-models", model]
    return args, {"simulator": {"models": models}, "model": spec["llm"]["model"]}


def _recorded_kinds(demo: str, llm: dict[str, Any], inputs: Path, tmp_path: Path) -> dict[str, str]:
    """Node -> kind of the demo recorded by ``quiver record`` on its own spec (same inputs, llm, one repeat)."""
    spec = yaml.safe_load((EXPERIMENTS / demo / "record.yaml").read_text(encoding="utf-8"))
    file, fn = spec["pipeline"].split(":")
    spec.update(pipeline=str(EXPERIMENTS / demo / file) + ":" + fn, llm=llm, inputs=str(inputs), repeats=1,
                output=str(tmp_path / "recorded"))
    absolute_checks(spec, EXPERIMENTS / demo)
    path = tmp_path / "demo-record.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    result = run_cli(["record", str(path), "--quiet"], seconds=SECONDS)
    assert result.code == 0, result.stderr
    kinds: dict[str, str] = {}
    for trace in quiver.iter_traces(tmp_path / "recorded" / "traces.jsonl"):
        for call in trace.calls[1:]:
            assert kinds.setdefault(call.node, call.kind) == call.kind, call.node
    return kinds


@pytest.mark.slow
@pytest.mark.parametrize("demo", DEMOS)
def test_init_writes_specs_that_plan_and_run_with_the_recorded_nodes(demo: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = tmp_path / "inputs.jsonl"
    lines = (EXPERIMENTS / demo / "inputs.jsonl").read_text(encoding="utf-8").splitlines()
    inputs.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args, llm = _init_args(demo)
    init = run_cli(["init", *args, "--inputs", "inputs.jsonl", "--out-dir", "specs", "--json"], seconds=SECONDS)
    assert init.code == 0, init.stderr
    found = json.loads(init.stdout)
    assert found["traces"] == 2 and found["failed"] == 0
    assert {n["name"]: n["kind"] for n in found["nodes"]} == _recorded_kinds(demo, llm, inputs, tmp_path)

    campaign = tmp_path / "specs" / "campaign.yaml"
    text = campaign.read_text(encoding="utf-8")
    perturbed = [p["node"] for p in yaml.safe_load(text)["perturbations"]]
    assert perturbed and len(set(perturbed)) == len(perturbed)  # one per node at most
    for node in found["nodes"]:  # every node is named in a comment, with what is proposed or why not
        assert f"  # {node['name']} ({node['kind']}, " in text
    for kind in ("spec", "record"):
        path = tmp_path / "specs" / f"{'campaign' if kind == 'spec' else 'record'}.yaml"
        check = run_cli(["schema", kind, "--check", str(path)])
        assert check.code == 0, check.stdout + check.stderr

    record = run_cli(["record", "specs/record.yaml", "--repeats", "2", "--quiet"], seconds=SECONDS)
    assert record.code == 0, record.stderr
    plan = run_cli(["run", "specs/campaign.yaml", "--plan"], seconds=SECONDS)
    assert plan.code == 0, plan.stderr
    ids = [p["id"] for p in yaml.safe_load(text)["perturbations"]]
    planned = {line.split()[0] for line in plan.stdout.splitlines() if line.split()}
    assert set(ids) <= planned, plan.stdout
    run = run_cli(["run", "specs/campaign.yaml", "--quiet"], seconds=SECONDS)
    assert run.code in (0, 1), run.stderr  # 1: a finding such as a failed negative control
    result = json.loads((tmp_path / yaml.safe_load(text)["output"] / "campaign.json").read_text(encoding="utf-8"))
    pairs = {p["id"]: p["pairs"] for p in result["perturbations"]}
    assert set(pairs) == set(ids) and all(n > 0 for n in pairs.values()), pairs


def test_init_never_overwrites_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "campaign.yaml").write_text("# mine\n", encoding="utf-8")
    args, _ = _init_args("quickstart")
    result = run_cli(["init", *args, "--input", '{"ticket": "My invoice is wrong"}', "--out-dir", "specs"])
    assert result.code == 2 and result.stdout == ""
    (line,) = result.error_lines()
    assert "specs/campaign.yaml exists; quiver init never overwrites a file" in line
    assert (tmp_path / "specs" / "campaign.yaml").read_text(encoding="utf-8") == "# mine\n"
    assert not (tmp_path / "specs" / "record.yaml").exists()
