"""``quiver run SPEC``: a perturbation campaign, end to end.

1. The baseline: an existing traces file, or the spec's inputs recorded ``repeats``
   times (into ``OUTPUT/baseline/``, resumable like ``quiver record``). A line of it
   that cannot be read costs only itself (one warning, ``baseline FILE:LINE: REASON;
   the line is skipped``; the run ends with exit 1); a baseline in which no line reads
   cannot run (exit 2). A resume skips the same lines, or is refused naming the line
   (:func:`~quiver.experiments._campaign.resume.check_baseline_identity`).
2. The observational profile of the baseline (``OUTPUT/observational/``).
3. Jobs (see :mod:`quiver.experiments._campaign.jobs`): every perturbation's parameter
   sets x the selected traces x the replay repeats, sample keys fixed up front, then
   the control replays.
4. Replays on the executor (local threads or Ray). Each finished replay is committed
   to the ledger (``ledger.sqlite``) by a separate thread, in batches, while the
   executor goes on submitting: a killed campaign resumes (``--resume``) with no
   replay lost or repeated (those in flight or waiting for their batch are simply run
   again). A resume keeps failed replays (``--retry-failed`` runs them again) and
   refuses replays made with other parameters, files or pipeline code, or a damaged
   ledger (see :mod:`~quiver.experiments._campaign.resume`).
5. Pairs, formed while the replays run, block by block in job order, as each block
   of jobs is complete in the ledger; then the results (see
   :mod:`quiver.experiments._campaign.results`): ``pairs.jsonl``, ``replays.jsonl``,
   ``campaign.json`` (the interventional estimates), ``report.md`` and ``summary.json``.

A :class:`CampaignRun` holds what every phase needs (the spec, its folder, the output
folder, the redactor, the LLM client, the progress stream); ``quiver gate`` uses the
same object for its baseline, profile, executor and replay context.

A resume of a finished campaign whose results are whole touches nothing ("already
complete"; :func:`~quiver.experiments._campaign.resume.finished`).

Exit codes (``quiver run``): 0 done (or already complete); 1 done with problems (failed
or diverged pairs, a failed negative control, bad baseline lines skipped) or stopped by
the budget; 2 could not run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from quiver._distance import EmbeddingStore, default_cache_dir, make_embedder
from quiver._errors import QuiverError, SpecError
from quiver._graph import PipelineGraph, infer_graph, load_graph
from quiver._interrupt import Interrupted
from quiver._interventional import CampaignEstimates, CampaignGraph, PairRow, RoundPlan, adaptive_curve, seen_part
from quiver._observational import Profile, analyze
from quiver._outdir import (
    MARKER_FILE,
    OutputFolder,
    check_database,
    make_folder,
    mark_folder,
    output_errors,
    write_text,
)
from quiver._progress import StageProgress
from quiver._report import write_profile
from quiver._trace import Trace, read_corpus
from quiver._yamlspec import load_spec
from quiver.experiments._config import (
    CampaignSpec,
    check_outcome_inputs,
    load_inputs,
    open_llm,
    outcome_runner,
    outcome_settings,
    spec_line,
    spec_redactor,
)
from quiver.replay import (
    ClusterLost,
    EndpointDown,
    Executor,
    LLMClient,
    ReplayContext,
    ReplayJob,
    ReplayMode,
    ResponseCache,
    declared_graph,
    make_executor,
    new_run_id,
    record_corpus,
)
from quiver.replay._capture import http_tools

from .checks import check_baseline, check_spec
from .fidelity import check_fidelity
from .identity import campaign_identities, stored_identity
from .jobs import AdaptiveLayout, adaptive_layouts, controls, expand_jobs
from .journal import FILES, JOURNAL, Journals
from .ledger import Ledger
from .replays import replay_jobs
from .resume import FINISHED, check_baseline_identity, finished, mark_finished, resume_state, unmark_finished

__all__ = ["CampaignResult", "CampaignRun", "run_campaign"]

log = logging.getLogger("quiver.campaign")


@dataclass
class CampaignResult:
    """What a campaign run produced."""

    output: Path
    jobs: int
    done: int
    resumed: int
    status: Counter[str] = field(default_factory=Counter)
    stopped_by_budget: bool = False
    budget_stop: str = ""
    """Where the budget stopped the run: the limit reached, what this run used, the
    replays committed and the perturbation (or control) then running."""
    negative_control_failed: list[str] = field(default_factory=list)
    llm_calls: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    executor: str = "local"
    nodes: int = 1
    """Machines that ran replays (the Ray nodes that ran tasks; this process counts one)."""
    estimates: CampaignEstimates | None = None
    """The interventional estimates (``campaign.json``), once every job is done."""
    failed_kept: int = 0
    """Failed replays a resume took from the ledger as they were (``--retry-failed`` runs them again)."""
    retried: int = 0
    """Failed replays ``--retry-failed`` took out of the ledger and ran again."""
    failures: dict[str, Counter[str]] = field(default_factory=dict)
    """Failed replays by perturbation (controls included) and reason
    (:func:`~quiver.experiments._campaign.results.failure_reason`)."""
    skipped_lines: int = 0
    """Baseline lines that could not be read, each named once by a warning and skipped."""
    already_complete: bool = False
    """A resume found the campaign finished, its results whole, and touched nothing."""
    not_landed: dict[str, Counter[str]] = field(default_factory=dict)
    """Replays whose perturbation did not land (``not_applied``), by perturbation and reason."""
    unaccounted: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Requests of the replays the replay contract did not account for, by (node, endpoint)."""

    @property
    def complete(self) -> bool:
        return self.done == self.jobs


