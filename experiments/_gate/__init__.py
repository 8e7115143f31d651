"""``quiver gate``: is a prompt change safe to deploy?

* ``run``: probes, the two arms of replays, and the verdict (``run_gate``); the jobs
  (``candidate_jobs``) and what they will cost (``plan_gate``, ``quiver gate --plan``);
* ``report``: the verdict as Markdown for a pull request and as JUnit XML for CI.
"""

from __future__ import annotations

from .report import gate_junit, gate_markdown
from .run import (
    CandidateJobs,
    GateResult,
    GateSettings,
    candidate_jobs,
    gate_settings,
    parse_candidates,
    plan_gate,
    run_gate,
)

__all__ = ["CandidateJobs", "GateResult", "GateSettings", "candidate_jobs", "gate_settings", "parse_candidates",
           "plan_gate", "run_gate", "gate_markdown", "gate_junit"]
