"""The Markdown report of ``quiver analyze``: the profile, table by table.

:func:`render_report` turns a profile (the plain JSON-able dict written to
``profile.json``) into the report a platform engineer reads: the corpus, the graph, edge
sensitivities and lifts (QUIVER.md §3-§4), partial sensitivities, noise floors, origins
and bifurcation thresholds (§7-§8), divergence rates (§6), paths and transitive sigma
(§5), drift budgets and impact sets (§9), distribution faithfulness (§10) and the
embedding cost. Every estimate is shown with its n and, when there is one, its 95%
interval ``[lo, hi]``; an undefined value is ``—``. Each section opens with one plain
sentence on how to read it. Every text of the profile (node and field names, classes,
reasons) is escaped (:func:`~.markup.md_text`): an ordinary name reads as it is, and
nothing in one can become Markdown or HTML.

The renderer is tolerant: any value may be null, optional sections may be missing (they
are then left out) or empty (then it says so), and keys it does not know are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from quiver._compare import first_divergence_markdown
from quiver._outdir import make_folder, write_text
from quiver._stats import DASH, fmt, fmt_ci, fmt_est, fmt_n

from .markup import md_table, md_text

__all__ = ["render_report", "write_report", "REPORT_FILE", "fmt", "fmt_ci", "fmt_est", "graph_nodes"]

REPORT_FILE = "report.md"
ARROW = " → "
MAX_PATHS = 10

Row = Sequence[str]

_DIVERGENCE = {
    "D_iter": ("D_iter > 0", "how many times some node was called"),
    "D_shape": ("D_shape > 0", "the branch or action decisions taken"),
    "D_output": ("D_output > 0", "some node's output (value drift, any kind)"),
    "D_output_only": ("D_output-only", "outputs only, with the same decisions and call counts"),
    "D_struct": ("D_struct > 0", "which nodes ran at all"),
}

_READ = {
    "graph": "Each node's output is compared field by field: routing fields weigh twice as much as context "
    "fields and observability fields are ignored; *(inferred)* marks what was guessed from the traces "
    "rather than declared.",
    "edges": "sigma is how much a change at the source grows (above 1) or shrinks (below 1) by the time it "
    "reaches the target, lambda how much more often the target changes when the source did than when it "
    "did not; a median well below sigma with a large frac > 1.5 means most changes fade but a few blow up.",
    "partials": "For a node with several parents, how much of its change each parent (and each pair of "
    "parents together) explains when they are fitted jointly on the same n pairs.",
    "nodes": "The noise floor is how much a node's output varies when the pipeline reruns the same input; an "
    "origin creates that variation itself, a propagator only passes on its parents' changes, and a "
    "bifurcation source is a node whose own changes switch the pipeline's path (beta is the smallest change "
    "that did).",
    "divergence": "The share of pairs of runs on the same input that differed in each respect.",
    "paths": "Multiplying sigma along a path estimates how a change at its start is scaled at its end; above "
    "1 (a cascade) the change grows along the way, and n is that of the path's least-sampled edge.",
    "transitive": "sigma measured directly between nodes that are not adjacent, next to the largest product "
    "along a path between them: close agreement means the path products can be trusted.",
    "budgets": "A change at the source smaller than tau moves the target beyond its own noise floor with "
    "probability below alpha, so the target need not be re-evaluated after such a change.",
    "impact": "The nodes to re-evaluate when the source changes: those reached through a path whose sigma "
    "exceeds alpha, and loop nodes whose bifurcation threshold lies below the change.",
    "faithfulness": "How far each node's production outputs are from the golden outputs it is evaluated "
    "against (0 = identical, 1 = entirely different): a large gap means the evaluation set no longer looks "
    "like production.",
    "embedding": "What the text distances cost: texts embedded with the sentence model, and the time spent.",
}


# --------------------------------------------------------------------------- formatting


def _yes_no(x: Any) -> str:
    return DASH if x is None else ("yes" if x else "no")


def _edge_name(row: Mapping[str, Any]) -> str:
    return f"{md_text(row.get('source'))}{ARROW}{md_text(row.get('target'))}"


def _edge_n(row: Mapping[str, Any]) -> Any:
    return row.get("sigma_n", row.get("n"))


def _path(nodes: Iterable[Any]) -> str:
    return ARROW.join(md_text(n) for n in nodes)


def _names(names: Iterable[Any]) -> str:
    return ", ".join(md_text(n) for n in names)


_table = md_table


def _section(title: str, read: str) -> list[str]:
    return [f"## {title}", "", f"*How to read this:* {_READ[read]}", ""]


def _list(profile: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = profile.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _sort_key_desc(value: Any) -> tuple[int, float]:
    """Sort descending with null last."""
    if value is None or not isinstance(value, (int, float)) or math.isnan(float(value)):
        return (1, 0.0)
    return (0, -float(value))


# --------------------------------------------------------------------------- graph order


def graph_nodes(profile: Mapping[str, Any]) -> list[str]:
    """The nodes in topological order (parents first, ties in declaration order).

    Nodes come from the graph, else from the node table and the edges; loop feedback
    edges (which close a cycle) are broken in declaration order.
    """
    graph = profile.get("graph") or {}
    names: list[str] = list(graph.get("nodes") or {})
    for row in _list(profile, "nodes"):
        if row.get("node") is not None and row["node"] not in names:
            names.append(str(row["node"]))
    edges = graph_edges(profile)
    for a, b in edges:
        names += [n for n in (a, b) if n not in names]
    parents = {n: {a for a, b in edges if b == n and a != n} for n in names}
    order: list[str] = []
    pending = list(names)
    while pending:
        ready = [n for n in pending if not (parents[n] & set(pending))] or pending[:1]
        order += ready
        pending = [n for n in pending if n not in ready]
    return order


def graph_edges(profile: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The graph's edges, else the edges the profile estimated."""
    graph = profile.get("graph") or {}
    raw = graph.get("edges") or [(e.get("source"), e.get("target")) for e in _list(profile, "edges")]
    out: list[tuple[str, str]] = []
    for e in raw:
        if isinstance(e, Sequence) and len(e) == 2 and e[0] is not None and e[1] is not None:
            pair = (str(e[0]), str(e[1]))
            if pair not in out:
                out.append(pair)
    return out


