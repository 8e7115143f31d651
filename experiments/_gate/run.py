"""``quiver gate SPEC --candidate TEMPLATE_ID=PATH``: is a prompt change safe to deploy?

QUIVER.md §9 (the paper's Principle 2 protocol), for each candidate template:

1. **The changed node**: the node whose recorded calls rendered ``TEMPLATE_ID``.
2. **Probes**: a seeded sample of ``gate.probes`` ok baseline traces where that node ran.
3. **Two arms**, ``gate.repeats`` replays per probe each, everything upstream of the
   changed node served from the recording, the node and all downstream live:
   *candidate* (the candidate template in force for the whole replay, so every call of
   the node renders it) and *current* (the current template: the node's own noise
   floor). The arms have their own sample keys (``gate:TEMPLATE_ID:candidate`` and
   ``...:current``).
4. **Measures**, from each replay's pair with its recorded baseline: d_i, the node
   distance of the changed node (and each of its fields' distances, which show what
   the change moved, e.g. only an observability field, whose role weight is 0); the
   D_shape and D_iter > 0 indicators; the distance of every downstream node. Per arm
   the mean (rate) over probes with the 95% interval of a
   bootstrap over probe inputs; and candidate minus current, paired replay by replay
   (same probe, same repeat), with the same resamples.
5. **Verdict** (``fail``, exit 1) when
   * d_i (the candidate arm's mean) exceeds the changed node's beta_shape: the
     interventional ``value`` of the last campaign (the smallest over that node's
     perturbations with one), else the observational beta_shape when the node is a
     bifurcation source (§7), else no threshold applies (said in the report); or
   * the lower end of the 95% interval of (candidate - current) D_shape or D_iter rate
     is above 0.
   Otherwise ``pass`` (exit 0) with the nodes to re-evaluate.
6. **Re-evaluate** (the impact set, §9), an engine choice where the paper is open: when
   the candidate's d_i does not exceed the current template's by more than the analysis'
   epsilon (the lower end of the interval of the difference is not above epsilon, the
   smallest distance the engine counts as a change, QUIVER.md §13) the change is within
   the node's own noise and nothing is listed; otherwise every node of the profile's impact set at ``alpha``
   (a path with sigma(p) > alpha), every direct successor whose drift budget
   tau_ij@alpha is below d_i, and every loop-body node whose beta_shape is below d_i.
   Downstream nodes whose measured distance rose (interval of the difference above
   epsilon) are listed too, as measured. Without the epsilon margin, a rewording whose
   rewrites move by 0.003 on average (+0.0026 [+0.0008, +0.0045] over 100 pairs) was
   "out of noise" and listed the rewriter's whole impact set.

The profile: ``--profile RUN_DIR`` (a ``quiver run`` folder: ``observational/profile.json``,
``campaign.json``, and its ``baseline/`` when the spec records one), else the spec's
output folder when a campaign ran there, else the observational part of the campaign
is run first (baseline recorded or loaded, then analysed, into the gate's folder), and
the report says so. Outputs in the gate's folder: ``gate.json``, ``gate.md`` (a
pull-request comment) and ``junit.xml`` (one test case per candidate). Exit 2 when the
gate could not run: a bad spec or candidate, no baseline, a template no call rendered,
an endpoint that failed replays.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from quiver._distance import EmbeddingStore, default_cache_dir, make_embedder
from quiver._errors import QuiverError
from quiver._stats import Estimate, GroupBootstrap
from quiver._graph import PipelineGraph
from quiver._report import fmt, fmt_est
from quiver._interventional import downstream_nodes
from quiver._progress import Progress
from quiver._trace import Redactor
from quiver._trace import Trace
from quiver._trace import load_traces
from quiver._yamlspec import load_spec
from quiver.replay import ReplayMode, ReplayResult, pair_results
from quiver.replay._executors import ReplayJob
from quiver.replay._replayer import sample_ids

from quiver.experiments._campaign import (
    campaign_graph,
    check_spec,
    load_baseline,
    make_executor,
    eligible_traces,
    observational_profile,
    replay_context,
    sample_traces,
)
from quiver.experiments._config import CampaignSpec
from quiver.experiments._config import open_llm, spec_redactor

__all__ = ["GateResult", "run_gate", "parse_candidates", "gate_markdown", "gate_junit"]

EXIT_PASS, EXIT_FAIL = 0, 1


@dataclass
class GateResult:
    """What ``quiver gate`` decided, and where it wrote it."""

    verdict: str
    data: dict[str, Any]
    output: Path
    files: list[Path] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.verdict == "pass" else EXIT_FAIL


def parse_candidates(items: Sequence[str]) -> dict[str, Path]:
    """``TEMPLATE_ID=PATH`` arguments -> {template id: path}; each file must exist."""
    out: dict[str, Path] = {}
    for item in items:
        tid, sep, path = item.partition("=")
        if not sep or not tid.strip() or not path.strip():
            raise QuiverError(f"--candidate {item!r}: give TEMPLATE_ID=PATH, e.g. support_bot.rewriter=prompts/new.txt")
        tid = tid.strip()
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


@dataclass
class _Profile:
    data: dict[str, Any]
    campaign: dict[str, Any] | None
    source: str
    """Where the numbers come from, for the report."""


def _load_profile(spec: CampaignSpec, profile_dir: Path | None, base_dir: Path, out: Path, client: Any, fn: Any,
                  redactor: Redactor, stream: TextIO | None) -> tuple[list[Trace], _Profile, PipelineGraph]:
    run_dir = profile_dir
    if run_dir is None and (Path(spec.output) / "observational" / "profile.json").is_file():
        run_dir = Path(spec.output)
    if run_dir is not None:
        profile_file = run_dir / "observational" / "profile.json"
        if not profile_file.is_file():
            raise QuiverError(f"--profile {run_dir}: no observational/profile.json there; is it a `quiver run` folder?")
        if spec.baseline is not None:
            traces = load_baseline(spec, base_dir, out, client, fn, False, redactor, stream)
        elif (run_dir / "baseline" / "traces.jsonl").is_file():
            traces = load_traces(run_dir / "baseline" / "traces.jsonl").traces
        else:
            raise QuiverError(
                f"no baseline: the spec names no baseline file and {run_dir / 'baseline' / 'traces.jsonl'} "
                "does not exist"
            )
        campaign_file = run_dir / "campaign.json"
        campaign = json.loads(campaign_file.read_text(encoding="utf-8")) if campaign_file.is_file() else None
        data = json.loads(profile_file.read_text(encoding="utf-8"))
        return traces, _Profile(data, campaign, str(run_dir)), campaign_graph(spec, base_dir, traces)
    traces = load_baseline(spec, base_dir, out, client, fn, False, redactor, stream)
    profile = observational_profile(spec, traces, campaign_graph(spec, base_dir, traces), out / "observational")
    note = (f"no campaign profile: the observational part was run first ({out / 'observational'}); "
            "no interventional beta_shape is available")
    return traces, _Profile(profile.to_json(), None, note), profile.graph


# --------------------------------------------------------------------------- jobs


def _changed_node(template: str, traces: Sequence[Trace]) -> str:
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


def _probes(traces: Sequence[Trace], node: str, n: int, seed: int, template: str) -> list[Trace]:
    eligible = eligible_traces(traces, node)
    if not eligible:
        raise QuiverError(f"no ok baseline trace ran node {node!r}: nothing to probe")
    return sample_traces(eligible, n, seed, template)


def _jobs(template: str, path: Path, node: str, probes: Sequence[Trace], repeats: int) -> list[ReplayJob]:
    jobs: list[ReplayJob] = []
    payloads = [trace.model_dump(mode="json") for trace in probes]  # one JSON form per probe, shared by its jobs
    keyed = sample_ids(probes)
    for arm in ("candidate", "current"):
        for trace, payload in zip(probes, payloads):
            for r in range(repeats):
                jobs.append(ReplayJob(
                    job_id=f"{template}/{arm}/{trace.trace_id}/{r}", seq=len(jobs),
                    trace=payload, perturbation_id=f"gate:{template}:{arm}", node=node,
                    occurrence=0, op="", params={}, repeat=r,
                    templates={template: str(path)} if arm == "candidate" else {}, sample_id=keyed[trace.trace_id],
                ))
    return jobs


# --------------------------------------------------------------------------- estimates


def _est(e: Estimate) -> dict[str, Any]:
    d = e.as_dict("value")
    return {"value": d["value"], "ci": d["value_ci"], "n": d["value_n"]}


def _above(e: Estimate, margin: float = 0.0) -> bool:
    """The lower end of ``e``'s interval is above ``margin`` (beyond round-off)."""
    return e.value is not None and e.ci is not None and e.ci[0] > margin + 1e-12


