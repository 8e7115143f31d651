"""``quiver localize SPEC``: which step broke each failing run, by counterfactual replay.

For each failing run of the spec's corpus (its outcome checks say which fail) and each of
its steps, replays re-run everything after the step live, with the step intervened on
(transplanted from a passing run of the same input, or resampled) or kept (the control);
the sequential search (:mod:`.search`) adds replays where the answer is not yet clear,
and the statistics (:mod:`quiver._localize`) name the decisive step, the earliest whose
intervention raises the pass rate beyond its control.

Everything runs through the campaign's machinery: the spec's baseline (recorded into the
output folder, or read), its endpoint (the simulator started when the spec names it),
the fidelity check, the executor (local or Ray, paced to the endpoint's limits), the
replays' own wire counts. Each finished replay is committed to ``localize.sqlite`` (job
id -> its result) before it counts: a killed run resumed with ``--resume`` replays
nothing twice and, its rounds being a pure function of the results, finishes with the
same ``localize.json`` as an uninterrupted run; so do the local and the Ray executors.

Imported traces (no pipeline to replay them with) get the observational answer, said to
be one: the first step whose output differs from a passing run of the same input (what
``quiver diff`` against a passing run gives).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from quiver._diff import diff_traces
from quiver._errors import QuiverError
from quiver._interrupt import Interrupted
from quiver._localize import LocalizeSettings, node_shares
from quiver._outdir import OutputFolder, make_folder, mark_folder, output_errors, write_text
from quiver._progress import Progress
from quiver._report import localize_markdown, write_html
from quiver._sqlite import KeyValueFile, Layout
from quiver._trace import Trace
from quiver.experiments._campaign import CampaignRun
from quiver.replay import EndpointWatch, ReplayJob, ReplayMode, sample_ids

from .search import Failure, job_key
from .steps import Step, failure_steps

__all__ = ["LocalizeResult", "plan_localize", "run_localize"]

_LAYOUT = Layout(kind="localize ledger", table="replays", value="TEXT", version=1,
                 way_out="delete it (or the folder) to localise afresh, or give another --output")


@dataclass
class LocalizeResult:
    """What ``quiver localize`` found, and where it wrote it."""

    data: dict[str, Any]
    output: Path
    seconds: float = 0.0
    resumed: int = 0
    """Replays a resumed run found committed (not replayed again)."""
    files: list[Path] = field(default_factory=list)


def _operator(step: Step, arm: str) -> tuple[str, dict[str, Any]]:
    """The operator of one arm at a step: the control keeps the step (``identity``); the
    intervention transplants (``replace``) or resamples (no operator: the step runs live)."""
    if arm == "control":
        return "identity", {}
    if step.how == "transplant":
        return "replace", {"value": step.value}
    return "", {}


def _passed(data: dict[str, Any]) -> bool | None:
    """Whether a replay's run passed its outcome checks (None: it failed, or its outcome
    could not be evaluated)."""
    if "error" in data:
        return None
    outcome = (data.get("trace") or {}).get("outcome") or {}
    status = outcome.get("status")
    return None if status not in ("pass", "fail") else status == "pass"


def _select(failing: list[Trace], wanted: Sequence[str], max_failures: int | None, seed: int) -> list[Trace]:
    if wanted:
        by_id = {t.trace_id: t for t in failing}
        missing = [w for w in wanted if w not in by_id]
        if missing:
            raise QuiverError(f"--trace {missing[0]}: no failing trace of the corpus has that id; "
                              f"{len(failing)} failed" + (f", e.g. {failing[0].trace_id}" if failing else ""))
        return [by_id[w] for w in wanted]
    if max_failures is not None and len(failing) > max_failures:
        picked = set(random.Random(seed).sample(range(len(failing)), max_failures))
        return [t for i, t in enumerate(failing) if i in picked]
    return failing


def _observational(failing: Trace, passing: Sequence[Trace]) -> dict[str, Any] | None:
    """The first step at which the failing run differs from its input's first passing run."""
    if not passing:
        return None
    first = diff_traces(passing[0], failing).first
    if first is None:
        return None
    return {"node": first.node, "occurrence": first.occurrence, "against": passing[0].trace_id,
            "cause": first.cause}


