"""``quiver gate SPEC --candidate TEMPLATE_ID=PATH``: is a prompt change safe to deploy?

QUIVER.md §9 (the paper's Principle 2 protocol), for each candidate template:

1. **The changed node**: the node whose recorded calls rendered ``TEMPLATE_ID``.
2. **Probes**: ``gate.probes`` ok baseline traces where that node ran, drawn stratified
   by input (:func:`draw_probes`): one trace of each input in a seeded order, then a
   second of each, and so on; by default one per input. Inputs the budget leaves without
   a probe are named in the report.
3. **Two arms**, ``gate.repeats`` replays per probe each (by default the fewest at which
   a complete change of one input can fail the per-input test with every probed input
   in the family: :func:`~quiver._interventional.inputs.replays_needed`), everything upstream of the
   changed node served from the recording, the node and all downstream live:
   *candidate* (the candidate template in force for the whole replay, so every call of
   the node renders it) and *current* (the current template: the node's own noise
   floor). The arms have their own sample keys (``gate:TEMPLATE_ID:candidate`` and
   ``...:current``).
4. **Measures, verdict and what to re-evaluate**, from each replay's pair with its
   recorded baseline, pairs and downstream nodes read from one graph: the baseline's
   and the nodes the candidate's replays reached that no baseline trace ran
   (:class:`~quiver._interventional.CampaignGraph`). See
   :mod:`quiver._interventional.gate` (d_i and its fields, the
   D_shape and D_iter rates and every downstream node's distance, per arm and paired,
   and the per-input tests; ``fail``, exit 1, when d_i exceeds the node's beta_shape and
   rises, a rate rises, or an input's path changes beyond its current-template rate, at
   the familywise level ``gate.familywise``; otherwise ``pass``, exit 0, with the impact
   set and the inputs that could not be tested).

The profile: ``--profile RUN_DIR`` (a ``quiver run`` folder: ``observational/profile.json``,
``campaign.json``, and its ``baseline/`` when the spec records one), else the spec's
output folder when a campaign ran there, else the observational part of the campaign
is run first (baseline recorded or loaded, then analysed, into the gate's folder), and
the report says so. Outputs in the gate's folder: ``gate.json``, ``gate.md`` (a
pull-request comment) and ``junit.xml`` (one test case per candidate). Exit 2 when the
gate could not run: a bad spec or candidate, no baseline (or none of its lines reads), a
template no call rendered, an endpoint that failed replays. A baseline line that cannot
be read costs only itself (one warning, ``baseline FILE:LINE: REASON; the line is
skipped``; exit 1 whatever the verdict).

``quiver gate --plan`` (:func:`plan_gate`) counts the replays, LLM calls, tokens and cost
of the very jobs the gate runs (:func:`candidate_jobs`) and writes nothing. The gate
keeps nothing to resume: on Ctrl-C it says how many of its replays finished, and that
it is to be run again (exit 130).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._interrupt import Interrupted
from quiver._interventional import (
    CampaignEstimates,
    CampaignGraph,
    GateCandidate,
    GateProfile,
    gate_levels,
    judge_candidate,
    pair_results,
    replays_needed,
)
from quiver._outdir import OutputFolder, mark_folder, output_errors, write_text
from quiver._progress import Progress
from quiver._report import write_html
from quiver._trace import NodeCall, Trace
from quiver.experiments._campaign import (
    CampaignPlan,
    CampaignRun,
    check_candidates,
    eligible_traces,
    inline_candidate,
    plan_jobs,
)
from quiver.replay import EndpointWatch, ReplayJob, ReplayMode, ReplayResult, sample_ids
from quiver.replay._capture import merge_unaccounted, unaccounted_json, unaccounted_lines

from .report import gate_junit, gate_markdown

__all__ = ["CandidateJobs", "GateResult", "GateSettings", "candidate_jobs", "draw_probes", "gate_settings",
           "parse_candidates", "plan_gate", "run_gate"]


@dataclass
class GateResult:
    """What ``quiver gate`` decided, and where it wrote it."""

    verdict: str
    data: dict[str, Any]
    output: Path
    files: list[Path] = field(default_factory=list)
    skipped_lines: int = 0
    """Baseline lines that could not be read, each named once by a warning and skipped."""

    @property
    def passed(self) -> bool:
        """Every candidate passed (``quiver gate`` exits 0, else 1)."""
        return self.verdict == "pass"


def parse_candidates(items: Sequence[str]) -> dict[str, Path]:
    """``TEMPLATE_ID=PATH`` (or ``NODE/SELECTOR=PATH``: an inline message, see
    :func:`~quiver.experiments._campaign.inline_candidate`) arguments -> {id: path}; each
    file must exist."""
    out: dict[str, Path] = {}
    for item in items:
        tid, sep, path = item.rpartition("=") if "/" in item.partition("=")[0] else item.partition("=")
        if not sep or not tid.strip() or not path.strip():
            raise QuiverError(f"--candidate {item!r}: give TEMPLATE_ID=PATH, e.g. support_bot.rewriter=prompts/new.txt,"
                              " or NODE/SELECTOR=PATH for an inline message, e.g. draft/system=new_system.txt")
        tid = tid.strip()
        inline_candidate(tid)  # a malformed selector is said here
        if tid in out:
            raise QuiverError(f"--candidate: template {tid!r} is given twice; one candidate per template")
        file = Path(path.strip()).expanduser().resolve()
        if not file.is_file():
            raise QuiverError(f"--candidate {item!r}: no file at {file}")
        out[tid] = file
    if not out:
        raise QuiverError("no --candidate given: name at least one TEMPLATE_ID=PATH")
    return out


# --------------------------------------------------------------------------- the profile


def _run_dir(run: CampaignRun, profile_dir: Path | None) -> Path | None:
    """The campaign folder whose profile the gate reads (None: it computes one)."""
    if profile_dir is None and (Path(run.spec.output) / "observational" / "profile.json").is_file():
        return Path(run.spec.output)
    return profile_dir


def _baseline_at_hand(run: CampaignRun, profile_dir: Path | None) -> list[Trace] | None:
    """The baseline, when it needs no recording: the spec's file, or the campaign folder's."""
    if run.spec.baseline is not None:
        return run.baseline()
    found = _recorded_baseline(run, profile_dir)
    return run.read_baseline(found) if found is not None else None


def _recorded_baseline(run: CampaignRun, profile_dir: Path | None) -> Path | None:
    """The campaign folder's recorded baseline, when there is one."""
    run_dir = _run_dir(run, profile_dir)
    found = run_dir / "baseline" / "traces.jsonl" if run_dir is not None else None
    return found if found is not None and found.is_file() else None


