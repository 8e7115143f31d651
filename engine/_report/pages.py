"""The content of ``report.html`` for a campaign, an analysis and a gate (see :mod:`.html`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quiver._stats import DASH, fmt, fmt_n

from . import svg
from .adaptive import adaptive_charts
from .html import cell, details, folded, markdown_html, page, png_img
from .markdown import graph_edges, graph_nodes, render_report
from .markup import Markup, element
from .summary import SummaryRow, control_replay_count, summary_rows

__all__ = ["campaign_page", "analysis_page", "gate_page"]


def _figure(chart: Markup, caption: str) -> Markup:
    return element("figure", chart, element("figcaption", caption))


def _plots(figures: Sequence[Markup]) -> Markup:
    return element("div", Markup("").join(figures), class_="plots")


def _head_row(head: Sequence[str]) -> Markup:
    return element("thead", element("tr", Markup("").join(element("th", h) for h in head)))


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


# --------------------------------------------------------------------------- the graph


def _inferred(profile: Mapping[str, Any]) -> tuple[set[str], set[tuple[str, str]], bool]:
    """Inferred nodes, inferred edges, and whether every edge was inferred (no list)."""
    info = (profile.get("graph") or {}).get("inferred") or {}
    if not isinstance(info, Mapping):
        info = {k: getattr(info, k, None) for k in ("inferred_nodes", "inferred_edges", "inferred_edge_list")}
    listed = {(str(a), str(b)) for a, b in (info.get("inferred_edge_list") or []) if a is not None}
    every = bool(info.get("inferred_edges")) and not listed
    return {str(n) for n in info.get("inferred_nodes") or []}, listed, every


def graph_svg(profile: Mapping[str, Any], name: str = "graph") -> Markup:
    """The pipeline graph of a profile: amplifying edges, bifurcation sources and what was
    inferred marked."""
    nodes = graph_nodes(profile)
    by_edge = {(str(e.get("source")), str(e.get("target"))): e for e in profile.get("edges") or []
               if isinstance(e, Mapping)}
    inferred_nodes, inferred_edges, every = _inferred(profile)
    edges = [svg.GraphEdge(a, b, str((by_edge.get((a, b)) or {}).get("class") or "undefined"),
                           _num((by_edge.get((a, b)) or {}).get("sigma")), every or (a, b) in inferred_edges)
             for a, b in graph_edges(profile)]
    sources = [str(n.get("node")) for n in profile.get("nodes") or [] if isinstance(n, Mapping)
               and n.get("bifurcation_source")]
    loop = (profile.get("graph") or {}).get("loop") or {}
    body = loop.get("body") or [] if isinstance(loop, Mapping) else []
    return svg.graph(name, "Pipeline graph", nodes, edges, sources=sources, inferred_nodes=sorted(inferred_nodes),
                     loop=body)


def sigma_svg(profile: Mapping[str, Any]) -> Markup:
    """The observational Sigma matrix, sigma written in every edge's cell."""
    nodes = graph_nodes(profile)
    values: dict[tuple[str, str], float | None] = {}
    undefined = []
    for e in profile.get("edges") or []:
        if isinstance(e, Mapping):
            key = (str(e.get("source")), str(e.get("target")))
            values[key] = _num(e.get("sigma"))
            if values[key] is None:
                undefined.append(key)
    return svg.heatmap("sigma_matrix", "Edge sensitivity Sigma (rows: source, columns: target)", nodes, nodes,
                       values, hatched=undefined, lo=0.0)


# --------------------------------------------------------------------------- campaign


def _excess_text(r: SummaryRow) -> str:
    e = r.excess
    if e.value is None:
        return DASH
    ci = f" [{fmt(e.lo, signed=True)}, {fmt(e.hi, signed=True)}]" if e.lo is not None else ""
    return fmt(e.value, signed=True) + ci


def _beta_text(r: SummaryRow) -> str:
    if r.beta_value is None:
        return "none" if r.beta_reason else DASH
    return ("≤ " if r.beta_upper_bound else "") + fmt(r.beta_value)


def _failures_text(r: SummaryRow) -> str:
    if not r.failures.count:
        return "0"
    reasons = "; ".join(f"{k}: {v}" for k, v in sorted(r.failures.by_reason.items()))
    return f"{r.failures.count} ({reasons})" if reasons else str(r.failures.count)