# --------------------------------------------------------------------------- sections


def _header(p: Mapping[str, Any]) -> list[str]:
    failed = p.get("failed_traces")
    paired = f" ({fmt_n(p['paired_groups'])} with two traces or more)" if p.get("paired_groups") is not None else ""
    corpus = (
        f"**Corpus:** {fmt_n(p.get('traces'))} traces ({fmt_n(failed)} failed) in {fmt_n(p.get('groups'))} "
        f"input groups{paired}, {fmt_n(p.get('pairs'))} same-input pairs."
    )
    eps = p.get("epsilon")
    settings = (
        f"**Settings:** epsilon = {DASH if eps is None else f'{eps:g}'} (a distance at or below it counts as no "
        f"change); 95% intervals from {fmt_n(p.get('resamples'))} bootstrap resamples of input groups "
        f"(seed {fmt_n(p.get('seed'))})."
    )
    seconds = p.get("seconds")
    took = [f"Analysis time: {seconds:.1f} s."] if isinstance(seconds, (int, float)) else []
    lines = ["# QUIVER analysis report", "", corpus, settings, *took, ""]
    if isinstance(failed, int) and failed > 0:
        lines += [f"> {failed:,} trace(s) failed and are left out of every estimate.", ""]
    return lines


def _summary(p: Mapping[str, Any]) -> list[str]:
    edges = _list(p, "edges")
    amps = sorted((e for e in edges if e.get("class") == "amplifier"), key=lambda e: _sort_key_desc(e.get("sigma")))
    lines = ["## At a glance", ""]
    if edges:
        amp = ", ".join(
            f"{_edge_name(e)} ({fmt(e.get('sigma'))}, n = {fmt_n(_edge_n(e))})" for e in amps[:5]
        )
        more = f" and {len(amps) - 5} more" if len(amps) > 5 else ""
        lines.append(f"- Amplifying edges: {len(amps)} of {len(edges)}" + (f": {amp}{more}." if amps else "."))
    crit = p.get("critical_path")
    if isinstance(crit, dict) and crit.get("path"):
        lines.append(f"- Critical amplification path: {_path(crit['path'])} (sigma(p) = {fmt(crit.get('sigma'))}).")
    nodes = _list(p, "nodes")
    origins = [str(n.get("node")) for n in nodes if n.get("origin") == "origin"]
    bif = [str(n.get("node")) for n in nodes if n.get("bifurcation_source")]
    if any(n.get("origin") for n in nodes):
        origin_text, bif_text = _names(origins) or "none", _names(bif) or "none"
        lines.append(f"- Noise origins: {origin_text}; bifurcation sources: {bif_text}.")
    div = p.get("divergence")
    if isinstance(div, dict) and div.get("D_shape") is not None:
        lines.append(
            f"- Same-input pairs taking a different path (D_shape > 0): {fmt(div.get('D_shape'))} "
            f"(n = {fmt_n(div.get('D_shape_n'))})."
        )
    return lines + [""] if len(lines) > 2 else []


