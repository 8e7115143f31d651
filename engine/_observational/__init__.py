"""The observational profile of a recorded corpus (QUIVER.md §3-§10): ``analyze``.

* ``sensitivity``: edge sensitivity sigma, occurrence-lift lambda, partials, paths;
* ``divergence``: divergence rates, observational thresholds, noise origins;
* ``budgets``: drift budgets and impact sets;
* ``faithfulness``: production outputs against golden ones;
* ``profile``: all of it over a corpus (``analyze``), as a :class:`Profile`.
"""

from __future__ import annotations

from .budgets import MIN_PAIRS_ABOVE, BudgetStatus, DriftBudget, ImpactMember, ImpactSet, drift_budget, impact_set
from .divergence import (
    DivergenceRates,
    NoiseOrigin,
    NoiseVerdict,
    Thresholds,
    bifurcation_thresholds,
    divergence_rates,
    group_minimum,
    noise_origin,
)
from .faithfulness import GoldenLine, faithfulness, golden_texts, load_golden
from .profile import Profile, analyze
from .sensitivity import (
    DEFAULT_DELTA,
    DEFAULT_EPSILON,
    MAX_PATHS,
    RATIO_BIN_EDGES,
    EdgeClass,
    EdgeSensitivity,
    PartialSensitivities,
    PathProduct,
    PathProducts,
    Sigmas,
    Transitive,
    classify,
    critical_path,
    edge_sensitivity,
    partial_sensitivities,
    path_products,
    transitive_sensitivity,
)

__all__ = [
    "EdgeClass",
    "Sigmas",
    "EdgeSensitivity",
    "classify",
    "edge_sensitivity",
    "PartialSensitivities",
    "partial_sensitivities",
    "PathProduct",
    "PathProducts",
    "path_products",
    "critical_path",
    "Transitive",
    "transitive_sensitivity",
    "DEFAULT_EPSILON",
    "DEFAULT_DELTA",
    "MAX_PATHS",
    "RATIO_BIN_EDGES",
    "DivergenceRates",
    "divergence_rates",
    "Thresholds",
    "bifurcation_thresholds",
    "NoiseVerdict",
    "NoiseOrigin",
    "noise_origin",
    "group_minimum",
    "MIN_PAIRS_ABOVE",
    "BudgetStatus",
    "DriftBudget",
    "drift_budget",
    "ImpactMember",
    "ImpactSet",
    "impact_set",
    "GoldenLine",
    "load_golden",
    "faithfulness",
    "golden_texts",
    "Profile",
    "analyze",
]
