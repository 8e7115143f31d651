"""Per-input effects: whether a change moves an event more often than its control does,
input group by input group (DESIGN.md, "Effects live in inputs").

An average over inputs hides a change confined to one kind of input: a candidate
template that reroutes one of 16 inputs in every replay raises the average path-change
rate by 1/16, inside the noise of the other fifteen. So the gate and the campaign test
each input group on its own as well, and control the familywise error over the groups.

**The units.** Two arms over the same baseline traces: the *changed* arm (a gate's
candidate replays, a perturbation's effective pairs) and the *control* arm (the current
template's replays, the perturbation's control replays). Each unit has an event
indicator (the path changed from the recording) and a *stratum*, the baseline trace it
replays (a gate's probe; a campaign's trace). Units of one stratum share everything
upstream of the target; different traces of one input need not (their upstream calls
were sampled apart), so each trace is a stratum of its own.

**The test** of one input group, H0: within each stratum the two arms' units are
exchangeable (the change does not move the event), H1 (one-sided): the changed arm has
the event more often. Given stratum j's event total t_j over its n1_j + n0_j units, the
changed arm's count X_j is hypergeometric (n1_j draws among them); p = P(sum_j X_j >=
observed) under the convolution of the strata's laws: the exact conditional test, which
is Fisher's exact test (one-sided) with one stratum and the exact stratified
(Cochran-Mantel-Haenszel-type) test with several. Pooling a group's strata into one 2x2
table would not be valid: with one unit per arm per stratum and a rate of 1/2 in each,
the pooled hypergeometric law has half the variance of the true one. Strata with units
of one arm only carry no information on H0 and are left out of the test (their units
still count in the rates written).

**The family.** A discrete test attains few p-values: given its margins, a group's
smallest attainable p-value is p*_g = prod_j P(X_j = min(t_j, n1_j)) (every event in the
changed arm). A group whose p*_g exceeds alpha / K can never be rejected in a family of
K. Tarone's (1990) selection: K = the smallest k >= 1 such that at most k groups have
p* <= alpha / k; the family is those groups, and Holm's step-down procedure runs over it
at alpha. The selection reads only the margins, given which each test is exact, so the
familywise error rate stays at alpha (Tarone, *Biometrics* 46:515; Hommel and
Krummenauer, *Biometrics* 54:673). A group outside the family is *not testable* with
these units (reported so, never called unmoved): one where no unit had the event, or
too few units for its changes to reach significance.

**Design.** A complete change in a group of one stratum with k units per arm attains
p = 1 / C(2k, k); it reaches significance in a family of G groups when
1 / C(2k, k) <= alpha / G, and with m strata of r units per arm when
C(2r, r)^-m <= alpha / G (:func:`replays_needed`). A family can only be smaller than
the groups there are, so a design that meets the bound for every group tests every
group that changed completely.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quiver._stats import rounded

from .reader import Reader

__all__ = ["InputEffect", "InputEffects", "input_effects", "exact_p", "min_attainable_p", "tarone_family",
           "replays_needed", "complete_change_p", "holm", "TEST", "CORRECTION"]

TEST = "one-sided exact conditional test, stratified by baseline trace (Fisher's exact test with one trace)"
"""The per-input test, as ``campaign.json`` and ``gate.json`` name it."""
CORRECTION = "Holm over Tarone's family (the inputs whose changes could reach significance)"
"""The multiplicity correction, as the JSON names it."""

ROUND_OFF = 1e-9
"""Relative slack of a comparison with a level: 1 / C(6, 3) computes as 0.05000000000000001."""

CONCENTRATED_SHARE = 0.25
"""An effect is concentrated when the groups that moved are at most this share of the
groups tested: a minority of inputs carries it, and the findings name them."""

Stratum = tuple[int, int, int, int]
"""``(n1, x1, n0, x0)``: a stratum's units and events in the changed and the control arm."""


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the order given.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted p_(i) = max over j <= i of
    min(1, (m - j + 1) p_(j)). Rejecting where adjusted <= alpha is Holm's procedure.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def _law(n1: int, n0: int, t: int) -> np.ndarray:
    """P(X = k), k = 0..min(t, n1): the changed arm's events given t events in all (the
    hypergeometric law, C(t, k) C(n1 + n0 - t, n1 - k) / C(n1 + n0, n1), in exact
    integers to the division)."""
    whole = math.comb(n1 + n0, n1)
    return np.array([math.comb(t, k) * math.comb(n1 + n0 - t, n1 - k) / whole for k in range(min(t, n1) + 1)],
                    dtype=np.float64)


