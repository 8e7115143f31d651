"""The observational profile of a recorded corpus (QUIVER.md §3-§10): ``analyze``.

* ``sensitivity``: edge sensitivity sigma, occurrence-lift lambda, partials, paths;
* ``divergence``: divergence rates, observational thresholds, noise origins;
* ``budgets``: drift budgets and impact sets;
* ``faithfulness``: production outputs against golden ones;
* ``profile``: all of it over a corpus (``analyze``), as a :class:`Profile`.
"""

from __future__ import annotations

from .sensitivity import EdgeClass, Sigmas, EdgeSensitivity, classify, edge_sensitivity, PartialSensitivities, partial_sensitivities, PathProduct, PathProducts, path_products, critical_path, Transitive, transitive_sensitivity, DEFAULT_EPSILON, DEFAULT_DELTA, MAX_PATHS, RATIO_BIN_EDGES
from .divergence import DivergenceRates, divergence_rates, Thresholds, bifurcation_thresholds, NoiseVerdict, NoiseOrigin, noise_origin, group_minimum
from .budgets import MIN_PAIRS_ABOVE, BudgetStatus, DriftBudget, drift_budget, ImpactMember, ImpactSet, impact_set
from .faithfulness import GoldenLine, load_golden, faithfulness, golden_texts
from .profile import Profile, analyze

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