def _load_profile(
    run: CampaignRun, profile_dir: Path | None, out: Path, traces: list[Trace] | None = None,
) -> tuple[list[Trace], GateProfile, PipelineGraph]:
    spec = run.spec
    run_dir = _run_dir(run, profile_dir)
    if run_dir is not None:
        profile_file = run_dir / "observational" / "profile.json"
        if not profile_file.is_file():
            raise QuiverError(f"--profile {run_dir}: no observational/profile.json there; is it a `quiver run` folder?")
        if traces is None and spec.baseline is not None:
            traces = run.baseline()
        elif traces is None and (run_dir / "baseline" / "traces.jsonl").is_file():
            traces = run.read_baseline(run_dir / "baseline" / "traces.jsonl")
        elif traces is None:
            raise QuiverError(
                f"no baseline: the spec names no baseline file and {run_dir / 'baseline' / 'traces.jsonl'} "
                "does not exist"
            )
        campaign_file = run_dir / "campaign.json"
        campaign = (CampaignEstimates.from_json(json.loads(campaign_file.read_text(encoding="utf-8")))
                    if campaign_file.is_file() else None)
        data = json.loads(profile_file.read_text(encoding="utf-8"))
        return traces, GateProfile(data, campaign, str(run_dir)), run.graph(traces)
    traces = traces if traces is not None else run.baseline(folder=out / "baseline")
    profile = run.observational_profile(traces, run.graph(traces), out / "observational")
    note = (f"no campaign profile: the observational part was run first ({out / 'observational'}); "
            "no interventional beta_shape is available")
    return traces, GateProfile(profile.to_json(), None, note), profile.graph


# --------------------------------------------------------------------------- jobs


