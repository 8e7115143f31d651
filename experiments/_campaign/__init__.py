"""``quiver run``: a perturbation campaign, end to end, resumable from its ledger.

* ``checks``: what can be checked of a spec before anything runs;
* ``fidelity``: a sample of the baseline replayed frozen before anything is spent;
* ``jobs``: which traces each perturbation replays, the controls, the job order;
* ``finish``: a replay redacted, stored as a difference and paired where it ran;
* ``committer``: finished replays checked and committed, off the executor's loop;
* ``journal``: the files the ledger points into, each replay kept once;
* ``ledger``: every finished replay, committed durably, read back through one error;
* ``replays``: the replay phase (the executor, the commits, the budget);
* ``identity``: what each perturbation's replays are made with, checked on resume;
* ``resume``: what a resumed run takes from its ledger (``--retry-failed`` included);
* ``run``: :class:`CampaignRun` (what every phase shares) and ``run_campaign``;
* ``results``: pair rows read back, and the files a campaign writes;
* ``plan``: the replays, LLM calls, tokens and cost a campaign will take (``--plan``).
"""

from __future__ import annotations

from .checks import check_candidates, check_spec, inline_candidate
from .fidelity import FidelityError, check_fidelity, divergence_cause
from .jobs import Control, controls, distinct, eligible_traces, expand_jobs, sample_traces, select_traces
from .ledger import Ledger, LedgerError
from .plan import CampaignPlan, PlanRow, Usage, live_llm_calls, plan_campaign, plan_jobs
from .results import (
    collect_rows,
    failure_lines,
    failure_reason,
    not_applied_lines,
    write_results,
    write_summary,
)
from .run import CampaignResult, CampaignRun, run_campaign

__all__ = [
    "check_spec",
    "check_candidates",
    "inline_candidate",
    "FidelityError",
    "check_fidelity",
    "divergence_cause",
    "Control",
    "controls",
    "distinct",
    "eligible_traces",
    "expand_jobs",
    "sample_traces",
    "select_traces",
    "Ledger",
    "LedgerError",
    "CampaignPlan",
    "PlanRow",
    "Usage",
    "live_llm_calls",
    "plan_campaign",
    "plan_jobs",
    "collect_rows",
    "failure_lines",
    "failure_reason",
    "not_applied_lines",
    "write_results",
    "write_summary",
    "CampaignResult",
    "CampaignRun",
    "run_campaign",
]
