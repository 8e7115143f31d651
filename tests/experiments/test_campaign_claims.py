"""The README campaign's findings, examples and totals say only what its numbers hold.

* Every finding sentence is checked against ``campaign.json`` (``tests/findings_claims.py``):
  no "leaves the path as its control replays do" (or any other absence) unless the
  interval lies inside the equivalence margin the file states; every "not
  distinguishable" with its n, interval and the replays that would halve it.
* Every perturbation with an effective pair whose path changed shows one among its
  example pairs, and its "largest cascade" is such a pair.
* ``campaign.json`` states the LLM calls of its replays, ``summary.json``'s count.
"""

from __future__ import annotations

import json
from pathlib import Path

from findings_claims import check_claims


def test_no_finding_of_the_readme_campaign_claims_an_absence_beyond_its_margin(support_bot_run: Path) -> None:
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    assert raw["equivalence_margin"] == 0.05
    texts = check_claims(raw)
    print("\n".join(texts))
    # its path: +0.018 [-0.052, +0.089], too wide to say "no effect"
    flip = next(t for t in texts if "(turn-type-flip)" in t and "pass rate" not in t)
    assert "as its control replays do" not in flip and "not distinguishable from control at n = 225" in flip


def test_every_perturbation_that_changed_a_path_shows_one_as_its_largest_cascade(support_bot_run: Path) -> None:
    pairs = [json.loads(line) for line in (support_bot_run / "pairs.jsonl").read_text().splitlines()]
    moved = {r["perturbation_id"] for r in pairs if r.get("stratum") == "effective" and r.get("D_shape")}
    examples = json.loads((support_bot_run / "examples.json").read_text())["pairs"]
    cascades = {e["perturbation"]: e for e in examples if e["rule"] == "largest cascade"}
    shown = {e["perturbation"] for e in examples if e["events"]["D_shape"]}
    assert moved and moved <= shown
    assert all(cascades[pid]["events"]["D_shape"] for pid in moved if pid in cascades)


def test_campaign_json_states_the_llm_calls_its_replays_made(support_bot_run: Path) -> None:
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    summary = json.loads((support_bot_run / "summary.json").read_text())
    assert raw["llm_calls"] == summary["llm_calls"] > 0