def _changed_node(template: str, traces: Sequence[Trace]) -> str:
    inline = inline_candidate(template)
    if inline is not None:  # an inline message of the node named
        if not any(c.node == inline[0] for t in traces for c in t.calls):
            ran = sorted({c.node for t in traces for c in t.calls if c.kind != "source"})
            raise QuiverError(f"--candidate {template}: no recorded call of node {inline[0]!r}; the baseline's "
                              f"nodes are {', '.join(ran) or 'none'}")
        return inline[0]
    nodes = sorted({c.node for t in traces for c in t.calls
                    if c.prompt is not None and c.prompt.template_id == template})
    if not nodes:
        used = sorted({c.prompt.template_id for t in traces for c in t.calls
                       if c.prompt is not None and c.prompt.template_id})
        raise QuiverError(
            f"--candidate {template}: no recorded call rendered template {template!r}; the baseline's templates "
            f"are {', '.join(used) or 'none'}"
        )
    if len(nodes) > 1:
        raise QuiverError(f"--candidate {template}: template {template!r} is rendered by several nodes "
                          f"({', '.join(nodes)}); the gate checks one changed node per template")
    return nodes[0]


def _node_calls(node: str, traces: Sequence[Trace]) -> list[tuple[Trace, NodeCall]]:
    """Every recorded call of ``node`` (in ok traces), with its trace."""
    return [(t, c) for t in traces if t.status == "ok" for c in t.calls if c.node == node]


def draw_probes(traces: Sequence[Trace], node: str, n: int | None, seed: int,
                template: str) -> tuple[list[Trace], list[str]]:
    """The probes of ``node``, stratified by input, and the inputs left without one.

    The ok traces where the node ran are grouped by input; the inputs are put in a
    seeded order (``seed`` and ``template``), as are each input's traces; the probes are
    the first trace of each input in that order, then the second of each input that has
    one, and so on, until ``n`` (all of them when ``n`` is None or not smaller; None: one
    per input). Returned in the traces' order.

    Raises:
        QuiverError: No ok trace ran the node.
    """
    eligible = eligible_traces(traces, node)
    if not eligible:
        raise QuiverError(f"no ok baseline trace ran node {node!r}: nothing to probe")
    rng = random.Random(f"{seed}|{template}")
    by_input: dict[str, list[Trace]] = {}
    for t in eligible:
        by_input.setdefault(t.input_id, []).append(t)
    order = sorted(by_input)
    rng.shuffle(order)
    for group in order:
        rng.shuffle(by_input[group])
    budget = len(order) if n is None else n
    chosen: list[Trace] = []
    for depth in range(max(len(v) for v in by_input.values())):
        chosen += [by_input[g][depth] for g in order if depth < len(by_input[g])][:budget - len(chosen)]
    keep = {t.trace_id for t in chosen}
    probed = {t.input_id for t in chosen}
    return [t for t in eligible if t.trace_id in keep], sorted(g for g in by_input if g not in probed)


def _repeats(probes: Sequence[Trace], repeats: int | None, familywise: float) -> int:
    """``repeats``, else the fewest replays per probe and arm at which a complete change
    of the input with the fewest probes reaches the per-input family's level with every
    probed input in it."""
    if repeats is not None:
        return repeats
    per = Counter(t.input_id for t in probes)
    return replays_needed(len(per), gate_levels(familywise)["inputs"], strata=min(per.values()))


def _jobs(template: str, path: Path, node: str, probes: Sequence[Trace], repeats: int) -> list[ReplayJob]:
    jobs: list[ReplayJob] = []
    payloads = [trace.model_dump(mode="json") for trace in probes]  # one JSON form per probe, shared by its jobs
    keyed = sample_ids(probes)
    inline = inline_candidate(template)
    for arm in ("candidate", "current"):
        # a template is deployed for the whole replay; an inline message is swapped in the node's call
        op, params, templates = (
            ("", {}, {}) if arm == "current" else
            ("prompt_swap", {"message": inline[1], "variant": str(path)}, {}) if inline is not None else
            ("", {}, {template: str(path)}))
        for trace, payload in zip(probes, payloads, strict=True):
            for r in range(repeats):
                jobs.append(ReplayJob(
                    job_id=f"{template}/{arm}/{trace.trace_id}/{r}", seq=len(jobs),
                    trace=payload, perturbation_id=f"gate:{template}:{arm}", node=node,
                    occurrence=0, op=op, params=params, repeat=r, templates=templates,
                    sample_id=keyed[trace.trace_id],
                ))
    return jobs


