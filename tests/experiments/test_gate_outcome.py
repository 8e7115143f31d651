"""The gate's outcome criterion on the multi-hop QA example (experiments/specs/multihop_qa.yaml:
HotpotQA's exact match or token F1 >= 0.8 against the gold answers, non-inferiority margin
0.1): a second-hop query writer told to write no query lowers accuracy and fails; a
neutral rewording of its prompt is shown non-inferior and passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "experiments" / "specs" / "multihop_qa.yaml"
PROMPTS = ROOT / "experiments" / "multihop_qa" / "prompts"
TEMPLATE = "multihop_qa.generate_query_2"


def _gate(out: Path, candidate: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "gate", str(SPEC), "--candidate",
                           f"{TEMPLATE}={PROMPTS / candidate}", "--output", str(out), "--quiet", *extra],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads((out / "gate.json").read_text()), done.stdout


@pytest.fixture(scope="module")
def dropped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("gate") / "dropped"
    return (out, *_gate(out, "query_2_dropped.txt"))


def test_a_candidate_that_drops_the_second_hop_fails_on_the_outcome(
        dropped: tuple[Path, int, dict[str, Any], str]) -> None:
    _, code, data, stdout = dropped
    assert code == 1 and data["verdict"] == "fail"
    (c,) = data["candidates"]
    o = c["outcome"]
    assert o["decision"] == "worse" and o["test_ci"][1] < -o["margin"] == -0.1
    assert o["candidate"]["value"] < o["current"]["value"] and o["candidate"]["n"] == c["pairs"]["candidate"]
    assert any(f.startswith("the pass rate falls by") for f in c["failures"])
    assert "the candidate lowers it beyond the non-inferiority margin 0.100" in stdout
    junit = (dropped[0] / "junit.xml").read_text()
    assert 'failures="1"' in junit and "the pass rate falls by" in junit


def test_a_neutral_rewording_is_shown_non_inferior_and_passes(dropped: tuple[Path, int, dict[str, Any], str],
                                                               tmp_path: Path) -> None:
    code, data, stdout = _gate(tmp_path / "reworded", "query_2_reworded.txt", "--profile", str(dropped[0]))
    (c,) = data["candidates"]
    assert c["outcome"]["decision"] == "non-inferior" and c["outcome"]["test_ci"][0] > -0.1
    assert code == 0 and data["verdict"] == "pass", c["failures"]
    assert "the candidate keeps it within the non-inferiority margin" in stdout
