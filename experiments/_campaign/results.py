"""A campaign's results: pair rows formed while the replays run, then ``pairs.jsonl``,
``replays.jsonl``, ``campaign.json``, ``report.md``, ``report.html`` and ``summary.json``.

Jobs are cut, in job order, into blocks of ``PAIR_CHUNK``. A :class:`Pairer` thread
turns each block into pair rows as soon as its last replay is in the ledger (one
embedding pass over the block's new texts), block after block, while the executor goes
on with later jobs; when the last replay is committed only the blocks still open are
left to pair. The blocks, their order and each block's embedding pass are the same on
every executor, in any order of completion and after a resume, so the numbers are too.
``replays.jsonl`` gets each replay as its difference from its baseline trace
(:func:`.stored.delta_line`), which the engine's trace readers read whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._interventional import CampaignGraph, PairRow, RoundPlan, campaign_estimates, pair_results
from quiver._observational import Profile
from quiver._outdir import LogFile, OutputFile, open_output, replace, write_text
from quiver._progress import Progress
from quiver._report import HTML_FILE, campaign_markdown, folder_files, md_text, write_examples, write_html
from quiver._trace import Redactor, Trace, output_redactor, redacted_logs
from quiver.replay import ReplayJob, ReplayResult, Target, unseen_llm_nodes, unseen_llm_warning
from quiver.replay._capture import merge_unaccounted, unaccounted_json, unaccounted_lines

from .jobs import AdaptiveLayout, controls, distinct
from .ledger import Ledger
from .stored import Baselines, delta_line, packed, unpacked

if TYPE_CHECKING:
    from .run import CampaignResult, CampaignRun

__all__ = ["PAIR_CHUNK", "Pairer", "write_results", "finished_rounds", "write_summary", "failure_reason",
           "failures_json", "failure_lines", "not_applied_lines", "replay_failure", "replay_failures_logged"]

PAIR_CHUNK = 256
"""Replays turned into pair rows per ``pair_results`` call (one embedding pass over
their new texts), in job order: the same blocks on every executor and after a resume."""


class Pairer(threading.Thread):
    """Pair rows of a campaign's jobs, formed block by block as the ledger fills.

    :meth:`committed` tells it which jobs are in the ledger (the jobs a resumed run
    found there count from the start); the thread pairs block ``k`` once every job of
    blocks ``0..k`` is committed, reading the block back from the ledger, and appends
    the block's replays to ``replays.jsonl.tmp``. :meth:`finish` waits for the last
    block and returns every row in job order; :meth:`abandon` stops it (a campaign that
    did not finish: a resume pairs again from the ledger). An error here (an embedding
    model that fails, a ledger row of another spec) stops the campaign: :attr:`failed`,
    raised again by :meth:`finish`.

    Args:
        run: The campaign (its spec, output folder, embedding store and stream).
        ledger: The campaign's ledger.
        traces: The baseline traces.
        graph: The campaign's graph: a block's replays add to it the nodes no baseline
            trace ran before the block is paired; the estimates read it at the end.
        jobs: Every job, in job order.
        steps: Job id -> ladder step.
        done: Job ids already in the ledger (all of them jobs of ``jobs``).
        on_paired: Called with the number of replays of each block paired while the
            executor runs (for the progress line).
    """

    def __init__(self, run: CampaignRun, ledger: Ledger, traces: list[Trace], graph: CampaignGraph,
                 jobs: list[ReplayJob], steps: dict[str, int], done: set[str],
                 on_paired: Any = None) -> None:
        super().__init__(name="quiver-pairs", daemon=True)
        self.run_, self.ledger, self.graph, self.steps = run, ledger, graph, steps
        self.jobs_by_id = {j.job_id: j for j in jobs}
        self.by_id = {t.trace_id: t for t in traces}
        ordered = sorted(jobs, key=lambda j: j.seq)
        self.blocks = [ordered[i:i + PAIR_CHUNK] for i in range(0, len(ordered), PAIR_CHUNK)]
        self._block_of = {j.job_id: k for k, block in enumerate(self.blocks) for j in block}
        self._open = [len(block) for block in self.blocks]
        for job_id in done:  # a subset of the jobs: the campaign refuses a ledger of another spec first
            self._open[self._block_of[job_id]] -= 1
        self.rows: list[PairRow] = []
        self.baselines = Baselines()
        """The baseline traces' JSON and digests, for the rows stored as differences from them."""
        for job in jobs:
            self.baselines.add(job.trace["trace_id"], job.trace)
        self.not_landed: dict[str, Counter[str]] = {}
        """Perturbation id -> why its replays did not land, by reason (those that did not)."""
        self.unaccounted: Counter[tuple[str, str]] = Counter()
        """Requests of the replays the replay contract did not account for, by (node, endpoint)."""
        self.paired_blocks = 0
        self.error: BaseException | None = None
        self.on_paired = on_paired
        self._cond = threading.Condition()
        self._abandoned = False
        self._progress: Progress | None = None

    # -- what the campaign calls -----------------------------------------------------
    def committed(self, job_id: str) -> None:
        """``job_id`` is in the ledger."""
        with self._cond:
            k = self._block_of[job_id]
            self._open[k] -= 1
            if self._open[k] == 0:
                self._cond.notify_all()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def finish(self) -> list[PairRow]:
        """Every job's pair row, in job order, once the last block is paired (with a
        progress line for the blocks left after the replays); ``replays.jsonl`` in place."""
        left = sum(len(b) for b in self.blocks[self.paired_blocks:])
        total = sum(len(b) for b in self.blocks)
        self._progress = Progress("pairs", total, stream=self.run_.stream, resumed=total - left,
                                  before="paired while replaying") if left else None
        try:
            self.join()
        finally:
            if self._progress is not None:
                self._progress.close()
        if self.error is not None:
            raise self.error
        out = self.run_.out
        replace(out / "replays.jsonl.tmp", out / "replays.jsonl")
        return self.rows

    def abandon(self) -> None:
        """Stop pairing (the campaign did not finish) and wait for the thread."""
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()
        if self.is_alive():
            self.join()

    # -- the thread ------------------------------------------------------------------
    def run(self) -> None:
        store = self.run_.embedding_store()
        try:
            with open_output(self.run_.out / "replays.jsonl.tmp") as writer:
                for k, block in enumerate(self.blocks):
                    with self._cond:
                        while self._open[k] > 0 and not self._abandoned:
                            self._cond.wait()
                        if self._abandoned:
                            return
                    found = self.ledger.replays_between(block[0].seq, block[-1].seq)
                    self._pair_block(block, found, store, writer)
                    self.paired_blocks = k + 1
                    failed = sum("error" in d for _, d in found)
                    if self._progress is not None:
                        self._progress.advance(len(block), failed=failed)
                    elif self.on_paired is not None:
                        self.on_paired(len(block))
        except BaseException as exc:  # raised again by finish()
            self.error = exc
        finally:
            store.close()

    def _pair_block(self, block: list[ReplayJob], found: list[tuple[str, dict[str, Any]]], store: Any,
                    writer: OutputFile) -> None:
        spec = self.run_.spec
        if [job_id for job_id, _ in found] != [j.job_id for j in block]:  # jobs of another spec are refused earlier
            raise QuiverError(
                f"{self.ledger.path} does not hold the replays of jobs {block[0].seq}-{block[-1].seq} that it "
                "reported done; run the campaign into a new output folder"
            )
        jobs_by_id, by_id = self.jobs_by_id, self.by_id
        replays = [(job_id, self._replay(job_id, data, by_id[jobs_by_id[job_id].trace["trace_id"]]))
                   for job_id, data in found if "error" not in data]
        self._note_wire_and_landing(replays)
        graph = self.graph.take_in(r for _, r in replays)
        pairs = iter(pair_results([r for _, r in replays], graph, epsilon=spec.analysis.epsilon, store=store))
        replayed = dict(replays)
        for job_id, data in found:
            job = jobs_by_id[job_id]
            common = {"job_id": job_id, "perturbation_id": job_id.split("/")[0], "replay_id": job.perturbation_id,
                      "step": self.steps[job_id]}
            if "error" in data:
                baseline = by_id[job.trace["trace_id"]]
                self.rows.append(PairRow.from_json({
                    **common, "trace_id": baseline.trace_id, "input_id": baseline.input_id, "repeat": job.repeat,
                    "status": "failed", "node": job.node, "op": job.op, "params": job.params, "error": data["error"],
                }))
                continue
            pair = next(pairs)
            self.rows.append(PairRow.from_json({**pair.to_json(traces=False), **common,
                                                "retries": replayed[job_id].retries}))
            writer.write(self._delta_line(replayed[job_id], data))
        writer.flush()

    def _delta_line(self, replay: ReplayResult, data: dict[str, Any]) -> str:
        """The line of ``replays.jsonl`` of a replay (``data``: its ledger row)."""
        stored = packed(data, replay.baseline, self.baselines)
        return delta_line(replay.trace.trace_id, stored["trace_delta"], replay.baseline, self.baselines,
                          _baseline_path(self.run_), self.run_.out)

    def _note_wire_and_landing(self, replays: list[tuple[str, ReplayResult]]) -> None:
        """What the replays sent that the contract did not account for, and why those
        whose perturbation did not land did not."""
        self.unaccounted.update(merge_unaccounted(r.wire for _, r in replays))
        for job_id, r in replays:
            if r.target is not None and r.target.landed is False:
                why = r.target.not_landed or "no reason recorded"
                self.not_landed.setdefault(job_id.split("/")[0], Counter())[why] += 1

    def _replay(self, job_id: str, data: dict[str, Any], baseline: Trace) -> ReplayResult:
        with self.ledger.reading(job_id):  # a row that is not a replay is the ledger's one error
            return ReplayResult.from_json(unpacked(data, baseline, self.baselines), baseline)