def _compare(boot: GroupBootstrap, cand: np.ndarray, curr: np.ndarray, margin: float = 0.0) -> dict[str, Any]:
    """Per arm the mean, and candidate - current paired slot by slot (NaN slots left out);
    ``rises`` when the difference's interval lies above ``margin``."""
    both = np.isfinite(cand) & np.isfinite(curr)
    diff = boot.mean(np.where(both, cand - curr, 0.0), both)
    return {"candidate": _est(boot.mean(cand, np.isfinite(cand))), "current": _est(boot.mean(curr, np.isfinite(curr))),
            "difference": _est(diff), "rises": _above(diff, margin)}


def _beta(node: str, profile: _Profile) -> dict[str, Any]:
    values = [p["beta_shape"]["value"] for p in (profile.campaign or {}).get("perturbations") or []
              if p.get("node") == node and (p.get("beta_shape") or {}).get("value") is not None]
    if values:
        return {"value": min(values), "source": "interventional (campaign.json)"}
    row: dict[str, Any] = next((n for n in profile.data.get("nodes") or [] if n.get("node") == node), {})
    if row.get("bifurcation_source") and row.get("beta_shape") is not None:
        return {"value": row["beta_shape"], "source": "observational (profile.json; no interventional value)"}
    why = "no interventional value at this node" if profile.campaign else "no campaign profile"
    return {"value": None, "source": f"none: {why}, and the node is not an observational bifurcation source"}