def _fields_text(fields: Mapping[str, Any], inferred: Mapping[str, Any], mark: bool) -> str:
    """``a, b: type, role; c: type, role *(inferred)*``: fields of one kind grouped, in order."""
    groups: dict[tuple[str, str, str, bool], list[str]] = {}
    for name, spec in fields.items():
        spec = spec if isinstance(spec, dict) else {}
        weight = f", weight {spec['weight']:g}" if isinstance(spec.get("weight"), (int, float)) else ""
        key = (md_text(spec.get("type", "?")), md_text(spec.get("role") or "context"), weight,
               mark and name in inferred)
        groups.setdefault(key, []).append(str(name))
    return "; ".join(
        f"{_names(names)}: {kind}, {role}{weight}" + (" *(inferred)*" if was_inferred else "")
        for (kind, role, weight, was_inferred), names in groups.items()
    )


def _graph(p: Mapping[str, Any]) -> list[str]:
    graph = p.get("graph")
    if not isinstance(graph, dict):
        return []
    specs = graph.get("nodes") or {}
    inference = graph.get("inferred") or {}
    inferred_nodes = set(inference.get("inferred_nodes") or [])
    inferred_fields = inference.get("inferred_fields") or {}
    edges = graph_edges(p)
    rows = []
    for node in graph_nodes(p):
        spec = specs.get(node) or {}
        mine = inferred_fields.get(node) or {}
        whole = node in inferred_nodes  # the node is marked, not each of its fields
        if spec.get("fields"):
            fields = _fields_text(spec["fields"], mine, not whole)
        elif spec.get("output"):
            fields = _fields_text({"output": spec["output"]}, mine, not whole) + " (whole output)"
        else:
            fields = DASH
        parents = _names(a for a, b in edges if b == node and a != node) or "— (source)"
        rows.append([md_text(node) + (" *(inferred)*" if node in inferred_nodes else ""), parents, fields])
    headers = ["node", "parents", "output fields (type, role)"]
    lines = _section("Pipeline graph", "graph") + _table(headers, rows, "lll")
    notes = []
    loop = graph.get("loop")
    if isinstance(loop, dict) and loop.get("body"):
        notes.append(f"Loop: body {_path(loop['body'])}, at most k_max = {fmt_n(loop.get('k_max'))} iterations.")
    if inference.get("inferred_edges"):
        notes.append("The edges were inferred from the parents recorded in the traces.")
    return lines + ([""] + notes if notes else []) + [""]


