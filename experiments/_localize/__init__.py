"""``quiver localize``: which step broke each failing run, by counterfactual replay.

* ``steps``: a failing run's steps and how each is intervened on (transplant, resample);
* ``search``: the sequential search of one failure's decisive step (which replays each
  round adds);
* ``run``: the localisation run through the campaign's machinery (baseline, endpoint,
  executor, a ledger of committed replays, resume);
* ``show``: one failure's localisation for ``quiver show``.

Its findings, ``localize.md`` and page are the report family's (:mod:`quiver._report.localize`).
"""

from __future__ import annotations

from .run import LocalizeResult, plan_localize, run_localize
from .search import Failure, job_key
from .show import localize_listing, localize_view
from .steps import Step, failure_steps

__all__ = ["Failure", "LocalizeResult", "Step", "failure_steps", "job_key", "localize_listing", "localize_view",
           "plan_localize", "run_localize"]