@dataclass
class CandidateJobs:
    """One candidate's probe replays: its template, file, changed node, probes (drawn by
    :func:`draw_probes`), replays per probe and arm, the inputs left without a probe, and
    its jobs (both arms, ``repeats`` per probe)."""

    template: str
    file: Path
    node: str
    probes: list[Trace]
    repeats: int
    unprobed: list[str]
    jobs: list[ReplayJob]

    def design(self, familywise: float) -> str:
        """The per-input design in a sentence: inputs, probes and replays per arm, and
        whether a complete change of an input can fail the per-input test."""
        per = Counter(t.input_id for t in self.probes)
        level = gate_levels(familywise)["inputs"]
        fewest = min(per.values())
        need = replays_needed(len(per), level, strata=fewest)
        most = max(per.values())
        spread = f"{fewest}" if most == fewest else f"{fewest}-{most}"
        head = (f"{self.template} at {self.node}: {len(per)} input(s), {len(self.probes)} probe(s) "
                f"({spread} per input) x {self.repeats} replay(s) per arm")
        enough = ("a complete change of an input can fail it" if self.repeats >= need else
                  f"too few for a complete change of an input to fail it ({need} replays per probe and arm "
                  "would be; fewer suffice when fewer inputs vary)")
        missing = f"; {len(self.unprobed)} input(s) get no probe: {_listed(self.unprobed)}" if self.unprobed else ""
        return f"{head}; per-input test at {level:g} (familywise {familywise:g}): {enough}{missing}"


def _listed(names: Sequence[str], most: int = 10) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def candidate_jobs(candidates: Mapping[str, Path], traces: Sequence[Trace], *, probes: int | None,
                   repeats: int | None, seed: int, familywise: float = 0.05) -> list[CandidateJobs]:
    """The gate's replay jobs, per candidate in the order given: the probes of the node
    that renders its template (:func:`draw_probes`), candidate arm then current arm (what
    :func:`run_gate` runs, and what :func:`plan_gate` counts).

    Raises:
        QuiverError: No recorded call rendered a template, several nodes did, or no ok
            baseline trace ran the node.
    """
    out = []
    for template, file in candidates.items():
        node = _changed_node(template, traces)
        chosen, unprobed = draw_probes(traces, node, probes, seed, template)
        times = _repeats(chosen, repeats, familywise)
        out.append(CandidateJobs(template, file, node, chosen, times, unprobed,
                                 _jobs(template, file, node, chosen, times)))
    return out


@dataclass(frozen=True)
class GateSettings:
    """The gate's probes, repeats (None: by default, see :class:`~quiver.experiments._config.GateSpec`),
    seed, alpha and familywise level: the spec's ``gate:`` block with the command line's
    overrides, and its folder."""

    probes: int | None
    repeats: int | None
    seed: int
    alpha: float
    out: Path
    familywise: float = 0.05


def gate_settings(run: CampaignRun, *, output: str | Path | None = None, probes: int | None = None,
                  repeats: int | None = None, alpha: float | None = None, seed: int | None = None,
                  familywise: float | None = None) -> GateSettings:
    """The settings of a gate of ``run``'s spec (see :class:`GateSettings`).

    Raises:
        QuiverError: ``probes`` below 2, ``repeats`` below 1, or ``familywise`` outside (0, 1).
    """
    spec = run.spec
    gate = spec.gate
    probes_n = probes if probes is not None else gate.probes
    repeats_n = repeats if repeats is not None else gate.repeats
    for name, value, low in (("probes", probes_n, 2), ("repeats", repeats_n, 1)):
        if value is not None and value < low:
            raise QuiverError(f"--{name} must be at least {low}; got {value}")
    level = familywise if familywise is not None else gate.familywise
    if not 0 < level < 1:
        raise QuiverError(f"--familywise must lie in (0, 1); got {level}")
    return GateSettings(
        probes=probes_n, repeats=repeats_n, seed=seed if seed is not None else gate.seed,
        alpha=alpha if alpha is not None else (gate.alpha if gate.alpha is not None else spec.analysis.alphas[0]),
        out=Path(output) if output is not None else Path(gate.output) if gate.output else Path(spec.output) / "gate",
        familywise=level,
    )


# --------------------------------------------------------------------------- the plan