def _summary_table(rows: Sequence[SummaryRow]) -> Markup:
    head = ["perturbation", "node", "op", "pairs", "effective", "no-op", "failed",
            "D_shape excess over control [95% CI]", "beta_shape", "negative control", "failed replays (reason)"]
    out = []
    for r in rows:
        bad = r.passed is False or r.failures.count > 0
        e = r.excess
        tds = [
            cell(r.id, field="id", value=r.id), cell(r.node, field="node", value=r.node),
            cell(r.op, field="op", value=r.op),
            cell(fmt_n(r.pairs), field="pairs", value=r.pairs, num=True),
            cell(fmt_n(r.effective), field="effective", value=r.effective, num=True),
            cell(fmt_n(r.noop), field="noop", value=r.noop, num=True),
            cell(fmt_n(r.failed), field="failed", value=r.failed, num=True),
            cell(_excess_text(r), field="excess", value=e.value, num=True,
                 extra={"lo": e.lo, "hi": e.hi, "rate": r.rate.value,
                        "control-rate": None if r.control_rate is None else r.control_rate.value}),
            cell(_beta_text(r), field="beta_shape", value=r.beta_value, num=True,
                 extra={"upper-bound": r.beta_upper_bound}, title=r.beta_reason),
            cell(r.verdict, field="negative_control", value=r.passed),
            cell(_failures_text(r), field="failures", value=r.failures.count,
                 extra={"by-reason": dict(r.failures.by_reason)}),
        ]
        out.append(element("tr", Markup("").join(tds), data_perturbation=r.id, class_="bad" if bad else None))
    return element("table", _head_row(head), element("tbody", Markup("").join(out)), id="summary")


def _dose(p: Any) -> Markup | None:
    b = p.beta_shape
    if not b.bins:
        return None
    ladder = b.bin_rule == "ladder"
    steps = [svg.Step(float(i) if ladder else (x.lo + x.hi) / 2,
                      f"step {x.step}" if x.step is not None else f"bin {x.bin}", x.rate.value,
                      x.rate.ci[0] if x.rate.ci else None, x.rate.ci[1] if x.rate.ci else None,
                      x.control_rate.value, x.qualifies) for i, x in enumerate(b.bins)]
    band = p.control_replays.rates.d_shape.ci if p.control_replays is not None else None
    label = f"beta_shape {'≤' if b.upper_bound else '='} {fmt(b.value)}" if b.value is not None else ""
    threshold = b.value
    ticks = None
    if ladder:  # the steps' magnitudes overlap: one position per step, the threshold at its step
        ticks = [(float(i), f"step {x.step}", f"{fmt(x.lo)}–{fmt(x.hi)}") for i, x in enumerate(b.bins)]
        threshold = next((float(i) for i, x in enumerate(b.bins) if b.value is not None
                          and x.lo <= b.value <= x.hi and x.qualifies), None)
    unit = "step" if ladder else "bin"
    chart = svg.dose_response(f"dose-{p.id}", f"{p.id}: D_shape rate by {b.bin_rule} {unit}", steps,
                              control_band=band, threshold=threshold, threshold_label=label, event="D_shape",
                              ticks=ticks)
    where = "at its step" if ladder else "at the middle of its magnitudes"
    note = (f"Each point is a {b.bin_rule} {unit}, placed {where}, with its 95% interval; a filled circle is a "
            f"{unit} whose excess over its own traces' control qualifies. {b.reason or ''}")
    return _figure(chart, note)


def _adaptive(campaign: Any) -> list[Markup]:
    """The dose-response curves of the adaptive ladders (nothing when there is none)."""
    charts = adaptive_charts(campaign)
    if not charts:
        return []
    return [Markup("<h3>Adaptive ladders: excess over controls by dose</h3>"),
            _plots([_figure(chart, caption) for chart, caption in charts])]


