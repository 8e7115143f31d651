"""``quiver run SPEC``: a perturbation campaign, end to end.

1. The baseline: an existing traces file, or the spec's inputs recorded ``repeats``
   times (into ``OUTPUT/baseline/``, resumable like ``quiver record``).
2. The observational profile of the baseline (``OUTPUT/observational/``).
3. Jobs: every perturbation's parameter sets (prompt variants x ladder steps) x the
   selected traces where its target call ran x the replay repeats, each with its job
   id and sample keys fixed up front (seed, trace, perturbation step, repeat). Then
   the control replays (``replay.controls`` per trace): one control per target and
   kind, over every trace a perturbation of that target selected, the target served
   as recorded (``identity``, for output operators) or run live unchanged (for
   execution operators), downstream live: the noise the thresholds are held against.
4. Replays on the executor (local threads or Ray). Each finished replay is committed
   to the ledger (``ledger.sqlite``) by a separate thread, in batches, while the
   executor goes on submitting: a killed campaign resumes (``--resume``) with no
   replay lost or repeated (those in flight or waiting for their batch are simply run
   again).
5. Pairs, once every job is in the ledger: the replays are read back in job order and
   turned into pair rows ``PAIR_CHUNK`` at a time (one embedding pass over each
   chunk's new texts), so every executor and every resumed run gets the same batches
   and the same numbers. Then ``pairs.jsonl`` (job order), ``replays.jsonl`` (the
   perturbed traces), ``campaign.json`` (the interventional estimates), ``report.md``
   and ``summary.json``.

Exit codes: 0 done; 1 done with problems (failed or diverged pairs, a failed negative
control) or stopped by the budget; 2 could not run.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from quiver._observational import Profile, analyze
from quiver._distance import default_cache_dir, make_embedder
from quiver._distance import EmbeddingStore
from quiver._errors import QuiverError, SpecError
from quiver._graph import PipelineGraph, infer_graph, load_graph
from quiver._progress import Progress
from quiver._trace import Redactor
from quiver._trace import Trace
from quiver._trace import TraceWriter, load_traces
from quiver._yamlspec import load_spec, load_yaml_with_lines
from quiver.replay import (
    LLMClient,
    ReplayMode,
    ReplayResult,
    declared_graph,
    load_pipeline,
    new_run_id,
    pair_results,
    record_corpus,
)
from quiver.perturbations import get_operator
from quiver._interventional import seen_part
from quiver.replay._executors import Executor, LocalExecutor, RayExecutor, ReplayContext, ReplayJob
from quiver.replay._replayer import sample_ids

from quiver.experiments._cli import write_profile
from quiver.experiments._config import CampaignSpec, PerturbationSpec
from .ledger import Ledger
from quiver.experiments._config import open_llm, spec_redactor
from quiver.experiments._config import load_inputs

__all__ = ["CampaignResult", "Control", "controls", "run_campaign", "expand_jobs", "select_traces", "check_spec", "campaign_graph", "eligible_traces", "load_baseline", "make_executor", "observational_profile", "replay_context", "sample_traces"]

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
    negative_control_failed: list[str] = field(default_factory=list)
    llm_calls: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    executor: str = "local"
    ray_nodes: int = 0

    @property
    def complete(self) -> bool:
        return self.done == self.jobs


# --------------------------------------------------------------------------- jobs


def _margin(call: Any) -> float | None:
    """The smallest gap between the top token logprob and the runner-up in a call's
    recorded response (None without alternatives)."""
    if call.response is None or not call.response.logprobs:
        return None
    gaps = []
    for entry in call.response.logprobs:
        top = sorted((alt.get("logprob", float("-inf")) for alt in entry.get("top_logprobs") or []), reverse=True)
        if len(top) >= 2:
            gaps.append(top[0] - top[1])
    return min(gaps) if gaps else None


def eligible_traces(traces: Sequence[Trace], node: str, occurrence: int = 0) -> list[Trace]:
    """The ok traces where the ``occurrence``-th call of ``node`` ran."""
    return [t for t in traces
            if t.status == "ok" and any(c.node == node and c.occurrence == occurrence for c in t.calls)]


def sample_traces(traces: Sequence[Trace], n: int | None, seed: int, key: str) -> list[Trace]:
    """A seeded sample of ``n`` of ``traces`` (all when ``n`` is None or not smaller), in
    their order; ``key`` (a perturbation id, a template id) gives each its own draw."""
    if n is None or n >= len(traces):
        return list(traces)
    keep = set(random.Random(f"{seed}|{key}").sample(range(len(traces)), n))
    return [t for i, t in enumerate(traces) if i in keep]


def select_traces(spec: CampaignSpec, perturbation: PerturbationSpec, traces: Sequence[Trace]) -> list[Trace]:
    """The baseline traces a perturbation replays: ok traces where its target call ran,
    filtered by the spec's ``select``."""
    eligible = eligible_traces(traces, perturbation.node, perturbation.occurrence)
    select = spec.select
    if select.mode == "sample":
        return sample_traces(eligible, select.n, select.seed, perturbation.id)
    if select.mode == "near_boundary":
        scored = []
        for t in eligible:
            call = next(c for c in t.calls if c.node == perturbation.node and c.occurrence == perturbation.occurrence)
            margin = _margin(call)
            if margin is not None and margin <= select.margin:
                scored.append((margin, t.trace_id, t))
        scored.sort(key=lambda x: (x[0], x[1]))
        return [t for _, _, t in scored[: select.n or len(scored)]]
    return eligible