def _impact(node: str, d_i: float | None, drifts: bool, profile: _Profile, alpha: float,
            graph: PipelineGraph) -> list[dict[str, Any]]:
    if not drifts or d_i is None:
        return []
    members: dict[str, list[str]] = {}
    for row in profile.data.get("impact_sets") or []:
        if row.get("source") == node and abs(float(row.get("alpha", -1)) - alpha) < 1e-9:
            for m in row.get("members") or []:
                members.setdefault(m["node"], []).extend(m.get("reasons") or [])
    for b in profile.data.get("budgets") or []:
        if (b.get("source") == node and abs(float(b.get("alpha", -1)) - alpha) < 1e-9 and b.get("status") == "ok"
                and b.get("tau") is not None and d_i > float(b["tau"])):
            members.setdefault(b["target"], []).append(
                f"d_i = {fmt(d_i)} exceeds the drift budget tau@{alpha:g} = {fmt(b['tau'])} on {node} -> {b['target']}")
    if graph.loop is not None and node in graph.loop.body:
        for row in profile.data.get("nodes") or []:
            other, beta = row.get("node"), row.get("beta_shape")
            if other in graph.loop.body and other != node and beta is not None and beta > 0 and d_i > beta:
                members.setdefault(other, []).append(f"loop-body node with beta_shape {fmt(beta)} below d_i")
    order = graph.topological_order()
    return [{"node": n, "reasons": members[n]} for n in sorted(members, key=lambda n: (order.index(n)
                                                                                      if n in order else 1e9, n))]


