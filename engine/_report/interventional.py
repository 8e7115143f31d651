"""The Markdown report of a perturbation campaign: :func:`interventional_report`.

Renders the dict of :func:`~quiver._interventional.campaign_estimates` in the order an
engineer reads it: per perturbation its divergence table in the shape of the paper's
Table 3 (observational next to the effective and no-op strata, with the downstream
nodes' mean distances), the cascades across perturbations in the shape of Table 4,
observational against interventional sigma at targetable edges, then the bifurcation
thresholds and the negative-control verdicts. Every estimate is shown with its 95%
interval and n; an undefined value is ``—``. Like the profile report it tolerates
nulls and missing keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .markdown import ARROW, DASH, _table, fmt, fmt_est, fmt_n

__all__ = ["interventional_report", "fmt", "fmt_est"]

_RATES = (
    ("D_iter", "D_iter > 0"),
    ("D_shape", "D_shape > 0"),
    ("D_output", "D_output > 0"),
    ("D_output_only", "D_output-only"),
    ("D_struct", "D_struct > 0"),
)
_BETAS = (("beta_shape", "beta_shape"), ("beta_iter", "beta_iter"))


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _pid(p: Mapping[str, Any]) -> str:
    return f"`{p.get('id')}`"


def _yes_no(x: Any) -> str:
    return DASH if x is None else ("yes" if x else "no")


def _nested(block: Mapping[str, Any], name: str, node: str) -> dict[str, Any]:
    """The estimate ``name`` of one node from per-node dicts (``mean_d``, ``mean_d_ci``, ``mean_d_n``)."""
    return {name: _map(block.get(name)).get(node), f"{name}_ci": _map(block.get(f"{name}_ci")).get(node),
            f"{name}_n": _map(block.get(f"{name}_n")).get(node)}


def _cells(block: Mapping[str, Any] | None, name: str) -> list[str]:
    if block is None:
        return [DASH, DASH]
    return [fmt_est(block, name), fmt_n(block.get(f"{name}_n"))]


# --------------------------------------------------------------------------- sections


def _header(c: Mapping[str, Any]) -> list[str]:
    perts = _dicts(c.get("perturbations"))
    obs = _map(c.get("observational"))
    return [
        "# QUIVER interventional report", "",
        f"**Campaign:** {len(perts)} perturbation(s), {fmt_n(c.get('pairs'))} pair rows; observational "
        f"baseline of {fmt_n(obs.get('n'))} same-input pairs.",
        f"**Settings:** epsilon = {fmt(c.get('epsilon'))}; 95% intervals from {fmt_n(c.get('resamples'))} "
        f"bootstrap resamples of input groups (seed {fmt_n(c.get('seed'))}); negative controls with "
        f"{fmt_n(c.get('permutations'))} permutations at alpha = {fmt(c.get('alpha'))} after Holm correction.",
        "",
        "Only pairs whose replay succeeded (status ok) enter the estimates. The *effective* stratum holds pairs "
        "where the perturbation changed the target's output, the *no-op* stratum those where it did not: the "
        "no-op pairs must look like the observational noise (the negative control).",
        "",
    ]


def _counts(p: Mapping[str, Any]) -> str:
    return (
        f"{fmt_n(p.get('pairs'))} pairs: {fmt_n(p.get('effective'))} effective, {fmt_n(p.get('noop'))} no-op, "
        f"{fmt_n(p.get('unstratified'))} unstratified (ok), {fmt_n(p.get('diverged'))} diverged, "
        f"{fmt_n(p.get('failed'))} failed; {fmt_n(p.get('groups'))} input groups."
    )


def _divergence(p: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    strata = _map(p.get("strata"))
    eff, noop = _map(strata.get("effective")), _map(strata.get("noop"))
    nodes = [str(n) for n in p.get("downstream") or []]
    rows = [[label, *_cells(obs, key), *_cells(eff, key), *_cells(noop, key)] for key, label in _RATES]
    rows.append([f"d({p.get('node')}) (magnitude)", DASH, DASH, *_cells(eff, "magnitude"), *_cells(noop, "magnitude")])
    for node in nodes:
        rows.append([f"mean d({node})", *_cells(_nested(obs, "mean_d", node), "mean_d"),
                     *_cells(_nested(eff, "mean_d", node), "mean_d"), *_cells(_nested(noop, "mean_d", node), "mean_d")])
    for node in nodes:
        name = "mean_d_given_shape"
        rows.append([f"mean d({node}) given D_shape > 0", DASH, DASH,
                     *_cells(_nested(eff, name, node), name), *_cells(_nested(noop, name, node), name)])
    headers = ["metric", "observational [95% CI]", "n", "effective [95% CI]", "n", "no-op [95% CI]", "n"]
    return _table(headers, rows, "lrrrrrr")


def _perturbation(p: Mapping[str, Any], obs: Mapping[str, Any]) -> list[str]:
    params = json.dumps(p.get("params"), sort_keys=True, ensure_ascii=False)
    ladder = f"; ladder `{json.dumps(p.get('ladder'), sort_keys=True)}`" if p.get("ladder") else ""
    lines = [f"### {_pid(p)}: {p.get('op')} at {p.get('node')}", "",
             f"Params `{params}`{ladder}. {_counts(p)}", ""]
    return lines + _divergence(p, obs) + [""]


def _perturbations(c: Mapping[str, Any]) -> list[str]:
    perts = _dicts(c.get("perturbations"))
    lines = ["## Divergence by perturbation (Table 3)", "",
             "*How to read this:* each rate is the share of pairs that differed in that respect; the observational "
             "column is the noise of same-input reruns, the strata are recorded baseline against perturbed replay. "
             "The mean distances of the downstream nodes, also among pairs that took another path, show where the "
             "change travelled.", ""]
    if not perts:
        return lines + ["No perturbation in this campaign.", ""]
    obs = _map(c.get("observational"))
    for p in perts:
        lines += _perturbation(p, obs)
    return lines


def _cascade(stratum: Mapping[str, Any], nodes: Sequence[str]) -> str:
    given = _map(stratum.get("mean_d_given_shape"))
    parts = [f"{n} {fmt(given.get(n))}" for n in nodes]
    return ARROW.join(parts) if parts else DASH


def _cascades(c: Mapping[str, Any]) -> list[str]:
    perts = _dicts(c.get("perturbations"))
    if not perts:
        return []
    rows = []
    for p in perts:
        strata = _map(p.get("strata"))
        name = "effective" if _map(strata.get("effective")).get("n") else "noop"
        s = _map(strata.get(name))
        rows.append([_pid(p), str(p.get("node")), name, fmt_n(s.get("n")), fmt_est(s, "D_shape"),
                     fmt_est(s, "D_iter"), _cascade(s, [str(n) for n in p.get("downstream") or []])])
    headers = ["perturbation", "target", "stratum", "n", "D_shape [95% CI]", "D_iter [95% CI]",
               "cascade: mean d given D_shape > 0"]
    return ["## Cascades across perturbations (Table 4)", "",
            "*How to read this:* the same path-change rate can come from different mechanisms; the cascade column "
            "follows the downstream chain's mean distance among the pairs whose path changed (effective stratum, "
            "the no-op one when there is no effective pair).", ""] + _table(headers, rows, "lllrrrl") + [""]


def _validation(c: Mapping[str, Any]) -> list[str]:
    rows = [
        [f"{v.get('source')}{ARROW}{v.get('target')}", fmt_est(v, "sigma_obs"), fmt_n(v.get("n_obs")),
         fmt_est(v, "sigma_int"), fmt_n(v.get("n_int")), _yes_no(v.get("agree"))]
        for v in _dicts(c.get("validation"))
    ]
    lines = ["## Observational against interventional sigma", "",
             "*How to read this:* at each edge out of a perturbed node, sigma estimated from natural reruns next to "
             "sigma under perturbation; overlapping 95% intervals (agree) are evidence that the observational "
             "estimate is not confounded.", ""]
    lines += (_table(["edge", "sigma obs [95% CI]", "n obs", "sigma int [95% CI]", "n int", "agree"], rows, "lrrrrl")
              if rows else ["No targetable edge could be compared."])
    skipped = _dicts(c.get("validation_skipped"))
    if skipped:
        lines += ["", "Skipped edges:", ""]
        lines += [f"- {s.get('source')}{ARROW}{s.get('target')}: {s.get('reason')}" for s in skipped]
    return lines + [""]


def _beta_row(p: Mapping[str, Any], key: str, label: str) -> list[str]:
    b = _map(p.get(key))
    iqr = b.get("iqr")
    control = f"{fmt_est(b, 'control_rate')} ({b.get('control') or DASH}, n = {fmt_n(b.get('control_n'))})"
    return [_pid(p), label, fmt(b.get("value")), fmt_est(b, "raw_min"), fmt_n(b.get("n")), fmt_n(b.get("n_events")),
            f"[{fmt(iqr[0])}, {fmt(iqr[1])}]" if isinstance(iqr, list) and len(iqr) == 2 else DASH,
            fmt(b.get("max_non_bifurcating")), _yes_no(b.get("upper_bound")), control,
            str(b.get("reason") or "")]


def _bins(p: Mapping[str, Any], key: str, label: str) -> list[str]:
    b = _map(p.get(key))
    bins = _dicts(b.get("bins"))
    if not bins:
        return []
    rows = [[str(x.get("bin")), DASH if x.get("step") is None else str(x.get("step")),
             f"{fmt(x.get('lo'))}–{fmt(x.get('hi'))}", fmt_n(x.get("n")), fmt_n(x.get("n_events")),
             f"{fmt_n(x.get('inputs'))} ({fmt_n(x.get('inputs_above_control'))})",
             fmt_est(x, "rate"), f"{fmt(x.get('control_rate'))} ({x.get('control') or DASH})",
             fmt_est(x, "excess", signed=True), _yes_no(x.get("qualifies"))] for x in bins]
    headers = ["bin", "step", "magnitudes", "n", "events", "inputs (above control)", "rate [95% CI]", "control rate",
               "minus control [95% CI]", "qualifies"]
    title = f"{_pid(p)} {label} bins ({b.get('bin_rule') or DASH}):"
    return [title, ""] + _table(headers, rows, "rrlrrrrlrl") + [""]


def _betas(c: Mapping[str, Any]) -> list[str]:
    perts = _dicts(c.get("perturbations"))
    if not perts:
        return []
    rows = [_beta_row(p, key, label) for p in perts for key, label in _BETAS]
    headers = ["perturbation", "beta", "value", "raw min [95% CI]", "n (effective)", "events", "IQR of events",
               "max non-bifurcating", "upper bound", "control rate", "note"]
    lines = ["## Bifurcation thresholds", "",
             "*How to read this:* value is the smallest target change in the first magnitude bin whose path-change "
             "(or iteration-change) rate clearly exceeds the control's (by default the observational noise of the "
             "bin's own inputs); raw min is the smallest change that "
             "changed the path at all, noise included; an upper bound means fewer than 10 effective pairs probed "
             "below the value.", ""]
    lines += _table(headers, rows, "llrrrrrrlrl") + [""]
    controls = [(p, _map(p.get("control_replays"))) for p in perts if p.get("control_replays")]
    if controls:
        lines += ["Control replays (the target as recorded, or re-run unchanged; downstream live): the noise each "
                  "bin is held against, trace by trace.", ""]
        lines += _table(["perturbation", "control", "replays", "traces", "D_shape rate [95% CI]", "D_iter rate [95% CI]"],
                        [[_pid(p), f"`{c.get('id')}`", fmt_n(c.get("n")), fmt_n(c.get("traces")),
                          fmt_est(c, "D_shape"), fmt_est(c, "D_iter")] for p, c in controls], "llrrrr") + [""]
    for p in perts:
        for key, label in _BETAS:
            lines += _bins(p, key, label)
    return lines


def _verdict(nc: Mapping[str, Any]) -> str:
    passed = nc.get("passed")
    if passed is None:
        return f"not tested: {nc.get('reason') or 'no result'}"
    if passed:
        return "passed"
    return "FAILED: " + ", ".join(str(n) for n in nc.get("rejected") or [])


def _negative_controls(c: Mapping[str, Any]) -> list[str]:
    perts = _dicts(c.get("perturbations"))
    if not perts:
        return []
    lines = ["## Negative controls", "",
             "*How to read this:* per downstream node, whether the no-op pairs drift more than same-input reruns "
             "(one-sided permutation test, Holm-corrected across the nodes); a failure names the nodes whose no-op "
             "distances sit above the noise floor.", ""]
    summary = [[_pid(p), _verdict(_map(p.get("negative_control"))),
                fmt(_map(p.get("negative_control")).get("statistic"), signed=True),
                fmt(_map(p.get("negative_control")).get("p_value"))] for p in perts]
    lines += _table(["perturbation", "verdict", "largest statistic", "smallest p (Holm)"], summary, "llrr") + [""]
    for p in perts:
        nodes = _map(_map(p.get("negative_control")).get("nodes"))
        if not nodes:
            continue
        rows = [[str(n), fmt(r.get("mean_noop")), fmt_n(r.get("n_noop")), fmt(r.get("mean_obs")), fmt_n(r.get("n_obs")),
                 fmt(r.get("statistic"), signed=True), fmt(r.get("p_value")), fmt(r.get("p_holm")),
                 _yes_no(r.get("rejects")) if r.get("p_value") is not None else str(r.get("reason") or DASH)]
                for n, r in nodes.items() if isinstance(r, Mapping)]
        headers = ["node", "mean d no-op", "n", "mean d obs", "n", "no-op − obs", "p", "p (Holm)", "rejects"]
        lines += [f"{_pid(p)}:", ""] + _table(headers, rows, "lrrrrrrrl") + [""]
    return lines


_SECTIONS = (_header, _perturbations, _cascades, _validation, _betas, _negative_controls)


def interventional_report(campaign: Mapping[str, Any]) -> str:
    """The Markdown report of :func:`~quiver._interventional.campaign_estimates`' result.

    Args:
        campaign: The campaign estimates (the dict written to ``campaign.json``).

    Returns:
        The report text, ending with a newline.
    """
    lines: list[str] = []
    for section in _SECTIONS:
        lines += section(campaign)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