def expand_jobs(spec: CampaignSpec, traces: Sequence[Trace]) -> tuple[list[ReplayJob], dict[str, int], dict[str, int]]:
    """Every job of the campaign in a fixed order, with the step of each job and the
    traces each perturbation left out (no target call, or not selected)."""
    jobs: list[ReplayJob] = []
    steps: dict[str, int] = {}
    left_out: dict[str, int] = {}
    payloads: dict[str, dict[str, Any]] = {}

    def payload(trace: Trace) -> dict[str, Any]:  # one JSON form per trace, shared by its jobs
        if trace.trace_id not in payloads:
            payloads[trace.trace_id] = trace.model_dump(mode="json")
        return payloads[trace.trace_id]

    keyed = sample_ids(traces)
    for p in spec.perturbations:
        chosen = select_traces(spec, p, traces)
        left_out[p.id] = len(traces) - len(chosen)
        parameter_sets = p.steps()
        repeats = p.repeats or spec.replay.repeats
        for step, params in enumerate(parameter_sets):
            pid = p.id if len(parameter_sets) == 1 else f"{p.id}#{step}"
            for trace in chosen:
                for r in range(repeats):
                    job_id = f"{p.id}/{step}/{trace.trace_id}/{r}"
                    steps[job_id] = step
                    jobs.append(ReplayJob(
                        job_id=job_id, seq=len(jobs), trace=payload(trace), perturbation_id=pid, node=p.node,
                        occurrence=p.occurrence, op=p.op, params=params, repeat=r, sample_id=keyed[trace.trace_id],
                    ))
    for control in distinct(controls(spec, traces)):
        for trace in control.traces:
            for r in range(spec.replay.controls):
                job_id = f"{control.id}/0/{trace.trace_id}/{r}"
                steps[job_id] = 0
                jobs.append(ReplayJob(
                    job_id=job_id, seq=len(jobs), trace=payload(trace), perturbation_id=control.id,
                    node=control.node,
                    occurrence=control.occurrence, op=control.op, params={}, repeat=r,
                    sample_id=keyed[trace.trace_id],
                ))
    return jobs, steps, left_out


@dataclass
class Control:
    """The control replays of one target: its perturbations' downstream noise, trace by trace."""

    id: str
    node: str
    occurrence: int
    kind: str
    """``served`` (the target as recorded: the control of output operators) or ``live``
    (the target run again unchanged: the control of execution operators)."""
    traces: list[Trace]
    perturbations: list[str]

    @property
    def op(self) -> str:
        return "identity" if self.kind == "served" else ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "occurrence": self.occurrence, "kind": self.kind,
                "op": self.op or None, "perturbations": self.perturbations}