def _edge_row(e: Mapping[str, Any]) -> Row:
    return [
        _edge_name(e),
        fmt_n(_edge_n(e)),
        fmt_est(e, "sigma"),
        fmt(e.get("sigma_median")),
        fmt(e.get("frac_ratio_below_1")),
        fmt(e.get("frac_ratio_above_1_5")),
        fmt(e.get("ratio_max")),
        fmt_est(e, "lambda", signed=True),
        f"{fmt_n(e.get('lambda_n_above', e.get('n_above')))} / {fmt_n(e.get('lambda_n_below', e.get('n_below')))}",
        md_text(e.get("class") or DASH) + (" (threshold-sensitive)" if e.get("threshold_sensitive") else ""),
    ]


def _edges(p: Mapping[str, Any]) -> list[str]:
    edges = sorted(_list(p, "edges"), key=lambda e: (*_sort_key_desc(e.get("sigma")), -(e.get("n") or 0)))
    lines = _section("Edge sensitivity and occurrence-lift", "edges")
    if not edges:
        return lines + ["No edge was estimated.", ""]
    headers = [
        "edge", "n", "sigma [95% CI]", "median", "frac < 1", "frac > 1.5", "max",
        "lambda [95% CI]", "n above / below", "class",
    ]
    note = (
        "n counts the pairs where the source changed (d_i > epsilon); median, frac and max describe the "
        "ratio d_j / d_i over those pairs; n above / below are the two partitions lambda compares."
    )
    return lines + _table(headers, [_edge_row(e) for e in edges], "lrrrrrrrrl") + ["", note, ""]