def write_results(run: CampaignRun, rows: list[PairRow], profile: Profile, result: CampaignResult,
                  traces: list[Trace], graph: PipelineGraph,
                  layouts: Mapping[str, AdaptiveLayout] | None = None) -> None:
    """``pairs.jsonl``, ``campaign.json`` and ``report.md`` of a finished campaign from its
    pair rows (in job order) and the graph they were paired with (``layouts``: the rounds
    of its adaptive ladders); the result's counts from the rows."""
    spec, out = run.spec, run.out
    _write_jsonl(out / "pairs.jsonl", rows)
    of = controls(spec, traces)
    perturbations = run.redactor.data([{**p.model_dump(mode="json"), "control": of[p.id].id if p.id in of else None,
                                        **_adaptive_entry(p.id, layouts)}
                                       for p in spec.perturbations])  # params may hold what the run redacts
    control_rows = [c.to_json() for c in distinct(of)]
    estimates = campaign_estimates(
        perturbations, rows, profile.table, profile.to_json(), graph, epsilon=spec.analysis.epsilon,
        resamples=spec.analysis.resamples, seed=spec.analysis.seed, permutations=spec.analysis.permutations,
        controls=control_rows, equivalence_margin=spec.analysis.equivalence_margin,
    )
    result.failures = _failures_by_perturbation(rows)
    data = estimates.to_json()
    unseen = _unseen_llm_nodes(spec, traces)
    for entry in data["perturbations"]:
        entry["failures"] = failures_json(result.failures.get(entry["id"], Counter()))
        entry["not_applied_reasons"] = dict(_commonest_first(result.not_landed.get(entry["id"], Counter())))
        entry["unseen_llm_nodes"] = unseen.get(entry["id"], [])
    data["unaccounted_requests"] = unaccounted_json(result.unaccounted)
    data["llm_calls"] = sum(sum(r.llm_calls.values()) for r in rows)  # every pair's, as the wire counted them
    write_text(out / "campaign.json", json.dumps(data, indent=2) + "\n")
    result.estimates = estimates
    observational = (out / "observational" / "report.md").read_text(encoding="utf-8")
    named = {node for node, endpoint in result.unaccounted}  # the wire saw their requests: said below
    warnings = [line for pid, nodes in unseen.items()
                if (line := unseen_llm_warning([n for n in nodes if n not in named], f"perturbation {pid}"))]
    warnings += unaccounted_lines(result.unaccounted, "replays")
    for line in warnings:
        run.warn(line)
    report = campaign_markdown(data, observational)  # the failures' reasons too
    if warnings:
        report += "\n## LLM requests the engine did not see\n\n" + "".join(f"* {md_text(line)}\n" for line in warnings)
    if result.not_landed:
        report += "\n## Perturbations not applied\n\n" + "".join(f"* {md_text(line.strip())}\n"
                                                               for line in not_applied_lines(result))
    write_text(out / "report.md", report)
    write_examples(out, rows, traces, data, _baseline_path(run),
                   {pid: _commonest_first(c)[0][0] for pid, c in result.not_landed.items() if c})
    write_html(out, "campaign", files=_files_written(out))
    result.negative_control_failed = [p.id for p in estimates.perturbations if p.negative_control.passed is False]
    result.status = Counter(r.status for r in rows)
    result.retries = Counter()
    for r in rows:
        result.retries.update(r.retries or {})
    result.llm_calls = data["llm_calls"]


