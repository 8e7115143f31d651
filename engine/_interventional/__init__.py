"""What a perturbation campaign measures (QUIVER.md §6-§7, §11-§13).

* ``pairing``: a recorded baseline next to its perturbed replay, as a pair result;
* ``columns``: pair rows as arrays;
* ``betas``: interventional bifurcation thresholds;
* ``estimates``: strata, rates, negative controls and validation: ``campaign.json``.
"""

from __future__ import annotations

from .columns import Event, TIE, Columns, mask, renamed, difference
from .betas import beta, MIN_BIN_PAIRS, QUANTILE_BINS, UPPER_BOUND_PAIRS, MATCHED, MATCHED_CONTROLS, MATCHED_MIXED
from .estimates import campaign_estimates, downstream_nodes, holm, permutation_test, STATUSES, STRATA, RATES
from .pairing import PairResult, pair_results, first_divergent_call, seen_part

__all__ = [
    "Event",
    "TIE",
    "Columns",
    "mask",
    "renamed",
    "difference",
    "beta",
    "MIN_BIN_PAIRS",
    "QUANTILE_BINS",
    "UPPER_BOUND_PAIRS",
    "MATCHED",
    "MATCHED_CONTROLS",
    "MATCHED_MIXED",
    "campaign_estimates",
    "downstream_nodes",
    "holm",
    "permutation_test",
    "STATUSES",
    "STRATA",
    "RATES",
    "PairResult",
    "pair_results",
    "first_divergent_call",
    "seen_part",
]
