"""Known-answer tests: synthetic pipelines whose profile is known in closed form.

As SALib checks its Sobol estimator on the Ishigami function, each pipeline here is
built so that a quantity of QUIVER.md has an exact value, and the whole stack (the
instrumentation writing traces, pairing, type-dispatched distances, estimators) must
recover it. Each trace is recorded through the real instrumentation; the hidden state
that makes repeats differ (what a model's sampling would do) is passed per repeat.
"""

from __future__ import annotations

import contextvars
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import quiver
from quiver import Trace
from quiver._observational import analyze
from quiver._stats import NoPairsError
from quiver.replay import TraceBuilder
from quiver.replay._instrument import current_builder

FIELDS = 10
CACHE = Path(tempfile.mkdtemp(prefix="quiver-known-answers-"))


def run_synthetic(fn: Callable[..., Any], states: dict[str, list[dict[str, Any]]]) -> list[Trace]:
    """Record ``fn(**state)`` once per repeat state of each input group."""
    traces = []
    for input_id, repeats in states.items():
        for r, state in enumerate(repeats):
            builder = TraceBuilder(trace_id=f"{input_id}/{r}", run_id="synthetic", pipeline=fn.__name__,
                                   input_id=input_id, repeat=r, inputs={"input_id": input_id})

            def body(builder: TraceBuilder = builder, state: dict[str, Any] = state) -> Trace:
                current_builder.set(builder)
                return builder.finish(fn(**state))

            traces.append(contextvars.Context().run(body))
    return traces


def flags(k: int) -> dict[str, bool]:
    """Ten bool fields, the first ``k`` set: two outputs differ on |k - k'| of ten fields."""
    return {f"f{i}": i < k for i in range(FIELDS)}


@quiver.node("A")
def node_a(m: int) -> dict[str, bool]:
    return flags(m)


@quiver.node("B")
def node_b(a: dict[str, bool]) -> dict[str, bool]:
    return flags(2 * sum(a.values()))  # d_B = 2 d_A exactly


@quiver.node("C")
def node_c(b: dict[str, bool]) -> dict[str, int]:
    return {"x": 1}  # constant: insensitive to its parent


def chain(m: int) -> Any:
    return node_c(node_b(node_a(m)))


def analyse(traces: list[Trace], **kwargs: Any) -> Any:
    # no output here is text: nothing is embedded, and the cache stays empty
    return analyze(traces, embedder=lambda texts: np.ones((len(texts), 2)), cache_dir=CACHE, **kwargs)


@pytest.fixture(scope="module")
def chain_profile() -> Any:
    rng = random.Random(1)
    states = {f"g{g}": [{"m": rng.randint(0, 5)} for _ in range(3)] for g in range(40)}
    return analyse(run_synthetic(chain, states))


def test_a_linear_amplifier_edge_recovers_its_gain(chain_profile: Any) -> None:
    edge = chain_profile.edge("A", "B")
    assert edge["sigma"] == 2.0 and edge["sigma_ci"] == [2.0, 2.0]
    assert edge["class"] == "amplifier" and edge["sigma_median"] == 2.0
    assert edge["n"] == edge["sigma_n"] > 0
    assert edge["lambda"] == 1.0  # B drifts exactly when A does


def test_a_constant_node_is_insensitive(chain_profile: Any) -> None:
    edge = chain_profile.edge("B", "C")
    assert edge["sigma"] == 0.0 and edge["class"] == "insensitive"
    assert chain_profile.node("C")["origin"] == "stable"


def test_a_pure_chain_has_no_structural_divergence(chain_profile: Any) -> None:
    div = chain_profile.to_json()["divergence"]
    assert div["D_iter"] == div["D_shape"] == div["D_struct"] == 0.0
    assert div["D_output_only"] == div["D_output"] > 0
    assert div["D_iter_n"] == chain_profile.to_json()["pairs"] == 40 * 3


def test_path_products_follow_the_edges(chain_profile: Any) -> None:
    paths = {tuple(p["path"]): p for p in chain_profile.to_json()["paths"]}
    assert paths[("A", "B", "C")]["edge_sigmas"] == [2.0, 0.0] and paths[("A", "B", "C")]["sigma"] == 0.0
    transitive = {(t["source"], t["target"]): t for t in chain_profile.to_json()["transitive"]}
    assert transitive[("A", "C")]["sigma"] == 0.0 and transitive[("A", "C")]["path_product"] == 0.0


# --------------------------------------------------------------------------- thresholds

BOUNDARY = 0.35


@quiver.node("gate", kind="router")
def gate(a: dict[str, bool]) -> str:
    return quiver.decide("route", "alt" if sum(a.values()) / FIELDS > BOUNDARY else "base")


@quiver.node("U")
def unrelated(u: str) -> dict[str, str]:
    return {"label": u}


def gated(m: int, u: str) -> Any:
    arm = gate(node_a(m))
    unrelated(u)
    return arm


