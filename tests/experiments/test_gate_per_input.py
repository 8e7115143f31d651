"""``quiver gate`` tests each input: a change confined to one input fails, and a change of nothing
fails at most at the stated familywise level.

The pipeline (``tests/pipelines/desk_router.py``) routes 16 help-desk messages; its
triage model (the bundled simulator, temperature 1) sends three of them to one queue or
another about as often, so the current template has noise of its own. A candidate
template that adds "Thank-you notes go to billing." sends the one thank-you message to
billing in every replay and changes nothing else: the path-change rate over all inputs
rises by about 1/16, inside the others' noise, so no average can catch it. The gate's
defaults (one probe per input; as many replays per arm as a complete change of one input
needs with all 16 in the family, two-sided: 7) must fail it and name the input. A candidate holding
the template's own text must fail at most at the familywise level: gated at 20 seeds, it
may fail in at most 3 (below).

The simulator runs in this process (every gate's requests go to it over loopback HTTP,
through the real ``openai`` client); the baseline is recorded once, by the first gate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli

from quiver.replay import Simulator, SimulatorConfig, load_pipeline

PIPELINE = Path(__file__).parents[1] / "pipelines" / "desk_router.py"
SEEDS = 20
MOST_FALSE_FAILS = 3
"""The most of the 20 seeds at which the unchanged candidate may fail. At a familywise
level of 0.05 the count of false fails is at most Binomial(20, 0.05), whose chance of 4 or
more is 1.6%; the gate's tests are conservative (the bootstrap tests are one-sided at
alpha / 6 each, the per-input family Holm-corrected over exact tests), so the expected
count is below 1. The seeds are fixed, so the count is a property of the code: it cannot
flake, and a gate whose false-fail rate had doubled (0.10) would exceed the bound at
these seeds with a chance of 13%, one that had tripled with 35%."""

SPEC = """\
pipeline: {pipeline}:pipeline
name: desk
llm: {{base_url: {url}, model: desk-triage, api_key_env: QUIVER_DESK_KEY}}
inputs: inputs.jsonl
repeats: 2
seed: 0
perturbations:
  - {{id: flip, node: triage, op: categorical_flip, params: {{field: queue}}}}
