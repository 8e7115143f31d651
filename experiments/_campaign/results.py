"""A campaign's results: its pair rows read back (:func:`collect_rows`), then
``campaign.json``, ``report.md``, ``report.html`` and ``summary.json``.

Each replay is paired where it ran (:mod:`.finish`); its pair row and its line of
``replays.jsonl`` are kept once, in the files the ledger points into (:mod:`.journal`),
which become ``pairs.jsonl`` and ``replays.jsonl`` in job order when the campaign
finishes. A pair row is a function of its replay alone, so the numbers are the same on
every executor, in any order of completion and after a resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._interventional import CampaignGraph, PairRow, RoundPlan, campaign_estimates
from quiver._observational import Profile
from quiver._outdir import LogFile, write_text
from quiver._report import HTML_FILE, campaign_markdown, folder_files, md_text, write_examples, write_html
from quiver._trace import Redactor, Trace, output_redactor, redacted_logs
from quiver.replay import Target, unseen_llm_nodes, unseen_llm_warning
from quiver.replay._capture import unaccounted_json, unaccounted_lines

from .jobs import AdaptiveLayout, controls, distinct
from .journal import Journals
from .ledger import Ledger

if TYPE_CHECKING:
    from .run import CampaignResult, CampaignRun

__all__ = ["Collected", "collect_rows", "write_results", "finished_rounds", "write_summary", "failure_reason",
           "failures_json", "failure_lines", "not_applied_lines", "replay_failure", "replay_failures_logged"]

@dataclasses.dataclass
class Collected:
    """A campaign's pair rows in job order, read back from where its replays are kept,
    with what its replays' facts add up to."""

    rows: list[PairRow]
    not_landed: dict[str, Counter[str]]
    """Perturbation id -> why its replays did not land, by reason (those that did not)."""
    unaccounted: Counter[tuple[str, str]]
    """Requests of the replays the replay contract did not account for, by (node, endpoint)."""


def collect_rows(ledger: Ledger, journals: Journals, graph: CampaignGraph) -> Collected:
    """Every committed replay's pair row, in job order; the campaign's graph takes in,
    in job order, the nodes replays ran that it lacks (from the replays' facts).

    Raises:
        LedgerError: A row's facts or pair row that does not read.
    """
    refs = ledger.refs()
    rows: list[PairRow] = []
    not_landed: dict[str, Counter[str]] = {}
    unaccounted: Counter[tuple[str, str]] = Counter()
    for ref, text in zip(refs, journals.pair_rows(refs), strict=True):
        with ledger.reading(ref.job_id):
            rows.append(PairRow.from_json(json.loads(text), where=f"the pair row of job {ref.job_id!r}"))
            facts = json.loads(ref.facts) if ref.facts else {}
            if facts.get("ran"):
                graph.take_in_ran(facts["ran"], [tuple(e) for e in facts.get("edges") or []])
            if facts.get("not_landed"):
                not_landed.setdefault(ref.job_id.split("/")[0], Counter())[str(facts["not_landed"])] += 1
            for node, endpoint, n in facts.get("unaccounted") or []:
                unaccounted[(str(node), str(endpoint))] += int(n)
    return Collected(rows, not_landed, unaccounted)


def write_results(run: CampaignRun, rows: list[PairRow], profile: Profile, result: CampaignResult,
                  traces: list[Trace], graph: PipelineGraph,
                  layouts: Mapping[str, AdaptiveLayout] | None = None) -> None:
    """``pairs.jsonl``, ``campaign.json`` and ``report.md`` of a finished campaign from its
    pair rows (in job order) and the graph they were paired with (``layouts``: the rounds
    of its adaptive ladders); the result's counts from the rows."""
    spec, out = run.spec, run.out
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
    write_examples(out, rows, traces, data, baseline_path(run),
                   {pid: _commonest_first(c)[0][0] for pid, c in result.not_landed.items() if c})
    write_html(out, "campaign", files=_files_written(out))
    result.negative_control_failed = [p.id for p in estimates.perturbations if p.negative_control.passed is False]
    result.status = Counter(r.status for r in rows)
    result.retries = Counter()
    for r in rows:
        result.retries.update(r.retries or {})
    result.llm_calls = data["llm_calls"]


def baseline_path(run: CampaignRun) -> Path:
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