def run_localize(spec_path: str | Path, *, output: str | Path | None = None, traces: Sequence[str] = (),
                 max_failures: int | None = None, full_ranking: bool = False, budget: int | None = None,
                 resume: bool = False, executor: str | None = None, address: str | None = None,
                 progress_stream: TextIO | None = sys.stderr) -> LocalizeResult:
    """Run ``quiver localize``; see the module docstring.

    Raises:
        QuiverError: The spec has no outcome checks, a --trace that is no failing trace,
            an output folder holding another run (without ``resume``), an endpoint that
            stopped answering.
    """
    t0 = time.perf_counter()
    run = CampaignRun.load(Path(spec_path), stream=progress_stream)
    if run.outcome is None:
        raise QuiverError(f"{spec_path}: quiver localize needs outcome checks (an outcome: block) to tell failing "
                          "runs from passing ones")
    spec = run.spec
    out = Path(output) if output is not None else Path(spec.output) / "localize"
    settings = LocalizeSettings(**({"budget": budget} if budget is not None else {}))
    ledger_path = out / "localize.sqlite"
    if ledger_path.exists() and not resume:
        raise QuiverError(f"{out} holds a localisation already: `quiver localize {spec_path} --output {out} --resume` "
                          "finishes it; or give another --output")
    again = f"run `quiver localize {spec_path} --output {out} --resume`"
    with output_errors(out, "every replay committed so far is kept", again), OutputFolder(out, "localize"):
        return _localize(run, out, ledger_path, settings, traces, max_failures, full_ranking, executor, address,
                         progress_stream, t0)


def _localize(run: CampaignRun, out: Path, ledger_path: Path, settings: LocalizeSettings, wanted: Sequence[str],
              max_failures: int | None, full_ranking: bool, executor: str | None, address: str | None,
              stream: TextIO | None, t0: float) -> LocalizeResult:
    spec = run.spec
    make_folder(out)
    mark_folder(out, "localize")
    ledger = KeyValueFile(ledger_path, _LAYOUT)
    runner = run.executor(executor, address)
    failures: list[Failure] = []
    observational: dict[str, dict[str, Any] | None] = {}
    spent: dict[str, int] = {"replays": 0, "llm_calls": 0, "judge_calls": 0, "failed": 0}
    try:
        with run.connected():
            baseline = run.baseline(resume=True, folder=out / "baseline") if spec.baseline is None \
                else run.baseline()
            judged = [t for t in baseline if t.outcome is not None]
            failing = [t for t in judged if t.outcome is not None and t.outcome.status == "fail"]
            chosen = _select(failing, wanted, max_failures, spec.seed)
            replayable = [t for t in chosen if "import" not in t.tags]
            if replayable:
                run.check_fidelity(baseline)
            payloads = {t.trace_id: t.model_dump(mode="json") for t in chosen}
            keyed = sample_ids(baseline)
            for trace in chosen:
                passing = [t for t in judged if t.input_id == trace.input_id and t.outcome is not None
                           and t.outcome.status == "pass"]
                observational[trace.trace_id] = _observational(trace, passing)
                if trace in replayable:
                    failures.append(Failure(trace.trace_id, failure_steps(trace, passing)))
            context = run.replay_context(run.graph(baseline), ReplayMode(), seed=spec.seed, run_id="localize")
            progress = Progress("localize replays", 0, stream=stream)
            round_no = 0
            runner.start()
            while True:
                jobs = _round(failures, settings, full_ranking, payloads, keyed)
                if not jobs:
                    break
                round_no += 1
                results = _run_round(runner, context, jobs, ledger, progress, spent)
                for failure in failures:
                    failure.take({k: _passed(v) for k, v in results.items()})
            progress.close()
    except KeyboardInterrupt as exc:
        said = str(exc).removeprefix("interrupted").removeprefix(": ")
        raise Interrupted(f"interrupted{': ' + said if said else ''}; {len(ledger)} replays are committed to "
                          f"{ledger_path}: `--resume` goes on from there") from None
    finally:
        try:
            runner.close()
        finally:
            ledger.close()
    data = _summary(run, failures, observational, chosen, failing, judged, settings, full_ranking, spent)
    result = LocalizeResult(data, out, seconds=round(time.perf_counter() - t0, 3), resumed=spent.get("resumed", 0))
    result.files.append(write_text(out / "localize.json", json.dumps(data, indent=2) + "\n"))
    result.files.append(write_text(out / "localize.md", localize_markdown(data)))
    result.files.append(write_html(out, "localize"))
    return result


