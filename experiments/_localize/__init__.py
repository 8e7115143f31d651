"""``quiver localize``: which step broke each failing run, by counterfactual replay.

* ``steps``: a failing run's steps and how each is intervened on (transplant, resample);
* ``search``: the sequential search of one failure's decisive step (which replays each
  round adds);
* ``run``: the localisation run through the campaign's machinery (baseline, endpoint,
  executor, a ledger of committed replays, resume);
* ``report``: its findings and ``localize.md``.
"""

from __future__ import annotations

from .report import localize_findings, localize_markdown
from .run import LocalizeResult, run_localize
from .search import Failure, job_key
from .steps import Step, failure_steps

__all__ = ["Failure", "LocalizeResult", "Step", "failure_steps", "job_key", "localize_findings",
           "localize_markdown", "run_localize"]