def _candidate(template: str, path: Path, node: str, probes: Sequence[Trace], repeats: int,
               pairs: Sequence[Any], graph: PipelineGraph, profile: _Profile, alpha: float,
               resamples: int, seed: int, epsilon: float) -> dict[str, Any]:
    n = len(probes) * repeats
    cand, curr = pairs[:n], pairs[n:]
    inputs = sorted({p.input_id for p in probes})
    index = {g: i for i, g in enumerate(inputs)}
    group = np.array([index[t.input_id] for t in probes for _ in range(repeats)], dtype=np.int64)
    boot = GroupBootstrap(group, len(inputs), resamples=resamples, seed=seed)

    def col(rows: Sequence[Any], f: Any) -> np.ndarray:
        return np.array([np.nan if (v := f(r)) is None else float(v) for r in rows], dtype=np.float64)

    d_i = _compare(boot, col(cand, lambda p: p.d.get(node)), col(curr, lambda p: p.d.get(node)), epsilon)
    rates = {
        "D_shape": _compare(boot, col(cand, lambda p: float(p.d_shape)), col(curr, lambda p: float(p.d_shape))),
        "D_iter": _compare(boot, col(cand, lambda p: float(p.d_iter > 0)), col(curr, lambda p: float(p.d_iter > 0))),
    }
    downstream = {
        v: _compare(boot, col(cand, lambda p, v=v: p.d.get(v)), col(curr, lambda p, v=v: p.d.get(v)), epsilon)
        for v in downstream_nodes(graph, node)
    }
    names = sorted({f for p in pairs for f in (p.fields.get(node) or {})})
    fields = {
        f: _compare(boot, col(cand, lambda p, f=f: (p.fields.get(node) or {}).get(f)),
                    col(curr, lambda p, f=f: (p.fields.get(node) or {}).get(f)), epsilon)
        for f in names
    }
    beta = _beta(node, profile)
    failures = []
    drift = d_i["candidate"]["value"]
    if beta["value"] is not None and drift is not None and drift > beta["value"]:
        failures.append(f"d_i = {fmt(drift)} at {node} exceeds its beta_shape {fmt(beta['value'])} ({beta['source']})")
    for name, row in rates.items():
        if row["rises"]:
            diff = row["difference"]
            failures.append(
                f"the {name} rate rises by {fmt(diff['value'], signed=True)} [{fmt(diff['ci'][0], signed=True)}, "
                f"{fmt(diff['ci'][1], signed=True)}] over the current template ({fmt(row['candidate']['value'])} "
                f"against {fmt(row['current']['value'])}, n = {row['difference']['n']}): decisions at or downstream of "
                f"{node} change")
    impact = _impact(node, drift, d_i["rises"], profile, alpha, graph)
    moved = [v for v, row in downstream.items() if row["rises"]]
    return {
        "template": template, "path": str(path), "node": node, "probes": len(probes), "repeats": repeats,
        "inputs": len(inputs), "pairs": {"candidate": len(cand), "current": len(curr)},
        "d_i": d_i, "fields": fields, "rates": rates, "beta_shape": beta, "downstream": downstream,
        "verdict": "fail" if failures else "pass", "failures": failures,
        "within_noise": not d_i["rises"], "epsilon": epsilon, "re_evaluate": impact, "moved": moved,
        # failing on the rates alone while the node itself did not drift: possibly the
        # rate test's own false alarm (reported as such, the verdict stands)
        "rates_only_within_noise": bool(failures) and not d_i["rises"]
        and not (beta["value"] is not None and drift is not None and drift > beta["value"]),
    }


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
    progress_stream: TextIO | None = sys.stderr,
) -> GateResult:
    """Run ``quiver gate``; see the module docstring. Raises QuiverError when it cannot run."""
    t0 = time.perf_counter()
    path = Path(spec_path)
    spec = load_spec(CampaignSpec, path)
    fn, _ = check_spec(spec, path)
    gate = spec.gate
    probes_n = probes if probes is not None else gate.probes
    repeats_n = repeats if repeats is not None else gate.repeats
    seed_n = seed if seed is not None else gate.seed
    alpha_v = alpha if alpha is not None else (gate.alpha if gate.alpha is not None else spec.analysis.alphas[0])
    for name, value, low in (("probes", probes_n, 2), ("repeats", repeats_n, 1)):
        if value < low:
            raise QuiverError(f"--{name} must be at least {low}; got {value}")
    base_dir = path.parent
    out = Path(output) if output is not None else Path(gate.output) if gate.output else Path(spec.output) / "gate"
    out.mkdir(parents=True, exist_ok=True)
    redactor = spec_redactor(spec)
    with open_llm(spec.llm, base_dir) as client:
        traces, profile, graph = _load_profile(spec, Path(profile_dir) if profile_dir else None, base_dir, out,
                                               client, fn, redactor, progress_stream)
        alphas = sorted({float(r["alpha"]) for r in profile.data.get("impact_sets") or []})
        if alphas and all(abs(a - alpha_v) > 1e-9 for a in alphas):
            raise QuiverError(f"alpha {alpha_v:g}: the profile has impact sets and budgets at "
                              f"{', '.join(f'{a:g}' for a in alphas)} only")
        plan = []
        for template, file in candidates.items():
            node = _changed_node(template, traces)
            chosen = _probes(traces, node, probes_n, seed_n, template)
            plan.append((template, file, node, chosen, _jobs(template, file, node, chosen, repeats_n)))
        context = replay_context(spec, base_dir, client, graph, ReplayMode(), seed=seed_n, run_id="gate")
        jobs = [j for *_, js in plan for j in js]
        results: dict[str, dict[str, Any]] = {}
        progress = Progress("gate replays", len(jobs), stream=progress_stream)

        def done(job_id: str, data: dict[str, Any]) -> None:
            results[job_id] = data
            progress.advance(failed=int("error" in data))

        try:
            make_executor(spec, None, None).run(context, jobs, done, lambda: False)
        finally:
            progress.close()
    failed = [(j, results[j.job_id]["error"]) for j in jobs if "error" in results.get(j.job_id, {"error": "not run"})]
    if failed:
        raise QuiverError(f"{len(failed)} of {len(jobs)} gate replays failed, so no verdict is given; the first: "
                          f"{failed[0][0].job_id}: {str(failed[0][1]).splitlines()[0][:300]}")
    store = EmbeddingStore(make_embedder(spec.analysis.embedder),
                           Path(spec.analysis.cache_dir) if spec.analysis.cache_dir else default_cache_dir())
    rows = []
    try:
        for template, file, node, chosen, js in plan:
            by_id = {t.trace_id: t for t in chosen}
            replays = [ReplayResult.from_json(results[j.job_id], by_id[j.trace["trace_id"]]) for j in js]
            pairs = pair_results(replays, graph, epsilon=spec.analysis.epsilon, store=store)
            bad = [p for p in pairs if p.status != "ok"]
            if bad:
                raise QuiverError(f"{len(bad)} gate replay(s) of {template} did not pair cleanly (status "
                                  f"{bad[0].status}); the first: {bad[0].trace_id}")
            rows.append(_candidate(template, file, node, chosen, repeats_n, pairs, graph, profile, alpha_v,
                                   spec.analysis.resamples, seed_n, spec.analysis.epsilon))
    finally:
        store.close()
    verdict = "fail" if any(r["verdict"] == "fail" for r in rows) else "pass"
    data = {
        "verdict": verdict, "spec": str(path), "profile": profile.source,
        "campaign_profile": profile.campaign is not None, "alpha": alpha_v, "seed": seed_n,
        "probes": probes_n, "repeats": repeats_n, "resamples": spec.analysis.resamples,
        "candidates": rows, "seconds": round(time.perf_counter() - t0, 3),
    }
    result = GateResult(verdict, data, out)
    for name, text in (("gate.json", json.dumps(data, indent=2) + "\n"), ("gate.md", gate_markdown(data)),
                       ("junit.xml", gate_junit(data))):
        (out / name).write_text(text, encoding="utf-8")
        result.files.append(out / name)
    return result


