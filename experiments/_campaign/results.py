"""A finished campaign's results: pair rows from the ledger, then ``pairs.jsonl``,
``replays.jsonl``, ``campaign.json``, ``report.md`` and ``summary.json``.

Pairs are computed once every job is in the ledger: the replays are read back in job
order and turned into pair rows ``PAIR_CHUNK`` at a time (one embedding pass over each
chunk's new texts), so every executor and every resumed run gets the same batches and
the same numbers.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._interventional import PairRow, campaign_estimates, pair_results
from quiver._observational import Profile
from quiver._progress import Progress
from quiver._report import interventional_report
from quiver._trace import Trace, TraceWriter
from quiver.replay import ReplayJob, ReplayResult

from .jobs import controls, distinct
from .ledger import Ledger

if TYPE_CHECKING:
    from .run import CampaignResult, CampaignRun

__all__ = ["PAIR_CHUNK", "pair_rows", "write_results", "write_summary"]

PAIR_CHUNK = 256
"""Replays turned into pair rows per ``pair_results`` call (one embedding pass over
their new texts), in job order: the same batches on every executor and after a resume."""


def pair_rows(run: CampaignRun, ledger: Ledger, traces: list[Trace], graph: PipelineGraph,
              jobs: list[ReplayJob], steps: dict[str, int]) -> list[PairRow]:
    """Every job's pair row, in job order, from the ledger; writes ``replays.jsonl`` on the way."""
    spec, out = run.spec, run.out
    jobs_by_id = {j.job_id: j for j in jobs}
    by_id = {t.trace_id: t for t in traces}
    store = run.embedding_store()
    progress = Progress("pairs", len(jobs), stream=run.stream)
    rows: list[PairRow] = []

    def pair_chunk(chunk: list[tuple[str, dict[str, Any]]], writer: TraceWriter) -> None:
        replays = [(job_id, ReplayResult.from_json(data, by_id[jobs_by_id[job_id].trace["trace_id"]]))
                   for job_id, data in chunk if "error" not in data]
        pairs = iter(pair_results([r for _, r in replays], graph, epsilon=spec.analysis.epsilon, store=store))
        replayed = dict(replays)
        for job_id, data in chunk:
            job = jobs_by_id[job_id]
            common = {"job_id": job_id, "perturbation_id": job_id.split("/")[0], "replay_id": job.perturbation_id,
                      "step": steps[job_id]}
            if "error" in data:
                baseline = by_id[job.trace["trace_id"]]
                rows.append(PairRow.from_json({
                    **common, "trace_id": baseline.trace_id, "input_id": baseline.input_id, "repeat": job.repeat,
                    "status": "failed", "node": job.node, "op": job.op, "params": job.params, "error": data["error"],
                }))
                continue
            pair = next(pairs)
            rows.append(PairRow.from_json({**pair.to_json(traces=False), **common,
                                           "retries": replayed[job_id].retries}))
            writer.write(replayed[job_id].trace)
        progress.advance(len(chunk), failed=sum("error" in d for _, d in chunk))

    try:
        with TraceWriter(out / "replays.jsonl.tmp") as writer:
            chunk: list[tuple[str, dict[str, Any]]] = []
            for item in ledger.replays():
                if item[0] not in jobs_by_id:
                    raise QuiverError(
                        f"{ledger.path} holds job {item[0]!r}, which this spec does not make; "
                        "was the spec edited since the campaign started? Run it into a new output folder"
                    )
                chunk.append(item)
                if len(chunk) == PAIR_CHUNK:
                    pair_chunk(chunk, writer)
                    chunk = []
            if chunk:
                pair_chunk(chunk, writer)
    finally:
        progress.close()
        store.close()
    os.replace(out / "replays.jsonl.tmp", out / "replays.jsonl")
    return rows


def write_results(run: CampaignRun, ledger: Ledger, profile: Profile, result: CampaignResult,
                  traces: list[Trace], jobs: list[ReplayJob], steps: dict[str, int]) -> None:
    """``pairs.jsonl``, ``campaign.json`` and ``report.md`` of a finished campaign; the
    result's counts from the pair rows."""
    spec, out = run.spec, run.out
    rows = pair_rows(run, ledger, traces, profile.graph, jobs, steps)
    _write_jsonl(out / "pairs.jsonl", rows)
    of = controls(spec, traces)
    perturbations = [{**p.model_dump(mode="json"), "control": of[p.id].id if p.id in of else None}
                     for p in spec.perturbations]
    control_rows = [c.to_json() for c in distinct(of)]
    estimates = campaign_estimates(
        perturbations, rows, profile.table, profile.to_json(), profile.graph, epsilon=spec.analysis.epsilon,
        resamples=spec.analysis.resamples, seed=spec.analysis.seed, permutations=spec.analysis.permutations,
        controls=control_rows,
    )
    (out / "campaign.json").write_text(json.dumps(estimates.to_json(), indent=2) + "\n", encoding="utf-8")
    result.estimates = estimates
    observational = (out / "observational" / "report.md").read_text(encoding="utf-8")
    (out / "report.md").write_text(
        interventional_report(estimates) + "\n\n---\n\n" + observational, encoding="utf-8"
    )
    result.negative_control_failed = [p.id for p in estimates.perturbations if p.negative_control.passed is False]
    result.status = Counter(r.status for r in rows)
    result.retries = Counter()
    for r in rows:
        result.retries.update(r.retries or {})
    result.llm_calls = sum(sum(r.llm_calls.values()) for r in rows)


def _write_jsonl(path: Path, rows: Sequence[PairRow]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row.to_json(), sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_summary(out: Path, result: CampaignResult) -> None:
    """``summary.json``: the run's counts, written whether or not it finished."""
    summary = {
        "jobs": result.jobs, "done": result.done, "resumed": result.resumed, "complete": result.complete,
        "status": dict(result.status), "stopped_by_budget": result.stopped_by_budget,
        "negative_control_failed": result.negative_control_failed, "llm_calls": result.llm_calls,
        "retries": dict(sorted(result.retries.items())),
        "executor": result.executor, "nodes": result.nodes, "seconds": result.seconds,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