def controls(spec: CampaignSpec, traces: Sequence[Trace]) -> dict[str, Control]:
    """The campaign's controls by perturbation id (none when ``replay.controls`` is 0):
    one per target and kind, over every trace a perturbation of that target selected."""
    if spec.replay.controls == 0:
        return {}
    by_key: dict[tuple[str, int, str], Control] = {}
    of: dict[str, Control] = {}
    for p in spec.perturbations:
        kind = "live" if get_operator(p.op).mode == "execution" else "served"
        key = (p.node, p.occurrence, kind)
        control = by_key.get(key)
        if control is None:
            control = by_key[key] = Control(f"control.{p.node}.{p.occurrence}.{kind}", p.node, p.occurrence, kind,
                                            [], [])
        seen = {t.trace_id for t in control.traces}
        control.traces += [t for t in select_traces(spec, p, traces) if t.trace_id not in seen]
        control.perturbations.append(p.id)
        of[p.id] = control
    return of


def distinct(of: dict[str, Control]) -> list[Control]:
    """The controls of :func:`controls`' result, each once, in the order first met."""
    return list({c.id: c for c in of.values()}.values())


# --------------------------------------------------------------------------- checks


def check_spec(spec: CampaignSpec, path: Path) -> tuple[Any, PipelineGraph | None]:
    """Everything that can be checked before anything runs: the pipeline imports, the
    graph and baseline files exist, and every perturbation names a node, a field and
    values the graph knows (when it declares them). Returns the pipeline function and
    the declared graph.

    Raises:
        SpecError: naming the file, the line and the field path, and what would be valid.
    """
    _, lines = load_yaml_with_lines(path)
    base_dir = path.parent

    def fail(where: tuple[Any, ...], reason: str) -> SpecError:
        line = next((lines[where[:i]] for i in range(len(where), 0, -1) if where[:i] in lines), None)
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
        return SpecError(str(path), line, dotted, reason)

    try:
        fn = load_pipeline(spec.pipeline, base_dir)
    except QuiverError as exc:
        raise fail(("pipeline",), str(exc)) from None
    for key in ("baseline", "graph"):
        value = getattr(spec, key)
        if value is not None and not (base_dir / value).is_file():
            raise fail((key,), f"no file at {base_dir / value}")
    graph = load_graph(base_dir / spec.graph) if spec.graph else declared_graph()
    if not graph.nodes:
        return fn, None
    for i, p in enumerate(spec.perturbations):
        if p.node not in graph.nodes:
            raise fail(("perturbations", i, "node"),
                       f"unknown node {p.node!r}; the graph's nodes are {', '.join(sorted(graph.nodes))}")
        node = graph.nodes[p.node]
        for step in p.steps():
            for field_name, value in _fields_set(p.op, step):
                top = field_name.split(".")[0]
                if node.fields is not None and top not in node.fields:
                    raise fail(("perturbations", i, "params"),
                               f"node {p.node!r} has no field {top!r}; its fields are {', '.join(node.fields)}")
                spec_f = node.fields.get(top) if node.fields is not None else None
                cats = spec_f.categories if spec_f is not None else None
                if cats and value is not _ANY and value not in cats:
                    raise fail(("perturbations", i, "params"),
                               f"{value!r} is not a category of {p.node}.{top}; its categories are "
                               f"{', '.join(map(str, cats))}")
    return fn, graph


_ANY = object()


def _fields_set(op: str, params: dict[str, Any]) -> list[tuple[str, Any]]:
    """The (field, value) pairs an operator touches (value _ANY when it is not fixed)."""
    if op == "override":
        return list((params.get("set") or {}).items())
    if op == "categorical_flip" and params.get("field"):
        return [(params["field"], params["to"] if "to" in params and params.get("to") is not None else _ANY)]
    if params.get("field") and op in ("bool_flip", "list_edit", "text_edit"):
        return [(params["field"], _ANY)]
    return []


# --------------------------------------------------------------------------- running


def make_executor(spec: CampaignSpec, kind: str | None, address: str | None) -> Executor:
    chosen = kind or spec.executor.kind
    if chosen == "ray":
        return RayExecutor(
            address=address or spec.executor.address, batch_size=spec.executor.batch_size,
            max_in_flight=spec.executor.max_in_flight, max_retries=spec.executor.max_retries,
        )
    return LocalExecutor(spec.executor.concurrency)


