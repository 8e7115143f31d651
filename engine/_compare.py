"""Divergence over a corpus and across two corpora: where pairs first diverge, and baselines.

* :func:`first_divergence_table`: every same-input pair of a corpus diffed
  (:func:`quiver._diff.diff_traces`); the first divergence counted by node x cause x
  origin, as a rate over all pairs and as the share of the path-changing pairs
  (D_shape > 0) it explains, each with the 95% group-bootstrap interval (QUIVER.md §13,
  groups = inputs).
* :func:`compare_corpora`: two corpora over the same inputs (two deployments, two weeks
  of production). Per node, the *within-corpus* divergence rate of each (the share of
  same-input pairs of that corpus where the node's outputs, decisions, tool calls (a
  handoff of an agent SDK is one, whatever wire format carried it) or call count
  differ, over the pairs where it ran), the *across-corpus* rate (pairs of one trace
  from each, of different repeats: repeat r of two recordings at one seed shares its samples),
  the shift of the within rate (after - before) and the excess of the
  across rate over the mean within rate, each with an interval from one bootstrap over
  the shared inputs (the same resampled inputs for every term of a difference). A node
  is *reached* by what changed when the excess's interval lies above 0; it became *less
  consistent* when the shift's interval lies above 0 (``quiver compare`` exits 1). What
  changed is read from the recorded contexts: template hashes, model versions and
  sampling parameters, the tools offered, retrieval content hashes under the same
  document id, tool responses to the same arguments.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quiver._canonical import canonical_json
from quiver._diff import REQUEST_FIELDS, PairDiff, answer_view, diff_traces
from quiver._errors import QuiverError
from quiver._stats import (
    DASH,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    GroupBootstrap,
    fmt_est,
    fmt_n,
    group_traces,
    percentile_interval,
)
from quiver._trace import Trace, iter_traces

ALPHA = 0.05
"""The family-wise level of ``quiver compare``'s flags (Bonferroni over nodes)."""

__all__ = [
    "ALPHA", "DivergenceTable", "first_divergence_table", "first_divergence_json", "first_divergence_markdown",
    "Comparison", "compare_corpora",
]


# --------------------------------------------------------------------------- one corpus


@dataclass(frozen=True)
class DivergenceTable:
    """First divergences of the same-input pairs of a corpus, by node x cause x origin.

    Attributes:
        pairs: Every pair's diff, in pair order.
        group: (P,) the input group of each pair.
        groups: The input ids.
        data: The JSON form (``profile.json``'s ``first_divergence``).
    """

    pairs: list[PairDiff]
    group: np.ndarray
    groups: list[str]
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.data


def _pair_list(groups: dict[str, list[Trace]]) -> list[tuple[str, Trace, Trace]]:
    return [(g, a, b) for g, ts in groups.items() for a, b in itertools.combinations(ts, 2)]


def first_divergence_table(
    traces: Iterable[Trace], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
) -> DivergenceTable:
    """Diff every same-input pair of ``traces`` (failed traces left out) and tabulate where
    and why they first diverge."""
    groups, _ = group_traces(traces)
    return _table(_pair_list(groups), list(groups), resamples, seed)