class CampaignRun:
    """A campaign spec made ready to run, and what every phase of the run shares.

    Building one checks the spec (:func:`~quiver.experiments._campaign.checks.check_spec`:
    the pipeline imports, files exist, every perturbation names a node, field and value
    the graph knows), so nothing starts on a spec that cannot finish.

    Args:
        spec: The validated spec.
        path: The spec file; relative paths in it resolve against its folder.
        stream: Where progress lines go (None: nowhere).

    Attributes:
        spec: The spec.
        path: The spec file.
        base_dir: The spec's folder.
        out: The run folder (``spec.output``).
        redactor: What is removed before anything is written (the spec's ``redact:``
            block and the value of its API-key variable).
        fn: The pipeline function.
        client: The LLM client while :meth:`connected` is open, else None.
    """

    def __init__(self, spec: CampaignSpec, path: Path, *, stream: TextIO | None = sys.stderr,
                 warn: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.path = path
        self.base_dir = path.parent.resolve()  # not the current folder: a Ray job's may be unpacked again meanwhile
        self.out = Path(spec.output)
        self.stream = stream
        self.warn: Callable[[str], None] = warn if warn is not None else log.warning
        self.skipped: list[str] = []
        """The warnings of the baseline lines skipped (``FILE:LINE: REASON; the line is skipped``)."""
        self.redactor = spec_redactor(spec)
        self.fn, _ = check_spec(spec, path)
        self.client: LLMClient | None = None
        self.outcome = outcome_runner(spec, self.base_dir, None, spec_file=str(path))
        """The spec's outcome checks (None without): a check that does not import is said here."""
        if self.outcome is not None and spec.baseline is None and spec.inputs is not None:
            check_outcome_inputs(spec, [i.inputs for i in load_inputs(spec, self.base_dir, spec_file=str(path))],
                                 spec_file=str(path))

    @classmethod
    def load(cls, spec_path: str | Path, *, output: str | Path | None = None,
             stream: TextIO | None = sys.stderr, warn: Callable[[str], None] | None = None) -> CampaignRun:
        """Read, validate and check a campaign spec (``output`` replaces its output folder;
        ``warn`` gets each baseline line skipped, default the log).

        Raises:
            SpecError: The spec is not valid; the message names the file, line and field.
        """
        path = Path(spec_path)
        spec = load_spec(CampaignSpec, path)
        if output is not None:
            spec = spec.model_copy(update={"output": str(output)})
        return cls(spec, path, stream=stream, warn=warn)

    # -- resources ---------------------------------------------------------------------
    @contextlib.contextmanager
    def connected(self) -> Iterator[LLMClient]:
        """The LLM client of the spec's ``llm:`` block for the duration of the block (the
        bundled simulator started and stopped when the spec names it)."""
        with open_llm(self.spec.llm, self.base_dir) as client:
            self.client = client
            if self.outcome is not None:
                self.outcome.with_client(client)
            try:
                yield client
            finally:
                self.client = None

    def _client(self) -> LLMClient:
        if self.client is None:
            raise QuiverError("the campaign's LLM client is not open: use `with run.connected():`")
        return self.client

    def embedding_store(self) -> EmbeddingStore:
        """An embedding store with the spec's embedder and cache (the caller closes it)."""
        analysis = self.spec.analysis
        return EmbeddingStore(make_embedder(analysis.embedder),
                              Path(analysis.cache_dir) if analysis.cache_dir else default_cache_dir())

    # -- the phases --------------------------------------------------------------------
    def baseline(self, *, resume: bool = False, folder: Path | None = None) -> list[Trace]:
        """The baseline traces: the spec's ``baseline`` file, or its inputs recorded
        ``repeats`` times into ``folder`` (default ``OUTPUT/baseline``; with ``resume``,
        a finished recording there is read back and an interrupted one continued)."""
        spec = self.spec
        if spec.baseline is not None:
            return self.read_baseline(self.base_dir / spec.baseline)
        folder = folder if folder is not None else self.out / "baseline"
        done = folder / "traces.jsonl"
        if resume and done.is_file():
            return self.read_baseline(done)
        function_name: str = getattr(self.fn, "__name__", "pipeline")  # a callable object may have none
        with http_tools(spec.tools.http):  # kept in each trace: its replays serve the same hosts
            result = record_corpus(
                self.fn, pipeline_name=spec.name or function_name,
                inputs=load_inputs(spec, self.base_dir), repeats=spec.repeats, output_dir=folder,
                llm=self._client(), concurrency=spec.concurrency, redactor=self.redactor, seed=spec.seed,
                resume=resume, progress_stream=self.stream, outcome=self.outcome,
            )
        return self.read_baseline(result.traces_path)

    def read_baseline(self, path: Path) -> list[Trace]:
        """Every readable trace of the baseline file ``path``: a bad line costs only itself
        (``warn`` gets ``baseline FILE:LINE: REASON; the line is skipped``, once a line,
        and :attr:`skipped` keeps it); the same lines are skipped on every read, so that
        a resume sees the traces its campaign started with.

        Raises:
            QuiverError: The file cannot be read, holds no line, or no line of it reads.
        """
        said: list[str] = []
        traces, _ = read_corpus([path], said.append, what="baseline trace")
        self.skipped = said
        for line in said:
            self.warn(f"baseline {line}")
        check_outcome_inputs(self.spec, [t.inputs for t in traces], spec_file=str(self.path),
                             what="baseline traces")
        judged = self._judged(traces)
        self._check_outcome_ladders(judged)
        return judged

    def _check_outcome_ladders(self, traces: list[Trace]) -> None:
        """An adaptive ladder that follows the outcome needs outcomes: the spec's checks,
        or a baseline that carries them (an import's scores).

        Raises:
            SpecError: A ladder has ``event: outcome`` and there is neither.
        """
        if self.outcome is not None or any(t.outcome is not None for t in traces):
            return
        for i, p in enumerate(self.spec.perturbations or []):
            if p.adaptive is not None and p.adaptive.event == "outcome":
                where = ("perturbations", i, "ladder", "adaptive", "event")
                raise SpecError(str(self.path), spec_line(str(self.path), where),
                                f"perturbations[{i}].ladder.adaptive.event",
                                f"perturbation {p.id!r} follows the outcome, but the spec has no outcome checks and "
                                "no baseline trace carries an outcome: add an outcome: section, or follow D_shape")

    def _judged(self, traces: list[Trace]) -> list[Trace]:
        """The baseline with the spec's outcome on every trace that carries none (a corpus
        recorded without checks, or imported): evaluated on its recorded output, a judge
        asking at the open endpoint (none open: the judge's check is an error)."""
        if self.outcome is None or all(t.outcome is not None for t in traces):
            return traces
        from quiver.replay import trace_sample_key

        return [t if t.outcome is not None else t.model_copy(update={"outcome": self.outcome.evaluate(
            t, sample_key=trace_sample_key(self.spec.seed, t.input_id, t.repeat))}) for t in traces]

    def declared(self) -> PipelineGraph:
        """The spec's graph file over the pipeline's declarations (:meth:`PipelineGraph.over`),
        or the declarations."""
        declared = declared_graph()
        return load_graph(self.base_dir / self.spec.graph).over(declared) if self.spec.graph else declared

    def graph(self, traces: list[Trace]) -> PipelineGraph:
        """The declared graph's part that ``traces`` ran, completed from the ok traces."""
        return infer_graph([t for t in traces if t.status == "ok"], seen_part(self.declared(), traces))[0]

    def observational_profile(self, traces: list[Trace], graph: PipelineGraph,
                              folder: Path | None = None) -> Profile:
        """The baseline's observational profile with the spec's analysis options, written
        to ``folder`` (default ``OUTPUT/observational``)."""
        analysis = self.spec.analysis
        progress = StageProgress("analysis", self.stream)
        progress.say(f"the observational profile of {len(traces)} baseline traces (the embedding model loads "
                     "first when a text is not in the cache)")
        profile = analyze(
            traces, graph, epsilon=analysis.epsilon, alphas=analysis.alphas, resamples=analysis.resamples,
            seed=analysis.seed, embedder=analysis.embedder, cache_dir=analysis.cache_dir, progress=progress,
        )
        _write_profile_once(profile, folder if folder is not None else self.out / "observational")
        return profile

    def executor(self, kind: str | None = None, address: str | None = None) -> Executor:
        """The executor ``kind`` (default the spec's ``executor.kind``), built from the
        spec's ``executor:`` block; ``address`` replaces its Ray address."""
        settings = self.spec.executor.model_dump()
        if address is not None:
            settings["address"] = address
        if settings.get("address") and settings.get("runtime_env") is None:
            settings["runtime_env"] = self.shipped()
        return make_executor(kind or self.spec.executor.kind, settings)

    def shipped(self) -> dict[str, Any]:
        """The runtime environment that brings the pipeline to a cluster's workers: the
        folder holding the spec and the pipeline as ``working_dir``, without the output
        folder, the response and embedding caches and version-control folders."""
        path = self.spec.pipeline.rpartition(":")[0] or self.spec.pipeline
        pipeline = (self.base_dir / path).resolve()
        folder = Path(os.path.commonpath([self.base_dir.resolve(), pipeline.parent]))
        if len(folder.parts) < 3 or folder == Path.home():  # "/", "/tmp", the home folder: not one project's
            raise QuiverError(
                f"{self.path}: the spec's folder and the pipeline {pipeline} share no folder but {folder}, too wide "
                "to ship to the Ray cluster's workers: put the pipeline beside the spec, or give "
                "executor.runtime_env (its working_dir is shipped; {} ships nothing, for nodes that share this disk)")
        excludes = [".git", "__pycache__", ".quiver"]
        for inside in (self.out.resolve(), *([Path(self.spec.analysis.cache_dir).resolve()]
                                             if self.spec.analysis.cache_dir else [])):
            if inside.is_relative_to(folder):
                excludes.append("/" + inside.relative_to(folder).as_posix())
        return {"working_dir": str(folder), "excludes": excludes}

    def replay_mode(self) -> ReplayMode:
        """What the spec's replays hold frozen (its ``replay:`` block)."""
        replay = self.spec.replay
        return ReplayMode(frozen=tuple(replay.frozen), live_nodes=tuple(replay.live_nodes),
                          frozen_nodes=tuple(replay.frozen_nodes), downstream=replay.downstream)

    def replay_context(self, graph: PipelineGraph, mode: ReplayMode, *, seed: int, run_id: str,
                       cache_dir: Path | None = None) -> ReplayContext:
        """What a worker needs to replay the spec's jobs against the open client's endpoint."""
        client = self._client()
        return ReplayContext(
            pipeline=self.spec.pipeline, base_dir=str(self.base_dir.resolve()),
            llm={"base_url": client.base_url, "model": client.model, "api_key": client.api_key,
                 "timeout_s": client.timeout_s, "retry": client.retry.model_dump(), "params": client.params,
                 "limits": client.limits.model_dump()},
            mode=mode.model_dump(mode="json"), graph=graph.model_dump(mode="json"), seed=seed, run_id=run_id,
            cache_dir=str(cache_dir.resolve()) if cache_dir is not None else None,
            redaction=self.redactor.to_json(), outcome=outcome_settings(self.spec),
        )

    def run(self, *, resume: bool = False, retry_failed: bool = False, executor: str | None = None,
            address: str | None = None) -> CampaignResult:
        """Run the campaign; see the module docstring. ``retry_failed`` resumes, and runs
        the replays the ledger holds as failed again (:mod:`.resume`). The output folder
        is held for the whole run, its recorded baseline included
        (:class:`~quiver._outdir.OutputFolder`).

        Raises:
            QuiverError: The spec cannot run, the ledger is damaged
                (:class:`~quiver.experiments._campaign.ledger.LedgerError`), or it holds
                replays this spec would not make as they are.
            OutputError: The output folder is in use by another command, holds files no
                ``quiver run`` wrote, is reached through a link that leaves it, or is on a
                disk that refused a write (then the message says what was kept and how
                to resume).
        """
        self.require_perturbations()
        again = f"run `quiver run {self.path} --output {self.out} --resume`"
        with output_errors(self.out, "everything committed so far is kept", again), OutputFolder(self.out, "run"):
            return self._run(resume=resume, retry_failed=retry_failed, executor=executor, address=address)

    def require_perturbations(self) -> None:
        """Refuse a spec with no perturbation for a campaign (``quiver gate`` and ``quiver
        localize`` read one as it is).

        Raises:
            SpecError: The spec has no perturbation.
        """
        if not self.spec.perturbations:
            raise SpecError(str(self.path), None, "perturbations",
                            "a campaign needs at least one perturbation (quiver gate and quiver localize read a spec "
                            "without any)")

    def _run(self, *, resume: bool, retry_failed: bool, executor: str | None, address: str | None) -> CampaignResult:
        """:meth:`run`, the output folder held."""
        from quiver.experiments._attribute import campaign_attribution

        from .results import replay_failures_logged, write_results, write_summary

        t0 = time.perf_counter()
        out = self.out
        resume = resume or retry_failed
        ledger_path = out / "ledger.sqlite"
        if ledger_path.exists() and not resume:
            raise QuiverError(
                f"{out} holds a campaign's ledger already: `quiver run {self.path} --output {out} --resume` "
                "finishes it; or give another --output"
            )
        if resume and not retry_failed:
            held = self._finished()
            if held is not None:  # nothing to do, and nothing touched
                return held
        # nothing is written to the output folder before the baseline is loaded and checked
        traces = self.checked_baseline() if self.spec.baseline is not None else None
        ledger: Ledger | None = None
        journals: Journals | None = None
        runner = self.executor(executor, address)
        jobs: list[ReplayJob] = []
        identities: dict[str, dict[str, Any]] = {}
        try:
            with self.connected():
                if traces is None:
                    traces = self.checked_baseline(resume=resume)
                self.check_fidelity(traces)  # nothing is spent on a baseline that does not replay
                ledger, run_id = self._open_ledger(ledger_path)
                journals = self._open_journals(ledger)
                if self.spec.replay.downstream == "cached":  # a cache file that cannot be used: said before any work
                    make_folder(out / "cache")
                    check_database(out / "cache" / "cache.db")  # no link out of the output folder
                    ResponseCache(out / "cache").close()
                source = str(self.base_dir / self.spec.baseline) if self.spec.baseline else str(out / "baseline")
                check_baseline_identity(ledger, traces, self.skipped, source)
                rounds = self._recorded_rounds(ledger)
                jobs, steps, left_out = expand_jobs(self.spec, traces, rounds)
                self._start(runner, len(jobs))  # its workers start up while the baseline is analysed
                identities = self._identities(traces)
                resumed = resume_state(ledger, jobs, traces, identities, self.path, source, retry_failed=retry_failed)
                unmark_finished(out)  # the results may be written again from here on
                profile = self.observational_profile(traces, self.graph(traces))
                graph = CampaignGraph(profile.graph, self.declared())  # pairs and estimates read this one
                done, spent = resumed.done, [0, 0]
                with replay_failures_logged(out / "campaign.log", self.redactor):  # counted by reason, not one each
                    while True:  # once, or once per round of the adaptive ladders
                        rows = replay_jobs(self, jobs, left_out, graph, ledger, journals, run_id, runner,
                                           done=done, spent=spent, first=done is resumed.done)
                        if not rows.result.complete:
                            break
                        layouts = self._next_rounds(ledger, traces, rounds, rows.rows, profile, graph.graph)
                        if not any(layout.plans[-1].add for layout in layouts.values()):
                            break
                        done = ledger.done()
                        jobs, steps, left_out = expand_jobs(self.spec, traces, rounds)
                result = rows.result
                result.resumed = len(resumed.done)
                result.failed_kept, result.retried = resumed.failed_kept, resumed.retried
                if result.complete:
                    journals.finish()  # replays.jsonl and pairs.jsonl, in job order
                    write_results(self, rows.rows, profile, result, traces, graph.graph,
                                  adaptive_layouts(self.spec, traces, rounds))
                    campaign_attribution(self.spec, self.fn, self._client(), traces, out,  # its attribution: block
                                         self.stream)
        except Exception as exc:
            if ledger is not None and not resume and len(ledger) == 0:
                if journals is not None:
                    journals.close()
                ledger.close()  # failed before its first replay: the corrected run starts afresh
                ledger = None
                _discard_empty_run(out)
            if isinstance(exc, ClusterLost):  # nothing failed because of it: the run goes on on a cluster
                where = " --address ADDRESS" if runner.name == "ray" else ""
                raise exc.with_note(f"{len(ledger) if ledger is not None else 0:,} of {len(jobs):,} replays committed "
                                    f"to {ledger_path}, none counted as failed because of it; continue on a running "
                                    f"cluster with: quiver run {self.path} --output {out} --resume{where}") from None
            if isinstance(exc, EndpointDown):  # nothing failed because of it: the run goes on once it answers
                raise exc.with_note(f"when it answers again, continue with: quiver run {self.path} --output {out} "
                                    "--resume") from None
            raise
        except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: what finished is committed; say so
            raise Interrupted(_interrupted(exc, len(ledger) if ledger is not None else 0, len(jobs), ledger_path,
                                           f"quiver run {self.path} --output {out} --resume")) from None
        finally:
            try:
                runner.close()
            finally:
                if journals is not None:
                    journals.close()
                if ledger is not None:
                    ledger.close()
        result.seconds = round(time.perf_counter() - t0, 3)
        result.skipped_lines = len(self.skipped)
        write_summary(out, result)
        if result.complete:
            mark_finished(out, jobs, identities, [name for name in RESULT_FILES if (out / name).is_file()])
        return result

    def _recorded_rounds(self, ledger: Ledger) -> dict[str, list[RoundPlan]]:
        """The rounds of the adaptive ladders the ledger holds (a resume takes them as they are).

        Raises:
            QuiverError: Rounds of a perturbation the spec no longer searches adaptively.
            LedgerError: A round that is not a plan.
        """
        adaptive = {p.id for p in self.spec.perturbations if p.adaptive is not None}
        out: dict[str, list[RoundPlan]] = {}
        for pid, plans in ledger.rounds().items():
            if pid not in adaptive:
                raise QuiverError(f"{ledger.path} holds rounds of an adaptive ladder of perturbation {pid!r}, which "
                                  "the spec no longer searches adaptively: restore the spec, or run the campaign "
                                  "into another output folder (--output DIR)")
            try:
                out[pid] = [RoundPlan.from_json(plan, where=f"round {k + 1} of {pid}") for k, plan in enumerate(plans)]
            except QuiverError as exc:
                raise ledger.damaged(str(exc)) from None
        return out

    def _next_rounds(self, ledger: Ledger, traces: list[Trace], rounds: dict[str, list[RoundPlan]],
                     rows: list[PairRow], profile: Profile, graph: PipelineGraph) -> dict[str, AdaptiveLayout]:
        """Decide the next round of every adaptive ladder still searching, from the pairs so
        far, and record it in the ledger (before any of its replays runs); ``rounds`` gets
        it too. Returns the layouts of the ladders that go on (their last plan: the new round)."""
        spec = self.spec
        layouts = adaptive_layouts(spec, traces, rounds)
        going = {pid: layout for pid, layout in layouts.items() if layout.stopped is None}
        if not going:
            return {}
        of = controls(spec, traces)
        by_id: dict[str, list[PairRow]] = {}
        for row in rows:
            by_id.setdefault(row.perturbation_id, []).append(row)
        decided = []
        for pid, layout in going.items():
            p = layout.perturbation
            settings = p.adaptive_settings()
            control = of.get(pid)
            curve = adaptive_curve(by_id.get(pid, []), by_id.get(control.id, []) if control else [],
                                   profile.table, layout.levels, settings.event, settings.param,
                                   resamples=spec.analysis.resamples, seed=spec.analysis.seed)
            plan = layout.next_plan(curve)
            layout.add(plan)
            rounds.setdefault(pid, []).append(plan)
            decided.append((pid, plan.to_json()))
            self._say(f"{pid}: round {plan.round}: "
                      + (f"stops ({plan.stop})" if plan.stop else
                         f"{sum(n for _, n in plan.add)} replays at {len(plan.add)} levels ({plan.reason})"))
        ledger.add_rounds(decided)
        return going

    def _say(self, line: str) -> None:
        if self.stream is not None:
            print(line, file=self.stream, flush=True)

    def _identities(self, traces: list[Trace]) -> dict[str, dict[str, Any]]:
        """Every perturbation's and control's identity, as the ledger keeps it."""
        return {pid: stored_identity(identity, self.redactor) for pid, identity
                in campaign_identities(self.spec, self.base_dir, self.fn, traces).items()}

    def _finished(self) -> CampaignResult | None:
        """The result of this very campaign (same jobs, same identities) when it finished
        in the output folder and its results are there whole (see
        :func:`~quiver.experiments._campaign.resume.finished`), its counts read from its
        ``summary.json`` (``already_complete``); else None. Writes nothing."""
        spec, out = self.spec, self.out
        source = self.base_dir / spec.baseline if spec.baseline is not None else out / "baseline" / "traces.jsonl"
        if not (out / FINISHED).is_file() or not source.is_file():
            return None
        try:
            traces, skipped = read_corpus([source], lambda line: None)  # each named when the campaign ran
        except QuiverError:
            return None
        from .results import finished_rounds

        held = finished(out, expand_jobs(spec, traces, finished_rounds(out))[0], self._identities(traces))
        if held is None:
            return None
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))  # whole: finished() says so
        status = Counter({str(k): int(v) for k, v in summary.get("status", {}).items()})
        return CampaignResult(output=out, jobs=held, done=held, resumed=held, status=status,
                              negative_control_failed=list(summary.get("negative_control_failed") or []),
                              failed_kept=status.get("failed", 0), skipped_lines=skipped, already_complete=True)

    def check_fidelity(self, traces: list[Trace]) -> None:
        """Replay a sample of ``traces`` with every dimension frozen (the spec's
        ``fidelity:``; :mod:`~quiver.experiments._campaign.fidelity`).

        Raises:
            FidelityError: Too few of them reproduce; the message says which call
                diverged first and its likely cause.
        """
        fidelity = self.spec.fidelity
        if fidelity.per_group == 0:
            return
        self._say(f"fidelity: replaying up to {fidelity.per_group} trace(s) of {fidelity.groups or 'every'} input "
                  "group(s) with everything frozen")
        check_fidelity(traces, self.fn, self._client(), per_group=fidelity.per_group, groups=fidelity.groups,
                       threshold=fidelity.threshold, seed=fidelity.seed, redactor=self.redactor,
                       base_dir=self.base_dir, where=str(self.path), concurrency=self.spec.concurrency)

    def checked_baseline(self, *, resume: bool = False) -> list[Trace]:
        """:meth:`baseline`, then every perturbation tried once, dry, on it
        (:func:`~quiver.experiments._campaign.checks.check_baseline`).

        Raises:
            SpecError: A perturbation would fail its replays; the message names it.
        """
        traces = self.baseline(resume=resume)
        check_baseline(self.spec, self.path, traces, lambda: self.graph(traces))
        return traces

    def _start(self, runner: Executor, jobs: int) -> None:
        """Start the executor's workers, told how many jobs to expect and to load the text
        embedding model meanwhile (executors that take either: ``expected_jobs``, ``warm``)."""
        from .finish import warm_embedder

        if hasattr(runner, "expected_jobs"):
            runner.expected_jobs = jobs
        if hasattr(runner, "warm"):
            embedder = self.spec.analysis.embedder
            runner.warm = functools.partial(warm_embedder, embedder if isinstance(embedder, str) else None)
        runner.start()

    def _open_journals(self, ledger: Ledger) -> Journals:
        """The files the ledger points into, made to agree with it (:mod:`.journal`);
        rows of an older layout, and damaged rows, are found now (their replays run again,
        or the ledger is refused)."""
        if len(ledger):
            ledger.check_rows()
            older = ledger.unplaced()
            if older:
                log.info("%s: %d replay(s) stored by an earlier version are run again", ledger.path, len(older))
                ledger.forget(older)
        journals = Journals(self.out, ledger)
        journals.open()
        return journals

    def _open_ledger(self, ledger_path: Path) -> tuple[Ledger, str]:
        """The run folder's ``spec.resolved.json`` and ledger (with the run's id)."""
        make_folder(self.out)
        write_text(self.out / "spec.resolved.json",
                   json.dumps(self.redactor.data(self.spec.model_dump(mode="json")), indent=2) + "\n")
        mark_folder(self.out, "run")
        ledger = Ledger(ledger_path, resume=f"quiver run {self.path} --resume")
        run_id = ledger.get_meta("run_id") or new_run_id()
        ledger.set_meta([("run_id", run_id), ("spec", str(self.path.resolve()))])
        return ledger, run_id