def _round(failures: list[Failure], settings: LocalizeSettings, full_ranking: bool,
           payloads: dict[str, dict[str, Any]], keyed: dict[str, str]) -> list[ReplayJob]:
    """The replay jobs of the next round of every failure still searching."""
    jobs: list[ReplayJob] = []
    for failure in failures:
        for step, arm, repeat in failure.next_round(settings, full_ranking=full_ranking):
            op, params = _operator(step, arm)
            jobs.append(ReplayJob(
                job_id=job_key(failure.trace_id, step, arm, repeat), seq=len(jobs),
                trace=payloads[failure.trace_id], perturbation_id=f"localize:{step.index}:{arm}", node=step.node,
                occurrence=step.occurrence, op=op, params=params, repeat=repeat,
                sample_id=keyed[failure.trace_id],
            ))
    return jobs


def _run_round(runner: Any, context: Any, jobs: list[ReplayJob], ledger: KeyValueFile, progress: Progress,
               spent: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The results of a round's jobs: those the ledger holds, the others replayed (each
    committed as it finishes)."""
    held = {k: json.loads(str(v)) for k, v in ledger.get_many([j.job_id for j in jobs]).items()}
    todo = [j for j in jobs if j.job_id not in held]
    progress.total += len(jobs)
    progress.advance(len(held))
    results = dict(held)

    def done(job_id: str, data: dict[str, Any]) -> None:
        if "error" not in data:
            ledger.put_many([(job_id, json.dumps(data, separators=(",", ":")))])
        results[job_id] = data
        progress.advance(failed=int("error" in data))

    watch = EndpointWatch(done, lambda: False)
    if todo:
        runner.run(context, todo, watch.done, watch.should_stop)
    watch.raise_if_down(f"{len(ledger)} replays are committed: run it again with --resume when it answers")
    for job in jobs:  # every replay of the localisation, this run's and those of a run it resumes
        data = results[job.job_id]
        spent["replays"] += 1
        spent["failed"] += int("error" in data)
        spent["llm_calls"] += sum((data.get("llm_calls") or {}).values())
        spent["judge_calls"] += int(data.get("judge_calls") or 0)
        spent["resumed"] = spent.get("resumed", 0) + int(job.job_id in held)
    return results


def _baseline_source(run: CampaignRun) -> str:
    """Where the failing traces are: the spec's baseline file, or ``baseline/traces.jsonl``
    of the localisation's folder (the recording it made)."""
    if run.spec.baseline is not None:
        return str((run.base_dir / run.spec.baseline).resolve())
    return "baseline/traces.jsonl"


def _summary(run: CampaignRun, failures: list[Failure], observational: dict[str, dict[str, Any] | None],
             chosen: list[Trace], failing: list[Trace], judged: list[Trace], settings: LocalizeSettings,
             full_ranking: bool, spent: dict[str, int]) -> dict[str, Any]:
    """``localize.json``: the same whatever executor ran the replays, and whether the run
    was resumed (no timing in it)."""
    rows: list[dict[str, Any]] = []
    by_id = {f.trace_id: f for f in failures}
    for trace in chosen:
        failure = by_id.get(trace.trace_id)
        if failure is None:
            rows.append({"trace_id": trace.trace_id, "input_id": trace.input_id, "verdict": "observational only",
                         "observational": observational[trace.trace_id],
                         "why": "an imported trace: no pipeline code to replay it with"})
            continue
        row = failure.summary(settings)
        rows.append({"input_id": trace.input_id, **row, "observational": observational[trace.trace_id]})
    decisive = [r["decisive"]["node"] if r.get("decisive") else None for r in rows
                if r["verdict"] != "observational only"]
    verdicts = {v: sum(r["verdict"] == v for r in rows) for v in ("decisive", "undecided", "no single step",
                                                                   "observational only")}
    replays = [int(r["replays"]) for r in rows if "replays" in r]
    return {
        "spec": str(run.path), "baseline": _baseline_source(run), "seed": run.spec.seed,
        "settings": {"alpha": settings.alpha, "n_min": settings.n_min, "n_max": settings.n_max,
                     "budget": settings.budget, "full_ranking": full_ranking},
        "traces": len(judged), "failing": len(failing), "localized": len(rows),
        "verdicts": verdicts, "nodes": [s.to_json() for s in node_shares(decisive)],
        "replays": spent["replays"], "replays_failed": spent["failed"],
        "replays_per_failure": {"mean": round(sum(replays) / len(replays), 3) if replays else None,
                                "max": max(replays) if replays else None},
        "llm_calls": spent["llm_calls"], "judge_calls": spent["judge_calls"],
        "failures": rows,
    }


