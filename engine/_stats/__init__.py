"""Estimates with their n and interval, and the table of pairs every estimator reads.

* ``bootstrap``: :class:`Estimate` and the group bootstrap shared by all estimators;
* ``pairs``: same-input pairs of traces and their node distances (QUIVER.md §6);
* ``format``: how numbers and estimates are written for people.
"""

from __future__ import annotations

from .bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, Estimate, GroupBootstrap, percentile_interval, rounded
from .format import DASH, fmt, fmt_ci, fmt_est, fmt_n
from .pairs import NoPairsError, PairTable, build_pairs, group_traces

__all__ = [
    "Estimate",
    "GroupBootstrap",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "percentile_interval",
    "rounded",
    "PairTable",
    "NoPairsError",
    "group_traces",
    "build_pairs",
    "DASH",
    "fmt",
    "fmt_ci",
    "fmt_est",
    "fmt_n",
]