def run_campaign(
    spec_path: str | Path,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    executor: str | None = None,
    address: str | None = None,
    output: str | None = None,
    progress_stream: TextIO | None = sys.stderr,
    warn: Callable[[str], None] | None = None,
) -> CampaignResult:
    """Run ``quiver run SPEC``: ``CampaignRun.load(spec_path, ...).run(...)`` (``warn``
    gets each baseline line skipped)."""
    run = CampaignRun.load(spec_path, output=output, stream=progress_stream, warn=warn)
    return run.run(resume=resume, retry_failed=retry_failed, executor=executor, address=address)


def _interrupted(exc: KeyboardInterrupt, committed: int, jobs: int, ledger: Path, resume: str) -> str:
    """What an interrupted campaign kept, and the command that continues it."""
    said = str(exc).removeprefix("interrupted").removeprefix(": ")
    if said and not jobs:  # in the baseline's recording, which says what it wrote
        return f"interrupted while recording the baseline: {said}; continue with: {resume}"
    if not jobs:
        return f"interrupted before the replays began ({committed:,} in {ledger}); continue with: {resume}"
    return f"interrupted: {committed:,} of {jobs:,} replays committed to {ledger}; continue with: {resume}"


def _discard_empty_run(out: Path) -> None:
    """Remove the ledger (holding no replay), ``spec.resolved.json`` and the folder's mark
    of a run that failed before its first replay, so that the corrected spec runs into the
    same folder."""
    for name in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal",
                 "spec.resolved.json", *FILES[JOURNAL], MARKER_FILE):
        (out / name).unlink(missing_ok=True)