def plan_localize(spec_path: str | Path, *, output: str | Path | None = None, traces: Sequence[str] = (),
                  max_failures: int | None = None, budget: int | None = None) -> str:
    """``quiver localize --plan``: the failing runs, their tested steps, and the replays and
    LLM calls the search takes in its first round and at most (its budget, or every tested
    step at the most replays per arm), from the recorded traces. Sends nothing, writes
    nothing.

    Raises:
        QuiverError: No outcome checks, no baseline at hand (a spec that records one, not
            recorded yet), or a --trace that is no failing trace.
    """
    run = CampaignRun.load(Path(spec_path), stream=None)
    if run.outcome is None:
        raise QuiverError(f"{spec_path}: quiver localize needs outcome checks (an outcome: block) to tell failing "
                          "runs from passing ones")
    out = Path(output) if output is not None else Path(run.spec.output) / "localize"
    source = run.base_dir / run.spec.baseline if run.spec.baseline is not None else out / "baseline" / "traces.jsonl"
    if not source.is_file():
        raise QuiverError(f"{spec_path}: the plan needs the recorded runs: {source} does not exist yet; "
                          "`quiver localize` records them first, or give `baseline:` a traces file")
    baseline = run._judged(run.read_baseline(source))
    settings = LocalizeSettings(**({"budget": budget} if budget is not None else {}))
    judged = [t for t in baseline if t.outcome is not None]
    failing = [t for t in judged if t.outcome is not None and t.outcome.status == "fail"]
    chosen = _select(failing, traces, max_failures, run.spec.seed)
    lines = [f"plan of {spec_path}: {len(chosen)} of {len(failing)} failing runs ({len(judged)} judged) from {source}"]
    first = most = calls_first = calls_most = 0
    for trace in chosen:
        passing = [t for t in judged if t.input_id == trace.input_id and t.outcome is not None
                   and t.outcome.status == "pass"]
        steps = [s for s in failure_steps(trace, passing) if s.tested]
        live = [sum(1 for c in trace.calls if c.model is not None and trace.calls.index(c) >= _at(trace, s))
                for s in steps]
        n_first = [2 * settings.n_min] * len(steps)
        n_most = [2 * settings.n_max] * len(steps)
        cap = min(sum(n_most), settings.budget)
        first, most = first + sum(n_first), most + cap
        calls_first += sum(n * k for n, k in zip(n_first, live, strict=True))
        calls_most += round(sum(n * k for n, k in zip(n_most, live, strict=True)) * cap / max(sum(n_most), 1))
        lines.append(f"  {trace.trace_id}: {len(steps)} tested step(s) "
                     f"({', '.join(f'{s.label} {s.how}' for s in steps) or 'none'})")
    lines.append(f"replays: {first:,} in the first round, at most {most:,}; LLM calls (the recorded calls from each "
                 f"step on, run live): about {calls_first:,} in the first round, at most about {calls_most:,}")
    return "\n".join(lines) + "\n"


def _at(trace: Trace, step: Step) -> int:
    """The index in ``trace.calls`` of the step's call."""
    return next(i for i, c in enumerate(trace.calls) if c.call_path == step.call_path)
