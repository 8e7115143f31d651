"""The content of ``report.html`` for a campaign, an analysis and a gate (see :mod:`.html`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from quiver._stats import fmt, fmt_n

from . import svg
from .campaign_figures import figure as _figure, plots as _plots
from .findings import findings_html
from .findings_more import gate_iterations
from .glossary import term, with_glossary
from .graphsvg import GraphEdge, graph
from .html import HTML_FILE, cell, details, folded, markdown_html, page, png_img
from .markdown import graph_edges, graph_nodes, render_report
from .markup import Markup, anchor, element
from .summary import SummaryRow, control_replay_count, summary_rows

__all__ = ["campaign_page", "analysis_page", "gate_page", "FILES"]


def _head_row(head: Sequence[str | Markup]) -> Markup:
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
    edges = [GraphEdge(a, b, str((by_edge.get((a, b)) or {}).get("class") or "undefined"),
                           _num((by_edge.get((a, b)) or {}).get("sigma")), every or (a, b) in inferred_edges)
             for a, b in graph_edges(profile)]
    sources = [str(n.get("node")) for n in profile.get("nodes") or [] if isinstance(n, Mapping)
               and n.get("bifurcation_source")]
    loop = (profile.get("graph") or {}).get("loop") or {}
    body = loop.get("body") or [] if isinstance(loop, Mapping) else []
    return graph(name, "Pipeline graph", nodes, edges, sources=sources, inferred_nodes=sorted(inferred_nodes),
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

FILES = {
    "campaign.json": "the estimates (the contract: every number on this page)",
    "report.md": "this report in Markdown, for pull requests",
    "report.html": "this page",
    "examples.json": "the example pairs shown above",
    "pairs.jsonl": "one row per pair: baseline against replay, node by node",
    "replays.jsonl": "the perturbed replays, as traces",
    "summary.json": "the run's counts: replays, LLM calls, retries, failures",
    "ledger.sqlite": "every finished replay, committed as it finished (what --resume continues from)",
    "campaign.log": "the reasons of failed replays, one line each",
    "spec.resolved.json": "the spec as run, every default filled in",
}
"""What each file of a campaign's folder holds."""


def _files_table(files: Sequence[tuple[str, int | None]]) -> Markup:
    rows = []
    for n, s in files:
        size = "this page" if n == HTML_FILE else ("written after this page" if s is None else _size(s))
        rows.append(element("tr", element("td", element("code", n)), element("td", FILES.get(n, "")),
                            cell(size, field="size", value=s, num=True)))
    return element("table", _head_row(["file", "what it holds", "size"]), element("tbody", Markup("").join(rows)),
                   id="files")


def _lead(c: Any, rows: Sequence[SummaryRow]) -> Markup:
    controls = control_replay_count(c)
    perturbed = sum(r.pairs for r in rows)
    return Markup('<p class="lead">{} perturbation(s): <strong>{}</strong> perturbed pairs, and <strong '
                  'id="control-replays" data-value="{}">{}</strong> {} counted apart ({} pair rows in all); '
                  "observational baseline of {} same-input pairs. {} from {} bootstrap resamples of input groups "
                  "(seed {}).</p>").format(
        len(rows), fmt_n(perturbed), int(controls), fmt_n(controls), term("control replays"), fmt_n(c.pairs),
        fmt_n(c.observational.n), term("95% CI", "95% intervals"), fmt_n(c.resamples), fmt_n(c.seed))


