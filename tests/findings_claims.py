"""A campaign's findings claim no effect only inside their equivalence margin (shared by the
tests that run a bundled campaign).

:func:`check_claims` reads a ``campaign.json``, makes its findings as every report does,
and checks each sentence against the file's numbers: an absence ("leaves the path as its
control replays do", "as often as under control", "tolerates") only where the 95%
interval of the excess, recomputed here from the file's two rates (MOVER), lies inside
``equivalence_margin``; every "not distinguishable" with its n, its interval and how many
replays would halve it; every input a sentence names as moved, moved in the file (for a
pass-rate finding, the outcome's own interval and per-input tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ABSENCE = ("as its control replays do", "as often as under control", "tolerates changes", "values only")
"""The words of a sentence that says an effect is absent."""


def _path_excess(p: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    from quiver._report.summary import excess
    from quiver._stats import Estimate

    eff, ctl = p["strata"]["effective"], p.get("control_replays")
    if ctl is None or eff["D_shape"] is None or ctl["D_shape"] is None:
        return None, None, None
    e = excess(Estimate(eff["D_shape"], tuple(eff["D_shape_ci"]) if eff["D_shape_ci"] else None, eff["D_shape_n"]),
               Estimate(ctl["D_shape"], tuple(ctl["D_shape_ci"]) if ctl["D_shape_ci"] else None, ctl["D_shape_n"]))
    return e.value, e.lo, e.hi


def _inside(lo: float | None, hi: float | None, margin: float) -> bool:
    return lo is not None and hi is not None and -margin <= lo and hi <= margin


def _check_effect(text: str, data: Mapping[str, Any], p: Mapping[str, Any], margin: float) -> None:
    from quiver._stats import fmt

    value, lo, hi = _path_excess(p)
    said_absent = "as its control replays do" in text or "inside the equivalence margin" in text
    assert not said_absent or _inside(lo, hi, margin), (text, lo, hi, margin)
    if lo is not None and hi is not None:
        shown = f"{fmt(value, signed=True)} [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]"
        if data.get("path_claim") in ("equivalent", "undecided"):
            assert shown in text, (text, shown)  # the path's interval, as campaign.json gives it
        if data.get("path_claim") == "undecided" and "not distinguishable" in text and data.get("event") == "D_output":
            n = p["strata"]["effective"]["D_shape_n"]
            assert f"at n = {n:,} effective pairs" in text and f"4x the replays, n = {4 * n:,}" in text, text
    if data.get("inputs"):
        _check_inputs(text, data, (p.get("per_input") or {}).get("inputs", []), "effective pairs")


def _check_outcome(text: str, data: Mapping[str, Any], p: Mapping[str, Any], margin: float) -> None:
    """A pass-rate finding: an absence only inside the margin (the outcome's own interval),
    and every input it names failing more often in the outcome's per-input tests."""
    o = p["outcome"]
    lo, hi = (o["difference"].get("ci") or [None, None])
    if "as its control replays do" in text:
        assert _inside(lo, hi, margin), (text, lo, hi, margin)
    if data.get("inputs"):
        _check_inputs(text, data, (o.get("per_input") or {}).get("inputs", []), "effective replays")


def _check_inputs(text: str, data: Mapping[str, Any], rows: list[Mapping[str, Any]], what: str) -> None:
    """Every input the finding's data names moved in the per-input tests; those its sentence
    writes out with their counts, the rest as "and N more"."""
    per = {g["input_id"]: g for g in rows}
    names = list(data.get("inputs") or [])
    assert all(per[name]["moved"] for name in names), names
    shown = [name for name in names if f"{name} ({per[name]['events']} of {per[name]['n']} {what}" in text]
    assert shown == names[:len(shown)] and shown, (text, names)
    rest = len(names) - len(shown)
    assert rest == 0 or f" and {rest} more" in text, (text, names)


def _check_threshold(text: str, data: Mapping[str, Any], p: Mapping[str, Any], margin: float) -> None:
    if "as often as under control" in text or "tolerates changes" in text:
        bins = p["beta_shape"]["bins"]
        below = [b for b in bins if (b["excess_ci"] is not None and b["excess_ci"][0] == data.get("below_lo")
                                     and b["excess_ci"][1] == data.get("below_hi"))]
        assert below and _inside(*below[0]["excess_ci"], margin), (text, data)


def check_claims(raw: Mapping[str, Any]) -> list[str]:
    """Check every finding sentence of the campaign ``raw`` (its ``campaign.json``) against
    it (module docstring); returns the sentences."""
    from quiver._report import campaign_findings

    margin = raw.get("equivalence_margin", 0.05)
    by_id = {p["id"]: p for p in raw["perturbations"]}
    texts = []
    for f in campaign_findings(raw):
        text, data = f.text(), f.data
        texts.append(text)
        p = by_id.get(str(data.get("perturbation")))
        if any(word in text for word in ABSENCE):
            assert p is not None and f.kind in ("effect", "threshold") and f"±{margin:g}" in text, text
        if p is not None and f.kind == "effect" and data.get("event") == "pass_rate":
            _check_outcome(text, data, p, margin)
        elif p is not None and f.kind == "effect" and data.get("event") is not None:
            _check_effect(text, data, p, margin)
        if p is not None and f.kind == "threshold":
            _check_threshold(text, data, p, margin)
        if "not distinguishable" in text:
            assert "interval" in text and "would halve the interval" in text and "at n = " in text, text
    return texts
