"""What a campaign found about outcomes: per perturbation, how far it moves the pass rate
beyond its control replays (``campaign.json``'s ``outcome`` of each perturbation), and
the inputs where it makes answers fail when the effect lives there.

The same wording rules as the paths' (:mod:`.findings`): a perturbation "leaves the pass
rate as its control replays do" only when the difference's interval lies inside the
equivalence margin; otherwise it lowers or raises it (the interval clear of 0), or it is
not distinguishable from control at its n, with its interval and the replays that would
halve it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver._stats import fmt_n

from .findings import Finding, Sentence, action, inside_margin, pct, perturbation_anchor, undecided

if TYPE_CHECKING:
    from quiver._interventional import CampaignEstimates, PerturbationEstimates

__all__ = ["outcome_findings"]


def _points(x: float | None) -> str:
    return "—" if x is None else f"{abs(x) * 100:.0f}"


def _outcome(p: PerturbationEstimates, margin: float) -> Finding | None:
    o = p.outcome
    if o is None:
        return None
    d, mine, theirs = o.difference, o.pass_rate, o.control_pass_rate
    value, (lo, hi), n = d["value"], d["ci"] or (None, None), mine["n"]
    s = action(p).t(" (").c(p.id).t(") ")
    base = (f"(from {pct(theirs['value'])} of {fmt_n(theirs['n'])} control replays to {pct(mine['value'])} of "
            f"{fmt_n(n)} effective replays)")
    if o.lowers or o.raises:
        word = "lowers" if o.lowers else "raises"
        s.t(f"{word} the pass rate by {_points(value)} points [{_points(hi if o.lowers else lo)}, "
            f"{_points(lo if o.lowers else hi)}] {base}")
        claim = word
    elif inside_margin(lo, hi, margin):
        s.t(f"leaves the pass rate as its control replays do ({fmt_signed(value)} [{fmt_signed(lo)}, "
            f"{fmt_signed(hi)}], inside the equivalence margin ±{margin:g}) {base}")
        claim = "equivalent"
    else:
        s.t("changes the pass rate by an amount " + undecided(n, value, lo, hi, margin, "effective replays"))
        claim = "undecided"
    inputs = _failing_inputs(s, p)
    s.t(".")
    return s.done("effect", perturbation_anchor(p.id), perturbation=p.id, event="pass_rate", value=value, lo=lo,
                  hi=hi, n=n, margin=margin, claim=claim, inputs=inputs)


def fmt_signed(x: float | None) -> str:
    from quiver._stats import fmt

    return fmt(x, signed=True)


def _failing_inputs(s: Sentence, p: PerturbationEstimates) -> list[str]:
    """The inputs where ``p`` makes answers fail more often than its controls (its
    per-input tests), named when some did."""
    per = p.outcome.per_input if p.outcome is not None else None
    moved = per.moved() if per is not None else []
    if per is None or not moved:
        return []
    s.t(f"; answers fail more often at {len(moved)} of {len(per.inputs)} inputs: ")
    for i, g in enumerate(moved[:3]):
        s.t(", " if i else "").c(g.input_id).t(f" ({g.events} of {g.n} effective replays against "
                                               f"{g.control_events} of {g.control_n} control replays, Holm p = "
                                               f"{g.p_holm or 0.0:.2g})")
    if len(moved) > 3:
        s.t(f" and {len(moved) - 3} more")
    return [g.input_id for g in moved]


def outcome_findings(c: CampaignEstimates, margin: float) -> list[Finding]:
    """One sentence per perturbation with an outcome effect, the largest drop first."""
    found = [f for p in c.perturbations if (f := _outcome(p, margin)) is not None]
    return sorted(found, key=lambda f: (f.data.get("value") if f.data.get("value") is not None else 0.0))
