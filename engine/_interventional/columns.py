"""Pair rows of a campaign as arrays, shared by the interventional estimates
(:mod:`quiver._interventional`) and the thresholds (:mod:`quiver._interventional`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from quiver._stats import Estimate, GroupBootstrap, percentile_interval

from .rows import PairRow

__all__ = ["Event", "DoseEvent", "TIE", "Columns", "mask", "difference"]

Event = Literal["D_shape", "D_iter"]
DoseEvent = Literal["D_shape", "D_iter", "outcome"]
"""What an adaptive ladder follows: a path change, or the replay's outcome not passing."""

TIE = 1e-12
"""Above 0 beyond round-off: an excess of exactly 0 can come out as 1e-17."""


def _float(x: Any) -> float:
    return np.nan if x is None else float(x)


def _not_passed(status: Any) -> float:
    """1.0 for an outcome that did not pass (an error is not a pass), 0.0 for a pass, NaN for none."""
    return np.nan if status is None else float(status != "pass")


@dataclass(frozen=True)
class Columns:
    """The ok pair rows of a selection, as arrays (NaN where a value is None)."""

    groups: list[str]
    group: np.ndarray
    trace: list[str]
    step: np.ndarray
    stratum: np.ndarray
    magnitude: np.ndarray
    d_iter: np.ndarray
    d_shape: np.ndarray
    d_output: np.ndarray
    d_struct: np.ndarray
    d: dict[str, np.ndarray]
    fails: np.ndarray
    """Per row, 1.0 when the replay's outcome did not pass (fail or error), 0.0 when it
    passed, NaN when the replay carries no outcome."""
    baseline_fails: np.ndarray
    """The same of the recorded baseline trace."""

    @classmethod
    def of(cls, rows: Sequence[PairRow], nodes: Sequence[str]) -> Columns:
        """The rows as arrays; ``d`` holds the distances of ``nodes`` (NaN: None or absent)."""
        groups = sorted({str(r.input_id) for r in rows})
        index = {g: i for i, g in enumerate(groups)}
        return cls(
            groups=groups,
            group=np.array([index[str(r.input_id)] for r in rows], dtype=np.int64),
            trace=[str(r.trace_id) for r in rows],
            step=np.array([r.step or 0 for r in rows], dtype=np.int64),
            stratum=np.array([r.stratum or "" for r in rows], dtype=object),
            magnitude=np.array([_float(r.magnitude) for r in rows], dtype=np.float64),
            d_iter=np.array([r.d_iter > 0 for r in rows], dtype=bool),
            d_shape=np.array([r.d_shape for r in rows], dtype=bool),
            d_output=np.array([r.d_output for r in rows], dtype=bool),
            d_struct=np.array([r.d_struct for r in rows], dtype=bool),
            d={n: np.array([_float(r.d.get(n)) for r in rows], dtype=np.float64) for n in nodes},
            fails=np.array([_not_passed((r.outcome or {}).get("replay")) for r in rows], dtype=np.float64),
            baseline_fails=np.array([_not_passed((r.outcome or {}).get("baseline")) for r in rows], dtype=np.float64),
        )

    def bootstrap(self, resamples: int, seed: int) -> GroupBootstrap:
        return GroupBootstrap(self.group, len(self.groups), resamples=resamples, seed=seed)

    def event(self, name: Event) -> np.ndarray:
        return self.d_shape if name == "D_shape" else self.d_iter


def mask(size: int, idx: np.ndarray) -> np.ndarray:
    """A boolean mask of ``size`` with ``idx`` set."""
    out = np.zeros(size, dtype=bool)
    out[idx] = True
    return out


def difference(a: Estimate, b: Estimate) -> Estimate:
    """a - b draw by draw (shared or independent resamples alike); n = a.n."""
    if a.value is None or b.value is None or a.draws is None or b.draws is None:
        return Estimate(None, None, a.n)
    draws = a.draws - b.draws
    return Estimate(a.value - b.value, percentile_interval(draws), a.n, draws)
