"""What was found, first: plain sentences made from the estimates, each with its number,
its interval and where its evidence is.

A :class:`Finding` is one sentence as a sequence of parts (text, and names written as
code), the numbers it states in :attr:`Finding.data` (exactly as the JSON it was made
from holds them, so a test or a program can check them), its kind and the ``id`` of
the part of the page that shows the evidence. It is written three ways: plain text
for the console (:meth:`Finding.text`), Markdown (:meth:`Finding.markdown`) and HTML
(:func:`findings_html`), names escaped on the one way in (:mod:`.markup`).

A campaign's findings (:func:`campaign_findings`), in the order a user deciding whether
a change is safe reads them:

1. problems first: replays whose perturbation was not applied, requests the replay
   contract does not account for, failed replays, failed negative controls, llm nodes
   whose requests the engine did not see;
1b. per perturbation, how far it moves the pass rate beyond its control replays, when
   the spec has outcome checks (:mod:`.findings_outcome`): whether answers stay right;
2. per perturbation, the event it moved most beyond its control replays: the path
   (D_shape), the loop iterations (D_iter; "the call counts" in a pipeline without a
   loop, and left out when no pair's call counts differed), which nodes run (D_struct)
   or the final output (D_output), as the excess of its effective stratum's rate over
   its control's (MOVER interval, :mod:`.summary`), with the path's excess beside it
   when another event is the strongest, and the inputs where it moved the path most
   when the effect is concentrated there (the per-input tests of ``campaign.json``);
3. the thresholds found: from which change of its target the path changes beyond
   control, and what the change below it does;
4. the check of the observational estimates: on how many edges observational and
   interventional sensitivity agree, and which edges were probed beyond what natural
   runs show.

The gate's, the analysis', the comparison's and the attribution's are in
:mod:`.findings_more`.

**Absence is an equivalence claim.** A sentence says an effect is absent ("leaves the
path as its control replays do", "as often as under control") only when the
difference's 95% interval lies inside the stated equivalence margin (``campaign.json``'s
``equivalence_margin``, the spec's ``analysis.equivalence_margin``, 0.05 by default):
the two one-sided tests of a TOST at 2.5% each. Otherwise it says the difference is
not distinguishable from control at its n, with its interval, and how many replays
would halve that interval (its width shrinks as 1 / sqrt(n): four times as many).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quiver._stats import fmt, fmt_n

from .markup import Markup, anchor, element, md_code, md_text, visible
from .summary import excess

if TYPE_CHECKING:
    from quiver._interventional import CampaignEstimates, PerturbationEstimates
    from quiver._stats import Estimate

__all__ = ["Finding", "EVENTS", "campaign_findings", "findings_html", "findings_markdown", "findings_text",
           "findings_console",
           "strongest_event", "EventEffect", "event_effects", "perturbation_anchor", "action", "pct", "Sentence",
           "code_list", "PATH_EVENTS", "DEFAULT_MARGIN", "inside_margin", "undecided", "campaign_events",
           "iteration_words", "profile_iterations_told"]

EVENTS: tuple[tuple[str, str, str], ...] = (
    ("d_shape", "D_shape", "the path"),
    ("d_iter", "D_iter", "the loop iterations"),
    ("d_struct", "D_struct", "which nodes run"),
    ("d_output", "D_output", "some node's output"),
)
"""(attribute of the rates, name in campaign.json, what it is in a sentence), in the
order a tie between two events is broken. D_output (some node's output differs, the
target's own included) holds for every effective pair by definition: it is the event
a perturbation moved most only when it moved none of the path events beyond its
control (it changed values only)."""
PATH_EVENTS = ("d_shape", "d_iter", "d_struct")
DEFAULT_MARGIN = 0.05
"""The equivalence margin of a file written before it held one."""
Events = tuple[tuple[str, str, str], ...]

Part = tuple[str, str]
"""``("text", s)`` or ``("code", s)``: a piece of a sentence."""


@dataclass(frozen=True)
class Finding:
    """One sentence of what was found.

    Attributes:
        kind: ``problem``, ``effect``, ``threshold``, ``validation``, ``verdict`` or ``note``.
        parts: The sentence: text, and names written as code.
        link: The ``id`` of the page's part that shows the evidence (None: none).
        data: The numbers the sentence states, as the JSON holds them (``value``, ``lo``,
            ``hi``, ``n``), and what they are about (``perturbation``, ``event``, ...).
    """

    kind: str
    parts: tuple[Part, ...]
    link: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The sentence as plain text (names and reasons made visible: one line, no control character)."""
        return "".join(visible(s) for _, s in self.parts)

    def markdown(self) -> str:
        """The sentence as Markdown: names as code spans, the rest escaped."""
        out = [md_code(s) if k == "code" else md_text(s) for k, s in self.parts]
        return "".join(x if i == 0 or not x.startswith("&#32;") else " " + x[5:] for i, x in enumerate(out))

    def html(self) -> Markup:
        """The sentence as HTML, with a link to its evidence."""
        body = Markup("").join(element("code", s) if k == "code" else s for k, s in self.parts)
        more = element("a", "evidence", href=f"#{self.link}", class_="evidence") if self.link else Markup("")
        attrs = {f"data-{k}": _attr(v) for k, v in self.data.items()}
        return element("li", body, " ", more, attrs={"class": f"finding finding-{self.kind}", **attrs})


def _attr(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


class Sentence:
    """A sentence built part by part."""

    def __init__(self) -> None:
        self.parts: list[Part] = []

    def t(self, text: str) -> Sentence:
        self.parts.append(("text", text))
        return self

    def c(self, name: object) -> Sentence:
        self.parts.append(("code", str(name)))
        return self

    def done(self, kind: str, link: str | None = None, **data: Any) -> Finding:
        return Finding(kind, tuple(self.parts), link, data)


def findings_text(findings: Sequence[Finding]) -> list[str]:
    """The sentences for the console, one a line, each starting with ``* ``."""
    return [f"* {f.text()}" for f in findings]


def findings_console(findings: Sequence[Finding], what: str, report: object) -> list[str]:
    """The lines that end a command's output: ``What WHAT found:``, the sentences, and
    where the report is."""
    head = [f"What {what} found:", *findings_text(findings)] if findings else [f"{what[0].upper()}{what[1:]} found "
                                                                                 "nothing to report."]
    return [*head, f"Open the report: {report}"]


def findings_markdown(findings: Sequence[Finding]) -> list[str]:
    """``## What was found`` and the sentences as a Markdown list (nothing when none)."""
    if not findings:
        return []
    return ["## What was found", "", *(f"- {f.markdown()}" for f in findings), ""]


def findings_html(findings: Sequence[Finding]) -> Markup:
    """The sentences as the page's first list (``<ul id="findings">``)."""
    items = Markup("").join(f.html() for f in findings) or element("li", "Nothing to report.")
    return element("section", element("h2", "What was found"), element("ul", items, id="findings"),
                   class_="findings")


def pct(x: float | None) -> str:
    """A share as a whole percentage (``88%``; ``<1%`` for a small non-zero one)."""
    if x is None:
        return "—"
    v = abs(x) * 100
    return "<1%" if 0 < v < 0.5 else f"{v:.0f}%"


def _ci(lo: float | None, hi: float | None) -> str:
    return f" [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]" if lo is not None and hi is not None else ""


def inside_margin(lo: float | None, hi: float | None, margin: float) -> bool:
    """Whether the interval ``[lo, hi]`` lies inside ``[-margin, +margin]``: the two
    one-sided tests of equivalence (TOST) both reject."""
    return lo is not None and hi is not None and -margin <= lo and hi <= margin


def undecided(n: int | None, value: float | None, lo: float | None, hi: float | None, margin: float, unit: str,
              against: str = "control") -> str:
    """``not distinguishable from control at n = 225 effective pairs (+0.018 [-0.052, +0.089],
    wider than the equivalence margin ±0.05; 4x the replays, n = 900, would halve the
    interval)``."""
    more = f"; 4x the replays, n = {fmt_n(4 * n)}, would halve the interval" if n else ""
    return (f"not distinguishable from {against} at n = {fmt_n(n)} {unit} ({fmt(value, signed=True)}{_ci(lo, hi)}, "
            f"wider than the equivalence margin ±{margin:g}{more})")


def iteration_words(loop: bool, differed: bool) -> str | None:
    """What D_iter is called: the loop iterations of a pipeline with a loop; the call
    counts of one without, when some pair's calls per node differed beyond which nodes
    ran (a branch taken runs other nodes, which D_struct and the path already say);
    nothing to say otherwise."""
    return "the loop iterations" if loop else "the call counts" if differed else None


def profile_iterations_told(p: Mapping[str, Any]) -> bool:
    """Whether D_iter says anything in an analysis (its ``profile.json``): a loop in its
    graph, or same-input pairs whose calls per node differed with the same nodes run (a
    D_iter rate above the D_struct rate); a profile without its graph keeps it."""
    graph, div = p.get("graph"), p.get("divergence")
    if not isinstance(graph, Mapping) or not isinstance(div, Mapping):
        return True
    rate, struct = div.get("D_iter"), div.get("D_struct")
    differed = not isinstance(struct, (int, float)) or (isinstance(rate, (int, float)) and rate > struct + 1e-9)
    return iteration_words(bool(graph.get("loop")), differed) is not None


def _iterations_differed(c: CampaignEstimates) -> bool:
    """Whether some pair of the campaign (observational, perturbed or control) had its
    call counts differ with the same nodes run: D_struct implies D_iter, so a D_iter
    rate above the D_struct rate of the same pairs."""
    blocks = [c.observational.rates, *(s.rates for p in c.perturbations for s in p.strata.values()),
              *(p.control_replays.rates for p in c.perturbations if p.control_replays is not None)]
    return any((r.d_iter.value or 0.0) > (r.d_struct.value or 0.0) + 1e-9 for r in blocks)


def campaign_events(c: CampaignEstimates) -> Events:
    """:data:`EVENTS` as the campaign's sentences speak of them: D_iter as the loop
    iterations or the call counts (:func:`iteration_words`), or left out when its
    pipeline has no loop and no pair's call counts differed (no D_iter story to tell)."""
    words = iteration_words(bool(c.loop), _iterations_differed(c))
    return tuple((k, n, (words or w) if k == "d_iter" else w) for k, n, w in EVENTS if k != "d_iter" or words)


def perturbation_anchor(pid: str) -> str:
    """The ``id`` of a perturbation's row in the page's summary table."""
    return anchor("perturbation", pid)


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class EventEffect:
    """One event's excess over control for a perturbation.

    Attributes:
        key: ``d_shape``, ``d_iter``, ``d_struct`` or ``d_output``.
        name: Its name in campaign.json (``D_shape``, ...).
        what: What it is in a sentence (``the path``).
        rate: The effective stratum's rate.
        control: The control replays' rate (None: no control).
        value, lo, hi: The excess and its MOVER interval (None: undefined).
    """

    key: str
    name: str
    what: str
    rate: Estimate
    control: Estimate | None
    value: float | None
    lo: float | None
    hi: float | None

    @property
    def clear(self) -> bool:
        """Whether the excess's interval lies above 0."""
        return self.lo is not None and self.lo > 0


def event_effects(p: PerturbationEstimates, events: Events = EVENTS) -> list[EventEffect]:
    """The events' excesses of ``p`` over its control replays, in :data:`EVENTS` order
    (``events``: those the campaign speaks of, :func:`campaign_events`)."""
    rates = p.stratum("effective").rates
    controls = p.control_replays.rates if p.control_replays is not None else None
    out = []
    for key, name, what in events:
        rate = getattr(rates, key)
        control = getattr(controls, key) if controls is not None else None
        e = excess(rate, control)
        out.append(EventEffect(key, name, what, rate, control, e.value, e.lo, e.hi))
    return out


def strongest_event(p: PerturbationEstimates, events: Events = EVENTS) -> EventEffect | None:
    """The event ``p`` moved most beyond its control: of the path events (D_shape,
    D_iter, D_struct) whose excess's interval lies above 0, the largest excess (ties in
    :data:`EVENTS` order); D_output when there is none (values only); None when no
    excess is defined."""
    effects = [e for e in event_effects(p, events) if e.value is not None]
    clear = [e for e in effects if e.key in PATH_EVENTS and e.clear]
    order = [k for k, _, _ in EVENTS]
    if clear:
        return max(clear, key=lambda e: (e.value, -order.index(e.key)))
    return next((e for e in effects if e.key == "d_output"), None)


def _set_text(params: Any) -> str:
    if isinstance(params, Mapping) and isinstance(params.get("set"), Mapping) and len(params["set"]) == 1:
        [(name, value)] = params["set"].items()
        return f"{name} = {value if not isinstance(value, bool) else str(value).lower()}"
    return ""


def action(p: PerturbationEstimates) -> Sentence:
    """The start of a sentence saying what ``p`` does (``Setting signal_analysis.x = true``)."""
    s, params, op = Sentence(), p.params if isinstance(p.params, Mapping) else {}, p.op or "replay"
    if op == "override" and (what := _set_text(params)):
        name, _, value = what.partition(" = ")
        return s.t("Setting ").c(f"{p.node}.{name}").t(f" = {value}")
    if op in ("categorical_flip", "bool_flip") and isinstance(params.get("field"), str):
        return s.t("Flipping ").c(f"{p.node}.{params['field']}")
    if op == "prompt_swap":
        return s.t("Swapping the prompt of ").c(p.node)
    if op == "param_change":
        return s.t("Changing the model parameters of ").c(p.node)
    if op == "list_edit":
        return s.t("Editing the lists of ").c(p.node)
    return s.t(f"{op} at ").c(p.node)


def _effect(p: PerturbationEstimates, margin: float, events: Events) -> Finding | None:
    effects = event_effects(p, events)
    top = strongest_event(p, events)
    eff = p.stratum("effective")
    link = perturbation_anchor(p.id)
    if eff.n == 0:
        if not p.counts.noop:  # nothing ran to an end: the failures' finding says why
            return None
        return (action(p).t(" (").c(p.id).t(f") never changed its target: all {fmt_n(p.counts.noop)} ok pairs were "
                                             "no-op").done("effect", link, perturbation=p.id, event=None, value=None))
    if top is None:
        return None
    shape = effects[0]
    same = inside_margin(shape.lo, shape.hi, margin)
    s = action(p).t(" (").c(p.id).t(") ")
    if top.key == "d_output" and same:
        s.t(f"leaves the path as its control replays do ({fmt(shape.value, signed=True)}{_ci(shape.lo, shape.hi)}, "
            f"inside the equivalence margin ±{margin:g}); it changes values only: {_estimate(top)}")
    elif top.key == "d_output":
        s.t(f"changes values: {_estimate(top)}; on the path it is "
            + undecided(shape.rate.n, shape.value, shape.lo, shape.hi, margin, "effective pairs"))
    else:
        s.t(f"changes {top.what} in {pct(top.value)} of traces beyond control ({_estimate(top)})")
        if top.key != "d_shape" and shape.value is not None:
            s.t(f"; {shape.what} in {pct(shape.value)} ({fmt(shape.value, signed=True)}{_ci(shape.lo, shape.hi)}"
                + ("" if shape.clear else f", inside the equivalence margin ±{margin:g}" if same
                   else f", not distinguishable from control at n = {fmt_n(shape.rate.n)}") + ")")
    inputs = _concentration(s, p, shape.clear)
    s.t(".")
    return s.done("effect", link, perturbation=p.id, event=top.name, value=top.value, lo=top.lo, hi=top.hi,
                  n=top.rate.n, path_value=shape.value, path_lo=shape.lo, path_hi=shape.hi, margin=margin,
                  path_claim="equivalent" if same else "beyond control" if shape.clear else "undecided",
                  inputs=inputs)


def _concentration(s: Sentence, p: PerturbationEstimates, average_clear: bool) -> list[str]:
    """Names the inputs where ``p`` moved the path most (its per-input tests), when the
    effect is concentrated in them or the average does not show it; returns their ids."""
    per = p.per_input
    moved = per.moved() if per is not None else []
    if per is not None and not moved and not average_clear and not per.family and per.untestable_higher():
        s.t(f"; per input, none of its {len(per.inputs)} inputs has replays enough to be tested")
    if per is None or not moved or not (per.concentrated or not average_clear):
        return []
    s.t(f"; the path moved most at {len(moved)} of {len(per.inputs)} inputs: ")
    for i, g in enumerate(moved[:3]):
        s.t(", " if i else "").c(g.input_id).t(f" ({g.events} of {g.n} effective pairs against {g.control_events} "
                                               f"of {g.control_n} control replays, Holm p = {g.p_holm or 0.0:.2g})")
    if len(moved) > 3:
        s.t(f" and {len(moved) - 3} more")
    return [g.input_id for g in moved]


def _estimate(e: EventEffect) -> str:
    """``+0.880 [+0.836, +0.922]; 100% of 210 effective pairs against 12% of 450 control replays``."""
    return (f"{fmt(e.value, signed=True)}{_ci(e.lo, e.hi)}; {e.what} differs in {pct(e.rate.value)} of "
            f"{fmt_n(e.rate.n)} effective pairs against {pct(e.control.value if e.control else None)} of "
            f"{fmt_n(e.control.n if e.control else None)} control replays")


# --------------------------------------------------------------------------- problems


def _problems(c: CampaignEstimates, raw: Mapping[str, Any]) -> list[Finding]:
    raws = {str(r.get("id")): r for r in raw.get("perturbations") or [] if isinstance(r, Mapping)}
    out: list[Finding] = []
    for p in c.perturbations:
        r = raws.get(p.id, {})
        link = perturbation_anchor(p.id)
        if p.counts.not_applied:
            reasons = r.get("not_applied_reasons") or {}
            why = next(iter(reasons), "no reason recorded") if isinstance(reasons, Mapping) else "no reason recorded"
            out.append(Sentence().c(p.id).t(f": {fmt_n(p.counts.not_applied)} of {fmt_n(p.counts.pairs)} replays "
                                             f"were not applied (counted in no stratum): {why}.")
                       .done("problem", link, perturbation=p.id, problem="not applied", value=p.counts.not_applied))
        failures = r.get("failures") if isinstance(r.get("failures"), Mapping) else None
        failed = int(failures.get("count") or 0) if failures else p.counts.failed
        if failed:
            by = failures.get("by_reason") if failures else None
            why = next(iter(by), "") if isinstance(by, Mapping) and by else ""
            out.append(Sentence().c(p.id).t(f": {fmt_n(failed)} of {fmt_n(p.counts.pairs)} replays failed"
                                             + (f" ({why})" if why else "") + "; the estimates leave them out.")
                       .done("problem", link, perturbation=p.id, problem="failed", value=failed))
        if p.negative_control.passed is False:
            s = code_list(Sentence().c(p.id).t(": the negative control failed at "), p.negative_control.rejected)
            out.append(s.t(": its no-op pairs drift more than same-input reruns, so part of what it moved may come "
                           "from the replay itself.").done("problem", link, perturbation=p.id,
                                                           problem="negative control"))
        unseen = [str(n) for n in r.get("unseen_llm_nodes") or []]
        if unseen:
            s = code_list(Sentence().c(p.id).t(" runs llm node(s) that recorded no LLM call ("), unseen)
            out.append(s.t("): their requests bypass the engine.").done("problem", link, perturbation=p.id,
                                                                         problem="unseen llm nodes"))
    for u in raw.get("unaccounted_requests") or []:
        if isinstance(u, Mapping):
            out.append(Sentence().t("Node ").c(u.get("node")).t(f" sent {fmt_n(u.get('requests'))} request(s) to ")
                       .c(u.get("endpoint")).t(" that the replay contract does not account for: they are sent "
                                               "again on every replay.")
                       .done("problem", None, problem="unaccounted requests", node=str(u.get("node")),
                             value=u.get("requests")))
    return out


# --------------------------------------------------------------------------- thresholds


def _threshold(p: PerturbationEstimates, margin: float) -> Finding | None:
    b = p.beta_shape
    if b.value is None or len(b.bins) < 2:
        return None  # one magnitude: the effect sentence says it all
    link = anchor("dose", p.id)
    first = next((x for x in b.bins if x.qualifies), None)
    below = _bin_below(b.bins)
    lo, hi = (below.excess.ci or (None, None)) if below is not None else (None, None)
    same = inside_margin(lo, hi, margin)
    if b.upper_bound:
        s = Sentence().t("Perturbation ").c(p.id).t(f" changes the path already at its smallest change (d_i ≤ "
                                                    f"{fmt(b.value)}): no tolerance below it was measured")
    elif same and below is not None:
        s = Sentence().t("Node ").c(p.node).t(f" tolerates changes up to d_i = {fmt(b.value)} (").c(p.id) \
            .t(f"): below it the path changes as often as under control ({_bin_text(below)}, inside the "
               f"equivalence margin ±{margin:g}; {fmt_n(b.n_below)} pairs below it)")
    else:
        s = Sentence().t("Node ").c(p.node).t(" (").c(p.id).t(")")
    if first is not None and first.excess.value is not None:
        ci = first.excess.ci
        where = (f"at ladder step {first.step} (d_i {fmt(first.lo)}–{fmt(first.hi)})" if b.bin_rule == "ladder"
                 else f"from d_i = {fmt(first.lo)} on")
        s.t(f"{'; ' if b.upper_bound or same else ': '}{where} the path changes in {pct(first.excess.value)} of "
            f"traces beyond control ({fmt(first.excess.value, signed=True)}{_ci(*(ci or (None, None)))}, "
            f"n = {fmt_n(first.n)})")
    if not b.upper_bound and not same:
        s.t(f"; below d_i = {fmt(b.value)} ({fmt_n(b.n_below)} pairs) it is ")
        s.t(undecided(below.n, below.excess.value, lo, hi, margin, f"pairs at d_i {fmt(below.lo)}–{fmt(below.hi)}")
            if below is not None else "not measured against control")
    s.t(".")
    return s.done("threshold", link, perturbation=p.id, value=b.value, upper_bound=b.upper_bound,
                  excess=None if first is None else first.excess.value, margin=margin,
                  below_claim=None if below is None else "equivalent" if same else "undecided",
                  below_lo=lo, below_hi=hi)


def _bin_below(bins: Sequence[Any]) -> Any:
    """The bin that stopped the step-down search (the largest that does not qualify below
    the qualifying bins at the top), None when every bin qualifies or none does."""
    top_down = list(reversed(bins))
    for i, upper in enumerate(top_down[:-1]):
        if not upper.qualifies:
            return None
        if not top_down[i + 1].qualifies:
            return top_down[i + 1]
    return None


def _bin_text(x: Any) -> str:
    ci = x.excess.ci or (None, None)
    return f"d_i {fmt(x.lo)}–{fmt(x.hi)}: {fmt(x.excess.value, signed=True)}{_ci(*ci)}, n = {fmt_n(x.n)}"


def _adaptive(p: PerturbationEstimates) -> Finding | None:
    """An adaptive ladder's answer: from which level the path changes beyond control, and
    the level at half its plateau, with its interval."""
    from .adaptive import fmt_dose

    a = p.adaptive
    if a is None:
        return None
    curve, param, whole = a.beta_shape, str(a.settings.get("param", "dose")), bool(a.settings.get("integer"))
    s = Sentence().t("Perturbation ").c(p.id).t(f" (an adaptive ladder over {param}): ")
    if curve.onset is None:
        s.t("no level tried changes the path distinguishably beyond control")
    else:
        s.t(f"the path changes beyond control from {param} = {fmt_dose(curve.onset, integer=whole)} on "
            + (f"(not at {fmt_dose(curve.below, integer=whole)})" if curve.below is not None
               else "(already at the smallest level)"))
    mid = curve.midpoint
    if mid.value is not None:  # a midpoint lies between levels: never rounded to one
        ci = f" [{fmt_dose(mid.ci[0])}, {fmt_dose(mid.ci[1])}]" if mid.ci else " (no interval)"
        s.t(f"; half its plateau at {param} = {fmt_dose(mid.value)}{ci}")
    s.t(f" ({fmt_n(a.replays)} replays).")
    return s.done("adaptive", "adaptive", perturbation=p.id, value=curve.onset, midpoint=mid.value)


# --------------------------------------------------------------------------- validation


def _validation(c: CampaignEstimates) -> list[Finding]:
    rows = list(c.validation)
    if not rows:
        return []
    from quiver._interventional import VERDICTS

    agree_, beyond_ = VERDICTS[0], VERDICTS[2]

    agree = [v for v in rows if v.verdict == agree_]
    beyond = [v for v in rows if v.verdict == beyond_]
    other = [v for v in rows if v.verdict not in (agree_, beyond_)]
    s = Sentence().t(f"Observational sensitivity agrees with intervention on {len(agree)} of {len(rows)} edge(s)")
    if beyond:
        s.t(f"; the {len(beyond)} edge(s) out of ")
        code_list(s, dict.fromkeys(v.source for v in beyond))
        s.t(" were probed beyond what natural runs ever show (a risk they cannot see)")
    if other:
        s.t(f"; {len(other)} differ: ")
        for i, v in enumerate(other):
            s.t(", " if i else "").c(f"{v.source} → {v.target}").t(f" ({v.verdict or 'undecided'})")
    s.t(".")
    return [s.done("validation", "validation", value=len(agree), n=len(rows), beyond=len(beyond))]


def code_list(s: Sentence, names: Iterable[str]) -> Sentence:
    """``A, B, C`` written into ``s`` as code."""
    for i, name in enumerate(names):
        s.t(", " if i else "").c(name)
    return s


# --------------------------------------------------------------------------- a campaign


def campaign_findings(raw: Mapping[str, Any], campaign: CampaignEstimates | None = None) -> list[Finding]:
    """What the campaign of ``raw`` (its ``campaign.json``) found, problems first.

    Raises:
        CampaignFormatError: ``raw`` is not a ``campaign.json``.
    """
    from quiver._interventional import CampaignEstimates

    c = campaign if campaign is not None else CampaignEstimates.from_json(raw)
    margin = c.equivalence_margin if c.equivalence_margin is not None else DEFAULT_MARGIN
    events = campaign_events(c)
    effects = [f for p in c.perturbations if (f := _effect(p, margin, events)) is not None]
    effects.sort(key=lambda f: -(f.data.get("value") or 0.0))
    thresholds = [f for p in c.perturbations for f in (_adaptive(p), _threshold(p, margin)) if f is not None]
    from .findings_outcome import outcome_findings  # outcomes first: whether answers stay right

    return [*_problems(c, raw), *outcome_findings(c, margin), *effects, *thresholds, *_validation(c)]