def _baseline_path(run: CampaignRun) -> Path:
    """Where the campaign's baseline traces are (``quiver show`` reads them)."""
    spec = run.spec
    return run.base_dir / spec.baseline if spec.baseline is not None else run.out / "baseline" / "traces.jsonl"


LATE = ("ledger.sqlite", "summary.json")
"""Files a campaign still writes after its page: listed on it without a size."""


def _files_written(out: Path) -> list[tuple[str, int | None]]:
    """The files of the campaign's folder as its page lists them: those there now with
    their sizes, those written after the page (the ledger, closed last, and
    ``summary.json``) and the page itself without one."""
    files: list[tuple[str, int | None]] = [(n, None if n in LATE else s) for n, s in folder_files(out)]
    have = {n for n, _ in files}
    files += [(n, None) for n in (*LATE, HTML_FILE) if n not in have]
    return sorted(files)


def _adaptive_entry(pid: str, layouts: Mapping[str, AdaptiveLayout] | None) -> dict[str, Any]:
    """``{"adaptive": {settings, levels, rounds}}`` of an adaptive ladder (else nothing)."""
    layout = (layouts or {}).get(pid)
    if layout is None:
        return {}
    return {"adaptive": {"settings": dataclasses.asdict(layout.perturbation.adaptive_settings()),
                         "levels": list(layout.levels), "rounds": [plan.to_json() for plan in layout.plans]}}