def first_divergence_json(
    files: Sequence[str | os.PathLike[str]], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """The JSON of :func:`first_divergence_table` over the traces of ``files``
    (``profile.json``'s ``first_divergence``)."""
    traces = itertools.chain.from_iterable(iter_traces(Path(f)) for f in files)
    return first_divergence_table(traces, resamples=resamples, seed=seed).data


def _table(pair_list: Sequence[tuple[str, Trace, Trace]], names: list[str], resamples: int,
           seed: int) -> DivergenceTable:
    index = {g: i for i, g in enumerate(names)}
    diffs = [diff_traces(a, b) for _, a, b in pair_list]
    group = np.array([index[g] for g, _, _ in pair_list], dtype=np.int64)
    boot = GroupBootstrap(group, len(names), resamples=resamples, seed=seed)
    shape = np.array([d.d_shape for d in diffs], dtype=bool)
    keys = [(d.first.node, d.first.cause, d.first.origin_node) if d.first else None for d in diffs]
    rows = []
    for key in sorted({k for k in keys if k is not None}, key=lambda k: (-keys.count(k), k)):
        hit = np.array([k == key for k in keys], dtype=bool)
        rows.append({"node": key[0], "cause": key[1], "origin": key[2], "count": int(hit.sum()),
                     **boot.rate(hit).as_dict("rate"), **boot.rate(hit, shape).as_dict("shape_share")})
    causes = {}
    for cause in sorted({k[1] for k in keys if k is not None}):
        hit = np.array([k is not None and k[1] == cause for k in keys], dtype=bool)
        causes[cause] = {"count": int(hit.sum()), **boot.rate(hit).as_dict("rate"),
                         **boot.rate(hit, shape).as_dict("shape_share")}
    none = np.array([k is None for k in keys], dtype=bool)
    data = {"pairs": len(diffs), "groups": int(len(set(group.tolist()))), "d_shape_pairs": int(shape.sum()),
            **boot.rate(none).as_dict("no_divergence"), **boot.rate(shape).as_dict("d_shape_rate"),
            "rows": rows, "causes": causes}
    return DivergenceTable(diffs, group, names, data)


def first_divergence_markdown(data: dict[str, Any] | None) -> list[str]:
    """The report section of a first-divergence table (empty when there is none); node
    names and causes escaped (:func:`quiver._report.markup.md_text`)."""
    if not data:
        return []
    from quiver._report import md_table, md_text
    lines = ["## First divergence: where same-input runs part, and why", "",
             "Each pair of runs on the same input is compared call by call in program order; the first call whose "
             "output or decisions differ is explained from the recorded context (prompt, model, retrieval, tool; "
             "sampling when every recorded input is identical; origin is where the cause lies when the call "
             "inherited it). Rates are over all pairs, shares over the pairs whose path changed (D_shape > 0), with "
             "95% group-bootstrap intervals.", "",
             f"{fmt_n(data['pairs'])} pairs in {fmt_n(data['groups'])} input groups; no divergence in "
             f"{fmt_est(data, 'no_divergence')}; D_shape > 0 in {fmt_n(data['d_shape_pairs'])} pairs.", ""]
    if not data["rows"]:
        return lines + ["No pair diverged.", ""]
    rows = [[md_text(r["node"]), md_text(r["cause"]), md_text(r["origin"]), fmt_n(r["count"]), fmt_est(r, "rate"),
             fmt_est(r, "shape_share") if r.get("shape_share_n") else DASH] for r in data["rows"]]
    headers = ["first divergent node", "cause", "origin", "pairs", "rate", "share of D_shape > 0"]
    return lines + md_table(headers, rows, "lllrrr") + [""]


# --------------------------------------------------------------------------- two corpora


def _node_views(trace: Trace) -> dict[str, list[str]]:
    """node -> what each of its calls produced: output, decisions, the tool calls its
    model answered with (:func:`quiver._diff.answer_view`)."""
    out: dict[str, list[str]] = {}
    for call in sorted(trace.calls, key=lambda c: (c.node, c.occurrence)):
        out.setdefault(call.node, []).append(answer_view(call))
    return out


@dataclass(frozen=True)
class Comparison:
    """Two corpora compared node by node (see the module docstring).

    Attributes:
        data: The JSON form (``compare.json``).
        across: The first-divergence table of the across-corpus pairs.
    """

    data: dict[str, Any]
    across: DivergenceTable

    @property
    def less_consistent(self) -> list[str]:
        """Nodes whose within-corpus divergence rate rose beyond its interval."""
        return [n["node"] for n in self.data["nodes"] if n["less_consistent"]]

    @property
    def reached(self) -> list[str]:
        """Nodes whose across-corpus rate exceeds the within-corpus rates beyond its interval."""
        return [n["node"] for n in self.data["nodes"] if n["reached"]]

    def to_json(self) -> dict[str, Any]:
        return self.data


def _difference(a: Estimate, b: Estimate, weight_b: float = 1.0, c: Estimate | None = None) -> Estimate:
    """a - weight_b * b (- weight_b * c), draw by draw (the same resamples)."""
    if a.value is None or b.value is None or a.draws is None or b.draws is None:
        return Estimate.empty()
    value, draws = a.value - weight_b * b.value, a.draws - weight_b * b.draws
    if c is not None:
        if c.value is None or c.draws is None:
            return Estimate.empty()
        value, draws = value - weight_b * c.value, draws - weight_b * c.draws
    return Estimate(value, percentile_interval(draws), min(a.n, b.n), draws)


def compare_corpora(
    before: Iterable[Trace], after: Iterable[Trace], *, resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Per-node divergence baselines of two corpora over the same inputs, their shift, and what changed.

    Raises:
        QuiverError: No input is in both corpora, or no input has two traces in each.
    """
    before, after = list(before), list(after)
    g_before, _ = group_traces(before)
    g_after, _ = group_traces(after)
    common = [g for g in g_before if g in g_after]
    if not common:
        raise QuiverError(f"no input is in both corpora ({len(g_before)} input id(s) before, {len(g_after)} after): "
                          "compare recordings of the same inputs")
    if not any(len(g_before[g]) > 1 and len(g_after[g]) > 1 for g in common):
        raise QuiverError(f"no input has two traces in each corpus ({len(common)} input(s) in common): the baselines "
                          "compare repeats of the same input; record with repeats >= 2")
    units: list[tuple[int, int, Trace, Trace]] = []  # (kind 0 before / 1 after / 2 across, group, a, b)
    for gi, g in enumerate(common):
        units += [(0, gi, a, b) for a, b in itertools.combinations(g_before[g], 2)]
        units += [(1, gi, a, b) for a, b in itertools.combinations(g_after[g], 2)]
        units += [(2, gi, a, b) for a in g_before[g] for b in g_after[g] if not _same_sample(a, b, g_before[g])]
    kind = np.array([u[0] for u in units], dtype=np.int64)
    boot = GroupBootstrap(np.array([u[1] for u in units], dtype=np.int64), len(common), resamples=resamples, seed=seed)
    views = {id(t): _node_views(t) for g in common for t in (*g_before[g], *g_after[g])}
    nodes = list(dict.fromkeys(c.node for g in common for t in (*g_before[g], *g_after[g]) for c in t.calls))
    changes = _context_changes([t for g in common for t in g_before[g]], [t for g in common for t in g_after[g]])
    rows = [_node_row(node, units, kind, views, boot, changes.get(node, [])) for node in nodes]
    family = _decide(rows)
    across = _table([(g, a, b) for g in common for a in g_before[g] for b in g_after[g]], common, resamples, seed)
    data = {
        "inputs": len(common), "inputs_before_only": len(g_before) - len(common),
        "inputs_after_only": len(g_after) - len(common), "traces_before": len(before), "traces_after": len(after),
        "pairs": {"before": int((kind == 0).sum()), "after": int((kind == 1).sum()), "across": int((kind == 2).sum())},
        "resamples": resamples, "seed": seed, "tests": family, "nodes": rows,
        "reached": [r["node"] for r in rows if r["reached"]],
        "less_consistent": [r["node"] for r in rows if r["less_consistent"]],
        "changes": {n: c for n, c in changes.items() if c}, "first_divergence_across": across.data,
    }
    data["verdict"] = "fail" if data["less_consistent"] else "pass"
    return Comparison(data, across)


def _same_sample(a: Trace, b: Trace, group: list[Trace]) -> bool:
    """Repeat r of one recording and repeat r of the other may share their samples (the
    sample key derives from the seed, the input and the repeat): such an across pair has
    less noise than any within pair, and is left out of the across rate when the repeats
    of the group are numbered apart."""
    return a.repeat == b.repeat and len({t.repeat for t in group}) == len(group)


def _node_row(node: str, units: list[tuple[int, int, Trace, Trace]], kind: np.ndarray, views: dict[int, Any],
              boot: GroupBootstrap, changes: list[str]) -> dict[str, Any]:
    ran = np.zeros(len(units), dtype=bool)
    differs = np.zeros(len(units), dtype=bool)
    for i, (_, _, a, b) in enumerate(units):
        x, y = views[id(a)].get(node), views[id(b)].get(node)
        ran[i] = x is not None or y is not None
        differs[i] = x != y
    before, after, across = (boot.rate(differs, ran & (kind == k)) for k in (0, 1, 2))
    shift = _difference(after, before)
    excess = _difference(across, before, 0.5, after)
    return {
        "node": node, **before.as_dict("within_before"), **after.as_dict("within_after"),
        **across.as_dict("across"), **shift.as_dict("shift"), **excess.as_dict("excess"),
        "changes": changes, "_draws": (shift.draws, excess.draws),
    }


_TOLERANCE = 1e-9
"""Differences of rates closer to 0 than this are 0 (float residue of a - b/2 - c/2)."""


def _decide(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Flag the rows whose shift or excess lies above 0 at the family-wise level ALPHA:
    the percentile interval at 1 - ALPHA / m (Bonferroni), so that two recordings of one
    deployment pass. m counts the nodes where the estimate is a test: defined, and not
    the same value <= 0 in every resample (a node no resample tells apart cannot lie above
    0 at any level, so it is left out of the family, as Tarone's rule leaves out tests
    that cannot reach significance). A lower end above 0 by less than float residue is 0.

    Returns:
        m of each estimate: ``{"shift": m, "excess": m}``.
    """
    family = {}
    for i, (key, flag) in enumerate((("shift", "less_consistent"), ("excess", "reached"))):
        finite = {id(r): _finite(r["_draws"][i]) if r[key] is not None else np.zeros(0) for r in rows}
        m = max(1, sum(d.size > 0 and (float(np.ptp(d)) > _TOLERANCE or float(d.min()) > _TOLERANCE)
                       for d in finite.values()))
        family[key] = m
        for r in rows:
            draws = finite[id(r)]
            low = float(np.percentile(draws, 100 * ALPHA / (2 * m))) if draws.size else None
            r[f"{key}_low_adjusted"] = None if low is None else round(low, 6)
            r[flag] = bool(low is not None and low > _TOLERANCE)
    for r in rows:
        del r["_draws"]
    return family


def _finite(draws: np.ndarray | None) -> np.ndarray:
    return draws[np.isfinite(draws)] if draws is not None else np.zeros(0)


def _contexts(traces: list[Trace]) -> dict[str, dict[str, set[str]]]:
    """node -> {what: the recorded values}: templates, models, sampling parameters, the
    tools offered, docs, tool responses."""
    out: dict[str, dict[str, set[str]]] = {}
    for t in traces:
        for c in t.calls:
            ctx = out.setdefault(c.node, {})
            if c.prompt is not None and c.prompt.template_hash:
                ctx.setdefault("template", set()).add(f"{c.prompt.template_id}={c.prompt.template_hash}")
            if c.model is not None:
                params = c.model.params
                ctx.setdefault("model", set()).add(f"{c.model.name} (version {c.model.version})")
                ctx.setdefault("params", set()).add(canonical_json({k: v for k, v in params.items()
                                                                    if k not in REQUEST_FIELDS}))
                ctx.setdefault("tools", set()).add(canonical_json(params.get("tools")))
            for d in c.retrieval or ():
                ctx.setdefault(f"doc {d.doc_id}", set()).add(d.content_hash)
            if c.tool is not None:
                ctx.setdefault(f"tool {c.tool.name} {canonical_json(c.tool.args)}", set()).add(c.tool.response_hash)
    return out


def _context_changes(before: list[Trace], after: list[Trace]) -> dict[str, list[str]]:
    """node -> what its recorded context shows changed between the corpora, one line each."""
    ctx_b, ctx_a = _contexts(before), _contexts(after)
    out: dict[str, list[str]] = {}
    for node in dict.fromkeys([*ctx_b, *ctx_a]):
        b, a = ctx_b.get(node, {}), ctx_a.get(node, {})
        lines = []
        for what in ("template", "model", "params", "tools"):
            if what in b and what in a and b[what] != a[what]:
                gone, new = sorted(b[what] - a[what]), sorted(a[what] - b[what])
                label = {"template": "prompt template", "model": "model", "params": "sampling parameters",
                         "tools": "tools offered"}[what]
                lines.append(f"{label}: {', '.join(_cut(x) for x in gone) or DASH} -> "
                             f"{', '.join(_cut(x) for x in new) or DASH}")
        docs = sorted(k[4:] for k in b.keys() & a.keys() if k.startswith("doc ") and b[k].isdisjoint(a[k]))
        if docs:
            lines.append(f"retrieval: {len(docs)} document(s) changed under the same id "
                         f"({', '.join(docs[:5])}{' ...' if len(docs) > 5 else ''}): index drift")
        tools = [k for k in b.keys() & a.keys() if k.startswith("tool ")]
        moved = [k for k in tools if b[k].isdisjoint(a[k])]
        if moved:
            lines.append(f"tool: other responses to the same arguments for {len(moved)} of {len(tools)} argument "
                         "set(s): live data")
        out[node] = lines
    return out


def _cut(text: str) -> str:
    head, sep, digest = text.partition("=sha256:")
    return f"{head}=sha256:{digest[:12]}" if sep else text