def _coefficients(part: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(term, {value, value_ci, value_n}) from ``coefficients`` or flat ``alpha[a]`` / ``gamma[a*b]`` keys."""
    if isinstance(part.get("coefficients"), dict):
        out = []
        for term, c in part["coefficients"].items():
            c = c if isinstance(c, dict) else {"value": c}
            out.append((str(term), {"value": c.get("value"), "value_ci": c.get("ci", c.get("value_ci")),
                                    "value_n": c.get("n")}))
        return out
    flat = []
    for key in part:
        if key == "intercept" or key.startswith(("alpha[", "gamma[")) and key.endswith("]"):
            term = key if key == "intercept" else key[6:-1]
            flat.append((term, {"value": part.get(key), "value_ci": part.get(f"{key}_ci"),
                                "value_n": part.get(f"{key}_n")}))
    return flat


def _partials(p: Mapping[str, Any]) -> list[str]:
    if "partials" not in p:
        return []
    partials = _list(p, "partials")
    lines = _section("Partial sensitivities (multi-parent nodes)", "partials")
    if not partials:
        return lines + ["No node has more than one parent with data.", ""]
    rows = []
    for part in partials:
        node = f"{md_text(part.get('node', part.get('target')))} ← {_names(part.get('parents') or [])}"
        params, r2 = fmt_n(part.get("params", part.get("n_params"))), fmt(part.get("r_squared"))
        status = md_text(part.get("status") or "ok")
        for term, est in _coefficients(part):
            n = est["value_n"] if est["value_n"] is not None else part.get("n")
            rows.append([node, _term(term), fmt_est(est, "value"), fmt_n(n), params, r2, status])
        if not _coefficients(part):
            rows.append([node, DASH, DASH, fmt_n(part.get("n")), params, r2, status])
    headers = ["node ← parents", "term", "coefficient [95% CI]", "n", "parameters", "R²", "status"]
    return lines + _table(headers, rows, "llrrrrl") + [""]


def _term(term: str) -> str:
    """A fitted term: ``intercept``, a parent, or parents multiplied (``a*b``)."""
    return term if term == "intercept" else " × ".join(md_text(t) for t in term.split("*"))


def _origin(n: Mapping[str, Any]) -> str:
    """The origin class, with the pairs whose parents were all unchanged when known."""
    origin = md_text(n.get("origin") or DASH)
    clean = n.get("n_clean_parents")
    return f"{origin} ({fmt_n(clean)} clean-parent pairs)" if isinstance(clean, int) and origin != DASH else origin


def _nodes(p: Mapping[str, Any]) -> list[str]:
    by_name = {str(n.get("node")): n for n in _list(p, "nodes")}
    lines = _section("Noise floors, origins and bifurcation thresholds", "nodes")
    if not by_name:
        return lines + ["No node statistics.", ""]
    order = [n for n in graph_nodes(p) if n in by_name] + [n for n in by_name if n not in graph_nodes(p)]
    rows = []
    for name in order:
        n = by_name[name]
        drift = fmt_est(n, "drift_rate")
        if n.get("drift_rate_n") is not None and drift != DASH:
            drift += f" (n = {fmt_n(n['drift_rate_n'])})"
        rows.append([
            md_text(name), fmt_est(n, "noise_floor"), fmt_n(n.get("noise_floor_n")), _origin(n), drift,
            fmt_est(n, "beta_shape"), fmt_n(n.get("beta_shape_n")),
            fmt_est(n, "beta_iter"), fmt_n(n.get("beta_iter_n")), _yes_no(n.get("bifurcation_source")),
        ])
    headers = [
        "node", "noise floor [95% CI]", "n", "origin", "drift rate", "beta_shape", "n", "beta_iter", "n",
        "bifurcation source",
    ]
    note = (
        "Origin classes: origin (changes with every parent unchanged), propagator (changes only when a parent "
        "did), indeterminate (no pair had all parents unchanged; see the drift rate), stable (never changed)."
    )
    return lines + _table(headers, rows, "lrrlrrrrrl") + ["", note, ""]


def _divergence(p: Mapping[str, Any]) -> list[str]:
    from .findings import profile_iterations_told

    div = p.get("divergence")
    lines = _section("Trajectory divergence", "divergence")
    if not isinstance(div, dict) or not div:
        return lines + ["No divergence rates.", ""]
    names = list(_DIVERGENCE) + [k for k in div if f"{k}_n" in div and k not in _DIVERGENCE]
    rows = []
    for key in names:
        if key not in div or (key == "D_iter" and not profile_iterations_told(p)):
            continue
        label, what = _DIVERGENCE.get(key, (md_text(key), DASH))
        rows.append([label, fmt_est(div, key), fmt_n(div.get(f"{key}_n")), what])
    return lines + _table(["metric", "rate [95% CI]", "n (pairs)", "pairs differing in"], rows, "lrrl") + [""]


def _min_edge_n(path: Sequence[Any], edge_n: Mapping[tuple[str, str], Any]) -> str:
    ns = [edge_n.get((str(a), str(b))) for a, b in pairwise(path)]
    counts = [n for n in ns if isinstance(n, (int, float))]
    if not ns or len(counts) < len(ns):
        return DASH
    return fmt_n(min(counts))


def _paths(p: Mapping[str, Any]) -> list[str]:
    edge_n = {(str(e.get("source")), str(e.get("target"))): _edge_n(e) for e in _list(p, "edges")}
    paths = sorted(_list(p, "paths"), key=lambda r: _sort_key_desc(r.get("sigma")))
    lines = _section("Paths", "paths")
    crit = p.get("critical_path")
    if isinstance(crit, dict) and crit.get("path"):
        cascade = isinstance(crit.get("sigma"), (int, float)) and crit["sigma"] > 1
        lines += [
            f"**Critical amplification path:** {_path(crit['path'])}, sigma(p) = {fmt(crit.get('sigma'))}, "
            f"n = {_min_edge_n(crit['path'], edge_n)}" + (" (a cascade amplifier)." if cascade else "."),
            "",
        ]
    else:
        lines += ["**Critical amplification path:** none (no source-to-sink path has a defined sigma).", ""]
    if not paths:
        return lines + ["No path with two or more edges.", ""]
    rows = [
        [str(i), _path(r.get("path") or []), fmt(r.get("sigma")), _yes_no(r.get("cascade")),
         _min_edge_n(r.get("path") or [], edge_n)]
        for i, r in enumerate(paths[:MAX_PATHS], 1)
    ]
    shown = f"Top {len(rows)} of {len(paths)} paths by sigma(p)." if len(paths) > MAX_PATHS else ""
    if p.get("paths_truncated"):
        shown = (shown + " " if shown else "") + "The path enumeration was cut short: more paths exist."
    table = _table(["#", "path", "sigma(p)", "cascade", "n (weakest edge)"], rows, "rlrlr")
    return lines + ([shown, ""] if shown else []) + table + [""]


def _transitive(p: Mapping[str, Any]) -> list[str]:
    if "transitive" not in p:
        return []
    items = _list(p, "transitive")
    lines = _section("Transitive sigma against the path product", "transitive")
    if not items:
        return lines + ["No pair of non-adjacent connected nodes with data.", ""]
    rows = []
    for t in items:
        ci, prod = t.get("sigma_ci"), t.get("path_product")
        inside = DASH
        if isinstance(ci, list) and len(ci) == 2 and None not in ci and isinstance(prod, (int, float)):
            inside = _yes_no(ci[0] <= prod <= ci[1])
        rows.append([
            _edge_name(t), fmt_est(t, "sigma"), fmt_n(t.get("sigma_n")),
            fmt(prod), fmt(t.get("relative_difference")), inside,
        ])
    headers = ["pair", "measured sigma [95% CI]", "n", "max path product", "relative difference", "product in CI"]
    return lines + _table(headers, rows, "lrrrrl") + [""]


def _tau_cell(b: Mapping[str, Any]) -> str:
    status = b.get("status")
    if status == "never":
        return "never"
    if status == "insufficient":
        return "insufficient data"
    return fmt(b.get("tau"))


def _budgets(p: Mapping[str, Any]) -> list[str]:
    if "budgets" not in p:
        return []
    budgets = _list(p, "budgets")
    lines = _section("Drift budgets", "budgets")
    if not budgets:
        return lines + ["No drift budget was computed.", ""]
    alphas = sorted({b.get("alpha") for b in budgets}, key=lambda a: (a is None, a or 0.0))
    headers = ["edge", "tau", "target noise floor", "P(target beyond it) [95% CI]", "n", "status"]
    for alpha in alphas:
        rows = [
            [_edge_name(b), _tau_cell(b), fmt(b.get("noise_floor_target")),
             fmt_est(b, "probability"), fmt_n(b.get("n", b.get("probability_n"))), md_text(b.get("status") or DASH)]
            for b in budgets if b.get("alpha") == alpha
        ]
        lines += [f"### alpha = {fmt(alpha)}", ""] + _table(headers, rows, "lrrrrl") + [""]
    return lines + [
        "P is the probability that the target moves beyond its noise floor when the source changes by more "
        "than tau, over n pairs; *never*: it never reaches alpha; *insufficient data*: fewer than 10 pairs "
        "above tau.",
        "",
    ]


def _member(m: Mapping[str, Any]) -> str:
    reasons = m.get("reasons")
    why = "; ".join(md_text(r) for r in (reasons if isinstance(reasons, list) else [m.get("reason")]) if r)
    return f"{md_text(m.get('node'))} ({why})" if why else md_text(m.get("node"))


def _impact(p: Mapping[str, Any]) -> list[str]:
    if "impact_sets" not in p:
        return []
    sets = _list(p, "impact_sets")
    lines = _section("Impact sets", "impact")
    if not sets:
        return lines + ["No impact set was computed.", ""]
    for s in sets:
        members = [_member(m) for m in s.get("members") or [] if isinstance(m, dict)]
        unassessed = [str(u) for u in s.get("unassessed") or []]
        if not members and not unassessed:
            continue
        line = f"- **{md_text(s.get('source'))}**, alpha = {fmt(s.get('alpha'))}: {'; '.join(members) or 'none'}"
        if unassessed:
            line += f"; not assessed (every path has an undefined sigma): {_names(unassessed)}"
        lines.append(line)
    nonempty = {str(s.get("source")) for s in sets if s.get("members") or s.get("unassessed")}
    quiet = list(dict.fromkeys(str(s.get("source")) for s in sets if str(s.get("source")) not in nonempty))
    if quiet:
        lines.append(f"- Nothing to re-evaluate at any alpha after a change at: {_names(quiet)}.")
    return lines + [""]


def _named_field(f: Mapping[str, Any], key: str) -> str:
    """``field (distance)`` for the field named by ``f[key]`` (min_field, max_field)."""
    name = f.get(key)
    if name is None:
        return DASH
    detail = (f.get("fields") or {}).get(name)
    return f"{md_text(name)} ({fmt(detail.get('distance') if isinstance(detail, dict) else None)})"


def _faithfulness(p: Mapping[str, Any]) -> list[str]:
    if "faithfulness" not in p:
        return []
    items = sorted(_list(p, "faithfulness"), key=lambda r: _sort_key_desc(r.get("gap")))
    lines = _section("Distribution faithfulness", "faithfulness")
    if not items:
        return lines + ["No golden outputs were given.", ""]
    rows = [
        [md_text(f.get("node")), fmt_est(f, "gap"), fmt_n(f.get("n")), _named_field(f, "min_field"),
         _named_field(f, "max_field")]
        for f in items
    ]
    field_rows = [
        [md_text(f.get("node")), md_text(name), fmt(d.get("distance")), fmt_n(d.get("n")), fmt(d.get("kl"))]
        for f in items for name, d in (f.get("fields") or {}).items() if isinstance(d, dict)
    ]
    lines += _table(["node", "mean gap", "n", "min field", "max field"], rows, "lrrll") + [""]
    if field_rows:
        kl = "KL is D_KL(production || golden) for categorical fields."
        lines += _table(["node", "field", "distance", "n", "KL"], field_rows, "llrrr") + ["", kl, ""]
    return lines


def _embedding(p: Mapping[str, Any]) -> list[str]:
    emb = p.get("embedding")
    if not isinstance(emb, dict):
        return []

    def secs(x: Any) -> str:
        return DASH if not isinstance(x, (int, float)) else f"{x:.1f} s"

    line = (
        f"Model {md_text(emb['model']) if emb.get('model') else DASH}: {fmt_n(emb.get('needed'))} texts needed, "
        f"{fmt_n(emb.get('embedded'))} embedded, {fmt_n(emb.get('cache_hits'))} cache hits; "
        f"model load {secs(emb.get('load_seconds'))}, encoding {secs(emb.get('encode_seconds'))}."
    )
    return _section("Text embeddings", "embedding") + [line, ""]


def _images(images: Iterable[str | Path]) -> list[str]:
    names = [Path(i).name for i in images]
    if not names:
        return []
    return ["## Plots", ""] + [f"![{md_text(Path(n).stem)}]({n})" for n in names if _plain_name(n)] + [""]


def _plain_name(name: str) -> bool:
    """Whether ``name`` is a file name an image link can hold as it is."""
    return bool(name) and all(ch.isalnum() or ch in "._-" for ch in name)


_SECTIONS = (
    _header, _summary, _graph, _edges, _partials, _nodes, _divergence,
    lambda p: first_divergence_markdown(p.get("first_divergence")), _paths, _transitive,
    _budgets, _impact, _faithfulness, _embedding,
)


def render_report(profile: Mapping[str, Any], *, images: Iterable[str | Path] = ()) -> str:
    """The Markdown report of a profile.

    Args:
        profile: The analysis profile (the dict written to ``profile.json``).
        images: Plot files to link at the end (relative to the report), e.g. what
            :func:`quiver._report.write_plots` returned.

    Returns:
        The report text, ending with a newline.
    """
    lines: list[str] = []
    for section in _SECTIONS:
        lines += section(profile)
    lines += _images(images)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def write_report(profile: Mapping[str, Any], out_dir: str | Path, *, images: Iterable[str | Path] = ()) -> Path:
    """Write ``report.md`` into ``out_dir`` (created if needed) and return its path."""
    out = Path(out_dir)
    make_folder(out)
    path = out / REPORT_FILE
    write_text(path, render_report(profile, images=images))
    return path
