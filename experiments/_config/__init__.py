"""The YAML specs, resolved into frozen, validated models.

* ``record``: ``quiver record`` (pipeline, llm, inputs, repeats, redaction);
* ``campaign``: ``quiver run`` and ``quiver gate`` (perturbations, replay, executor, ...);
* ``llm``: the spec's ``llm:`` block made into a client (the simulator started when named).
"""

from __future__ import annotations

from .campaign import (
    AnalysisSpec,
    BudgetSpec,
    CampaignSpec,
    ExecutorSpec,
    GateSpec,
    PerturbationSpec,
    ReplaySpec,
    SelectSpec,
)
from .llm import MIN_KEY_LITERAL, key_literals, open_llm, probe_endpoint, simulator_models, spec_redactor
from .outcome import outcome_runner, outcome_settings
from .record import FidelitySpec, LLMSpec, RecordSpec, SimulatorSpec, check_outcome_inputs, load_inputs, spec_line

__all__ = [
    "SimulatorSpec",
    "LLMSpec",
    "RecordSpec",
    "FidelitySpec",
    "load_inputs",
    "check_outcome_inputs",
    "spec_line",
    "outcome_runner",
    "outcome_settings",
    "PerturbationSpec",
    "GateSpec",
    "SelectSpec",
    "ReplaySpec",
    "ExecutorSpec",
    "BudgetSpec",
    "AnalysisSpec",
    "CampaignSpec",
    "open_llm",
    "probe_endpoint",
    "spec_redactor",
    "key_literals",
    "MIN_KEY_LITERAL",
    "simulator_models",
]