def load_baseline(spec: CampaignSpec, base_dir: Path, out: Path, client: LLMClient, fn: Any, resume: bool,
              redactor: Redactor, stream: TextIO | None) -> list[Trace]:
    if spec.baseline is not None:
        loaded = load_traces(base_dir / spec.baseline)
        if loaded.errors:
            raise QuiverError(f"baseline {spec.baseline}: {loaded.errors[0]} ({len(loaded.errors)} bad line(s))")
        return loaded.traces
    done = out / "baseline" / "traces.jsonl"
    if resume and done.is_file():
        return load_traces(done).traces
    inputs = load_inputs(spec, base_dir)  # type: ignore[arg-type]
    result = record_corpus(
        fn, pipeline_name=spec.name or getattr(fn, "__name__", "pipeline"), inputs=inputs, repeats=spec.repeats,
        output_dir=out / "baseline", llm=client, concurrency=spec.concurrency, redactor=redactor, seed=spec.seed,
        resume=resume, progress_stream=stream,
    )
    return load_traces(result.traces_path).traces


def observational_profile(spec: CampaignSpec, traces: list[Trace], graph: PipelineGraph, folder: Path) -> Profile:
    """The baseline's observational profile with the spec's analysis options, written to ``folder``."""
    profile = analyze(
        traces, graph, epsilon=spec.analysis.epsilon, alphas=spec.analysis.alphas, resamples=spec.analysis.resamples,
        seed=spec.analysis.seed, embedder=spec.analysis.embedder, cache_dir=spec.analysis.cache_dir,
    )
    write_profile(profile, folder)
    return profile


def campaign_graph(spec: CampaignSpec, base_dir: Path, traces: list[Trace]) -> PipelineGraph:
    base = load_graph(base_dir / spec.graph) if spec.graph else declared_graph()
    return infer_graph([t for t in traces if t.status == "ok"], seen_part(base, traces))[0]