def _informative(strata: Sequence[Stratum]) -> list[Stratum]:
    return [s for s in strata if s[0] > 0 and s[2] > 0]


def exact_p(strata: Sequence[Stratum]) -> float | None:
    """The one-sided p-value of the exact conditional test (module docstring); None when
    no stratum has units in both arms."""
    used = _informative(strata)
    if not used:
        return None
    law = np.ones(1)
    for n1, x1, n0, x0 in used:
        law = np.convolve(law, _law(n1, n0, x1 + x0))
    observed = sum(x1 for _, x1, _, _ in used)
    return float(min(1.0, law[observed:].sum()))


def min_attainable_p(strata: Sequence[Stratum]) -> float | None:
    """The smallest p-value :func:`exact_p` can give with these margins: every event in
    the changed arm (None when no stratum has units in both arms)."""
    used = _informative(strata)
    if not used:
        return None
    return float(np.prod([_law(n1, n0, x1 + x0)[-1] for n1, x1, n0, x0 in used]))


def _at_most(p: float, level: float) -> bool:
    """``p <= level`` up to round-off."""
    return p <= level * (1 + ROUND_OFF)


def tarone_family(p_min: Sequence[float | None], alpha: float) -> tuple[int, list[bool]]:
    """Tarone's K and, per group, whether it is in the family (p* <= alpha / K)."""
    values = [np.inf if p is None else p for p in p_min]
    for k in range(1, len(values) + 1):
        if sum(_at_most(p, alpha / k) for p in values) <= k:
            return k, [_at_most(p, alpha / k) for p in values]
    return 0, [False] * len(values)


def complete_change_p(per_arm: int, strata: int = 1) -> float:
    """The p-value of a complete change: ``strata`` strata of ``per_arm`` units per arm,
    every changed unit with the event and no control unit."""
    return float(math.comb(2 * per_arm, per_arm)) ** -strata


def replays_needed(groups: int, alpha: float, strata: int = 1) -> int:
    """The fewest units per arm and stratum at which a complete change in a group of
    ``strata`` strata reaches significance in a family of ``groups`` groups at ``alpha``
    (C(2r, r)^strata >= groups / alpha)."""
    r = 1
    while math.comb(2 * r, r) ** strata * alpha * (1 + ROUND_OFF) < max(groups, 1):
        r += 1
    return r


@dataclass(frozen=True)
class InputEffect:
    """One input group's test.

    Attributes:
        input_id: The group.
        strata: Its baseline traces with units in both arms (those the test reads).
        n: Its units in the changed arm.
        events: Those with the event.
        control_n: Its units in the control arm.
        control_events: Those with the event.
        p_value: The exact one-sided p-value (None: no trace has units in both arms).
        p_min: The smallest p-value its margins allow (None: as ``p_value``).
        p_holm: The Holm-adjusted p-value within Tarone's family (None: outside it, not testable).
        moved: Whether ``p_holm`` <= alpha.
    """

    input_id: str
    strata: int
    n: int
    events: int
    control_n: int
    control_events: int
    p_value: float | None
    p_min: float | None
    p_holm: float | None
    moved: bool

    @property
    def rate(self) -> float | None:
        return self.events / self.n if self.n else None

    @property
    def control_rate(self) -> float | None:
        return self.control_events / self.control_n if self.control_n else None

    @property
    def excess(self) -> float:
        """The rate minus the control's (0 when either is undefined)."""
        return (self.rate or 0.0) - (self.control_rate or 0.0) if self.n and self.control_n else 0.0

    @property
    def testable(self) -> bool:
        """Whether it is in Tarone's family."""
        return self.p_holm is not None

    def to_json(self) -> dict[str, Any]:
        return {"input_id": self.input_id, "strata": self.strata, "n": self.n, "events": self.events,
                "rate": rounded(self.rate), "control_n": self.control_n, "control_events": self.control_events,
                "control_rate": rounded(self.control_rate), "p_value": _p(self.p_value), "p_min": _p(self.p_min),
                "p_holm": _p(self.p_holm), "moved": self.moved}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "input") -> InputEffect:
        r = Reader(data, where)
        return cls(input_id=r.string("input_id"), strata=r.integer("strata"), n=r.integer("n"),
                   events=r.integer("events"), control_n=r.integer("control_n"),
                   control_events=r.integer("control_events"), p_value=r.opt_number("p_value"),
                   p_min=r.opt_number("p_min"), p_holm=r.opt_number("p_holm"), moved=r.boolean("moved"))


