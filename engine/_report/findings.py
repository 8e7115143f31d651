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
2. per perturbation, the event it moved most beyond its control replays: the path
   (D_shape), the loop iterations (D_iter), which nodes run (D_struct) or the final
   output (D_output), as the excess of its effective stratum's rate over its control's
   (MOVER interval, :mod:`.summary`), with the path's excess beside it when another
   event is the strongest;
3. the thresholds found: up to which change of its target a perturbation leaves the
   path as under control, and how much more often the path changes beyond it;
4. the check of the observational estimates: on how many edges observational and
   interventional sensitivity agree, and which edges were probed beyond what natural
   runs show.

The gate's, the analysis', the comparison's and the attribution's are in
:mod:`.findings_more`.
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
           "code_list", "PATH_EVENTS"]

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


def event_effects(p: PerturbationEstimates) -> list[EventEffect]:
    """The four events' excesses of ``p`` over its control replays, in :data:`EVENTS` order."""
    rates = p.stratum("effective").rates
    controls = p.control_replays.rates if p.control_replays is not None else None
    out = []
    for key, name, what in EVENTS:
        rate = getattr(rates, key)
        control = getattr(controls, key) if controls is not None else None
        e = excess(rate, control)
        out.append(EventEffect(key, name, what, rate, control, e.value, e.lo, e.hi))
    return out


def strongest_event(p: PerturbationEstimates) -> EventEffect | None:
    """The event ``p`` moved most beyond its control: of the path events (D_shape,
    D_iter, D_struct) whose excess's interval lies above 0, the largest excess (ties in
    :data:`EVENTS` order); D_output when there is none (values only); None when no
    excess is defined."""
    effects = [e for e in event_effects(p) if e.value is not None]
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


def _effect(p: PerturbationEstimates) -> Finding | None:
    effects = event_effects(p)
    top = strongest_event(p)
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
    s = action(p).t(" (").c(p.id).t(") ")
    if top.key == "d_output":
        s.t("leaves the path as its control replays do")
        if shape.value is not None:
            s.t(f" ({fmt(shape.value, signed=True)}{_ci(shape.lo, shape.hi)})")
        s.t(f"; it changes values only: {_estimate(top)}.")
        return s.done("effect", link, perturbation=p.id, event=top.name, value=top.value, lo=top.lo, hi=top.hi,
                      n=top.rate.n)
    s.t(f"changes {top.what} in {pct(top.value)} of traces beyond control ({_estimate(top)})")
    if top.key != "d_shape" and shape.value is not None:
        s.t(f"; {shape.what} in {pct(shape.value)} ({fmt(shape.value, signed=True)}{_ci(shape.lo, shape.hi)}"
            + ("" if shape.clear else ", not beyond control") + ")")
    s.t(".")
    return s.done("effect", link, perturbation=p.id, event=top.name, value=top.value, lo=top.lo, hi=top.hi,
                  n=top.rate.n)


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


def _threshold(p: PerturbationEstimates) -> Finding | None:
    b = p.beta_shape
    if b.value is None or len(b.bins) < 2:
        return None  # one magnitude: the effect sentence says it all
    link = anchor("dose", p.id)
    first = next((x for x in b.bins if x.qualifies), None)
    if b.upper_bound:
        s = Sentence().t("Perturbation ").c(p.id).t(f" changes the path already at its smallest change (d_i ≤ "
                                                    f"{fmt(b.value)}): no tolerance below it was measured")
    else:
        s = Sentence().t("Node ").c(p.node).t(f" tolerates changes up to d_i = {fmt(b.value)} (").c(p.id) \
            .t(f"): below it the path changes no more often than under control ({fmt_n(b.n_below)} pairs)")
    if first is not None and first.excess.value is not None:
        ci = first.excess.ci
        where = (f"at ladder step {first.step} (d_i {fmt(first.lo)}–{fmt(first.hi)})" if b.bin_rule == "ladder"
                 else f"from d_i = {fmt(first.lo)} on")
        s.t(f"; {where} it changes in {pct(first.excess.value)} of traces beyond control "
            f"({fmt(first.excess.value, signed=True)}{_ci(*(ci or (None, None)))}, n = {fmt_n(first.n)})")
    s.t(".")
    return s.done("threshold", link, perturbation=p.id, value=b.value, upper_bound=b.upper_bound,
                  excess=None if first is None else first.excess.value)


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
        s.t("the path changes beyond control at none of the levels tried")
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
    effects = [f for p in c.perturbations if (f := _effect(p)) is not None]
    effects.sort(key=lambda f: -(f.data.get("value") or 0.0))
    thresholds = [f for p in c.perturbations for f in (_adaptive(p), _threshold(p)) if f is not None]
    return [*_problems(c, raw), *effects, *thresholds, *_validation(c)]