def run_campaign(
    spec_path: str | Path,
    *,
    resume: bool = False,
    executor: str | None = None,
    address: str | None = None,
    output: str | None = None,
    progress_stream: TextIO | None = sys.stderr,
) -> CampaignResult:
    """Run ``quiver run SPEC``; see the module docstring."""
    t0 = time.perf_counter()
    path = Path(spec_path)
    spec = load_spec(CampaignSpec, path)
    if output is not None:
        spec = spec.model_copy(update={"output": output})
    fn, _ = check_spec(spec, path)
    base_dir = path.parent
    out = Path(spec.output)
    ledger_path = out / "ledger.sqlite"
    if ledger_path.exists() and not resume:
        raise QuiverError(
            f"{out} holds a campaign's ledger already: `quiver run {path} --resume` finishes it, "
            "or set another output folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    redactor = spec_redactor(spec)
    (out / "spec.resolved.json").write_text(
        json.dumps(redactor.data(spec.model_dump(mode="json")), indent=2) + "\n", encoding="utf-8"
    )
    ledger = Ledger(ledger_path)
    run_id = ledger.get_meta("run_id") or new_run_id()
    ledger.set_meta([("run_id", run_id), ("spec", str(path.resolve()))])
    try:
        with open_llm(spec.llm, base_dir) as client:
            traces = load_baseline(spec, base_dir, out, client, fn, resume, redactor, progress_stream)
            profile = observational_profile(spec, traces, campaign_graph(spec, base_dir, traces), out / "observational")
            jobs, steps, left_out = expand_jobs(spec, traces)
            result = _replay_all(spec, base_dir, out, client, jobs, left_out, profile.graph, ledger, run_id,
                                 make_executor(spec, executor, address), redactor, progress_stream)
            if result.complete:
                _write_results(spec, out, ledger, profile, result, traces, jobs, steps, progress_stream)
    finally:
        ledger.close()
    result.seconds = round(time.perf_counter() - t0, 3)
    _write_summary(out, result)
    return result


PAIR_CHUNK = 256
"""Replays turned into pair rows per ``pair_results`` call (one embedding pass over
their new texts), in job order: the same batches on every executor and after a resume."""


class _Committer(threading.Thread):
    """Commits finished replays to the ledger in batches, off the executor's loop.

    The executor hands a finished replay to :meth:`put` and goes straight back to
    submitting work; this thread redacts whatever has arrived, writes it in one
    transaction and then reports each replay to ``on_committed``. An error here stops
    the campaign (``failed``) and is raised again by :meth:`close`.
    """

    def __init__(self, ledger: Ledger, redactor: Redactor, seq: dict[str, int],
                 on_committed: Callable[[str, dict[str, Any]], None], max_batch: int = 512,
                 gather_s: float = 0.05) -> None:
        super().__init__(name="quiver-ledger", daemon=True)
        self.ledger, self.redactor, self.seq = ledger, redactor, seq
        self.on_committed, self.max_batch, self.gather_s = on_committed, max_batch, gather_s
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self.error: BaseException | None = None

    def put(self, job_id: str, data: dict[str, Any]) -> None:
        self.queue.put((job_id, data))

    @property
    def failed(self) -> bool:
        return self.error is not None

    def run(self) -> None:
        stop = False
        while not stop:
            batch = [self.queue.get()]
            # gather what finishes in the next moment too, then what is already there:
            # fewer, larger transactions (a kill loses at most this much finished work,
            # which a resume runs again); None, the last item ever put, ends the thread
            deadline = time.monotonic() + self.gather_s
            while batch[-1] is not None and len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            stop = batch[-1] is None
            if self.error is not None:
                continue  # drain until the end; close() reports the error
            try:
                items = [(job_id, *self.redactor.encode(data)) for job_id, data in (b for b in batch if b is not None)]
                self.ledger.commit([(job_id, self.seq[job_id], text) for job_id, _, text in items])
                for job_id, data, _ in items:
                    self.on_committed(job_id, data)
            except BaseException as exc:  # reported by close()
                self.error = exc

    def close(self) -> None:
        self.queue.put(None)
        self.join()
        if self.error is not None:
            raise QuiverError(f"the campaign ledger could not be written: {self.error}") from self.error


def replay_context(spec: CampaignSpec, base_dir: Path, client: LLMClient, graph: PipelineGraph, mode: ReplayMode, *,
                   seed: int, run_id: str, cache_dir: Path | None = None) -> ReplayContext:
    """What a worker needs to replay the spec's jobs against ``client``'s endpoint."""
    return ReplayContext(
        pipeline=spec.pipeline, base_dir=str(base_dir.resolve()),
        llm={"base_url": client.base_url, "model": client.model, "api_key": client.api_key,
             "timeout_s": client.timeout_s, "retry": client.retry.model_dump(), "params": client.params},
        mode=mode.model_dump(mode="json"), graph=graph.model_dump(mode="json"), seed=seed, run_id=run_id,
        cache_dir=str(cache_dir.resolve()) if cache_dir is not None else None,
    )


def _replay_all(
    spec: CampaignSpec, base_dir: Path, out: Path, client: LLMClient, jobs: list[ReplayJob],
    left_out: dict[str, int], graph: PipelineGraph, ledger: Ledger, run_id: str, executor: Executor,
    redactor: Redactor, stream: TextIO | None,
) -> CampaignResult:
    done = ledger.done()
    todo = [j for j in jobs if j.job_id not in done]
    mode = ReplayMode(
        frozen=tuple(spec.replay.frozen), live_nodes=tuple(spec.replay.live_nodes),
        frozen_nodes=tuple(spec.replay.frozen_nodes), downstream=spec.replay.downstream,
    )
    context = replay_context(spec, base_dir, client, graph, mode, seed=spec.seed, run_id=run_id,
                             cache_dir=out / "cache" if spec.replay.downstream == "cached" else None)
    result = CampaignResult(output=out, jobs=len(jobs), done=len(jobs) - len(todo), resumed=len(jobs) - len(todo),
                            executor=executor.name)
    tokens = [0]
    progress = Progress("replays", len(jobs), stream=stream)
    progress.advance(result.resumed)

    def over_budget() -> bool:
        budget = spec.budget
        hit = (budget.max_llm_calls is not None and result.llm_calls >= budget.max_llm_calls) or (
            budget.max_tokens is not None and tokens[0] >= budget.max_tokens
        )
        result.stopped_by_budget = result.stopped_by_budget or hit
        return hit

    def committed(job_id: str, data: dict[str, Any]) -> None:
        retried = 0
        if "error" in data:
            status = "failed"
        else:
            status = "diverged" if data.get("divergences") else "ok"
            calls = sum((data.get("llm_calls") or {}).values())
            result.llm_calls += calls
            result.retries.update(data.get("retries") or {})
            retried = sum((data.get("retries") or {}).values())
            tokens[0] += int(data.get("llm_tokens") or 0)
        result.status[status] += 1
        result.done += 1
        progress.advance(failed=int(status == "failed"), diverged=int(status == "diverged"), retries=retried)

    committer = _Committer(ledger, redactor, {j.job_id: j.seq for j in jobs}, committed)
    committer.start()
    try:
        executor.run(context, todo, committer.put, lambda: committer.failed or over_budget())
    finally:
        try:
            committer.close()
        finally:
            progress.close()
    if isinstance(executor, RayExecutor):
        result.ray_nodes = len(executor.nodes)
    left = {k: v for k, v in left_out.items() if v}
    if left:
        log.info("traces left out (no target call, or not selected): %s", left)
    return result


def _pair_rows(spec: CampaignSpec, out: Path, ledger: Ledger, traces: list[Trace], graph: PipelineGraph,
               jobs: list[ReplayJob], steps: dict[str, int], stream: TextIO | None) -> list[dict[str, Any]]:
    """Every job's pair row, in job order, from the ledger; writes ``replays.jsonl`` on the way."""
    jobs_by_id = {j.job_id: j for j in jobs}
    by_id = {t.trace_id: t for t in traces}
    store = EmbeddingStore(
        make_embedder(spec.analysis.embedder),
        Path(spec.analysis.cache_dir) if spec.analysis.cache_dir else default_cache_dir(),
    )
    progress = Progress("pairs", len(jobs), stream=stream)
    rows: list[dict[str, Any]] = []

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
                rows.append({**common, "trace_id": baseline.trace_id, "input_id": baseline.input_id,
                             "repeat": job.repeat, "status": "failed", "node": job.node, "op": job.op,
                             "params": job.params, "error": data["error"]})
                continue
            pair = next(pairs)
            rows.append({**pair.to_json(traces=False), **common, "retries": replayed[job_id].retries})
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


def _write_results(spec: CampaignSpec, out: Path, ledger: Ledger, profile: Any, result: CampaignResult,
                   traces: list[Trace], jobs: list[ReplayJob], steps: dict[str, int], stream: TextIO | None) -> None:
    from quiver import campaign_estimates, interventional_report

    rows = _pair_rows(spec, out, ledger, traces, profile.graph, jobs, steps, stream)
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
    (out / "campaign.json").write_text(json.dumps(estimates, indent=2) + "\n", encoding="utf-8")
    observational = (out / "observational" / "report.md").read_text(encoding="utf-8")
    (out / "report.md").write_text(
        interventional_report(estimates) + "\n\n---\n\n" + observational, encoding="utf-8"
    )
    result.negative_control_failed = [
        p["id"] for p in estimates["perturbations"] if (p.get("negative_control") or {}).get("passed") is False
    ]
    result.status = Counter(r.get("status", "ok") for r in rows)
    result.retries = Counter()
    for r in rows:
        result.retries.update(r.get("retries") or {})
    result.llm_calls = sum(sum((r.get("llm_calls") or {}).values()) for r in rows)


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _write_summary(out: Path, result: CampaignResult) -> None:
    summary = {
        "jobs": result.jobs, "done": result.done, "resumed": result.resumed, "complete": result.complete,
        "status": dict(result.status), "stopped_by_budget": result.stopped_by_budget,
        "negative_control_failed": result.negative_control_failed, "llm_calls": result.llm_calls,
        "retries": dict(sorted(result.retries.items())),
        "executor": result.executor, "ray_nodes": result.ray_nodes, "seconds": result.seconds,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