def _forest(campaign: Any) -> Markup:
    rows = []
    for p in campaign.perturbations:
        for name, shape in (("effective", "circle"), ("noop", "square")):
            est = p.stratum(name).rates.d_shape
            rows.append(svg.Interval(f"{p.id} ({'no-op' if name == 'noop' else name})", est.value,
                                     est.ci[0] if est.ci else None, est.ci[1] if est.ci else None, shape=shape,
                                     color=svg.BLUE if name == "effective" else svg.ORANGE,
                                     note=f"n = {fmt_n(est.n)}"))
    obs = campaign.observational.rates.d_shape
    chart = svg.interval_chart(
        "forest", "D_shape rate by perturbation against the observational rate", rows, axis="P(D_shape > 0)",
        band=obs.ci, band_label=f"observational 95% CI (n = {fmt_n(obs.n)})", line=obs.value,
        line_label=f"observational {fmt(obs.value)}", lo=0.0, hi=1.0,
        legend=[("circle", svg.BLUE, "effective stratum"), ("square", svg.ORANGE, "no-op stratum")])
    return _figure(chart, "Share of pairs whose path changed, per perturbation and stratum, with 95% intervals; the "
                          "hatched band and dashed line are same-input reruns without perturbation.")


def _cascade(campaign: Any, order: Sequence[str]) -> Markup:
    values: dict[tuple[str, str], float | None] = {}
    nodes: list[str] = []
    rows = []
    for p in campaign.perturbations:
        name = "effective" if p.stratum("effective").n else "noop"
        label = p.id + ("" if name == "effective" else " (no-op)")
        rows.append(label)
        for node, est in p.stratum(name).mean_d.items():
            values[label, node] = est.value
            if node not in nodes:
                nodes.append(node)
    rank = {n: i for i, n in enumerate(order)}
    nodes.sort(key=lambda n: rank.get(n, len(rank)))
    chart = svg.heatmap("cascade", "Cascade signatures: mean distance of each downstream node", rows, nodes, values,
                        lo=0.0, hi=1.0, empty="·")
    return _figure(chart, "Mean distance of each node downstream of the target (effective stratum; the no-op one "
                          "when there is no effective pair); · marks a node not downstream of that target.")


def _files_table(files: Sequence[tuple[str, int]]) -> Markup:
    rows = Markup("").join(element("tr", element("td", element("code", n)), cell(_size(s), field="size", value=s,
                                                                                   num=True)) for n, s in files)
    return element("table", _head_row(["file", "size"]), element("tbody", rows), id="files")


def campaign_page(raw: Mapping[str, Any], profile: Mapping[str, Any] | None, folder: Path,
                  files: Sequence[tuple[str, int]]) -> str:
    """The campaign's page: summary, dose-response, forest, cascades, graph, Sigma, details."""
    from quiver._interventional import CampaignEstimates

    from .interventional import interventional_report

    c = CampaignEstimates.from_json(raw)
    rows = summary_rows(c, raw)
    controls = control_replay_count(c)
    perturbed = sum(r.pairs for r in rows)
    why = [element("li", element("code", r.id), ": no beta_shape: ", r.beta_reason) for r in rows
           if r.beta_value is None and r.beta_reason]
    body = [Markup('<p class="lead">{} perturbation(s): <strong>{}</strong> perturbed pairs, and <strong '
                   'id="control-replays" data-value="{}">{}</strong> control replays counted apart ({} pair rows in '
                   "all); observational baseline of {} same-input pairs. 95% intervals from {} bootstrap resamples "
                   "of input groups (seed {}).</p>").format(
                len(rows), fmt_n(perturbed), int(controls), fmt_n(controls), fmt_n(c.pairs), fmt_n(c.observational.n),
                fmt_n(c.resamples), fmt_n(c.seed)),
            Markup("<h2>At a glance</h2>"), _summary_table(rows),
            Markup('<p class="muted">Excess: the effective stratum\'s D_shape rate minus that of the perturbation\'s '
                   "control replays (the target as recorded or re-run unchanged, downstream live), with a 95% interval "
                   "combined from the two rates' intervals (MOVER). beta_shape: the smallest change of the target "
                   "that switched the path; ≤ marks an upper bound. Rows with a failed negative control or failed "
                   "replays are marked.</p>")]
    body += [element("ul", Markup("").join(why), class_="muted")] if why else []
    doses = [d for p in c.perturbations if (d := _dose(p)) is not None]
    body += [Markup("<h2>Dose-response</h2>"), _plots(doses) if doses else
             Markup("<p>No perturbation has magnitude bins.</p>")]
    body += _adaptive(c)
    order = graph_nodes(profile) if profile else []
    body += [Markup("<h2>Rates and cascades</h2>"), _plots([_forest(c), _cascade(c, order)])]
    if profile:
        body += [Markup("<h2>Pipeline graph and observational Sigma</h2>"), _graph_figures(profile)]
    body += [Markup("<h2>Details</h2>"), *folded(interventional_report(raw))]
    if profile:
        body += folded(render_report(profile), prefix="Observational: ")
    body += [Markup("<h2>Files in this folder</h2>"), _files_table(files)]
    return page("QUIVER campaign report", body)


