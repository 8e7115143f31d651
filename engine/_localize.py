"""Which step broke a failing run: the statistics of failure localisation by
counterfactual replay (``quiver localize``).

Who&When (ICML 2025) defines a failing run's *decisive error step* counterfactually:
replace that step's action with a correct one and let what follows run again; if the
run now succeeds, the step is decisive, and the earliest such step is the cause. Here it
is computed, not guessed. For a failing run and each of its steps k (a node call, in
program order) two kinds of replays re-run everything after k live:

* the *intervention* at k: k's output transplanted from a passing run of the same input
  (``replace``), or, when no passing run has it, k's call resampled (run again live with
  its recorded inputs);
* the *control* at k: k kept as recorded (``identity``): re-running the later steps alone
  turns some failures into passes, and k must not be blamed for what that fixes.

The effect at k is P(pass | intervention at k) − P(pass | control at k), estimated from
the two arms' replays (**[engine]** unpaired: each replay samples its downstream anew;
the interval is Newcombe's hybrid score interval for a difference of proportions, 95%).
A step is **decisive** when a one-sided Fisher exact test of "the intervention passes
more often" rejects at α / K (Bonferroni over the failure's K tested steps, α = 0.05 by
default: the chance of blaming a step that does not matter stays below α per failure).
A step is **ruled out** when even all its remaining budgeted replays going the
intervention's way could not make it decisive (curtailment), or, **[engine]**, when after
``n_min`` replays per arm the intervention passes no more often than the control. The
failure's verdict:

* ``decisive``: the earliest decisive step, every earlier tested step ruled out;
* ``undecided``: the budget ran out with an earlier step (or every step) undecided;
* ``no single step``: every tested step ruled out (no intervention raises the pass rate:
  a deterministic bug, say, that no passing run of the input escapes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Arm", "LocalizeSettings", "NodeShare", "StepStats", "Verdict", "newcombe", "node_shares", "p_greater",
           "step_stats", "verdict", "wilson"]

StepState = Literal["decisive", "ruled_out", "undecided"]
Verdict = Literal["decisive", "undecided", "no single step"]


@dataclass(frozen=True)
class LocalizeSettings:
    """The sequential test's settings.

    Attributes:
        alpha: The familywise level per failure (Bonferroni over its tested steps).
        n_min: Replays per arm before a step can be ruled out for passing no more often
            than its control.
        n_max: The most replays per arm of one step.
        budget: The most replays (both arms, every step) of one failure.
    """

    alpha: float = 0.05
    n_min: int = 3
    n_max: int = 10
    budget: int = 60


@dataclass(frozen=True)
class Arm:
    """One arm's replays of a step: how many ran (ok), and how many passed."""

    n: int = 0
    passed: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.n if self.n else None


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion (95% by default); None for n = 0."""
    if n == 0:
        return None
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(a: Arm, b: Arm) -> tuple[float, float] | None:
    """Newcombe's hybrid score interval (method 10) of rate(a) − rate(b), 95%."""
    wa, wb = wilson(a.passed, a.n), wilson(b.passed, b.n)
    if wa is None or wb is None or a.rate is None or b.rate is None:
        return None
    d = a.rate - b.rate
    lower = d - math.sqrt((a.rate - wa[0]) ** 2 + (wb[1] - b.rate) ** 2)
    upper = d + math.sqrt((wa[1] - a.rate) ** 2 + (b.rate - wb[0]) ** 2)
    return max(-1.0, lower), min(1.0, upper)


def p_greater(a: Arm, b: Arm) -> float:
    """One-sided Fisher exact p-value of "a passes more often than b": the
    hypergeometric probability, in exact integers, of ``a.passed`` or more of the
    passes falling in ``a`` given both arms' sizes and the passes in all."""
    if a.n == 0 or b.n == 0:
        return 1.0
    passes, total = a.passed + b.passed, a.n + b.n
    top = sum(math.comb(a.n, x) * math.comb(b.n, passes - x) for x in range(a.passed, min(a.n, passes) + 1))
    return top / math.comb(total, passes)


@dataclass(frozen=True)
class StepStats:
    """One tested step's arms, effect and state."""

    intervention: Arm
    control: Arm
    effect: float | None
    interval: tuple[float, float] | None
    p_value: float
    state: StepState

    def to_json(self) -> dict[str, Any]:
        return {"intervention": {"n": self.intervention.n, "passed": self.intervention.passed},
                "control": {"n": self.control.n, "passed": self.control.passed},
                "effect": None if self.effect is None else round(self.effect, 6),
                "effect_ci": None if self.interval is None else [round(x, 6) for x in self.interval],
                "p_value": round(self.p_value, 8), "state": self.state}


def step_stats(intervention: Arm, control: Arm, tested: int, settings: LocalizeSettings) -> StepStats:
    """The effect and state of one step of a failure with ``tested`` steps tested."""
    level = settings.alpha / max(tested, 1)
    p = p_greater(intervention, control)
    effect = (intervention.rate - control.rate) if intervention.rate is not None and control.rate is not None \
        else None
    state: StepState = "undecided"
    if p < level:
        state = "decisive"
    elif _cannot_reach(intervention, control, level, settings.n_max) or (
            min(intervention.n, control.n) >= settings.n_min and effect is not None and effect <= 0):
        state = "ruled_out"
    return StepStats(intervention, control, effect, newcombe(intervention, control), p, state)


def _cannot_reach(intervention: Arm, control: Arm, level: float, n_max: int) -> bool:
    """Even if every replay left to the arms (up to ``n_max`` each) went the
    intervention's way, the step would not be decisive."""
    left_i, left_c = max(n_max - intervention.n, 0), max(n_max - control.n, 0)
    best = p_greater(Arm(intervention.n + left_i, intervention.passed + left_i),
                     Arm(control.n + left_c, control.passed))
    return best >= level


def verdict(states: Sequence[StepState]) -> tuple[Verdict, int | None]:
    """The failure's verdict from its tested steps' states (in program order), and the
    index (into ``states``) of its decisive step."""
    for i, state in enumerate(states):
        if state == "decisive":
            return "decisive", i
        if state == "undecided":
            return "undecided", None
    return "no single step", None


@dataclass
class NodeShare:
    """How often a node is a failure's decisive step."""

    node: str
    decisive: int
    failures: int
    interval: tuple[float, float] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        share = self.decisive / self.failures if self.failures else None
        return {"node": self.node, "decisive": self.decisive, "failures": self.failures,
                "share": None if share is None else round(share, 6),
                "share_ci": None if self.interval is None else [round(x, 6) for x in self.interval]}


def node_shares(decisive_nodes: Sequence[str | None]) -> list[NodeShare]:
    """Per node, the share of the failures (every one localised, whatever its verdict)
    for which it is the decisive step, with its Wilson interval; the commonest first."""
    total = len(decisive_nodes)
    counts: dict[str, int] = {}
    for node in decisive_nodes:
        if node is not None:
            counts[node] = counts.get(node, 0) + 1
    shares = [NodeShare(node, k, total, wilson(k, total)) for node, k in counts.items()]
    return sorted(shares, key=lambda s: (-s.decisive, s.node))