def finished_rounds(out: Path) -> dict[str, list[RoundPlan]]:
    """The rounds (from round 1) of the adaptive ladders of the campaign whose results are
    in ``out`` (its ``campaign.json``), as a resume of a finished campaign needs them to
    know its jobs; empty when there is none or the file cannot be read."""
    try:
        data = json.loads((out / "campaign.json").read_text(encoding="utf-8"))
        return {str(p["id"]): [RoundPlan.from_json(r) for r in p["adaptive"]["rounds"][1:]]
                for p in data["perturbations"] if isinstance(p, dict) and p.get("adaptive")}
    except (OSError, ValueError, KeyError, TypeError, QuiverError):
        return {}


def _unseen_llm_nodes(spec: Any, traces: list[Trace]) -> dict[str, list[str]]:
    """Perturbation id -> the llm nodes its replays run live (target, inside, downstream)
    that recorded no LLM call in the baseline (``campaign.json``'s ``unseen_llm_nodes``):
    their requests bypass the engine, so their pairs' LLM calls read 0."""
    out = {}
    for p in spec.perturbations:
        nodes = unseen_llm_nodes(traces, Target(p.node, p.occurrence))
        if nodes:
            out[p.id] = nodes
    return out


def _write_jsonl(path: Path, rows: Sequence[PairRow]) -> None:
    """Write ``path`` whole or not at all (a run killed mid-write leaves the old file, or
    none: never a prefix)."""
    write_text(path, "".join(json.dumps(row.to_json(), sort_keys=True) + "\n" for row in rows))


def write_summary(out: Path, result: CampaignResult) -> None:
    """``summary.json``: the run's counts, written whether or not it finished."""
    summary = {
        "jobs": result.jobs, "done": result.done, "resumed": result.resumed, "complete": result.complete,
        "status": dict(result.status), "stopped_by_budget": result.stopped_by_budget,
        "negative_control_failed": result.negative_control_failed, "llm_calls": result.llm_calls,
        "retries": dict(sorted(result.retries.items())),
        "executor": result.executor, "nodes": result.nodes, "seconds": result.seconds,
        "failures": {**failures_json(sum(result.failures.values(), Counter())),
                     "by_perturbation": {pid: failures_json(c) for pid, c in result.failures.items()}},
        "not_applied": {**failures_json(sum(result.not_landed.values(), Counter())),
                        "by_perturbation": {pid: failures_json(c) for pid, c in result.not_landed.items()}},
        "unaccounted_requests": unaccounted_json(result.unaccounted),
    }
    write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")


# --------------------------------------------------------------------------- failures

_REASON_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{8}T\d{6}Z-[0-9a-f]+(?:/[^\s'\",;:()]*)?"), "<trace>"),  # run, trace and replay ids
    (re.compile(r"sha256:[0-9a-f]{8,}"), "sha256:<hash>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<hash>"),
    (re.compile(r"(?<![\w.-])(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:[/\\][^\s'\",;:()\[\]{}]+)+"), "<path>"),
    (re.compile(r"\((?:\{|\[)[^()]*\)?"), "(<value>)"),  # the excerpt of a value an operator was given
    (re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])"), "<n>"),
)
"""What a failure's message says about one replay (ids, digests, paths, the value at
hand, numbers), replaced so that the same failure of many replays reads the same."""