def _graph_figures(profile: Mapping[str, Any]) -> Markup:
    return _plots([_figure(graph_svg(profile), "Edges labelled with sigma; red: amplifying; dashed: inferred from the "
                                               "traces."),
                   _figure(sigma_svg(profile), "sigma of each edge (blank: no edge; hatched: undefined).")])


# --------------------------------------------------------------------------- analysis


def _rate_row(div: Mapping[str, Any], k: str) -> Markup:
    return element("tr", element("td", f"{k} > 0"), cell(fmt(div.get(k)), field=k, value=div.get(k), num=True),
                   element("td", " – ".join(fmt(x) for x in div.get(f"{k}_ci") or []), class_="num"),
                   element("td", fmt_n(div.get(f"{k}_n")), class_="num"), data_rate=k)


def _amplifier(e: Mapping[str, Any]) -> Markup:
    ci = e.get("sigma_ci") or [None, None]
    return element("li", f"{e.get('source')} → {e.get('target')}: sigma {fmt(e.get('sigma'))} [{fmt(ci[0])}, "
                         f"{fmt(ci[1] if len(ci) > 1 else None)}], n = {fmt_n(e.get('sigma_n', e.get('n')))}")


def _analysis_summary(p: Mapping[str, Any]) -> list[Markup]:
    div = p.get("divergence") or {}
    rows = Markup("").join(_rate_row(div, k) for k in ("D_shape", "D_iter", "D_output", "D_struct") if k in div)
    edges = sorted((e for e in p.get("edges") or [] if isinstance(e, Mapping) and e.get("class") == "amplifier"),
                   key=lambda e: -(_num(e.get("sigma")) or 0.0))
    amp = Markup("").join(_amplifier(e) for e in edges[:5]) or Markup("<li>none</li>")
    sources = [str(n.get("node")) for n in p.get("nodes") or []
               if isinstance(n, Mapping) and n.get("bifurcation_source")]
    return [Markup('<p class="lead">{} traces ({} failed) in {} input groups, {} same-input pairs.</p>').format(
                fmt_n(p.get("traces")), fmt_n(p.get("failed_traces")), fmt_n(p.get("groups")), fmt_n(p.get("pairs"))),
            Markup("<h2>At a glance</h2>"),
            element("table", _head_row(["same-input pairs differing in", "rate", "95% CI", "n"]),
                    element("tbody", rows), id="rates"),
            Markup("<p><strong>Top amplifying edges</strong> ({} in all):</p>").format(len(edges)),
            element("ul", amp, id="amplifiers"),
            Markup('<p id="sources"><strong>Bifurcation sources:</strong> {}.</p>').format(
                ", ".join(sources) or "none")]


def analysis_page(profile: Mapping[str, Any], folder: Path) -> str:
    """An analysis' page: summary, graph, Sigma, ratios, details."""
    body = _analysis_summary(profile)
    body += [Markup("<h2>Pipeline graph and Sigma</h2>"), _graph_figures(profile)]
    ratios = png_img(folder / "ratios.png", "Ratio d_j / d_i per edge")
    if ratios:
        body += [Markup("<h2>Ratios</h2>"), _figure(ratios, "Per edge, the ratios d_j / d_i over the pairs where the "
                                                            "source changed, with lines at 1, the mean (sigma) and "
                                                            "the median.")]
    body += [Markup("<h2>Details</h2>"), *folded(render_report(profile))]
    return page("QUIVER analysis report", body)


# --------------------------------------------------------------------------- gate


def _arm_rows(measures: Mapping[str, Mapping[str, Any]]) -> list[svg.Interval]:
    rows = []
    for label, row in measures.items():
        for arm, shape, color in (("candidate", "circle", svg.BLUE), ("current", "square", svg.ORANGE)):
            est = row[arm]
            ci = est.get("ci") or [None, None]
            rows.append(svg.Interval(f"{label}, {arm}", _num(est.get("value")), _num(ci[0]), _num(ci[1]), shape=shape,
                                     color=color, note=f"n = {fmt_n(est.get('n'))}"))
    return rows


