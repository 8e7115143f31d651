"""The figures of a campaign's page (:func:`~.pages.campaign_page`), each with its
caption (its terms defined, :mod:`.glossary`):

* :func:`validation_figure`: observational against interventional sigma, one row per
  edge, both with their intervals, the envelope verdict written and coloured;
* :func:`dose_figures`: the dose-response of each perturbation probed at several
  magnitudes (quantile bins or ladder steps);
* :func:`single_figure`: the perturbations probed at one magnitude, as estimates (the
  path's excess over control at that magnitude), not one-point curves;
* :func:`forest_figure` and :func:`cascade_figure`: the path-change rates per stratum
  against the observational rate, and how far each perturbation's change travelled;
* :func:`adaptive_figures`: the adaptive ladders' curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from quiver._stats import fmt, fmt_n

from . import svg
from .adaptive import adaptive_charts
from .findings import event_effects
from .glossary import term
from .markup import Markup, anchor, element

if TYPE_CHECKING:
    from quiver._interventional import CampaignEstimates, PerturbationEstimates
    from quiver._stats import Estimate

__all__ = ["figure", "plots", "validation_figure", "dose_figures", "single_figure", "forest_figure",
           "cascade_figure", "adaptive_figures", "VERDICT_COLORS"]

VERDICT_COLORS = {"agree": "#1a7f37", "beyond the operating envelope": svg.ORANGE,
                  "disagree inside the envelope": svg.RED, "too few interventional pairs": svg.GREY}


def figure(chart: Markup, caption: Markup | str, *, id: str | None = None) -> Markup:
    """A chart and its caption."""
    return element("figure", chart, element("figcaption", caption), id=id)


def plots(figures: Sequence[Markup]) -> Markup:
    return element("div", Markup("").join(figures), class_="plots")


def _sentence(text: str) -> str:
    """``text`` as a sentence of its own: its first letter a capital, a full stop at its end."""
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


# --------------------------------------------------------------------------- validation


def _mark(e: Estimate, shape: str, color: str) -> svg.Mark:
    lo, hi = e.ci if e.ci is not None else (None, None)
    return svg.Mark(e.value, lo, hi, shape, color)


def validation_figure(c: CampaignEstimates) -> Markup | None:
    """Observational against interventional sigma per edge (None: no edge compared)."""
    if not c.validation:
        return None
    rows = []
    for v in c.validation:
        obs, intv = v.sigma_obs, v.sigma_int
        rows.append(svg.Paired(
            f"{v.source} → {v.target}",
            (_mark(obs, "square", svg.GREY), _mark(intv, "circle", svg.BLUE)),
            note=v.verdict or "undecided", note_color=VERDICT_COLORS.get(v.verdict or "", svg.INK)))
    chart = svg.paired_chart("validation", "Edge sensitivity sigma: natural reruns against intervention", rows,
                             axis="sigma = mean d_j / d_i", line=1.0, line_label="σ = 1",
                             legend=[("square", svg.GREY, "sigma obs (same-input reruns), 95% CI"),
                                     ("circle", svg.BLUE, "sigma int (perturbed replays), 95% CI")])
    caption = Markup("Per edge out of a perturbed node, {} (from natural reruns) and {} (from the perturbed pairs), "
                     "with their 95% intervals; right of each row the verdict: <em>agree</em> when the intervals "
                     "of the pairs inside the {} overlap, <em>beyond the operating envelope</em> when the "
                     "perturbation was (almost) only probed beyond the changes natural runs show (a risk they "
                     "cannot see), <em>disagree inside the envelope</em> when the observational estimate is "
                     "confounded. Validating the observational estimates is one of the engine's two "
                     "purposes.").format(term("sigma obs"), term("sigma int"), term("envelope"))
    return figure(chart, caption, id="validation")


# --------------------------------------------------------------------------- dose-response


def _dose(p: PerturbationEstimates) -> Markup | None:
    b = p.beta_shape
    if len(b.bins) < 2:
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
    caption = Markup("Each point is a {} ({} rate of its pairs), placed {}, with its 95% interval; a filled circle "
                     "is a {} whose {} over its own traces' control qualifies; the dotted red line is {}. {}").format(
        term("ladder step" if ladder else "quantile bin"), term("D_shape"), where, unit, term("excess"),
        term("beta_shape"), _sentence(b.reason or ""))
    return figure(chart, caption, id=anchor("dose", p.id))


def dose_figures(c: CampaignEstimates) -> list[Markup]:
    """The dose-response of each perturbation with two magnitude bins or more."""
    return [f for p in c.perturbations if (f := _dose(p)) is not None]


def single_figure(c: CampaignEstimates) -> Markup | None:
    """The perturbations probed at a single magnitude: their path excess over control at
    it (None: there is none)."""
    rows = []
    for p in c.perturbations:
        b = p.beta_shape
        if len(b.bins) != 1:
            continue
        shape = event_effects(p)[0]
        rows.append(svg.Interval(f"{p.id} (d_i = {fmt(b.bins[0].lo)})", shape.value, shape.lo, shape.hi,
                                 shape="circle" if b.bins[0].qualifies else "square",
                                 note=f"n = {fmt_n(shape.rate.n)}"))
    if not rows:
        return None
    chart = svg.interval_chart("single", "Perturbations at one magnitude: path change beyond control", rows,
                               axis="D_shape excess over control", line=0.0, line_label="control", lo=-0.2, hi=1.0,
                               legend=[("circle", svg.BLUE, "excess qualifies"),
                                       ("square", svg.BLUE, "does not qualify")])
    caption = Markup("Each of these perturbations changes its target by one size ({}) only, so there is no curve to "
                     "draw: the mark is its {} over its {} at that size, with its 95% interval ({}). Its {} is at "
                     "most that size (≤).").format(term("d_i"), term("excess"), term("control replays"),
                                                   term("MOVER"), term("beta_shape"))
    return figure(chart, caption, id="single")


def adaptive_figures(c: CampaignEstimates) -> list[Markup]:
    """The dose-response curves of the adaptive ladders (nothing when there is none)."""
    charts = adaptive_charts(c)
    if not charts:
        return []
    return [Markup('<h3 id="adaptive">Adaptive ladders: excess over controls by dose</h3>'),
            plots([figure(chart, caption) for chart, caption in charts])]


# --------------------------------------------------------------------------- rates and cascades


def forest_figure(c: CampaignEstimates) -> Markup:
    rows = []
    for p in c.perturbations:
        strata: tuple[tuple[Literal["effective", "noop"], str], ...] = (("effective", "circle"), ("noop", "square"))
        for name, shape in strata:
            est = p.stratum(name).rates.d_shape
            rows.append(svg.Interval(f"{p.id} ({'no-op' if name == 'noop' else name})", est.value,
                                     est.ci[0] if est.ci else None, est.ci[1] if est.ci else None, shape=shape,
                                     color=svg.BLUE if name == "effective" else svg.ORANGE,
                                     note=f"n = {fmt_n(est.n)}"))
    obs = c.observational.rates.d_shape
    chart = svg.interval_chart(
        "forest", "D_shape rate by perturbation against the observational rate", rows, axis="P(D_shape > 0)",
        band=obs.ci, band_label=f"observational 95% CI (n = {fmt_n(obs.n)})", line=obs.value,
        line_label=f"observational {fmt(obs.value)}", lo=0.0, hi=1.0,
        legend=[("circle", svg.BLUE, "effective stratum"), ("square", svg.ORANGE, "no-op stratum")])
    caption = Markup("Share of pairs whose {} changed ({}), per perturbation and {}, with 95% intervals; the hatched "
                     "band and dashed line are same-input reruns without perturbation.").format(
        term("path"), term("D_shape"), term("stratum"))
    return figure(chart, caption, id="forest")


def cascade_figure(c: CampaignEstimates, order: Sequence[str]) -> Markup:
    values: dict[tuple[str, str], float | None] = {}
    nodes: list[str] = []
    rows = []
    for p in c.perturbations:
        name: Literal["effective", "noop"] = "effective" if p.stratum("effective").n else "noop"
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
    caption = Markup("The {}: mean distance of each node downstream of the target (0 same, 1 entirely different; "
                     "{} stratum, the no-op one when there is no effective pair); · marks a node not downstream of "
                     "that target.").format(term("cascade"), term("effective"))
    return figure(chart, caption, id="cascade")