# --------------------------------------------------------------------------- reports


def _interval(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x")


def _signed(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x", signed=True)


def gate_markdown(data: Mapping[str, Any]) -> str:
    """The gate's verdict as Markdown, fit for a pull-request comment."""
    verdict = str(data["verdict"]).upper()
    lines = [f"## quiver gate: {verdict}", "",
             f"{len(data['candidates'])} candidate template(s); {data['probes']} probes x {data['repeats']} "
             f"replays per arm, seed {data['seed']}; impact sets at alpha {data['alpha']:g}; profile: "
             f"{data['profile']}.", ""]
    for c in data["candidates"]:
        lines += [f"### `{c['template']}` at node `{c['node']}`: {c['verdict'].upper()}", "",
                  f"Candidate `{c['path']}`; {c['probes']} probes over {c['inputs']} inputs, "
                  f"{c['pairs']['candidate']} replays per arm. Means with 95% intervals (bootstrap over "
                  "probe inputs); the difference is paired replay by replay.", "",
                  "| measure | candidate | current template | candidate - current |",
                  "| --- | ---: | ---: | ---: |"]
        table = [(f"d_i ({c['node']})", c["d_i"])]
        table += [(f"  field {f}", row) for f, row in c.get("fields", {}).items()]
        table += [(f"{k} rate", v) for k, v in c["rates"].items()]
        table += [(f"d ({v})", row) for v, row in c["downstream"].items()]
        for name, row in table:
            lines.append(f"| {name} | {_interval(row['candidate'])} | {_interval(row['current'])} | "
                         f"{_signed(row['difference'])} |")
        beta = c["beta_shape"]
        lines += ["", f"beta_shape of `{c['node']}`: {fmt(beta['value'])} ({beta['source']}).", ""]
        if c["failures"]:
            lines += ["**Fails:**", ""] + [f"- {f}" for f in c["failures"]] + [""]
            if c.get("rates_only_within_noise"):
                lines += [f"Only the rates fail, and d_i at `{c['node']}` is within the current template's own "
                          "noise: the rate test's false alarm (about 1 in 40 changes that move nothing, per rate) "
                          "is possible. Gating again at another `--seed` tells the two apart.", ""]
        if c["within_noise"]:
            lines += [f"d_i does not exceed the current template's own noise at `{c['node']}` by more than "
                      f"epsilon = {fmt(c['epsilon'])}: nothing to re-evaluate.", ""]
        elif c["re_evaluate"]:
            lines += ["**Re-evaluate** (impact set):", ""]
            lines += [f"- `{m['node']}`: {'; '.join(m['reasons'])}" for m in c["re_evaluate"]] + [""]
        else:
            lines += ["The profile's impact set is empty at this alpha: nothing to re-evaluate.", ""]
        if c["moved"]:
            lines += ["Measured: the distance rose at " + ", ".join(f"`{v}`" for v in c["moved"]) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


def gate_junit(data: Mapping[str, Any]) -> str:
    """The gate's verdict as JUnit XML: one test case per candidate template."""
    cases = []
    for c in data["candidates"]:
        name = quoteattr(f"{c['template']} ({c['node']})")
        if c["verdict"] == "fail":
            message = quoteattr("; ".join(c["failures"]))
            body = escape("\n".join(c["failures"]))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <failure message={message} type="gate">{body}</failure>\n  </testcase>')
        else:
            out = escape("re-evaluate: " + (", ".join(m["node"] for m in c["re_evaluate"]) or "nothing"))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <system-out>{out}</system-out>\n  </testcase>')
    failures = sum(c["verdict"] == "fail" for c in data["candidates"])
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuite name="quiver gate" tests="{len(data["candidates"])}" failures="{failures}" errors="0" '
            f'time="{data.get("seconds", 0)}">\n' + "\n".join(cases) + "\n</testsuite>\n")