def _gate_charts(c: Mapping[str, Any]) -> list[Markup]:
    legend = [("circle", svg.BLUE, "candidate template"), ("square", svg.ORANGE, "current template")]
    beta = _num((c.get("beta_shape") or {}).get("value"))
    node = str(c["node"])
    distances = {f"d_i ({node})": c["d_i"], **{f"d ({v})": row for v, row in (c.get("downstream") or {}).items()}}
    tid = str(c["template"])
    out = [_figure(svg.interval_chart(f"gate-d-{tid}", f"{tid}: distances to the recording, per arm",
                                      _arm_rows(distances), axis="mean distance", lo=0.0, hi=1.0, line=beta,
                                      line_label=f"beta_shape {fmt(beta)}" if beta is not None else "",
                                      legend=legend),
                   "d_i at the changed node and every downstream node's distance, candidate against current "
                   "template, means with 95% intervals; the dashed line is the node's beta_shape.")]
    rates = {k: v for k, v in (c.get("rates") or {}).items()}
    out.append(_figure(svg.interval_chart(f"gate-rates-{tid}", f"{tid}: divergence rates, per arm",
                                          _arm_rows(rates), axis="rate", lo=0.0, hi=1.0, legend=legend),
                       "D_shape and D_iter rates of the replays against the recording, per arm."))
    return out


def _gate_table(c: Mapping[str, Any]) -> Markup:
    def est(row: Mapping[str, Any], signed: bool = False) -> str:
        ci = row.get("ci")
        tail = f" [{fmt(ci[0], signed=signed)}, {fmt(ci[1], signed=signed)}]" if ci else ""
        return fmt(row.get("value"), signed=signed) + tail

    measures = [("d_i", f"d_i ({c['node']})", c["d_i"])]
    measures += [(f"field:{f}", f"field {f}", r) for f, r in (c.get("fields") or {}).items()]
    measures += [(f"rate:{k}", f"{k} rate", r) for k, r in (c.get("rates") or {}).items()]
    measures += [(f"d:{v}", f"d ({v})", r) for v, r in (c.get("downstream") or {}).items()]
    rows = Markup("").join(element(
        "tr", element("td", label),
        cell(est(r["candidate"]), field="candidate", value=r["candidate"].get("value"), num=True),
        cell(est(r["current"]), field="current", value=r["current"].get("value"), num=True),
        cell(est(r["difference"], True), field="difference", value=r["difference"].get("value"), num=True),
        cell("yes" if r.get("rises") else "no", field="rises", value=bool(r.get("rises"))), data_measure=key)
        for key, label, r in measures)
    head = _head_row(["measure", "candidate", "current template", "candidate − current", "rises"])
    return element("table", head, element("tbody", rows), class_="gate", data_template=str(c["template"]))


def gate_page(data: Mapping[str, Any], markdown: str | None) -> str:
    """The gate's page: the verdict and its table first, then per candidate its charts,
    and the gate's Markdown (``gate.md``) folded."""
    verdict = str(data.get("verdict", "")).lower()
    body = [Markup('<p class="lead">Verdict: <strong id="verdict" class="{}" data-value="{}">{}</strong> — {} '
                   "candidate template(s), {} probes × {} replays per arm, seed {}.</p>").format(
        f"verdict-{verdict}", verdict, verdict.upper(), len(data.get("candidates") or []), fmt_n(data.get("probes")),
        fmt_n(data.get("repeats")), fmt_n(data.get("seed")))]
    for c in data.get("candidates") or []:
        body.append(element("h2", element("code", str(c["template"])), " at ", element("code", str(c["node"])),
                            f": {str(c['verdict']).upper()}"))
        failures = c.get("failures") or []
        body.append(element("ul", Markup("").join(element("li", f) for f in failures)) if failures else
                    Markup("<p>No failure.</p>"))
        body += [_gate_table(c), _plots(_gate_charts(c))]
    if markdown:
        body += [Markup("<h2>Details</h2>"), details("The gate's Markdown report (gate.md)", [markdown_html(markdown)])]
    return page("QUIVER gate report", body)