analysis: {{resamples: 200, permutations: 200}}
executor: {{kind: local, concurrency: 4}}
output: {output}
"""


@dataclass(frozen=True)
class Desk:
    """The spec, its candidates, and the folder of the first gate (its baseline and profile)."""

    spec: Path
    same: Path
    reroute: Path
    profile: Path
    first: dict[str, Any]


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    from quiver.experiments._gate import run_gate

    module = load_pipeline(f"{PIPELINE}:pipeline").__module__  # registers the simulated model here
    desk_router = sys.modules[module]
    folder = tmp_path_factory.mktemp("desk")
    (folder / "inputs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in desk_router.inputs()))
    same, reroute = folder / "same.txt", folder / "reroute.txt"
    same.write_text(desk_router.template_file())
    system = desk_router.TEMPLATE["system"]
    reroute.write_text(desk_router.template_file().replace(system, f"{system} {desk_router.REROUTE}"))
    with Simulator(SimulatorConfig()) as sim, pytest.MonkeyPatch.context() as env:
        env.setenv("QUIVER_DESK_KEY", "sk-desk")
        spec = folder / "spec.yaml"
        spec.write_text(SPEC.format(pipeline=PIPELINE, url=sim.url, output=folder / "run"))
        first = run_gate(spec, {"desk.triage": same}, output=folder / "seed0", seed=0, progress_stream=None)
        yield Desk(spec, same, reroute, folder / "seed0", first.data)


def _gate(desk: Desk, out: Path, candidate: Path, **settings: Any) -> dict[str, Any]:
    from quiver.experiments._gate import run_gate

    return run_gate(desk.spec, {"desk.triage": candidate}, profile_dir=desk.profile, output=out,
                    progress_stream=None, **settings).data


def test_a_template_that_reroutes_one_input_of_16_fails_and_names_it(desk: Desk, tmp_path: Path) -> None:
    out = tmp_path / "reroute"
    proc = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "gate", str(desk.spec), "--candidate",
                           f"desk.triage={desk.reroute}", "--profile", str(desk.profile), "--output", str(out),
                           "--quiet"], capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "gate.json").read_text())
    [c] = data["candidates"]
    per = c["per_input"]
    assert c["probes"] == c["inputs"] == 16 and c["repeats"] == per["replays_needed"] == 7 and per["enough_replays"]
    # two-sided at 0.025 over 16 inputs: C(14, 7) = 3432 >= 2 * 16 / 0.025 = 1280 > C(12, 6) = 924
    assert per["moved"] == ["thanks"], per
    thanks = next(g for g in per["inputs"] if g["input_id"] == "thanks")
    assert (thanks["events"], thanks["n"], thanks["control_events"], thanks["control_n"]) == (7, 7, 0, 7)
    assert thanks["p_holm"] <= data["familywise"] / 2
    # the average cannot see it: neither rate rises at the gate's level
    assert not c["rates"]["D_shape"]["rises"] and not c["rates"]["D_iter"]["rises"]
    assert [f for f in c["failures"] if "thanks" in f] == c["failures"]
    print(f"reroute: D_shape {c['rates']['D_shape']['candidate']['value']} against "
          f"{c['rates']['D_shape']['current']['value']}; thanks {thanks['events']} of {thanks['n']} against "
          f"{thanks['control_events']} of {thanks['control_n']}, Holm p = {thanks['p_holm']}")
    assert "## quiver gate: FAIL" in proc.stdout and "`thanks`" in proc.stdout
    assert "the path moved at 1 of 16 input(s): thanks (7 of 7 candidate replays" in proc.stdout
    assert f"{data['replays']:,} gate replays in" in proc.stdout
    assert f"; {data['llm_calls']:,} LLM calls (counted on the wire)" in proc.stdout
    assert data["llm_calls"] == data["replays"] == 224  # one triage call a replay
    failure = ET.parse(out / "junit.xml").getroot().find("testcase/failure")
    assert failure is not None and "input thanks" in (failure.get("message") or "")
    page = (out / "report.html").read_text()
    assert 'data-input="thanks"' in page and "gate-inputs" in page
    assert "call counts" not in proc.stdout and "loop iterations" not in proc.stdout  # no loop, nothing to say


def test_an_unchanged_template_fails_at_most_at_the_familywise_level_over_20_seeds(desk: Desk,
                                                                                   tmp_path: Path) -> None:
    runs = [desk.first] + [_gate(desk, tmp_path / f"seed{seed}", desk.same, seed=seed) for seed in range(1, SEEDS)]
    fails = []
    for seed, data in enumerate(runs):
        [c] = data["candidates"]
        assert c["per_input"]["enough_replays"] and c["inputs"] == 16 and data["seed"] == seed
        if data["verdict"] == "fail":
            fails.append((seed, c["failures"]))
    print(f"unchanged template: {len(fails)} false fail(s) in {SEEDS} seeded gates at familywise level "
          f"{runs[0]['familywise']} (rate {len(fails) / SEEDS:.2f}): {fails}")
    assert len(fails) <= MOST_FALSE_FAILS, fails


def test_too_few_replays_are_said_and_the_inputs_they_cannot_test_named(desk: Desk, tmp_path: Path) -> None:
    data = _gate(desk, tmp_path / "two", desk.reroute, repeats=2)
    [c] = data["candidates"]
    per = c["per_input"]
    assert data["verdict"] == "pass" and not per["enough_replays"] and per["replays_needed"] == 7
    assert per["moved"] == [] and "thanks" in per["untestable"]
    text = (tmp_path / "two" / "gate.md").read_text()
    assert "With 2 replays per probe and arm no input's change can be tested among 16 inputs: 7 would" in text
    assert "`thanks` (2 of 2 against 0 of 2" in text


def test_a_probe_budget_below_the_inputs_names_the_inputs_without_a_probe(desk: Desk, tmp_path: Path) -> None:
    data = _gate(desk, tmp_path / "eight", desk.same, probes=8)
    [c] = data["candidates"]
    per = c["per_input"]
    assert c["probes"] == c["inputs"] == 8 and len(per["unprobed"]) == 8
    # 8 inputs, two-sided at 0.025: C(12, 6) = 924 >= 2 * 8 / 0.025 = 640
    assert c["repeats"] == per["replays_needed"] == 6
    assert set(per["unprobed"]) | {g["input_id"] for g in per["inputs"]} == {
        json.loads(line)["input_id"] for line in (desk.spec.parent / "inputs.jsonl").read_text().splitlines()}
    text = (tmp_path / "eight" / "gate.md").read_text()
    assert "Not tested, no probe (the probe budget is below the inputs): 8 input(s)" in text
    assert all(f"`{g}`" in text for g in per["unprobed"])


@pytest.mark.parametrize("value", ["1.5", "0", "x"])
def test_the_familywise_level_is_checked_as_the_spec_checks_it(desk: Desk, tmp_path: Path, value: str) -> None:
    done = run_cli(["gate", str(desk.spec), "--candidate", f"desk.triage={desk.same}", "--familywise", value,
                    "--output", str(tmp_path / "g")], seconds=60)
    assert done.code == 2 and len(done.error_lines()) == 1 and "familywise" in done.stderr, done.stderr
    assert not (tmp_path / "g").exists()