REASON_MAX_CHARS = 300
"""The longest reason kept (the message's first line, cut)."""


def failure_reason(error: str) -> str:
    """The reason of a failed replay: its error (``Type: message``), first line, with what
    belongs to one replay (ids, digests, paths, value excerpts, numbers) replaced by
    placeholders: 36 replays failing the same way give one reason."""
    text = (error or "unknown error").strip().splitlines()[0] if (error or "").strip() else "unknown error"
    for pattern, placeholder in _REASON_RULES:
        text = pattern.sub(placeholder, text)
    return text if len(text) <= REASON_MAX_CHARS else text[:REASON_MAX_CHARS - 3] + "..."


def replay_failure(data: Mapping[str, Any]) -> str | None:
    """The reason a replay (as the executor hands it over) failed, or None when it did not."""
    if "error" in data:
        return failure_reason(str(data["error"]))
    trace = data.get("trace")
    if not (isinstance(trace, Mapping) and trace.get("status") == "failed"):
        return None
    error = trace.get("error")
    return failure_reason(f"{error.get('type')}: {error.get('message')}" if isinstance(error, Mapping) else "")


def _failures_by_perturbation(rows: Sequence[PairRow]) -> dict[str, Counter[str]]:
    """Failed rows by perturbation (controls included) and reason."""
    out: dict[str, Counter[str]] = {}
    for row in rows:
        if row.status == "failed":
            out.setdefault(row.perturbation_id, Counter())[failure_reason(row.error or "")] += 1
    return out


def _commonest_first(reasons: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))


def failures_json(reasons: Mapping[str, int]) -> dict[str, Any]:
    """``{"count": N, "by_reason": {REASON: n}}``, the commonest reason first."""
    return {"count": sum(reasons.values()), "by_reason": dict(_commonest_first(reasons))}


def not_applied_lines(result: CampaignResult) -> list[str]:
    """One line per perturbation whose replays did not all land: how many did not, of
    how many, and the commonest reason (``campaign.json`` holds every reason)."""
    done: Counter[str] = Counter()
    if result.estimates is not None:
        done.update({p.id: p.counts.pairs for p in result.estimates.perturbations})
    lines = []
    for pid, reasons in sorted(result.not_landed.items()):
        reason, _ = _commonest_first(reasons)[0]
        of = f" of {done[pid]:,}" if done[pid] else ""
        lines.append(f"perturbation '{pid}': {sum(reasons.values()):,}{of} replays not applied (counted in no "
                     f"stratum): {reason}")
    return lines


def failure_lines(failures: Mapping[str, Mapping[str, int]]) -> list[str]:
    """One console line per (perturbation, reason): ``  ID  failed N: REASON``."""
    return [f"  {pid:<22} failed {n:>5}: {reason}" for pid, reasons in failures.items()
            for reason, n in _commonest_first(reasons)]


class _ReplayFailure(logging.Filter):
    """The one-line record the replayer logs for each failed replay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "quiver.replay" and str(record.msg).startswith("trace %s failed")


class _Not(logging.Filter):
    def __init__(self, inner: logging.Filter) -> None:
        super().__init__()
        self.inner = inner

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.inner.filter(record)


@contextlib.contextmanager
def replay_failures_logged(path: Path, redactor: Redactor | None = None) -> Iterator[None]:
    """Within the block, each failed replay's record goes to ``path`` (the run's log of
    failures, appended to) and not to the console's handlers: the campaign counts its
    failures by reason instead (:func:`failure_lines`). Every record is redacted by
    ``redactor`` (the run's; default :func:`~quiver._trace.redact_output.output_redactor`)
    meanwhile, its message and its exception's text alike
    (:func:`~quiver._trace.redact_output.redacted_logs`)."""
    handler = LogFile(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_ReplayFailure())
    hide = _Not(_ReplayFailure())
    console = list(logging.getLogger().handlers)
    logger = logging.getLogger("quiver.replay")
    for h in console:
        h.addFilter(hide)
    logger.addHandler(handler)
    try:
        with redacted_logs(redactor or output_redactor()):
            yield
    finally:
        logger.removeHandler(handler)
        for h in console:
            h.removeFilter(hide)
        handler.close()
