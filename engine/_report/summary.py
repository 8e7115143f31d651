"""The answer first: one row per perturbation of a campaign, shared by ``report.md`` and
``report.html``.

Each :class:`SummaryRow` holds what a reader asks of a perturbation before any table:
how many pairs it made (effective / no-op / failed), how much more often the path changed
than under its control replays, its bifurcation threshold, whether its no-op pairs
stayed at the noise floor, and why replays failed.

The effect on D_shape is the *excess*: the effective stratum's D_shape rate minus the
D_shape rate of the perturbation's control replays (the target as recorded or re-run
unchanged, downstream live: the noise the perturbation is held against). ``campaign.json``
keeps the two rates with their intervals but not their draws, so the excess's interval
is formed from the two intervals by the MOVER method (method of variance estimates
recovery; Zou and Donner, *Stat. Med.* 2008, 27:1693), which treats the two rates as
independent: the control replays share traces with the perturbed pairs, a positive
correlation, so the interval errs on the wide side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quiver._interventional import CampaignEstimates, PerturbationEstimates
    from quiver._stats import Estimate

__all__ = ["SummaryRow", "Failures", "summary_rows", "control_replay_count", "excess", "failures_of"]


@dataclass(frozen=True)
class Failures:
    """Failed replays of a perturbation: how many, and how many per reason."""

    count: int
    by_reason: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Excess:
    """A rate minus its control's rate, with a 95% interval (None parts: undefined)."""

    value: float | None
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class SummaryRow:
    """One perturbation at a glance (see the module docstring)."""

    id: str
    node: str
    op: str
    pairs: int
    effective: int
    noop: int
    failed: int
    rate: Estimate
    control: str | None
    control_rate: Estimate | None
    excess: Excess
    beta_value: float | None
    beta_upper_bound: bool | None
    beta_reason: str | None
    verdict: str
    passed: bool | None
    failures: Failures


def excess(rate: Estimate, control: Estimate | None) -> Excess:
    """``rate - control`` with the MOVER interval from the two 95% intervals."""
    if control is None or rate.value is None or control.value is None:
        return Excess(None, None, None)
    d = rate.value - control.value
    if rate.ci is None or control.ci is None:
        return Excess(d, None, None)
    (l1, u1), (l2, u2) = rate.ci, control.ci
    lo = d - math.sqrt((rate.value - l1) ** 2 + (u2 - control.value) ** 2)
    hi = d + math.sqrt((u1 - rate.value) ** 2 + (control.value - l2) ** 2)
    return Excess(d, lo, hi)


def failures_of(p: PerturbationEstimates, raw: Mapping[str, Any] | None) -> Failures:
    """The perturbation's ``failures`` entry of ``campaign.json`` (``{"count": N,
    "by_reason": {REASON: n}}``), else its failed rows with no reason known."""
    data: Any = getattr(p, "failures", None)
    if data is None and raw is not None:
        data = raw.get("failures")
    if data is not None and hasattr(data, "by_reason") and not isinstance(data, Mapping):
        data = {"count": getattr(data, "count", None), "by_reason": data.by_reason}
    if isinstance(data, Mapping) and isinstance(data.get("count"), int):
        reasons = data.get("by_reason")
        by_reason = {str(k): int(v) for k, v in reasons.items() if isinstance(v, int)} if isinstance(
            reasons, Mapping) else {}
        return Failures(int(data["count"]), by_reason)
    return Failures(p.counts.failed, {})


def _verdict(p: PerturbationEstimates) -> str:
    nc = p.negative_control
    if nc.passed is None:
        return "not tested"
    return "passed" if nc.passed else "FAILED: " + ", ".join(nc.rejected)


def summary_rows(campaign: CampaignEstimates, raw: Mapping[str, Any] | None = None) -> list[SummaryRow]:
    """One :class:`SummaryRow` per perturbation, in the campaign's order.

    Args:
        campaign: The campaign's estimates.
        raw: ``campaign.json`` as read (for what the typed estimates do not carry, such as
            each perturbation's ``failures``).
    """
    raws: dict[str, Mapping[str, Any]] = {}
    if raw is not None:
        raws = {str(r.get("id")): r for r in raw.get("perturbations") or [] if isinstance(r, Mapping)}
    rows = []
    for p in campaign.perturbations:
        rate = p.stratum("effective").rates.d_shape
        control = p.control_replays.rates.d_shape if p.control_replays is not None else None
        b = p.beta_shape
        rows.append(SummaryRow(
            id=p.id, node=p.node, op=str(p.op or ""), pairs=p.counts.pairs, effective=p.counts.effective,
            noop=p.counts.noop, failed=p.counts.failed, rate=rate,
            control=p.control_replays.id if p.control_replays is not None else None, control_rate=control,
            excess=excess(rate, control), beta_value=b.value, beta_upper_bound=b.upper_bound,
            beta_reason=b.reason, verdict=_verdict(p), passed=p.negative_control.passed,
            failures=failures_of(p, raws.get(p.id)),
        ))
    return rows


def control_replay_count(campaign: CampaignEstimates) -> int:
    """The campaign's control replays: its pair rows beyond those of its perturbations."""
    return max(0, campaign.pairs - sum(p.counts.pairs for p in campaign.perturbations))
