"""The gate's candidate-minus-current column: the difference of the arms' means, with an
interval from the same resamples of probe inputs, also for a node only some replays reach."""

from __future__ import annotations

import numpy as np

from quiver._interventional.gate import _compare
from quiver._stats import GroupBootstrap


def _boot(inputs: int, repeats: int) -> GroupBootstrap:
    group = np.repeat(np.arange(inputs), repeats)
    return GroupBootstrap(group, inputs, resamples=400, seed=3)


def test_a_node_only_the_candidate_reaches_differs_by_the_difference_of_the_means() -> None:
    """Every other candidate replay takes a path that reaches the node (distance 1, only the
    replay ran it); where both arms reach it they measure the same 0.2. The paired slots
    alone would give +0.000 [+0.000, +0.000] under means of 0.6 and 0.2."""
    n = 40
    reach = np.arange(n) % 2 == 0
    cand = np.where(reach, 1.0, 0.2)
    curr = np.where(reach, np.nan, 0.2)
    row = _compare(_boot(20, 2), cand, curr, margin=0.01)
    assert row["candidate"]["value"] == 0.6 and row["current"]["value"] == 0.2
    diff = row["difference"]
    assert abs(diff["value"] - (row["candidate"]["value"] - row["current"]["value"])) < 1e-9
    assert 0.0 < diff["ci"][0] <= diff["value"] <= diff["ci"][1]
    assert diff["n"] == 20 and row["rises"]


def test_with_every_slot_measured_it_is_the_mean_of_the_paired_differences() -> None:
    rng = np.random.default_rng(7)
    cand, curr = rng.random(30), rng.random(30)
    boot = _boot(10, 3)
    row = _compare(boot, cand, curr)
    paired = boot.mean(cand - curr)
    assert abs(row["difference"]["value"] - round(paired.value or 0.0, 6)) < 1e-6
    assert paired.ci is not None
    assert np.allclose(row["difference"]["ci"], paired.ci, atol=1e-6)
    assert row["difference"]["n"] == 30


def test_a_node_no_replay_of_one_arm_reached_has_no_difference() -> None:
    cand = np.full(12, 0.5)
    curr = np.full(12, np.nan)
    row = _compare(_boot(6, 2), cand, curr)
    assert row["current"]["value"] is None
    assert row["difference"] == {"value": None, "ci": None, "n": 0} and not row["rises"]