def campaign_page(raw: Mapping[str, Any], profile: Mapping[str, Any] | None, folder: Path,
                  files: Sequence[tuple[str, int | None]]) -> str:
    """The campaign's page: what was found, example pairs, one row per perturbation,
    the observational check, dose-response, rates, cascades, the graph, the details."""
    from quiver._interventional import CampaignEstimates

    from .campaign_figures import (
        adaptive_figures,
        cascade_figure,
        dose_figures,
        forest_figure,
        plots,
        single_figure,
        validation_figure,
    )
    from .examples import load_examples
    from .examples_html import examples_section
    from .findings import campaign_findings
    from .glance import glance_table
    from .interventional import interventional_report

    c = CampaignEstimates.from_json(raw)
    rows = summary_rows(c, raw)
    body = [_lead(c, rows), findings_html(campaign_findings(raw, c))]
    body += examples_section(load_examples(folder), [p.id for p in c.perturbations])
    body += [Markup("<h2>At a glance</h2>"), glance_table(c, rows),
             Markup('<p class="muted">The strongest {} of each row is in bold: the event the perturbation moved most '
                    "beyond its control (the path, the loop iterations or which nodes run; some node's output when it "
                    "moved none of those). Rows with a failed negative control, failed replays or replays not applied "
                    "are marked.</p>").format(term("excess"))]
    why = [element("li", element("code", r.id), ": no beta_shape: ", r.beta_reason) for r in rows
           if r.beta_value is None and r.beta_reason]
    body += [element("ul", Markup("").join(why), class_="muted")] if why else []
    validation = validation_figure(c)
    if validation is not None:
        body += [Markup("<h2>Observational against interventional sensitivity</h2>"), validation]
    doses, single = dose_figures(c), single_figure(c)
    if doses or single is not None:
        body += [Markup("<h2>Dose-response</h2>"), plots([*doses, *([single] if single is not None else [])])]
    body += adaptive_figures(c)
    order = graph_nodes(profile) if profile else []
    body += [Markup("<h2>Rates and cascades</h2>"), plots([forest_figure(c), cascade_figure(c, order)])]
    if profile:
        body += [Markup("<h2>Pipeline graph and observational Sigma</h2>"), _graph_figures(profile)]
    body += [Markup("<h2>Details</h2>"), *folded(interventional_report(raw))]
    if profile:
        body += folded(render_report(profile), prefix="Observational: ")
    body += [Markup("<h2>Files in this folder</h2>"), _files_table(files)]
    return page("QUIVER campaign report", with_glossary(body))


def _graph_figures(profile: Mapping[str, Any]) -> Markup:
    graph_caption = Markup("Nodes top to bottom in the order they run, each edge labelled with its {} (observed); red "
                           "and thick: an {}; dashed: inferred from the traces; a double red border marks a "
                           "{}.").format(term("sigma"), term("amplifier"), term("bifurcation source"))
    sigma_caption = Markup("The {} of each edge (rows: source, columns: target; blank: no edge; hatched: "
                           "undefined).").format(term("sigma"))
    return _plots([_figure(graph_svg(profile), graph_caption, id="graph"),
                   _figure(sigma_svg(profile), sigma_caption, id="sigma")])


# --------------------------------------------------------------------------- analysis


def _rate_row(div: Mapping[str, Any], k: str) -> Markup:
    return element("tr", element("td", Markup("{} &gt; 0").format(term(k))),
                   cell(fmt(div.get(k)), field=k, value=div.get(k), num=True),
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
            element("table", _head_row([Markup("same-input pairs differing in"), Markup("rate"), term("95% CI"),
                                        Markup("n")]), element("tbody", rows), id="rates"),
            Markup("<p><strong>Top amplifying edges</strong> ({} in all; {}):</p>").format(
                len(edges), term("sigma")),
            element("ul", amp, id="amplifiers"),
            Markup('<p id="sources"><strong>{}:</strong> {}.</p>').format(term("bifurcation source",
                                                                                "Bifurcation sources"),
                ", ".join(sources) or "none")]


def analysis_page(profile: Mapping[str, Any], folder: Path) -> str:
    """An analysis' page: what was found, summary, graph, Sigma, ratios, details."""
    from .findings_more import analysis_findings

    head = _analysis_summary(profile)
    body = [head[0], findings_html(analysis_findings(profile)), *head[1:]]
    body += [Markup("<h2>Pipeline graph and Sigma</h2>"), _graph_figures(profile)]
    ratios = png_img(folder / "ratios.png", "Ratio d_j / d_i per edge")
    if ratios:
        body += [Markup("<h2>Ratios</h2>"), _figure(ratios, "Per edge, the ratios d_j / d_i over the pairs where the "
                                                            "source changed, with lines at 1, the mean (sigma) and "
                                                            "the median.")]
    body += [Markup("<h2>Details</h2>"), *folded(render_report(profile))]
    return page("QUIVER analysis report", with_glossary(body))


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
    rates = {k: v for k, v in (c.get("rates") or {}).items() if k != "D_iter" or gate_iterations(c) is not None}
    out.append(_figure(svg.interval_chart(f"gate-rates-{tid}", f"{tid}: divergence rates, per arm",
                                          _arm_rows(rates), axis="rate", lo=0.0, hi=1.0, legend=legend),
                       "D_shape and D_iter rates of the replays against the recording, per arm."))
    return out


