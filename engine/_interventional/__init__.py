"""What a perturbation campaign measures (QUIVER.md §6-§7, §11-§13).

* ``graph``: the one graph a campaign pairs its replays with and estimates from;
* ``pairing``: a recorded baseline next to its perturbed replay, as a pair result;
* ``rows``: a pair row of ``pairs.jsonl`` as a typed object;
* ``columns``: pair rows as arrays;
* ``betas``: interventional bifurcation thresholds;
* ``dose``: dose-response curves over an adaptive ladder, and the rule of its rounds;
* ``estimates``: strata, rates, negative controls and validation: ``campaign.json``;
* ``negative``: the negative control (permutation tests, Holm);
* ``results``: those estimates as typed objects, to and from JSON (``validation_rows``: the
  validation rows);
* ``reader``: reading them back from JSON, with the place of any problem;
* ``inputs``: per-input effects: exact tests per input group, Holm over Tarone's family;
* ``gate``: the statistics and the verdict of ``quiver gate``.
"""

from __future__ import annotations

from .betas import (
    MATCHED,
    MATCHED_CONTROLS,
    MATCHED_MIXED,
    MIN_BIN_PAIRS,
    QUANTILE_BINS,
    UPPER_BOUND_PAIRS,
    Threshold,
    ThresholdBin,
    beta,
)
from .columns import TIE, Columns, Event, difference, mask
from .dose import (
    DEFINED_SHARE,
    AdaptiveEstimates,
    AdaptiveSettings,
    CurvePoint,
    DoseResponse,
    RoundPlan,
    adaptive_curve,
    adaptive_estimates,
    coarse_levels,
    dose_response,
    isotonic,
    plan_round,
)
from .estimates import (
    MIN_MATCHED_GROUPS,
    MIN_MATCHED_PAIRS,
    RATES,
    STATUSES,
    STRATA,
    VERDICTS,
    campaign_estimates,
    downstream_nodes,
    holm,
    permutation_test,
)
from .gate import PATH_EVENT, GateCandidate, GateProfile, gate_levels, judge_candidate
from .graph import CampaignGraph
from .inputs import (
    CORRECTION,
    TEST,
    InputEffect,
    InputEffects,
    complete_change_p,
    exact_p,
    input_effects,
    min_attainable_p,
    replays_needed,
    tarone_family,
)
from .pairing import PairResult, Replayed, first_divergent_call, pair_results, seen_part
from .reader import CampaignFormatError
from .results import (
    CampaignEstimates,
    ControlReplays,
    NegativeControl,
    NodeTest,
    ObservationalEstimates,
    PerturbationEstimates,
    Rates,
    RowCounts,
    SkippedValidationRow,
    StratumEstimates,
    UnknownPerturbationError,
    ValidationRow,
)
from .rows import PairRow, PairStatus

__all__ = [
    "AdaptiveSettings",
    "AdaptiveEstimates",
    "adaptive_curve",
    "adaptive_estimates",
    "CurvePoint",
    "DoseResponse",
    "RoundPlan",
    "DEFINED_SHARE",
    "coarse_levels",
    "dose_response",
    "isotonic",
    "plan_round",
    "CampaignFormatError",
    "PairRow",
    "PairStatus",
    "Event",
    "TIE",
    "Columns",
    "mask",
    "difference",
    "Threshold",
    "ThresholdBin",
    "beta",
    "MIN_BIN_PAIRS",
    "QUANTILE_BINS",
    "UPPER_BOUND_PAIRS",
    "MATCHED",
    "MATCHED_CONTROLS",
    "MATCHED_MIXED",
    "CampaignEstimates",
    "PerturbationEstimates",
    "RowCounts",
    "Rates",
    "StratumEstimates",
    "ObservationalEstimates",
    "ControlReplays",
    "NegativeControl",
    "NodeTest",
    "ValidationRow",
    "SkippedValidationRow",
    "UnknownPerturbationError",
    "campaign_estimates",
    "downstream_nodes",
    "holm",
    "permutation_test",
    "STATUSES",
    "STRATA",
    "RATES",
    "MIN_MATCHED_PAIRS",
    "MIN_MATCHED_GROUPS",
    "VERDICTS",
    "CampaignGraph",
    "PairResult",
    "Replayed",
    "pair_results",
    "first_divergent_call",
    "seen_part",
    "GateProfile",
    "GateCandidate",
    "judge_candidate",
    "gate_levels",
    "PATH_EVENT",
    "InputEffect",
    "InputEffects",
    "input_effects",
    "exact_p",
    "min_attainable_p",
    "tarone_family",
    "replays_needed",
    "complete_change_p",
    "TEST",
    "CORRECTION",
]
