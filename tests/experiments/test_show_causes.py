"""``quiver show`` names the perturbation as the cause where a replay perturbed its target.

The README campaign (``experiments/specs/support_bot.yaml``, run once per session) has
output operators (override, categorical flip, list edit: the target's recorded output is
changed) and an execution change (a prompt swap: the target runs live with another
prompt). In every effective example pair the first divergent call is the perturbed target
or a call it reached, and ``quiver show`` (as ``quiver diff`` of the baseline and the
replay) puts it down to the perturbation, naming the operator, never to sampling or to
the prompt the swap changed.
"""

from __future__ import annotations

import json
from pathlib import Path

from fuzzing import run_cli


def test_show_names_the_perturbation_as_the_cause_of_every_effective_pair(support_bot_run: Path) -> None:
    examples = json.loads((support_bot_run / "examples.json").read_text())
    operators = {p["id"]: p["op"] for p in json.loads((support_bot_run / "campaign.json").read_text())["perturbations"]}
    effective = [p for p in examples["pairs"] if p["stratum"] == "effective" and p["first"]]
    assert {p["perturbation"] for p in effective} == set(operators)
    for pair in effective:
        shown = run_cli(["show", str(support_bot_run), pair["pair_id"], "--json"])
        assert shown.code == 0, shown.stderr
        data = json.loads(shown.stdout)
        cause, target = data["cause"], data["target"]
        at_target = data["first"] == target
        said = ": perturbation: " if at_target else f": perturbation, inherited from {target} -> "
        assert said in cause and f"the replay's target: {operators[pair['perturbation']]}" in cause, (pair, cause)
    text = run_cli(["show", str(support_bot_run), effective[0]["pair_id"]]).stdout
    explained = text[text.index("first divergence, as `quiver diff` explains it:"):]
    assert "perturbation" in explained.splitlines()[1]