def _gate_table(c: Mapping[str, Any]) -> Markup:
    def est(row: Mapping[str, Any], signed: bool = False) -> str:
        ci = row.get("ci")
        tail = f" [{fmt(ci[0], signed=signed)}, {fmt(ci[1], signed=signed)}]" if ci else ""
        return fmt(row.get("value"), signed=signed) + tail

    measures: list[tuple[str, Markup | str, Any]] = [("d_i", Markup("{} ({})").format(term("d_i"), c["node"]),
                                                        c["d_i"])]
    measures += [(f"field:{f}", f"field {f}", r) for f, r in (c.get("fields") or {}).items()]
    measures += [(f"rate:{k}", Markup("{} rate").format(term(k) if k in ("D_shape", "D_iter") else k), r)
                 for k, r in (c.get("rates") or {}).items() if k != "D_iter" or gate_iterations(c) is not None]
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


def _gate_inputs(c: Mapping[str, Any]) -> Markup:
    """The per-input tests: the inputs that moved and those not testable though the
    candidate changed their path more often, with their counts and p-values."""
    per = c.get("per_input")
    if not isinstance(per, Mapping):
        return Markup("")
    rows = {str(g.get("input_id")): g for g in per.get("inputs") or [] if isinstance(g, Mapping)}
    shown = [(rows[str(g)], "moved") for g in per.get("moved") or [] if str(g) in rows]
    shown += [(rows[str(g)], "not testable") for g in per.get("untestable") or [] if str(g) in rows]
    lead = element("p", f"Per input: {fmt_n(len(rows))} inputs, the path changed ({per.get('event')}) in the "
                        f"candidate's replays against the current template's on the same probes; {per.get('test')}; "
                        f"{per.get('correction')}, {fmt_n(per.get('family'))} input(s) in it, at {per.get('alpha')}."
                        + (f" {fmt_n(len(per.get('unprobed') or []))} input(s) got no probe." if per.get("unprobed")
                           else ""))
    if not shown:
        return lead + element("p", "No input's path moved beyond its current-template rate.", class_="muted")
    body = Markup("").join(element(
        "tr", element("td", element("code", str(g.get("input_id")))),
        cell(f"{fmt_n(g.get('events'))} of {fmt_n(g.get('n'))}", field="candidate", value=g.get("rate"), num=True),
        cell(f"{fmt_n(g.get('control_events'))} of {fmt_n(g.get('control_n'))}", field="current",
             value=g.get("control_rate"), num=True),
        cell(_p(g.get("p_value")), field="p", value=g.get("p_value"), num=True),
        cell(_p(g.get("p_holm")), field="p_holm", value=g.get("p_holm"), num=True),
        cell(status, field="status", value=status), data_input=str(g.get("input_id"))) for g, status in shown)
    head = _head_row(["input", "candidate: path changed", "current template", "p", "Holm p", ""])
    return lead + element("table", head, element("tbody", body), class_="gate-inputs",
                          data_template=str(c["template"]))


def _p(p: Any) -> str:
    return "—" if _num(p) is None else f"{p:.3g}"


def gate_page(data: Mapping[str, Any], markdown: str | None) -> str:
    """The gate's page: the verdict and its table first, then per candidate its charts,
    and the gate's Markdown (``gate.md``) folded."""
    verdict = str(data.get("verdict", "")).lower()
    from .findings_more import gate_findings

    body = [Markup('<p class="lead">{}: <strong id="verdict" class="{}" data-value="{}">{}</strong> — {} '
                   "candidate template(s), {} replays, {} LLM calls, seed {}.</p>").format(
        term("verdict", "Verdict"), f"verdict-{verdict}", verdict, verdict.upper(), len(data.get("candidates") or []),
        fmt_n(data.get("replays")), fmt_n(data.get("llm_calls")), fmt_n(data.get("seed"))),
            findings_html(gate_findings(data))]
    for c in data.get("candidates") or []:
        body.append(element("h2", element("code", str(c["template"])), " at ", element("code", str(c["node"])),
                            f": {str(c['verdict']).upper()}", id=anchor("gate", c["template"])))
        failures = c.get("failures") or []
        body.append(element("ul", Markup("").join(element("li", f) for f in failures)) if failures else
                    Markup("<p>No failure.</p>"))
        body += [_gate_table(c), _gate_inputs(c), _plots(_gate_charts(c))]
    if markdown:
        body += [Markup("<h2>Details</h2>"), details("The gate's Markdown report (gate.md)", [markdown_html(markdown)])]
    return page("QUIVER gate report", with_glossary(body))
