"""The campaign page's "At a glance" table: one row per perturbation.

Each row says what the perturbation did (its target and operator), how many pairs it
made by stratum, the change of the pass rate over its control replays' (with outcome
checks), the event it moved most beyond its control replays
(:func:`~.findings.strongest_event`) and the excess of each event (the path, the loop
iterations (the call counts without a loop; no column when no pair's call counts
differed), which nodes run, some node's output) with its 95% interval, its
bifurcation threshold and its negative control. Every heading is a term with its
definition (:mod:`.glossary`); every number is in a ``data-`` attribute as
``campaign.json`` gives it, for programs that read the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from quiver._stats import DASH, fmt, fmt_n

from .findings import Events, campaign_events, event_effects, perturbation_anchor, strongest_event
from .glossary import term
from .html import cell
from .markup import Markup, element
from .summary import SummaryRow

if TYPE_CHECKING:
    from quiver._interventional import CampaignEstimates, PerturbationEstimates

    from .findings import EventEffect

__all__ = ["glance_table", "EVENT_FIELDS", "EVENT_HEADS"]

EVENT_FIELDS = {"d_shape": "excess", "d_iter": "excess_iter", "d_struct": "excess_struct", "d_output": "excess_output"}
"""The ``data-field`` of each event's excess cell (``excess`` is the path's, as before)."""
EVENT_HEADS = {"d_shape": ("path", "D_shape"), "d_iter": ("loop iterations", "D_iter"),
               "d_struct": ("nodes run", "D_struct"), "d_output": ("some node's output", "D_output")}


def _ci(lo: float | None, hi: float | None) -> str:
    return f"[{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]" if lo is not None and hi is not None else ""


def _excess_cell(e: EventEffect, strongest: bool) -> Markup:
    value = element("strong" if strongest else "span", fmt(e.value, signed=True) if e.value is not None else DASH)
    shown = Markup("{}<br>{}").format(value, element("span", _ci(e.lo, e.hi), class_="ci"))
    return cell(shown, field=EVENT_FIELDS[e.key], value=e.value, num=True,
                extra={"lo": e.lo, "hi": e.hi, "rate": e.rate.value,
                       "control-rate": None if e.control is None else e.control.value})


def _pairs_cell(r: SummaryRow, p: PerturbationEstimates) -> Markup:
    parts = [f"{fmt_n(r.effective)} effective", f"{fmt_n(r.noop)} no-op"]
    if p.counts.not_applied:
        parts.append(f"{fmt_n(p.counts.not_applied)} not applied")
    if r.failures.count:
        reasons = "; ".join(f"{k}: {fmt_n(v)}" for k, v in sorted(r.failures.by_reason.items()))
        parts.append(f"{fmt_n(r.failures.count)} failed" + (f" ({reasons})" if reasons else ""))
    return cell(Markup("{}<br>{}").format(element("strong", fmt_n(r.pairs)), element("span", ", ".join(parts),
                                                                                       class_="ci")),
                field="pairs", value=r.pairs,
                extra={"effective": r.effective, "noop": r.noop, "failed": r.failed,
                       "not-applied": p.counts.not_applied, "failures": r.failures.count,
                       "by-reason": dict(r.failures.by_reason)})


def _head_of(key: str, events: Events) -> tuple[str, str]:
    """The column's heading: the event as the campaign speaks of it (D_iter: the loop
    iterations or the call counts), its term."""
    what, name = EVENT_HEADS[key]
    said = next((w for k, _, w in events if k == key), what)
    return (what if key != "d_iter" else said.removeprefix("the ")), name


def _strongest_cell(p: PerturbationEstimates, events: Events) -> Markup:
    top = strongest_event(p, events)
    if top is None:
        return cell(DASH, field="strongest", value=None)
    what, name = _head_of(top.key, events)
    text = Markup("{} ({})").format(element("strong", "values only" if top.key == "d_output" else what),
                                    term(name))
    return cell(text, field="strongest", value=top.name, extra={"excess": top.value, "lo": top.lo, "hi": top.hi})


def _beta_cell(r: SummaryRow) -> Markup:
    text = ("none" if r.beta_reason else DASH) if r.beta_value is None else \
        ("≤ " if r.beta_upper_bound else "") + fmt(r.beta_value)
    return cell(text, field="beta_shape", value=r.beta_value, num=True, extra={"upper-bound": r.beta_upper_bound},
                title=r.beta_reason)


def _outcome_cell(p: PerturbationEstimates) -> Markup:
    """The change of the pass rate over the control replays', with its interval."""
    o = p.outcome
    if o is None:
        return cell(DASH, field="pass_rate_change", value=None)
    d = o.difference
    lo, hi = d["ci"] or (None, None)
    shown = Markup("{}<br>{}").format(element("strong" if o.lowers else "span", fmt(d["value"], signed=True)),
                                      element("span", _ci(lo, hi), class_="ci"))
    return cell(shown, field="pass_rate_change", value=d["value"], num=True,
                extra={"lo": lo, "hi": hi, "pass-rate": o.pass_rate["value"],
                       "control-pass-rate": o.control_pass_rate["value"], "n": o.pass_rate["n"]})


def _row(r: SummaryRow, p: PerturbationEstimates, events: Events, outcomes: bool = False) -> Markup:
    top = strongest_event(p, events)
    effects = event_effects(p, events)
    what = Markup("{}<br>{} {}").format(element("strong", r.id), element("code", r.node), element("span", r.op,
                                                                                                  class_="ci"))
    tds = [cell(what, field="id", value=r.id, extra={"node": r.node, "op": r.op}),
           _pairs_cell(r, p), _strongest_cell(p, events),
           *([_outcome_cell(p)] if outcomes else []),
           *(_excess_cell(e, top is not None and e.key == top.key) for e in effects),
           _beta_cell(r), cell(r.verdict, field="negative_control", value=r.passed)]
    bad = r.passed is False or r.failures.count > 0 or p.counts.not_applied > 0
    return element("tr", Markup("").join(tds), data_perturbation=r.id, id=perturbation_anchor(r.id),
                   class_="bad" if bad else None)


def _head(events: Events, outcomes: bool = False) -> Markup:
    first = [element("th", "perturbation, target, operator", rowspan=2),
             element("th", Markup("pairs: {}, {}").format(term("effective"), term("no-op")), rowspan=2),
             element("th", "moved most", rowspan=2),
             *([element("th", Markup("pass rate over control [{}]").format(term("95% CI")), rowspan=2)]
               if outcomes else []),
             element("th", Markup("{} over control [{}]").format(term("excess"), term("95% CI")),
                     colspan=len(events), class_="group"),
             element("th", term("beta_shape"), rowspan=2), element("th", term("negative control"), rowspan=2)]
    second = [element("th", Markup("{} ({})").format(what, term(name))) for key, _, _ in events
              for what, name in [_head_of(key, events)]]
    return element("thead", element("tr", Markup("").join(first)), element("tr", Markup("").join(second)))


def glance_table(campaign: CampaignEstimates, rows: Sequence[SummaryRow]) -> Markup:
    """The table, one row per perturbation of ``campaign`` (``rows``: its summary rows)."""
    by_id: dict[str, Any] = {p.id: p for p in campaign.perturbations}
    events = campaign_events(campaign)
    outcomes = any(p.outcome is not None for p in campaign.perturbations)
    body = Markup("").join(_row(r, by_id[r.id], events, outcomes) for r in rows)
    return element("table", _head(events, outcomes), element("tbody", body), id="summary", class_="glance")