def _p(p: float | None) -> float | None:
    """A p-value as written: 6 significant digits (a p of 1e-9 is not 0)."""
    return None if p is None else float(f"{p:.6g}")


@dataclass(frozen=True)
class InputEffects:
    """The per-input tests of one change (module docstring).

    Attributes:
        event: What the event is (``D_shape``; ``D_shape or D_iter``).
        alpha: The familywise level of the family.
        family: The groups in Tarone's family (those Holm runs over).
        inputs: Per group, its test, in input order.
    """

    event: str
    alpha: float
    family: int
    inputs: tuple[InputEffect, ...]

    def moved(self) -> list[InputEffect]:
        """The groups that moved, the largest excess first."""
        return sorted((g for g in self.inputs if g.moved), key=lambda g: (-g.excess, g.input_id))

    def untestable_higher(self) -> list[InputEffect]:
        """Groups outside the family whose changed arm had the event more often than the
        control arm: where a change may hide that these units cannot show."""
        return sorted((g for g in self.inputs if not g.testable and g.excess > 0),
                      key=lambda g: (-g.excess, g.input_id))

    @property
    def concentrated(self) -> bool:
        """Some group moved, and at most a quarter of the groups did: the effect lives in
        a few inputs, which the findings name (:data:`CONCENTRATED_SHARE`)."""
        return bool(self.moved()) and len(self.moved()) <= CONCENTRATED_SHARE * len(self.inputs)

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, "test": TEST, "correction": CORRECTION, "alpha": self.alpha,
                "family": self.family, "moved": [g.input_id for g in self.moved()],
                "concentrated": self.concentrated, "inputs": [g.to_json() for g in self.inputs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "per_input") -> InputEffects:
        r = Reader(data, where)
        return cls(event=r.string("event"), alpha=r.number("alpha"), family=r.integer("family"),
                   inputs=r.read_all("inputs", InputEffect.from_json))


def input_effects(group: Sequence[str], stratum: Sequence[str], changed: np.ndarray, event: np.ndarray, *,
                  alpha: float, event_name: str) -> InputEffects:
    """The per-input tests of a change (module docstring).

    Args:
        group: Per unit, its input group.
        stratum: Per unit, its baseline trace.
        changed: Per unit, whether it is of the changed arm (else the control arm).
        event: Per unit, whether it had the event.
        alpha: The familywise level.
        event_name: What the event is, for the JSON.

    Returns:
        The groups with units in the changed arm, in sorted order.
    """
    cells: dict[str, dict[str, list[int]]] = {}
    for g, s, c, e in zip(group, stratum, np.asarray(changed, dtype=bool), np.asarray(event, dtype=bool),
                          strict=True):
        cell = cells.setdefault(str(g), {}).setdefault(str(s), [0, 0, 0, 0])
        cell[0 if c else 2] += 1
        cell[1 if c else 3] += int(e)
    groups = sorted(g for g, by in cells.items() if any(v[0] for v in by.values()))
    strata = {g: [(a, b, c, d) for a, b, c, d in cells[g].values()] for g in groups}
    p = {g: exact_p(strata[g]) for g in groups}
    p_min = {g: min_attainable_p(strata[g]) for g in groups}
    _, inside = tarone_family([p_min[g] for g in groups], alpha)
    members = [g for g, keep in zip(groups, inside, strict=True) if keep and p[g] is not None]
    adjusted = dict(zip(members, holm([p[g] or 1.0 for g in members]), strict=True))
    return InputEffects(event_name, alpha, len(members), tuple(
        InputEffect(input_id=g, strata=len(_informative(strata[g])), n=sum(s[0] for s in strata[g]),
                    events=sum(s[1] for s in strata[g]), control_n=sum(s[2] for s in strata[g]),
                    control_events=sum(s[3] for s in strata[g]), p_value=p[g], p_min=p_min[g],
                    p_holm=adjusted.get(g), moved=g in adjusted and _at_most(adjusted[g], alpha))
        for g in groups))