def plan_gate(run: CampaignRun, candidates: Mapping[str, Path], settings: GateSettings, *,
              profile_dir: str | Path | None = None) -> tuple[CampaignPlan, list[CandidateJobs]]:
    """``quiver gate --plan``: the replays, LLM calls, tokens and cost (at the spec's
    ``prices:``) of the gate's probe jobs (:func:`candidate_jobs`, one row per arm of each
    candidate: the current template's arm is the candidate's control), predicted from the
    baseline's recorded calls as ``quiver run --plan`` predicts them; and the candidates'
    jobs, whose :meth:`CandidateJobs.design` says what the per-input test can find. Sends
    no LLM call and writes nothing.

    Raises:
        QuiverError: No baseline at hand (the spec records it and no campaign folder
            holds one), or a candidate the recorded calls do not render.
    """
    folder = Path(profile_dir) if profile_dir else None
    traces = _baseline_at_hand(run, folder)
    if traces is None:
        raise QuiverError(
            f"{run.path}: the gate's plan needs the baseline: this spec records it and no campaign folder holds "
            f"one ({Path(run.spec.output) / 'baseline' / 'traces.jsonl'} does not exist); run the campaign first, "
            "give its folder with --profile, or set `baseline:` to a traces file"
        )
    source = (str(run.base_dir / run.spec.baseline) if run.spec.baseline is not None
              else str(_recorded_baseline(run, folder)))
    check_candidates(candidates, lambda template: _changed_node(template, traces),
                     lambda node: _node_calls(node, traces))
    planned = _candidate_jobs(candidates, traces, settings)
    jobs = [j for c in planned for j in c.jobs]
    plan = plan_jobs(jobs, traces, ReplayMode(), prices=run.spec.prices, spec=str(run.path), baseline=source,
                     controls=[f"gate:{c.template}:current" for c in planned], by_perturbation=True)
    return plan, planned


def _candidate_jobs(candidates: Mapping[str, Path], traces: Sequence[Trace],
                    settings: GateSettings) -> list[CandidateJobs]:
    return candidate_jobs(candidates, traces, probes=settings.probes, repeats=settings.repeats, seed=settings.seed,
                          familywise=settings.familywise)


# --------------------------------------------------------------------------- running


def run_gate(
    spec_path: str | Path,
    candidates: Mapping[str, Path],
    *,
    profile_dir: str | Path | None = None,
    output: str | Path | None = None,
    probes: int | None = None,
    repeats: int | None = None,
    alpha: float | None = None,
    seed: int | None = None,
    familywise: float | None = None,
    progress_stream: TextIO | None = sys.stderr,
    warn: Callable[[str], None] | None = None,
) -> GateResult:
    """Run ``quiver gate``; see the module docstring. Raises QuiverError when it cannot run,
    :class:`~quiver._interrupt.Interrupted` (saying how far it got) when interrupted;
    ``warn`` gets each baseline line skipped. The gate's folder is held while it runs
    (:class:`~quiver._outdir.OutputFolder`)."""
    t0 = time.perf_counter()
    run = CampaignRun.load(Path(spec_path), stream=progress_stream, warn=warn)
    settings = gate_settings(run, output=output, probes=probes, repeats=repeats, alpha=alpha, seed=seed,
                             familywise=familywise)
    # candidates are checked against the recorded calls before anything is written
    early = _baseline_at_hand(run, Path(profile_dir) if profile_dir else None)
    if early is not None:
        check_candidates(candidates, lambda template: _changed_node(template, early),
                         lambda node: _node_calls(node, early))
    with output_errors(settings.out, "the gate keeps nothing to resume", "run it again"), \
            OutputFolder(settings.out, "gate"):
        mark_folder(settings.out, "gate")
        return _gate(run, candidates, settings, profile_dir, early, progress_stream, t0)


