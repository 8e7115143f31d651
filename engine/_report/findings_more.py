"""What a gate, an analysis, a comparison and an attribution found, as sentences
(:class:`~.findings.Finding`; a campaign's are in :mod:`.findings`).

Each reads the JSON its command writes (``gate.json``, ``profile.json``,
``compare.json``, ``attribution.json``) and states its numbers as that file holds them,
problems first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from quiver._stats import fmt, fmt_n

from .findings import DEFAULT_MARGIN, Finding, Sentence, code_list, inside_margin, iteration_words, pct, undecided
from .markup import anchor

__all__ = ["gate_findings", "gate_iterations", "analysis_findings", "compare_findings", "attribution_findings"]


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _est(value: Any, ci: Any, *, signed: bool = False) -> str:
    """``0.430 [0.293, 0.574]`` (the interval left out when there is none)."""
    pair = ci if isinstance(ci, Sequence) and not isinstance(ci, str) and len(ci) == 2 else None
    tail = f" [{fmt(pair[0], signed=signed)}, {fmt(pair[1], signed=signed)}]" if pair else ""
    return fmt(value, signed=signed) + tail


def _arm(row: Mapping[str, Any], arm: str) -> Mapping[str, Any]:
    found = row.get(arm)
    return found if isinstance(found, Mapping) else {}


# --------------------------------------------------------------------------- gate


def _gate_rate(c: Mapping[str, Any], key: str, what: str, margin: float) -> Finding | None:
    row = (c.get("rates") or {}).get(key)
    if not isinstance(row, Mapping):
        return None
    cand, curr, diff = _arm(row, "candidate"), _arm(row, "current"), _arm(row, "difference")
    if _num(diff.get("value")) is None:
        return None
    verb = "change" if what.endswith("s") else "changes"
    s = Sentence().t("With ").c(c.get("template")).t(f" {what} {verb} in {pct(_num(cand.get('value')))} of the "
                                                      f"replays against {pct(_num(curr.get('value')))} with the "
                                                      "current template: ")
    ci = diff.get("ci") if isinstance(diff.get("ci"), Sequence) else None
    lo, hi = (_num(ci[0]), _num(ci[1])) if ci and len(ci) == 2 else (None, None)
    test = row.get("test_ci") if isinstance(row.get("test_ci"), Sequence) else None
    estimate = f"{_est(diff.get('value'), diff.get('ci'), signed=True)}, n = {fmt_n(diff.get('n'))}"
    if row.get("rises"):
        level = _num(row.get("test_level"))
        at = (f"; at the gate's level its {100 * level:.3g}% interval, [{fmt(_num(test[0]), signed=True)}, "
              f"{fmt(_num(test[1]), signed=True)}], lies above 0" if test and level is not None else "")
        s.t(f"more than the current template's noise ({estimate}{at}).")
        claim = "rises"
    elif inside_margin(lo, hi, margin):
        s.t(f"as often as with it ({estimate}, inside the equivalence margin ±{margin:g}).")
        claim = "equivalent"
    else:
        s.t(undecided(_int(diff.get("n")), _num(diff.get("value")), lo, hi, margin, "replays per arm",
                      "the current template") + ".")
        claim = "undecided"
    return s.done("effect", anchor("gate", c.get("template")), template=str(c.get("template")), event=key,
                  value=_num(diff.get("value")), rises=bool(row.get("rises")), lo=lo, hi=hi, margin=margin,
                  claim=claim)


def _int(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _gate_inputs(c: Mapping[str, Any]) -> list[Finding]:
    """The inputs whose path moved (named, with their counts), and those the probes could
    not test."""
    per = c.get("per_input")
    if not isinstance(per, Mapping):
        return []
    rows = {str(g.get("input_id")): g for g in per.get("inputs") or [] if isinstance(g, Mapping)}
    link, template = anchor("gate", c.get("template")), str(c.get("template"))
    out = _moved_inputs(per, template, link, "the path moved")
    untested = [rows[str(g)] for g in per.get("untestable") or [] if str(g) in rows]
    unprobed = [str(g) for g in per.get("unprobed") or []]
    if untested or unprobed:
        s = Sentence().t("Not tested per input with ").c(template).t(": ")
        if untested:
            more = [v for v in (per.get("replays_to_test") or {}).values() if isinstance(v, int)]
            why = (f"any input's change ({fmt_n(per.get('replays_needed'))} would test a complete change of one "
                   "input)" if per.get("enough_replays") is False else "beside the other inputs' noise"
                   + (f" (about {fmt_n(max(more))} would test them)" if more else ""))
            code_list(s, [str(g.get("input_id")) for g in untested[:10]]).t(
                (f" and {len(untested) - 10} more" if len(untested) > 10 else "")
                + f" changed the path more often with the candidate, with {fmt_n(c.get('repeats'))} replays per "
                f"probe and arm too few to test {why}")
        if unprobed:
            s.t("; " if untested else "").t(f"{fmt_n(len(unprobed))} input(s) got no probe: ")
            code_list(s, unprobed[:10]).t(f" and {len(unprobed) - 10} more" if len(unprobed) > 10 else "")
        out.append(s.t(".").done("note", link, template=template, untested=[str(g.get("input_id")) for g in untested],
                                 unprobed=unprobed))
    return out


def _gate_candidate(c: Mapping[str, Any], margin: float) -> list[Finding]:
    verdict = str(c.get("verdict", "")).upper()
    s = Sentence().t("Candidate ").c(c.get("template")).t(" at ").c(c.get("node")).t(f": {verdict}")
    d_i, beta = c.get("d_i") or {}, _num((c.get("beta_shape") or {}).get("value"))
    cand = _arm(d_i, "candidate") if isinstance(d_i, Mapping) else {}
    if _num(cand.get("value")) is not None:
        s.t(f"; it changes the node's output by d_i = {_est(cand.get('value'), cand.get('ci'))}")
        if beta is not None:
            s.t(f", {'beyond' if (_num(cand.get('value')) or 0.0) > beta else 'within'} its threshold beta_shape = "
                f"{fmt(beta)}")
    out = [s.t(".").done("verdict", anchor("gate", c.get("template")), template=str(c.get("template")),
                         verdict=verdict, value=_num(cand.get("value")))]
    iterations = gate_iterations(c)
    out += [f for key, what in (("D_shape", "the path"), ("D_iter", iterations))
            if what is not None and (f := _gate_rate(c, key, what, margin)) is not None]
    out += _gate_inputs(c)
    out += _gate_outcome(c)
    nodes = [str(r.get("node")) for r in c.get("re_evaluate") or [] if isinstance(r, Mapping)]
    if nodes:
        out.append(code_list(Sentence().t("Re-evaluate "), nodes).t(" (the nodes this change can move beyond alpha).")
                   .done("note", anchor("gate", c.get("template")), template=str(c.get("template")), nodes=nodes))
    return out


def _gate_outcome(c: Mapping[str, Any]) -> list[Finding]:
    """The outcome criterion of a candidate (``gate.json``'s ``outcome``): its pass rate
    against the current template's, what that decides at the margin, and the inputs where
    answers fail more often."""
    o = c.get("outcome")
    if not isinstance(o, Mapping):
        return []
    template, link = str(c.get("template")), anchor("gate", c.get("template"))
    cand, curr, diff = _arm(o, "candidate"), _arm(o, "current"), _arm(o, "difference")
    lo, hi = (o.get("test_ci") or [None, None])[:2]
    said = {"worse": "lowers it beyond", "non-inferior": "keeps it within",
            "undecided": "is not shown to keep it within"}.get(str(o.get("decision")), str(o.get("decision")))
    interval = f"[{fmt(_num(lo), signed=True)}, {fmt(_num(hi), signed=True)}]"
    s = Sentence().t("With ").c(template).t(f" the pass rate is {fmt(_num(cand.get('value')))} against "
                                          f"{fmt(_num(curr.get('value')))} with the current template "
                                          f"({fmt(_num(diff.get('value')), signed=True)} {interval}, "
                                          f"n = {fmt_n(diff.get('n'))}): the candidate {said} the non-inferiority "
                                          f"margin {fmt(_num(o.get('margin')))}")
    out = [s.t(".").done("verdict", link, template=template, decision=str(o.get("decision")),
                         value=_num(diff.get("value")), lo=_num(lo), hi=_num(hi))]
    return out + _moved_inputs(o.get("per_input") or {}, template, link, "answers fail more often")


def _moved_inputs(per: Mapping[str, Any], template: str, link: str, what: str) -> list[Finding]:
    """The effect finding of a candidate's per-input tests (the path's or the outcome's):
    the inputs where ``what`` happened, each with its counts in both arms and Holm p."""
    rows = {str(g.get("input_id")): g for g in per.get("inputs") or [] if isinstance(g, Mapping)}
    moved = [rows[str(g)] for g in per.get("moved") or [] if str(g) in rows]
    if not moved:
        return []
    s = Sentence().t("With ").c(template).t(f" {what} at {len(moved)} of {len(rows)} input(s): ")
    for i, g in enumerate(moved):
        s.t("; " if i else "").c(g.get("input_id")).t(
            f" ({g.get('events')} of {g.get('n')} candidate replays against {g.get('control_events')} of "
            f"{g.get('control_n')} with the current template, Holm p = {_num(g.get('p_holm')) or 0.0:.2g})")
    return [s.t(".").done("effect", link, template=template, value=len(moved),
                          inputs=[str(g.get("input_id")) for g in moved])]


def gate_iterations(c: Mapping[str, Any]) -> str | None:
    """What D_iter is called for a candidate (:func:`~.findings.iteration_words`; a
    gate.json written before ``loop`` existed: the loop iterations)."""
    return iteration_words(bool(c.get("loop", True)), bool(c.get("call_counts_differ", True)))


def gate_findings(data: Mapping[str, Any]) -> list[Finding]:
    """What a gate (its ``gate.json``) found: per candidate its verdict, the path and
    loop rates against the current template's (an absence said only inside the
    equivalence margin), the inputs whose path moved and those not tested, and what to
    re-evaluate."""
    out: list[Finding] = []
    margin = _num(data.get("equivalence_margin")) or DEFAULT_MARGIN
    for c in data.get("candidates") or []:
        if isinstance(c, Mapping):
            out += _gate_candidate(c, margin)
    return out


# --------------------------------------------------------------------------- analysis


def analysis_findings(p: Mapping[str, Any]) -> list[Finding]:
    """What an analysis (its ``profile.json``) found: failed traces, how often same-input
    reruns diverge, the strongest amplifying edges and the bifurcation sources."""
    out: list[Finding] = []
    failed = int(_num(p.get("failed_traces")) or 0)
    if failed:
        out.append(Sentence().t(f"{fmt_n(failed)} of {fmt_n(p.get('traces'))} traces failed; the estimates leave "
                                 "them out.").done("problem", "rates", problem="failed", value=failed))
    div = p.get("divergence") or {}
    if isinstance(div, Mapping) and _num(div.get("D_shape")) is not None:
        s = Sentence().t(f"Same-input reruns take another path in {pct(_num(div.get('D_shape')))} of pairs "
                         f"({_est(div.get('D_shape'), div.get('D_shape_ci'))}, n = {fmt_n(div.get('D_shape_n'))}); "
                         f"some node's output differs in {pct(_num(div.get('D_output')))} "
                         f"({_est(div.get('D_output'), div.get('D_output_ci'))}).")
        out.append(s.done("noise", "rates", event="D_shape", value=_num(div.get("D_shape")), n=div.get("D_shape_n")))
    edges = sorted((e for e in p.get("edges") or [] if isinstance(e, Mapping) and e.get("class") == "amplifier"
                    and _num(e.get("sigma")) is not None), key=lambda e: -(_num(e.get("sigma")) or 0.0))
    for e in edges[:3]:
        sigma = _num(e.get("sigma")) or 0.0
        out.append(Sentence().t("A change at ").c(e.get("source")).t(" grows on its way to ").c(e.get("target"))
                   .t(f": sigma = {_est(e.get('sigma'), e.get('sigma_ci'))} (n = {fmt_n(e.get('sigma_n', e.get('n')))}"
                      f"), {sigma:.1f} times the change at the source on average.")
                   .done("effect", "amplifiers", source=str(e.get("source")), target=str(e.get("target")),
                         value=_num(e.get("sigma"))))
    sources = [str(n.get("node")) for n in p.get("nodes") or [] if isinstance(n, Mapping)
               and n.get("bifurcation_source")]
    if sources:
        out.append(code_list(Sentence().t("Divergence starts at "), sources)
                   .t(" (bifurcation source: its own variation changes the path).")
                   .done("note", "sources", nodes=sources))
    return out


# --------------------------------------------------------------------------- compare


def compare_findings(data: Mapping[str, Any]) -> list[Finding]:
    """What a comparison of two corpora (its ``compare.json``) found."""
    out: list[Finding] = []
    rows = {str(r.get("node")): r for r in data.get("nodes") or [] if isinstance(r, Mapping)}
    for node in data.get("less_consistent") or []:
        r = rows.get(str(node), {})
        out.append(Sentence().c(node).t(" became less consistent: its within-corpus divergence rate went from "
                                         f"{_est(r.get('within_before'), r.get('within_before_ci'))} to "
                                         f"{_est(r.get('within_after'), r.get('within_after_ci'))} (shift "
                                         f"{_est(r.get('shift'), r.get('shift_ci'), signed=True)}).")
                   .done("problem", None, node=str(node), value=_num(r.get("shift"))))
    reached = [str(n) for n in data.get("reached") or []]
    if reached:
        out.append(code_list(Sentence().t("The change reached "), reached)
                   .t(": runs of the two corpora differ there more than runs within each.")
                   .done("effect", None, nodes=reached))
    else:
        out.append(Sentence().t("The change reached no node beyond the corpora's own noise.").done("effect", None))
    changes = data.get("changes") or {}
    if isinstance(changes, Mapping) and changes:
        out.append(code_list(Sentence().t("What changed in the recorded context: at "), [str(n) for n in changes])
                   .t(".").done("note", None, nodes=[str(n) for n in changes]))
    return out


# --------------------------------------------------------------------------- attribution


def attribution_findings(data: Mapping[str, Any]) -> list[Finding]:
    """What an attribution (its ``attribution.json``) found: traces that did not
    reproduce, and per node the dimension that adds most to its divergence over sampling."""
    out: list[Finding] = []
    missing = data.get("not_reproduced") or []
    if missing:
        out.append(Sentence().t(f"{fmt_n(len(missing))} trace(s) did not reproduce with every dimension frozen and "
                                 "are left out.").done("problem", None, value=len(missing)))
    nodes = data.get("nodes") or {}
    for node, row in nodes.items() if isinstance(nodes, Mapping) else ():
        incs = row.get("increments") or {} if isinstance(row, Mapping) else {}
        clear = [(dim, inc) for dim, inc in incs.items() if isinstance(inc, Mapping)
                 and isinstance(inc.get("increment_ci"), Sequence) and (_num(inc["increment_ci"][0]) or 0.0) > 0]
        if not clear:
            continue
        dim, inc = max(clear, key=lambda kv: _num(kv[1].get("increment")) or 0.0)
        base = ((row.get("rates") or {}).get("sampling") or {}) if isinstance(row, Mapping) else {}
        out.append(Sentence().c(node).t(f" diverges most because of its {dim}: "
                                         f"{_est(inc.get('increment'), inc.get('increment_ci'), signed=True)} over "
                                         f"sampling alone ({_est(base.get('rate'), base.get('rate_ci'))}).")
                   .done("effect", None, node=str(node), dimension=str(dim), value=_num(inc.get("increment"))))
    if not out:
        out.append(Sentence().t("No dimension adds to any node's divergence beyond sampling.").done("note", None))
    return out
