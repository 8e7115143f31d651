"""The Markdown report of a perturbation campaign: :func:`interventional_report`.

Renders the :class:`~quiver._interventional.CampaignEstimates` of
:func:`~quiver._interventional.campaign_estimates` (or a ``campaign.json`` read back) in
the order an engineer reads it: per perturbation its divergence table in the shape of
the paper's Table 3 (observational next to the effective and no-op strata, with the
downstream nodes' mean distances), the cascades across perturbations in the shape of
Table 4, observational against interventional sigma at targetable edges, then the
bifurcation thresholds, the dose-response of adaptive ladders (:mod:`.adaptive`; only when
there is one) and the negative-control verdicts. Every estimate is shown with
its 95% interval and n, as ``campaign.json`` rounds it (6 decimals) and then to 3
decimals, so that the report of the estimates and of their JSON read back are the same
text; an undefined value is ``—``. Ids and parameters are code spans and every other text
of the campaign (node names, reasons) escaped (:mod:`.markup`): nothing in it can become
Markdown or HTML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from quiver._stats import DASH, Estimate, fmt_n, rounded

from .adaptive import adaptive_section
from .markdown import ARROW, _table, fmt, fmt_est
from .markup import md_code, md_text
from .summary import SummaryRow, control_replay_count, summary_rows

if TYPE_CHECKING:
    from quiver._interventional import (
        CampaignEstimates,
        NegativeControl,
        ObservationalEstimates,
        PerturbationEstimates,
        StratumEstimates,
        Threshold,
        ValidationRow,
    )

__all__ = ["interventional_report", "campaign_markdown", "fmt", "fmt_est"]

_RATES = (
    ("d_iter", "D_iter > 0"),
    ("d_shape", "D_shape > 0"),
    ("d_output", "D_output > 0"),
    ("d_output_only", "D_output-only"),
    ("d_struct", "D_struct > 0"),
)
_BETAS = (("beta_shape", "beta_shape"), ("beta_iter", "beta_iter"))


def _iter_story(c: CampaignEstimates) -> bool:
    """Whether D_iter has anything to say: a loop, or some pair whose call counts differed
    (:func:`~.findings.campaign_events`); without, its columns and rows are left out."""
    from .findings import campaign_events

    return any(key == "d_iter" for key, _, _ in campaign_events(c))


def _pid(p: PerturbationEstimates) -> str:
    return md_code(p.id)


def _yes_no(x: Any) -> str:
    return DASH if x is None else ("yes" if x else "no")


def _est(e: Estimate | None, *, signed: bool = False) -> str:
    """``value [lo, hi]`` as ``campaign.json`` writes it (``—`` when undefined)."""
    return DASH if e is None else fmt_est(e.as_dict("x"), "x", signed=signed)


def _value(e: Estimate | None) -> str:
    """The value alone, as ``campaign.json`` writes it."""
    return fmt(None if e is None else rounded(e.value))


def _cells(e: Estimate | None) -> list[str]:
    return [DASH, DASH] if e is None else [_est(e), fmt_n(e.n)]


# --------------------------------------------------------------------------- sections


def _header(c: CampaignEstimates) -> list[str]:
    perturbed = sum(p.counts.pairs for p in c.perturbations)
    return [
        "# QUIVER interventional report", "",
        f"**Campaign:** {len(c.perturbations)} perturbation(s), {fmt_n(perturbed)} perturbed pairs and "
        f"{fmt_n(control_replay_count(c))} control replays counted apart ({fmt_n(c.pairs)} pair rows in all); "
        f"observational baseline of {fmt_n(c.observational.n)} same-input pairs.",
        f"**Settings:** epsilon = {fmt(c.epsilon)}; 95% intervals from {fmt_n(c.resamples)} "
        f"bootstrap resamples of input groups (seed {fmt_n(c.seed)}); negative controls with "
        f"{fmt_n(c.permutations)} permutations at alpha = {fmt(c.alpha)} after Holm correction.",
        "",
        "Only pairs whose replay succeeded (status ok) enter the estimates. The *effective* stratum holds pairs "
        "where the perturbation changed the target's output, the *no-op* stratum those where it did not: the "
        "no-op pairs must look like the observational noise (the negative control).",
        "",
    ]


def _excess_cell(r: SummaryRow) -> str:
    e = r.excess
    if e.value is None:
        return DASH
    return fmt(e.value, signed=True) + (f" [{fmt(e.lo, signed=True)}, {fmt(e.hi, signed=True)}]"
                                        if e.lo is not None and e.hi is not None else "")


def _outcome_cell(o: Any) -> str:
    """The pass rate's change over the control replays' (``—``: no outcome effect)."""
    if o is None:
        return DASH
    d = o.difference
    lo, hi = d["ci"] or (None, None)
    return fmt(d["value"], signed=True) + (f" [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]" if lo is not None
                                           else "") + f" (n = {fmt_n(o.pass_rate['n'])})"


def _failed_cell(r: SummaryRow) -> str:
    reasons = "; ".join(f"{md_text(k)}: {fmt_n(v)}" for k, v in sorted(r.failures.by_reason.items()))
    return fmt_n(r.failures.count) + (f" ({reasons})" if reasons and r.failures.count else "")


def _glance(c: CampaignEstimates, raw: Mapping[str, Any] | None = None) -> list[str]:
    rows = summary_rows(c, raw)
    if not rows:
        return []
    outcome = {p.id: p.outcome for p in c.perturbations}
    with_outcome = any(o is not None for o in outcome.values())
    table = [[md_code(r.id), md_text(r.node), md_text(r.op), f"{fmt_n(r.pairs)} ({fmt_n(r.effective)} / "
              f"{fmt_n(r.noop)} / {fmt_n(r.failed)})", *([_outcome_cell(outcome[r.id])] if with_outcome else []),
              _excess_cell(r),
              DASH if r.beta_value is None else ("≤ " if r.beta_upper_bound else "") + fmt(r.beta_value),
              md_text(r.verdict), _failed_cell(r)] for r in rows]
    headers = ["perturbation", "node", "op", "pairs (effective / no-op / failed)",
               *(["pass rate over control [95% CI]"] if with_outcome else []),
               "D_shape excess over control [95% CI]", "beta_shape", "negative control", "failed replays (reason)"]
    return ["## At a glance", "",
            "*How to read this:* the excess is the effective stratum's D_shape rate minus that of the "
            "perturbation's control replays, with a 95% interval combined from the two rates' intervals (MOVER); "
            "beta_shape is the smallest change of the target that switched the path (≤: an upper bound). The "
            "plots are in `report.html`.", ""] + _table(headers, table, "lllr" + "r" * with_outcome + "rrll") + [""]


def _counts(p: PerturbationEstimates) -> str:
    n = p.counts
    return (
        f"{fmt_n(n.pairs)} pairs: {fmt_n(n.effective)} effective, {fmt_n(n.noop)} no-op, "
        f"{fmt_n(n.unstratified)} unstratified (ok), {fmt_n(n.diverged)} diverged, "
        f"{fmt_n(n.failed)} failed; {fmt_n(p.groups)} input groups."
    )


def _divergence(p: PerturbationEstimates, obs: ObservationalEstimates, story: bool) -> list[str]:
    eff, noop = p.stratum("effective"), p.stratum("noop")
    rows = [[label, *_cells(getattr(obs.rates, key)), *_cells(getattr(eff.rates, key)),
             *_cells(getattr(noop.rates, key))] for key, label in _RATES if story or key != "d_iter"]
    rows.append([f"d({md_text(p.node)}) (magnitude)", DASH, DASH, *_cells(eff.magnitude), *_cells(noop.magnitude)])
    for node in p.downstream:
        rows.append([f"mean d({md_text(node)})", *_cells(obs.mean_d.get(node)), *_cells(eff.mean_d.get(node)),
                     *_cells(noop.mean_d.get(node))])
    for node in p.downstream:
        rows.append([f"mean d({md_text(node)}) given D_shape > 0", DASH, DASH,
                     *_cells(eff.mean_d_given_shape.get(node)), *_cells(noop.mean_d_given_shape.get(node))])
    headers = ["metric", "observational [95% CI]", "n", "effective [95% CI]", "n", "no-op [95% CI]", "n"]
    return _table(headers, rows, "lrrrrrr")


def _perturbation(p: PerturbationEstimates, obs: ObservationalEstimates, story: bool) -> list[str]:
    params = json.dumps(p.params, sort_keys=True, ensure_ascii=False)
    ladder = f"; ladder {md_code(json.dumps(p.ladder, sort_keys=True))}" if p.ladder else ""
    lines = [f"### {_pid(p)}: {md_text(p.op)} at {md_text(p.node)}", "",
             f"Params {md_code(params)}{ladder}. {_counts(p)}", ""]
    return lines + _divergence(p, obs, story) + [""]


def _perturbations(c: CampaignEstimates) -> list[str]:
    lines = ["## Divergence by perturbation (Table 3)", "",
             "*How to read this:* each rate is the share of pairs that differed in that respect; the observational "
             "column is the noise of same-input reruns, the strata are recorded baseline against perturbed replay. "
             "The mean distances of the downstream nodes, also among pairs that took another path, show where the "
             "change travelled.", ""]
    if not c.perturbations:
        return lines + ["No perturbation in this campaign.", ""]
    story = _iter_story(c)
    for p in c.perturbations:
        lines += _perturbation(p, c.observational, story)
    return lines


def _cascade(stratum: StratumEstimates, nodes: Sequence[str]) -> str:
    parts = [f"{md_text(n)} {_value(stratum.mean_d_given_shape.get(n))}" for n in nodes]
    return ARROW.join(parts) if parts else DASH


def _cascades(c: CampaignEstimates) -> list[str]:
    if not c.perturbations:
        return []
    rows = []
    story = _iter_story(c)
    for p in c.perturbations:
        name = "effective" if p.stratum("effective").n else "noop"
        s = p.strata[name]
        rows.append([_pid(p), md_text(p.node), name, fmt_n(s.n), _est(s.rates.d_shape),
                     *([_est(s.rates.d_iter)] if story else []), _cascade(s, p.downstream)])
    headers = ["perturbation", "target", "stratum", "n", "D_shape [95% CI]", *(["D_iter [95% CI]"] if story else []),
               "cascade: mean d given D_shape > 0"]
    return ["## Cascades across perturbations (Table 4)", "",
            "*How to read this:* the same path-change rate can come from different mechanisms; the cascade column "
            "follows the downstream chain's mean distance among the pairs whose path changed (effective stratum, "
            "the no-op one when there is no effective pair).", "",
            *_table(headers, rows, f"lllrr{'r' * story}l"), ""]


def _envelope(v: ValidationRow) -> str:
    """``[lo, hi] (n N)`` of the natural range of d_i, as ``campaign.json`` writes it."""
    if v.envelope is None:
        return DASH
    lo, hi = (fmt(rounded(x)) for x in v.envelope)
    return f"[{lo}, {hi}] (n {fmt_n(v.n_envelope)})"


def _validation(c: CampaignEstimates) -> list[str]:
    from quiver._interventional import MIN_MATCHED_GROUPS, MIN_MATCHED_PAIRS

    rows = [
        [f"{md_text(v.source)}{ARROW}{md_text(v.target)}", _est(v.sigma_obs), fmt_n(v.sigma_obs.n),
         _est(v.sigma_int), fmt_n(v.sigma_int.n), _yes_no(v.agree), _envelope(v), *_cells(v.sigma_matched),
         _est(v.share_beyond), md_text(v.verdict or DASH)]
        for v in c.validation
    ]
    lines = ["## Observational against interventional sigma", "",
             "*How to read this:* at each edge out of a perturbed node, sigma estimated from natural reruns next to "
             "sigma under perturbation. *agree* compares all effective pairs; the *envelope* is the range of the "
             "source's distance d_i that natural reruns reach ([eps, max], over the pairs sigma obs rests on), and "
             "*sigma matched* pools the perturbed pairs whose d_i lies inside it. The *verdict* reads the gap: "
             "matched intervals that overlap (agree) are evidence that the observational estimate is not "
             "confounded, a gap inside the envelope is confounding, and an edge probed (almost) only beyond the "
             f"envelope (fewer than {MIN_MATCHED_PAIRS} matched pairs over {MIN_MATCHED_GROUPS} inputs) is a "
             "dormant risk natural runs do not show.", ""]
    headers = ["edge", "sigma obs [95% CI]", "n obs", "sigma int [95% CI]", "n int", "agree", "envelope of d_i",
               "sigma matched [95% CI]", "n matched", "share beyond [95% CI]", "verdict"]
    lines += (_table(headers, rows, "lrrrrlrrrrl") if rows else ["No targetable edge could be compared."])
    if c.validation_skipped:
        lines += ["", "Skipped edges:", ""]
        lines += [f"- {md_text(s.source)}{ARROW}{md_text(s.target)}: {md_text(s.reason)}"
                  for s in c.validation_skipped]
    return lines + [""]


def _beta(p: PerturbationEstimates, key: str) -> Threshold:
    return p.beta_shape if key == "beta_shape" else p.beta_iter


def _beta_row(p: PerturbationEstimates, key: str, label: str) -> list[str]:
    b = _beta(p, key)
    control = f"{_est(b.control_rate)} ({md_text(b.control or DASH)}, n = {fmt_n(b.control_rate.n)})"
    return [_pid(p), label, fmt(b.value), _est(b.raw_min), fmt_n(b.n), fmt_n(b.n_events),
            f"[{fmt(b.iqr[0])}, {fmt(b.iqr[1])}]" if b.iqr is not None else DASH,
            fmt(b.max_non_bifurcating), _yes_no(b.upper_bound), control, md_text(b.reason or "")]


def _bins(p: PerturbationEstimates, key: str, label: str) -> list[str]:
    b = _beta(p, key)
    if not b.bins:
        return []
    rows = [[str(x.bin), DASH if x.step is None else str(x.step), f"{fmt(x.lo)}–{fmt(x.hi)}", fmt_n(x.n),
             fmt_n(x.n_events), f"{fmt_n(x.inputs)} ({fmt_n(x.inputs_above_control)})", _est(x.rate),
             f"{_value(x.control_rate)} ({md_text(x.control or DASH)})", _est(x.excess, signed=True),
             _yes_no(x.qualifies)]
            for x in b.bins]
    headers = ["bin", "step", "magnitudes", "n", "events", "inputs (above control)", "rate [95% CI]", "control rate",
               "minus control [95% CI]", "qualifies"]
    title = f"{_pid(p)} {label} bins ({md_text(b.bin_rule or DASH)}):"
    return [title, ""] + _table(headers, rows, "rrlrrrrlrl") + [""]


def _betas(c: CampaignEstimates) -> list[str]:
    perts = c.perturbations
    if not perts:
        return []
    story = _iter_story(c)
    betas = [(key, label) for key, label in _BETAS if story or key != "beta_iter"]
    rows = [_beta_row(p, key, label) for p in perts for key, label in betas]
    headers = ["perturbation", "beta", "value", "raw min [95% CI]", "n (effective)", "events", "IQR of events",
               "max non-bifurcating", "upper bound", "control rate", "note"]
    lines = ["## Bifurcation thresholds", "",
             "*How to read this:* value is the smallest target change in the first magnitude bin whose path-change "
             "(or iteration-change) rate clearly exceeds the control's (by default the observational noise of the "
             "bin's own inputs); raw min is the smallest change that "
             "changed the path at all, noise included; an upper bound means fewer than 10 effective pairs probed "
             "below the value.", ""]
    lines += _table(headers, rows, "llrrrrrrlrl") + [""]
    controls = [(p, p.control_replays) for p in perts if p.control_replays is not None]
    if controls:
        lines += ["Control replays (the target as recorded, or re-run unchanged; downstream live): the noise each "
                  "bin is held against, trace by trace.", ""]
        lines += _table(["perturbation", "control", "replays", "traces", "D_shape rate [95% CI]",
                         *(["D_iter rate [95% CI]"] if story else [])],
                        [[_pid(p), md_code(r.id), fmt_n(r.n), fmt_n(r.traces), _est(r.rates.d_shape),
                          *([_est(r.rates.d_iter)] if story else [])] for p, r in controls],
                        "llrrr" + "r" * story) + [""]
    for p in perts:
        for key, label in betas:
            lines += _bins(p, key, label)
    return lines


def _verdict(nc: NegativeControl) -> str:
    if nc.passed is None:
        return f"not tested: {md_text(nc.reason or 'no result')}"
    if nc.passed:
        return "passed"
    return "FAILED: " + ", ".join(md_text(n) for n in nc.rejected)


def _negative_controls(c: CampaignEstimates) -> list[str]:
    perts = c.perturbations
    if not perts:
        return []
    lines = ["## Negative controls", "",
             "*How to read this:* per downstream node, whether the no-op pairs drift more than same-input reruns "
             "(one-sided permutation test, Holm-corrected across the nodes); a failure names the nodes whose no-op "
             "distances sit above the noise floor.", ""]
    summary = [[_pid(p), _verdict(p.negative_control), fmt(p.negative_control.statistic, signed=True),
                fmt(p.negative_control.p_value)] for p in perts]
    lines += _table(["perturbation", "verdict", "largest statistic", "smallest p (Holm)"], summary, "llrr") + [""]
    for p in perts:
        nodes = p.negative_control.nodes
        if not nodes:
            continue
        rows = [[md_text(n), fmt(r.mean_noop), fmt_n(r.n_noop), fmt(r.mean_obs), fmt_n(r.n_obs),
                 fmt(r.statistic, signed=True), fmt(r.p_value), fmt(r.p_holm),
                 _yes_no(r.rejects) if r.p_value is not None else md_text(r.reason or DASH)]
                for n, r in nodes.items()]
        headers = ["node", "mean d no-op", "n", "mean d obs", "n", "no-op − obs", "p", "p (Holm)", "rejects"]
        lines += [f"{_pid(p)}:", ""] + _table(headers, rows, "lrrrrrrrl") + [""]
    return lines


_SECTIONS = (_perturbations, _cascades, _validation, _betas, adaptive_section, _negative_controls)


def interventional_report(campaign: CampaignEstimates | Mapping[str, Any]) -> str:
    """The Markdown report of :func:`~quiver._interventional.campaign_estimates`' result:
    the header, what was found (:mod:`.findings`), one summary row per perturbation
    (:mod:`.summary`), then the tables.

    Args:
        campaign: The campaign estimates, or ``campaign.json`` read back (read with
            ``CampaignEstimates.from_json``; what the typed estimates do not carry, such
            as each perturbation's ``failures``, is read from it).

    Returns:
        The report text, ending with a newline.

    Raises:
        CampaignFormatError: ``campaign`` is a mapping that is not a ``campaign.json``.
    """
    raw: Mapping[str, Any] | None = None
    if isinstance(campaign, Mapping):
        from quiver._interventional import CampaignEstimates

        raw = campaign
        campaign = CampaignEstimates.from_json(campaign)
    from .findings import campaign_findings, findings_markdown

    found = campaign_findings(raw if raw is not None else campaign.to_json(), campaign)
    lines = _header(campaign) + findings_markdown(found) + _glance(campaign, raw)
    for section in _SECTIONS:
        lines += section(campaign)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


_IMAGE = re.compile(r"(?m)^(!\[[^\]]*\]\()([^)/][^)]*)(\))$")


def campaign_markdown(campaign: CampaignEstimates | Mapping[str, Any], observational: str,
                      folder: str = "observational") -> str:
    """A campaign's ``report.md``: :func:`interventional_report`, then the observational
    report (``observational``, the text of ``FOLDER/report.md``) with its image links
    made relative to the campaign's folder (``ratios.png`` -> ``observational/ratios.png``)."""
    relinked = _IMAGE.sub(lambda m: f"{m.group(1)}{folder}/{m.group(2)}{m.group(3)}", observational)
    return interventional_report(campaign) + "\n\n---\n\n" + relinked