def _gate(run: CampaignRun, candidates: Mapping[str, Path], settings: GateSettings, profile_dir: str | Path | None,
          early: list[Trace] | None, progress_stream: TextIO | None, t0: float) -> GateResult:
    """:func:`run_gate` once its candidates are checked, its folder held."""
    spec, path = run.spec, run.path
    seed_n, alpha_v, out = settings.seed, settings.alpha, settings.out
    results: dict[str, dict[str, Any]] = {}
    jobs: list[ReplayJob] = []
    try:
        with run.connected():
            traces, profile, graph = _load_profile(run, Path(profile_dir) if profile_dir else None, out, early)
            if early is None:
                check_candidates(candidates, lambda template: _changed_node(template, traces),
                             lambda node: _node_calls(node, traces))
            alphas = sorted({float(r["alpha"]) for r in profile.data.get("impact_sets") or []})
            if alphas and all(abs(a - alpha_v) > 1e-9 for a in alphas):
                raise QuiverError(f"alpha {alpha_v:g}: the profile has impact sets and budgets at "
                                  f"{', '.join(f'{a:g}' for a in alphas)} only")
            plan = _candidate_jobs(candidates, traces, settings)
            run.check_fidelity(traces)  # nothing is spent on a baseline that does not replay
            context = run.replay_context(graph, ReplayMode(), seed=seed_n, run_id="gate")
            jobs = [j for c in plan for j in c.jobs]
            progress = Progress("gate replays", len(jobs), stream=progress_stream)

            def done(job_id: str, data: dict[str, Any]) -> None:
                results[job_id] = data
                progress.advance(failed=int("error" in data))

            runner = run.executor()
            watch = EndpointWatch(done, lambda: False)
            try:
                runner.run(context, jobs, watch.done, watch.should_stop)
            finally:
                try:
                    runner.close()
                finally:
                    progress.close()
            watch.raise_if_down(f"the gate keeps no ledger: run it again when it answers ({len(results):,} of "
                                f"{len(jobs):,} replays had finished)")
    except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: the gate keeps no ledger; say how far it got
        raise Interrupted(_interrupted(exc, len(results), len(jobs))) from None
    failed = [(j, results[j.job_id]["error"]) for j in jobs if "error" in results.get(j.job_id, {"error": "not run"})]
    if failed:
        raise QuiverError(f"{len(failed)} of {len(jobs)} gate replays failed, so no verdict is given; the first: "
                          f"{failed[0][0].job_id}: {str(failed[0][1]).splitlines()[0][:300]}")
    store = run.embedding_store()
    declared = run.declared()
    rows = []
    try:
        for c in plan:
            template, file, node, chosen = c.template, c.file, c.node, c.probes
            by_id = {t.trace_id: t for t in chosen}
            replays = [ReplayResult.from_json(results[j.job_id], by_id[j.trace["trace_id"]]) for j in c.jobs]
            # the candidate's pairs and its downstream nodes read one graph: the baseline's
            # and the nodes its replays reached
            reached = CampaignGraph(graph, declared).take_in(replays)
            pairs = pair_results(replays, reached, epsilon=spec.analysis.epsilon, store=store)
            bad = [p for p in pairs if p.status != "ok"]
            if bad:
                raise QuiverError(f"{len(bad)} gate replay(s) of {template} did not pair cleanly (status "
                                  f"{bad[0].status}); the first: {bad[0].trace_id}")
            rows.append(judge_candidate(GateCandidate(template, file, node, chosen, c.repeats, tuple(c.unprobed)),
                                        pairs, reached, profile, alpha=alpha_v, resamples=spec.analysis.resamples,
                                        seed=seed_n, epsilon=spec.analysis.epsilon, familywise=settings.familywise,
                                        outcome_margin=spec.gate.outcome_margin))
    finally:
        store.close()
    verdicts = {r["verdict"] for r in rows}
    verdict = "fail" if "fail" in verdicts else "re-evaluate" if "re-evaluate" in verdicts else "pass"
    unaccounted = merge_unaccounted(results[j.job_id].get("wire") for j in jobs)
    data = {
        "verdict": verdict, "spec": str(path), "profile": profile.source,
        "campaign_profile": profile.campaign is not None, "alpha": alpha_v, "seed": seed_n,
        "probes": settings.probes, "repeats": settings.repeats, "familywise": settings.familywise,
        "equivalence_margin": spec.analysis.equivalence_margin, "resamples": spec.analysis.resamples,
        "candidates": rows, "replays": len(jobs),
        "llm_calls": sum(sum((results[j.job_id].get("llm_calls") or {}).values()) for j in jobs),
        "unaccounted_requests": unaccounted_json(unaccounted),
        "baseline_lines_skipped": len(run.skipped), "seconds": round(time.perf_counter() - t0, 3),
    }
    for line in unaccounted_lines(unaccounted, "gate's replays"):
        run.warn(line)
    result = GateResult(verdict, data, out, skipped_lines=len(run.skipped))
    for name, text in (("gate.json", json.dumps(data, indent=2) + "\n"), ("gate.md", gate_markdown(data)),
                       ("junit.xml", gate_junit(data))):
        result.files.append(write_text(out / name, text))
    result.files.append(write_html(out, "gate"))
    return result


def _interrupted(exc: KeyboardInterrupt, finished: int, jobs: int) -> str:
    """What an interrupted gate did: the replays finished of how many (none of it kept)."""
    said = str(exc).removeprefix("interrupted").removeprefix(": ")
    again = "the gate keeps nothing to resume: nothing was kept; run it again"
    if jobs:
        return f"interrupted: {finished:,} of {jobs:,} gate replays finished; {again}"
    if said:  # in the baseline's recording, which says how far it got
        return f"interrupted while recording the baseline ({said}); the gate keeps nothing to resume: run it again"
    return f"interrupted before the gate's replays began; {again}"
