"""What a resumed campaign takes from its ledger, and what it refuses to take.

``quiver run SPEC --resume`` keeps every replay the ledger holds, failed ones included
(the run says how many failed, and that ``--retry-failed`` runs them again);
``--retry-failed`` removes the failed rows first, so exactly those jobs run again and
the results are those of an uninterrupted run in which they succeeded (each job's
sample keys are fixed up front, so a replay run later is the replay it would have been).

Refused, with one line naming what and the way out: replays made with other parameters,
files or code (:func:`~quiver.experiments._campaign.identity.check_identities`), replays
made from another baseline (:func:`check_baseline_identity`: the ledger keeps the
SHA-256 of the baseline's trace ids, so a line skipped as unreadable now that read then
is named), and replays of jobs the spec and baseline no longer make (a perturbation
taken out of the spec, a baseline trace that is no longer there, fewer steps or repeats).

A resume of a campaign that finished (:func:`finished`: the run folder's
:data:`FINISHED` names every result file with its SHA-256, and the jobs and identities
it was made with) is "already complete": nothing is read from the ledger and nothing
is written. A result file missing, cut or changed, or a spec or baseline edited since,
and the resume goes its ordinary way (writing the results again).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._outdir import write_text
from quiver._trace import Trace
from quiver.replay import ReplayJob

from .identity import check_identities
from .ledger import Ledger

__all__ = ["FINISHED", "Resumed", "baseline_identity", "check_baseline_identity", "finished", "mark_finished",
           "resume_state", "split_job_id", "unmark_finished"]


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


# --------------------------------------------------------------------------- the baseline


def baseline_identity(traces: Sequence[Trace]) -> str:
    """What a campaign's replays were made from: the SHA-256 of its baseline's trace ids,
    in order (a line skipped as unreadable is a trace the campaign does not have)."""
    return hashlib.sha256("\n".join(t.trace_id for t in traces).encode("utf-8")).hexdigest()


def check_baseline_identity(ledger: Ledger, traces: Sequence[Trace], skipped: Sequence[str], baseline: str) -> None:
    """Refuse a resume that reads another baseline than the one the ledger's replays were
    made from (a line that read then and is skipped now, or the other way round); record
    the baseline's identity in a ledger that holds no replay yet (or none from before
    baselines were kept).

    Args:
        ledger: The campaign's ledger.
        traces: The baseline traces this run read.
        skipped: The warnings of the baseline lines this run skipped (``FILE:LINE: ...``).
        baseline: Where the baseline comes from.

    Raises:
        QuiverError: One line naming the baseline (its first line skipped now, if any)
            and the ways out.
    """
    now = json.dumps({"traces": len(traces), "sha256": baseline_identity(traces), "skipped": len(skipped)})
    held = ledger.get_meta("baseline")
    if held is not None and len(ledger):
        old = json.loads(held)
        if old.get("sha256") != baseline_identity(traces):
            way_out = "or run the campaign into another output folder (--output DIR), where it starts afresh"
            if skipped and len(traces) < int(old.get("traces", 0)):
                first = skipped[0].removesuffix("; the line is skipped")
                raise QuiverError(f"baseline {first}: the {len(ledger)} replay(s) in {ledger.path} were made "
                                  f"with that line read ({old.get('traces')} baseline traces, {len(traces)} now): "
                                  f"restore that line, {way_out}")
            raise QuiverError(f"the baseline {baseline} holds {len(traces)} readable trace(s), not the "
                              f"{old.get('traces')} the {len(ledger)} replay(s) in {ledger.path} were made from: "
                              f"restore the baseline the campaign started with, {way_out}")
    if held != now:
        ledger.set_meta([("baseline", now)])


# --------------------------------------------------------------------------- a finished campaign

FINISHED = ".finished"
"""In a run folder, written last by a campaign that finished: how many replays it holds,
the jobs and identities they were made with, and the SHA-256 of every result file."""


_LEDGER_SIDES = ("ledger.sqlite-wal", "ledger.sqlite-journal")


def _digests(out: Path, names: Sequence[str]) -> dict[str, str] | None:
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
        except OSError:
            return None
    return found


def _what(jobs: Sequence[ReplayJob], identities: dict[str, dict[str, Any]]) -> str:
    """The SHA-256 of the campaign's job ids and identities: a spec or baseline edited
    since the campaign finished gives another."""
    digests = {pid: identity.get("digest") for pid, identity in identities.items()}  # see stored_identity
    text = json.dumps({"jobs": [j.job_id for j in jobs], "identities": digests}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def mark_finished(out: Path, jobs: Sequence[ReplayJob], identities: dict[str, dict[str, Any]],
                  files: Sequence[str]) -> None:
    """Write :data:`FINISHED` (last, after every result file), naming ``files`` (relative
    to ``out``) with their digests."""
    digests = _digests(out, files) or {}
    write_text(out / FINISHED, json.dumps({"replays": len(jobs), "campaign": _what(jobs, identities),
                                           "files": digests}, sort_keys=True) + "\n")


def unmark_finished(out: Path) -> None:
    """Remove :data:`FINISHED`: the run folder's results are about to change."""
    (out / FINISHED).unlink(missing_ok=True)


def finished(out: Path, jobs: Sequence[ReplayJob], identities: dict[str, dict[str, Any]]) -> int | None:
    """The replays of the campaign finished in ``out``, when every one of its result files
    is there whole and it was made with these jobs and identities; else None (the
    campaign has work left, its results are to be written again, or the spec or baseline
    changed: the resume then goes its ordinary way). Reads, and writes nothing."""
    try:
        held = json.loads((out / FINISHED).read_text(encoding="utf-8"))
        files, replays, what = dict(held["files"]), int(held["replays"]), str(held["campaign"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if replays != len(jobs) or what != _what(jobs, identities) or not files:
        return None
    if any((out / name).exists() and name not in files for name in _LEDGER_SIDES):
        return None  # the ledger was opened since (its write-ahead log or journal is there)
    return replays if _digests(out, sorted(files)) == files else None
