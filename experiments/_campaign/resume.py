"""What a resumed campaign takes from its ledger, and what it refuses to take.

``quiver run SPEC --resume`` keeps every replay the ledger holds, failed ones included
(the run says how many failed, and that ``--retry-failed`` runs them again);
``--retry-failed`` removes the failed rows first, so exactly those jobs run again and
the results are those of an uninterrupted run in which they succeeded (each job's
sample keys are fixed up front, so a replay run later is the replay it would have been).

Refused, with one line naming what and the way out: replays made with other parameters,
files or code (:func:`~quiver.experiments._campaign.identity.check_identities`), and
replays of jobs the spec and baseline no longer make (a perturbation taken out of the
spec, a baseline trace that is no longer there, fewer steps or repeats).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Trace
from quiver.replay import ReplayJob

from .identity import check_identities
from .ledger import Ledger

__all__ = ["Resumed", "resume_state", "split_job_id"]


@dataclass
class Resumed:
    """What a run takes from its ledger."""

    done: set[str]
    """The job ids the ledger holds (after ``--retry-failed`` removed the failed ones)."""
    failed_kept: int = 0
    """Failed replays kept as they are (a plain ``--resume``)."""
    retried: int = 0
    """Failed replays removed to run again (``--retry-failed``)."""


def split_job_id(job_id: str) -> tuple[str, str, str, str]:
    """``(perturbation, step, trace id, repeat)`` of a job id (a trace id may hold ``/``)."""
    parts = job_id.split("/")
    if len(parts) < 4:
        return job_id, "", "", ""
    return parts[0], parts[1], "/".join(parts[2:-1]), parts[-1]


def _refuse_strange(ledger: Ledger, done: set[str], jobs: Sequence[ReplayJob], traces: Sequence[Trace],
                    groups: set[str], baseline: str) -> None:
    strange = sorted(done - {j.job_id for j in jobs})
    if not strange:
        return
    way_out = "or run the campaign into another output folder (--output DIR)"
    trace_ids = {t.trace_id for t in traces}
    group, _, trace_id, _ = split_job_id(strange[0])
    if group not in groups:
        what = "control" if group.startswith("control.") else "perturbation"
        raise QuiverError(f"{ledger.path} holds replays of {what} {group!r}, which the spec no longer makes: "
                          f"put it back in the spec, {way_out}")
    if trace_id not in trace_ids:
        raise QuiverError(f"{ledger.path} holds replays of baseline trace {trace_id!r}, which the baseline "
                          f"{baseline} no longer holds: restore the baseline the campaign started with, {way_out}")
    raise QuiverError(f"{ledger.path} holds job {strange[0]!r}, which this spec does not make (fewer steps, repeats "
                      f"or selected traces than when the campaign started): restore the spec, {way_out}")


def resume_state(ledger: Ledger, jobs: Sequence[ReplayJob], traces: Sequence[Trace],
                 identities: dict[str, dict[str, Any]], spec_path: Path, baseline: str, *,
                 retry_failed: bool = False) -> Resumed:
    """The jobs the ledger holds, once it is known they are this campaign's and still
    current; with ``retry_failed``, the failed ones removed from it to run again.

    Args:
        ledger: The campaign's ledger.
        jobs: Every job of the campaign.
        traces: The baseline traces.
        identities: What each perturbation's replays are made with now.
        spec_path: The spec file (named in the way out).
        baseline: Where the baseline comes from (named when a trace is missing).
        retry_failed: Remove the failed replays' rows so that they run again.

    Raises:
        QuiverError: The ledger holds replays made with other parameters, files or code,
            or replays of jobs the spec and baseline no longer make.
    """
    done = ledger.done()
    check_identities(ledger, identities, done, spec_path)
    _refuse_strange(ledger, done, jobs, traces, set(identities), baseline)
    failed = ledger.failed() if done else []
    if not retry_failed:
        return Resumed(done, failed_kept=len(failed))
    ledger.forget(failed)
    return Resumed(done - set(failed), retried=len(failed))
