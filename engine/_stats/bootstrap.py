"""Estimates with their sample size and a group-bootstrap confidence interval.

Every number the engine reports is an :class:`Estimate`: the value, the 95% percentile
interval from 1,000 bootstrap resamples of *input groups* (not pairs: pairs of one
group share traces and are not independent), the sample size n, and the draws
(QUIVER.md §13).

:class:`GroupBootstrap` draws the resamples once, as a (B, G) matrix of how many times
each group is taken, so that every estimator reuses the same resamples. Means and rates
over pairs reduce to per-group sums, so a bootstrap of them costs two matrix-vector
products: ``draws = (W @ sums) / (W @ counts)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Estimate", "GroupBootstrap", "DEFAULT_RESAMPLES", "DEFAULT_SEED", "percentile_interval", "rounded"]

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A value with its 95% confidence interval and sample size.

    Attributes:
        value: The point estimate (``None`` when n = 0 or it is undefined).
        ci: ``(low, high)`` percentile interval, ``None`` when it cannot be formed.
        n: The number of units it rests on (pairs, unless documented otherwise).
        draws: The bootstrap draws (NaN where a resample had no unit).
    """

    value: float | None
    ci: tuple[float, float] | None
    n: int
    draws: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def empty(cls) -> Estimate:
        """An undefined estimate (n = 0)."""
        return cls(None, None, 0)

    def as_dict(self, name: str) -> dict[str, Any]:
        """``{name: value, name_ci: [lo, hi], name_n: n}`` for JSON."""
        return {
            name: rounded(self.value),
            f"{name}_ci": [rounded(self.ci[0]), rounded(self.ci[1])] if self.ci else None,
            f"{name}_n": self.n,
        }


def rounded(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


class GroupBootstrap:
    """Resamples of input groups, drawn once and shared by every estimator.

    Args:
        group: For each unit (pair), the index of its input group.
        n_groups: How many groups there are.
        resamples: B, the number of resamples.
        seed: The seed of the resampling.
    """

    def __init__(self, group: np.ndarray, n_groups: int, *, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = DEFAULT_SEED) -> None:
        self.group = np.asarray(group, dtype=np.int64)
        self.n_groups = n_groups
        self.resamples = resamples
        rng = np.random.default_rng(seed)
        if n_groups:
            picks = rng.integers(0, n_groups, size=(resamples, n_groups))
            self.weights = np.stack([np.bincount(row, minlength=n_groups) for row in picks]).astype(np.float64)
        else:
            self.weights = np.zeros((resamples, 0))

    def group_sums(self, values: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-group sums of ``values`` and counts of units, over ``mask``."""
        m = np.ones(len(self.group), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        v = np.where(m, np.nan_to_num(np.asarray(values, dtype=np.float64)), 0.0)
        sums = np.bincount(self.group, weights=v, minlength=self.n_groups)
        counts = np.bincount(self.group, weights=m.astype(np.float64), minlength=self.n_groups)
        return sums, counts

    def mean(self, values: np.ndarray, mask: np.ndarray | None = None) -> Estimate:
        """The mean of ``values`` over ``mask``, with its bootstrap interval."""
        sums, counts = self.group_sums(values, mask)
        n = int(counts.sum())
        if n == 0:
            return Estimate.empty()
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = (self.weights @ sums) / (self.weights @ counts)
        return Estimate(float(sums.sum() / n), percentile_interval(draws), n, draws)

    def rate(self, events: np.ndarray, mask: np.ndarray | None = None) -> Estimate:
        """The fraction of units (over ``mask``) where ``events`` is true."""
        return self.mean(np.asarray(events, dtype=np.float64), mask)

    def statistic(self, fn: Callable[[np.ndarray], float | None], mask: np.ndarray | None = None) -> Estimate:
        """Any statistic of a unit selection, bootstrapped by group.

        ``fn`` receives per-unit weights (how many times each unit is in the resample,
        0 for units left out or masked) and returns the statistic, or None.
        """
        m = np.ones(len(self.group), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        n = int(m.sum())
        if n == 0:
            return Estimate.empty()
        value = fn(m.astype(np.float64))
        draws = np.array([
            np.nan if (s := fn(w[self.group] * m)) is None else s for w in self.weights
        ], dtype=np.float64)
        return Estimate(value, percentile_interval(draws), n, draws)


def percentile_interval(draws: np.ndarray) -> tuple[float, float] | None:
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)