def _budget_reached(budget: Any, calls: int, tokens: int) -> str:
    """The limit of ``budget`` that ``calls`` and ``tokens`` (this run's) reached."""
    limit = (f"max_llm_calls {budget.max_llm_calls:,}"
             if budget.max_llm_calls is not None and calls >= budget.max_llm_calls
             else f"max_tokens {budget.max_tokens:,}")
    return f"{limit} reached: {calls:,} LLM calls and {tokens:,} tokens by this run"


RESULT_FILES = ("pairs.jsonl", "replays.jsonl", "campaign.json", "report.md", "report.html", "summary.json",
                "attribution/attribution.json", "attribution/attribution.md", "ledger.sqlite", "ledger.sqlite-wal")
"""The files a finished campaign writes (the attribution's when its spec asks for one),
and its closed ledger: a resume finds the campaign finished only while each is as it was."""


_PROFILE_WRITTEN = ".written"
"""In an observational folder, written last: the digest of the profile whose files
(``profile.json``, the report, the plots) were all written, and their names."""


_PROFILE_COST = ("seconds", "embedding")
"""What a profile says about computing it (time, embedding cache hits), not about the corpus."""


def _write_profile_once(profile: Profile, folder: Path) -> None:
    """:func:`~quiver._report.write_profile`, unless ``folder`` holds this very profile
    (what it cost to compute aside) written whole already: a resumed campaign does not
    draw its plots again, and keeps the report of the run that drew them."""
    data = profile.to_json()
    digest = hashlib.sha256(json.dumps({k: v for k, v in data.items() if k not in _PROFILE_COST}, sort_keys=True,
                                       default=str).encode("utf-8")).hexdigest()
    marker = folder / _PROFILE_WRITTEN
    try:
        held = json.loads(marker.read_text(encoding="utf-8"))
        same = held["digest"] == digest and all((folder / name).is_file() for name in held["files"])
    except (OSError, ValueError, KeyError, TypeError):
        same = False
    if same:
        return
    marker.unlink(missing_ok=True)
    written = write_profile(profile, folder)
    write_text(marker, json.dumps({"digest": digest, "files": [p.name for p in written]}) + "\n")