def test_a_gate_gives_beta_shape_at_the_smallest_distance_above_its_boundary() -> None:
    # one pair per group: a baseline (m = 0) and a repeat with m of 10 fields changed
    states = {f"g{j}": [{"m": 0, "u": "x"}, {"m": j % 11, "u": "x" if j % 3 else "y"}] for j in range(44)}
    # the fields declared with one role: left to inference, f3 (the one whose flip alone
    # crosses the boundary) would be a routing field and weigh 2
    uniform = quiver.PipelineGraph(nodes={"A": {"fields": {f"f{i}": {"type": "bool"} for i in range(FIELDS)}}})
    profile = analyse(run_synthetic(gated, states), graph=uniform)
    a = profile.node("A")
    assert a["beta_shape"] == 0.4  # 4 of 10 fields: the smallest observed distance above 0.35
    assert a["bifurcation_source"] is True
    assert a["beta_shape_n"] == sum(1 for j in range(44) if (j % 11) / 10 > BOUNDARY)
    u = profile.node("U")  # drifts independently of the gate: some bifurcating pair has d_U = 0
    assert u["beta_shape"] == 0.0 and u["bifurcation_source"] is False


# --------------------------------------------------------------------------- loops


@quiver.node("planner")
def planner(step: int, k: int) -> dict[str, Any]:
    action = quiver.decide("action", "COMPOSE" if step == k - 1 else "RETRY")
    return {"action": action}


@quiver.node("executor")
def executor(step: int) -> dict[str, int]:
    return {"step": step}


def looped(k: int) -> Any:
    for it in quiver.loop("plan", k_max=5):
        planner(it, k)
        executor(it)
        if it == k - 1:
            break
    return k


def test_a_loop_with_a_data_dependent_count_gives_the_known_d_iter_rate() -> None:
    # half the groups always stop after 1 iteration, half run [1, 2, 2]: 2 of 3 pairs differ
    states = {f"g{g}": [{"k": 1}] * 3 if g % 2 else [{"k": 1}, {"k": 2}, {"k": 2}] for g in range(30)}
    profile = analyse(run_synthetic(looped, states))
    div = profile.to_json()["divergence"]
    assert div["D_iter"] == pytest.approx(1 / 3)
    assert div["D_iter_n"] == 90
    assert set(profile.table.d_iter.tolist()) == {0, 2}  # one extra planner and executor call
    assert div["D_struct"] == 0.0 and div["D_shape"] == pytest.approx(1 / 3)
    # executor: the first calls agree, the second is missing on one side -> (0 + 1) / 2
    assert profile.node("executor")["beta_iter"] == 0.5
    # planner: its first call already differs (COMPOSE vs RETRY) -> (1 + 1) / 2
    assert profile.node("planner")["beta_iter"] == 1.0


# --------------------------------------------------------------------------- origins


@quiver.node("noisy", ignore=["label"])  # the label stands for sampling noise, which is not an input
def noisy(label: str) -> dict[str, str]:
    return {"label": label}  # intrinsic noise: differs across repeats of one input


@quiver.node("copy")
def copy(n: dict[str, str]) -> dict[str, str]:
    return {"seen": n["label"]}


@quiver.node("copy_of", parents=["noisy"])
def copy_of(label: str) -> dict[str, str]:
    return {"seen": label}


def origin_pipeline(label: str, shuffled: str) -> Any:
    n = noisy(label)
    copy(n)
    copy_of(shuffled)
    return n


def test_intrinsic_noise_makes_an_origin_and_its_children_propagators() -> None:
    rng = random.Random(3)
    states = {f"g{g}": [{"label": rng.choice("xyz"), "shuffled": "-"} for _ in range(3)] for g in range(40)}
    profile = analyse(run_synthetic(origin_pipeline, states))
    assert profile.node("noisy")["origin"] == "origin"
    assert profile.node("copy")["origin"] == "propagator"
    assert profile.node("input")["origin"] == "stable"
    assert profile.edge("noisy", "copy")["lambda"] == 1.0


def test_shuffled_pairings_lose_their_lift() -> None:
    """Negative control: the child's value taken from a random trace of the corpus."""
    rng = random.Random(4)
    labels = [[rng.choice("xy") for _ in range(3)] for _ in range(60)]
    pool = [lab for group in labels for lab in group]
    states = {
        f"g{g}": [{"label": lab, "shuffled": rng.choice(pool)} for lab in group] for g, group in enumerate(labels)
    }
    profile = analyse(run_synthetic(origin_pipeline, states))
    edge = profile.edge("noisy", "copy_of")
    low, high = edge["lambda_ci"]
    assert low < 0 < high and abs(edge["lambda"]) < 0.2
    assert profile.edge("noisy", "copy")["lambda"] == 1.0


def test_traces_with_no_same_input_group_are_refused() -> None:
    traces = run_synthetic(chain, {f"g{g}": [{"m": 1}] for g in range(5)})
    with pytest.raises(NoPairsError, match=r"no input group has two traces \(5 trace\(s\) in 5 group\(s\) of size 1\)"):
        analyse(traces)
