"""A campaign's replay phase: the jobs on the executor, each finished replay committed as
it comes back, the budget kept, and the pair rows read back once every job is in.

Each worker finishes the replays it ran (:mod:`.finish`); the driver only checks and
commits them (:mod:`.committer`), so what the driver spends per replay does not grow with
the work a replay takes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._interventional import CampaignGraph, PairRow
from quiver._progress import Progress
from quiver.replay import EndpointWatch, Executor, ReplayJob

from .committer import LedgerCommitter
from .finish import Finisher, is_package
from .journal import Journals
from .ledger import Ledger
from .results import collect_rows

if TYPE_CHECKING:
    from .run import CampaignResult, CampaignRun

__all__ = ["Replayed", "replay_jobs", "finisher"]

log = logging.getLogger("quiver.campaign")


@dataclasses.dataclass
class Replayed:
    """The replay phase's counts, and every job's pair row (in job order) once complete."""

    result: CampaignResult
    rows: list[PairRow]


def finisher(run: CampaignRun, graph: CampaignGraph) -> Finisher:
    """What the campaign's workers finish its replays with: the run's redaction, the
    campaign's graph as the replays start, the analysis' epsilon and embedder, and the
    baseline file its ``replays.jsonl`` lines name."""
    from .results import baseline_path

    spec, out = run.spec, run.out
    base = baseline_path(run).resolve()
    analysis = spec.analysis
    return Finisher(
        redaction=run.redactor.to_json(), graph=graph.graph.model_dump(mode="json"),
        declared=graph.declared.model_dump(mode="json"), epsilon=analysis.epsilon,
        embedder=analysis.embedder if isinstance(analysis.embedder, str) else None,
        cache_dir=str(Path(analysis.cache_dir).resolve()) if analysis.cache_dir else None,
        baseline_file=Path(os.path.relpath(base, out.resolve())).as_posix(), baseline_path=str(base),
    )


def replay_jobs(run: CampaignRun, jobs: list[ReplayJob], left_out: dict[str, int], graph: CampaignGraph,
                ledger: Ledger, journals: Journals, run_id: str, executor: Executor, *, done: set[str],
                spent: list[int], first: bool = True) -> Replayed:
    """Run the jobs not ``done`` on ``executor`` (see the module docstring); ``spent``: the
    LLM calls and tokens of this run's replays so far (all its rounds), what the budget
    holds."""
    from .run import CampaignResult, _budget_reached

    spec, out = run.spec, run.out
    todo = [j for j in jobs if j.job_id not in done]
    cached = spec.replay.downstream == "cached"
    finish = finisher(run, graph)
    context = dataclasses.replace(
        run.replay_context(graph.graph, run.replay_mode(), seed=spec.seed, run_id=run_id,
                           cache_dir=out / "cache" if cached else None), finish=finish)
    result = CampaignResult(output=out, jobs=len(jobs), done=len(jobs) - len(todo), resumed=len(jobs) - len(todo),
                            executor=executor.name)
    progress = Progress("replays", len(jobs), stream=run.stream, resumed=result.resumed,
                        before="resumed" if first else "done before this round")

    def over_budget() -> bool:
        budget = spec.budget
        hit = (budget.max_llm_calls is not None and spent[0] >= budget.max_llm_calls) or (
            budget.max_tokens is not None and spent[1] >= budget.max_tokens
        )
        result.stopped_by_budget = result.stopped_by_budget or hit
        if hit and not result.budget_stop:
            result.budget_stop = _budget_reached(budget, spent[0], spent[1])
        return hit

    def finished(job_id: str, data: dict[str, Any]) -> None:
        calls, tokens = _spent(data)
        spent[0] += calls
        spent[1] += tokens
        committer.put(job_id, data)

    def committed(job_id: str, facts: dict[str, Any]) -> None:
        status = str(facts.get("status", "ok"))
        retries = facts.get("retries") or {}
        if status != "failed":
            result.llm_calls += int(facts.get("calls") or 0)
            result.retries.update(retries)
        result.status[status] += 1
        result.done += 1
        if facts.get("failure"):
            result.failures.setdefault(job_id.split("/")[0], Counter())[str(facts["failure"])] += 1
        progress.advance(failed=int(status == "failed"), diverged=int(status == "diverged"),
                         retries=sum(retries.values()) if status != "failed" else 0)

    committer = LedgerCommitter(ledger, journals, {j.job_id: j for j in jobs}, finish, committed)
    watch = EndpointWatch(finished, lambda: committer.failed or over_budget())
    committer.start()
    try:
        executor.run(context, todo, watch.done, watch.should_stop)
    finally:
        try:
            committer.close()
        finally:
            progress.close()
    watch.raise_if_down(f"{len(ledger):,} of {len(jobs):,} replays committed to {ledger.path}, none counted "
                        f"as failed because of it ({watch.held:,} cut short, to run again)")
    result.nodes = executor.nodes_used()
    if result.stopped_by_budget:  # the first replay in job order not committed was running
        held = ledger.done()
        running = next((j.perturbation_id.split("#")[0] for j in jobs if j.job_id not in held), "none")
        result.budget_stop += f"; {len(held):,} of {len(jobs):,} replays committed, {running} running"
    left = {k: v for k, v in left_out.items() if v}
    if left:
        log.info("traces left out (no target call, or not selected): %s", left)
    if not result.complete:
        return Replayed(result, [])
    collected = collect_rows(ledger, journals, graph)
    result.not_landed, result.unaccounted = collected.not_landed, collected.unaccounted
    return Replayed(result, collected.rows)


def _spent(data: dict[str, Any]) -> tuple[int, int]:
    """The LLM calls and tokens of a finished replay (as its worker finished it, or raw)."""
    if is_package(data):
        facts = data["facts"]
        return (0, 0) if facts.get("status") == "failed" else (int(facts.get("calls") or 0),
                                                                 int(facts.get("tokens") or 0))
    if "error" in data:
        return 0, 0
    return sum((data.get("llm_calls") or {}).values()), int(data.get("llm_tokens") or 0)

