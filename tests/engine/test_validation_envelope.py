"""Validation against the natural operating envelope, on a campaign whose sigmas are known.

``tests/pipelines/envelope.py`` has three targetable edges (its docstring gives the
closed forms): ``mood -> reply``, whose observational sigma a shared cause doubles
(sigma_obs = 1, sigma_int = 1/2, probed inside the natural range of d_mood: "disagree
inside the envelope"); ``gauge -> alarm``, whose parent barely moves naturally and is
pushed far past that (sigma_obs = 0, sigma_int = 1/0.9, no pair inside: "beyond the
operating envelope"); and ``level -> summary``, linear and unconfounded (both 1/2:
"agree"). The campaign runs as a user runs it: ``quiver run`` in a subprocess, the
bundled simulator answering the draws; the baseline's draws follow from its sample keys.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quiver._interventional import CampaignEstimates
from quiver._report import interventional_report

TESTS = Path(__file__).parents[1]
PIPELINE = TESTS / "pipelines" / "envelope.py"
TEXTS = ["billing charged twice", "app crashes on start", "refund for march", "login page blank",
         "password reset loops", "invoice missing", "slow dashboard", "export fails", "cannot invite team",
         "dark mode request", "api returns 500", "wrong timezone"]

SPEC = """\
pipeline: {pipeline}:pipeline
name: envelope
llm: simulator
inputs: {inputs}
repeats: 3
seed: 0
perturbations:
  - id: mood-up
    node: mood
    op: override
    params: {{set: {{f0: true, f1: true}}}}
  - id: gauge-max
    node: gauge
    op: override
    params: {{set: {gauge}}}
  - id: level-up
    node: level
    op: override
    params: {{set: {{f0: true, f1: true}}}}
replay: {{repeats: 1, controls: 0}}
analysis: {{resamples: 300, permutations: 200, cache_dir: {cache}}}
output: {output}
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``campaign.json`` of the campaign."""
    quiver_cli = [found] if (found := shutil.which("quiver")) else [sys.executable, "-m", "quiver.experiments._cli"]
    tmp = tmp_path_factory.mktemp("envelope")
    gauge = json.dumps({f"f{i}": True for i in range(1, 10)})
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC.format(pipeline=PIPELINE, inputs=json.dumps([{"text": t} for t in TEXTS]), gauge=gauge,
                                cache=tmp / "emb", output=tmp / "run"), encoding="utf-8")
    proc = subprocess.run([*quiver_cli, "run", str(spec), "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    data: dict[str, Any] = json.loads((tmp / "run" / "campaign.json").read_text())
    return data


def _row(data: dict[str, Any], source: str) -> dict[str, Any]:
    (row,) = [v for v in data["validation"] if v["source"] == source]
    return row


def _holds(value: float, ci: list[float]) -> bool:
    return ci[0] - 1e-6 <= value <= ci[1] + 1e-6


def test_only_the_three_perturbed_edges_are_validated(campaign: dict[str, Any]) -> None:
    assert sorted((v["source"], v["target"]) for v in campaign["validation"]) == [
        ("gauge", "alarm"), ("level", "summary"), ("mood", "reply")]
    assert campaign["validation_skipped"] == []


def test_a_shared_cause_is_a_disagreement_inside_the_envelope(campaign: dict[str, Any]) -> None:
    v = _row(campaign, "mood")
    assert v["verdict"] == "disagree inside the envelope"
    assert v["sigma_obs"] == 1.0 and _holds(1.0, v["sigma_obs_ci"])  # d_reply = d_mood in every natural pair
    assert v["sigma_matched"] == 0.5 and _holds(0.5, v["sigma_matched_ci"])  # only mood's half of reply follows
    assert v["envelope"] == [0.01, 0.4] and v["share_beyond"] == 0.0  # overrides move d_mood by 0.1 or 0.2
    assert v["n_matched"] == v["n_int"] >= 5 and v["groups_matched"] >= 2 and v["agree"] is False


def test_an_edge_probed_far_past_its_natural_noise_is_beyond_the_envelope(campaign: dict[str, Any]) -> None:
    v = _row(campaign, "gauge")
    assert v["verdict"] == "beyond the operating envelope"
    assert v["sigma_obs"] == 0.0 and v["sigma_obs_ci"] == [0.0, 0.0]  # natural runs never raise the alarm
    assert v["sigma_int"] == pytest.approx(1 / 0.9, abs=1e-6) and _holds(1 / 0.9, v["sigma_int_ci"])
    assert v["envelope"] == [0.01, 0.1] and v["n_envelope"] == v["n_obs"] > 0
    assert (v["n_matched"], v["sigma_matched"], v["share_beyond"], v["share_beyond_n"]) == (0, None, 1.0, 36)
    assert v["agree"] is False  # the unmatched comparison, as before


def test_a_linear_unconfounded_edge_agrees_inside_the_envelope(campaign: dict[str, Any]) -> None:
    v = _row(campaign, "level")
    assert v["verdict"] == "agree" and v["agree"] is True
    for key in ("sigma_obs", "sigma_int", "sigma_matched"):
        assert v[key] == 0.5 and _holds(0.5, v[f"{key}_ci"])
    assert v["envelope"] == [0.01, 0.4] and v["n_matched"] == v["n_int"] and v["share_beyond"] == 0.0


def test_the_report_gives_each_edge_its_verdict(campaign: dict[str, Any]) -> None:
    text = interventional_report(CampaignEstimates.from_json(campaign))
    table = text[text.index("## Observational against interventional sigma"):]
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert lines["mood → reply"].endswith("| disagree inside the envelope |")
    assert lines["gauge → alarm"].endswith("| beyond the operating envelope |")
    assert " | [0.010, 0.100] (n " in lines["gauge → alarm"]
    assert lines["level → summary"].endswith("| agree |")
