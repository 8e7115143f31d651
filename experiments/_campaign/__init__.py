"""``quiver run``: a perturbation campaign, end to end, resumable from its ledger.
"""

from __future__ import annotations

from .ledger import Ledger
from .run import CampaignResult, Control, controls, run_campaign, expand_jobs, select_traces, check_spec, campaign_graph, eligible_traces, load_baseline, make_executor, observational_profile, replay_context, sample_traces

__all__ = [
    "Ledger",
    "CampaignResult",
    "Control",
    "controls",
    "run_campaign",
    "expand_jobs",
    "select_traces",
    "check_spec",
    "campaign_graph",
    "eligible_traces",
    "load_baseline",
    "make_executor",
    "observational_profile",
    "replay_context",
    "sample_traces",
]
