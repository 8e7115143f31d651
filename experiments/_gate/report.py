"""The gate's verdict for people and for CI: Markdown for a pull request, JUnit XML.

Template ids, node names and paths are code spans and every other text of ``gate.json``
(field names, failures, reasons) escaped (:mod:`quiver._report.markup`), so that a
pull-request comment of ``gate.md`` shows them as text; the JUnit XML holds no character
XML cannot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from quiver._report import fmt, fmt_est, gate_findings, gate_iterations, md_code, md_table, md_text, xml_text

__all__ = ["gate_markdown", "gate_junit"]


def _interval(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x")


def _signed(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x", signed=True)


def gate_markdown(data: Mapping[str, Any]) -> str:
    """The gate's verdict as Markdown, fit for a pull-request comment."""
    verdict = md_text(str(data["verdict"]).upper())
    calls = f", {_count(data['llm_calls'])} LLM calls" if isinstance(data.get("llm_calls"), int) else ""
    lines = [f"## quiver gate: {verdict}", "",
             *(f"- {f.markdown()}" for f in gate_findings(data)), "",
             f"{len(data['candidates'])} candidate template(s); {_count(data.get('replays'))} replays{calls}, seed "
             f"{_count(data['seed'])}; familywise level {_count(data.get('familywise', '—'))}; impact sets at alpha "
             f"{_count(data['alpha'])}; profile: {md_text(data['profile'])}.", ""]
    for c in data["candidates"]:
        lines += _candidate(c)
    return "\n".join(lines).rstrip() + "\n"


def _count(x: Any) -> str:
    """A number of ``gate.json`` as it was written (escaped when it is not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return md_text(x)
    return str(x) if isinstance(x, int) else f"{x:g}"


def _candidate(c: Mapping[str, Any]) -> list[str]:
    node = md_code(c["node"])
    lines = [f"### {md_code(c['template'])} at node {node}: {md_text(str(c['verdict']).upper())}", "",
             f"Candidate {md_code(c['path'])}; {_count(c['probes'])} probes over {_count(c['inputs'])} inputs, "
             f"{_count(c['repeats'])} replays each, {_count(c['pairs']['candidate'])} replays per arm. Means with "
             "95% intervals (bootstrap over probe inputs); the difference is that of the means over the same "
             "resamples (replay by replay where both arms measured the node in every replay)."
             + _levels(c), ""]
    table = [(f"d_i ({md_text(c['node'])})", c["d_i"])]
    table += [(f"  field {md_text(f)}", row) for f, row in c.get("fields", {}).items()]
    iterations = gate_iterations(c) is not None
    table += [(f"{md_text(k)} rate", v) for k, v in c["rates"].items() if k != "D_iter" or iterations]
    table += [(f"d ({md_text(v)})", row) for v, row in c["downstream"].items()]
    lines += md_table(["measure", "candidate", "current template", "candidate - current"],
                      [[name, _interval(row["candidate"]), _interval(row["current"]), _signed(row["difference"])]
                       for name, row in table], "lrrr")
    beta = c["beta_shape"]
    lines += ["", f"beta_shape of {node}: {fmt(beta['value'])} ({md_text(beta['source'])}).", ""]
    if c["failures"]:
        lines += ["**Fails:**", ""] + [f"- {md_text(f)}" for f in c["failures"]] + [""]
        if c.get("rates_only_within_noise"):
            level = (c.get("levels") or {}).get("familywise")
            chance = (f"at most {_count(level)} (the familywise level) for a change that moves nothing"
                      if level is not None else "possible")
            lines += [f"Only the rates or the inputs fail, and d_i at {node} is not shown to exceed the current "
                      f"template's own noise: the chance of such a false alarm is {chance}. Gating again at "
                      "another `--seed` tells the two apart.", ""]
    lines += _inputs(c)
    lines += _outcome(c)
    if c["within_noise"]:
        lines += [f"d_i is not shown to exceed the current template's own noise at {node} by more than "
                  f"epsilon = {fmt(c['epsilon'])}: nothing to re-evaluate.", ""]
    elif c["re_evaluate"]:
        lines += ["**Re-evaluate** (impact set):", ""]
        lines += [f"- {md_code(m['node'])}: {'; '.join(md_text(r) for r in m['reasons'])}"
                  for m in c["re_evaluate"]] + [""]
    else:
        lines += ["The profile's impact set is empty at this alpha: nothing to re-evaluate.", ""]
    if c["moved"]:
        lines += ["Measured: the distance rose at " + ", ".join(md_code(v) for v in c["moved"]) + ".", ""]
    return lines


def _outcome(c: Mapping[str, Any]) -> list[str]:
    """The outcome criterion: the arms' pass rates, the difference and its test interval,
    the decision at the non-inferiority margin, and why it says re-evaluate."""
    o = c.get("outcome")
    if not isinstance(o, Mapping):
        return []
    ci = o.get("test_ci") or [None, None]
    lines = ["**Outcome** (the pass rate, candidate against the current template; non-inferiority margin "
             f"{_count(o.get('margin'))}):", "",
             *md_table(["measure", "candidate", "current template", "candidate - current",
                        f"{100 * o['test_level']:.4g}% test interval", "decision"],
                       [["pass rate", _interval(o["candidate"]), _interval(o["current"]), _signed(o["difference"]),
                         f"[{fmt(ci[0], signed=True)}, {fmt(ci[1], signed=True)}]", md_text(o["decision"])]],
                       "lrrrrl"), ""]
    if o.get("undecided"):
        lines += [f"**Re-evaluate:** {md_text(o['undecided'])}.", ""]
    return lines


def _levels(c: Mapping[str, Any]) -> str:
    levels = c.get("levels")
    if not isinstance(levels, Mapping):
        return ""
    each = float(levels.get("average_each") or 0.0)
    return (f" The verdict's tests share the familywise level {_count(levels.get('familywise'))}: the D_shape and "
            f"D_iter rates and d_i beyond beta_shape at {each:.3g} each (one-sided: the lower end of the "
            f"{100 * (1 - 2 * each):.3g}% interval of the difference above 0), the inputs at "
            f"{_count(levels.get('inputs'))} (Holm).")


def _inputs(c: Mapping[str, Any]) -> list[str]:
    """The per-input tests: how they were made, the inputs that moved (their rates and n),
    and the inputs that could not be tested."""
    per = c.get("per_input")
    if not isinstance(per, Mapping):
        return []
    rows = {str(g.get("input_id")): g for g in per.get("inputs") or [] if isinstance(g, Mapping)}
    lines = [f"**Per input** ({_count(len(rows))} inputs; the path changed, {md_text(per.get('event'))}, in the "
             f"candidate's replays against the current template's on the same probes; "
             f"{md_text(per.get('test'))}; {md_text(per.get('correction'))}, "
             f"{_count(per.get('family'))} input(s) in it, at {_count(per.get('alpha'))}).", ""]
    moved = [rows[g] for g in per.get("moved") or [] if g in rows]
    if moved:
        lines += ["Inputs whose path moved:", ""]
        lines += md_table(["input", "candidate", "current template", "p", "Holm p"],
                          [[md_code(g["input_id"]), _share(g["events"], g["n"]),
                            _share(g["control_events"], g["control_n"]), _p(g.get("p_value")), _p(g.get("p_holm"))]
                           for g in moved], "lrrrr") + [""]
    else:
        lines += ["No input's path moved beyond its current-template rate at this level.", ""]
    if per.get("enough_replays") is False:
        lines += [f"With {_count(c.get('repeats'))} replays per probe and arm no input's change can be tested among "
                  f"{_count(len(rows))} inputs: {_count(per.get('replays_needed'))} would test a complete change.", ""]
    untested = [rows[g] for g in per.get("untestable") or [] if g in rows]
    if untested:
        found = per.get("replays_to_test")
        more: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        lines += ["Not testable with these replays, though the candidate changed the path more often: "
                  + ", ".join(f"{md_code(g['input_id'])} ({_share(g['events'], g['n'])} against "
                              f"{_share(g['control_events'], g['control_n'])}"
                              + (f"; about {_count(more[g['input_id']])} replays per arm would test it"
                                 if isinstance(more.get(g["input_id"]), int) else "") + ")" for g in untested)
                  + ".", ""]
    unprobed = [str(g) for g in per.get("unprobed") or []]
    if unprobed:
        lines += [f"Not tested, no probe (the probe budget is below the inputs): {_count(len(unprobed))} input(s): "
                  + ", ".join(md_code(g) for g in unprobed) + ".", ""]
    return lines


def _share(k: Any, n: Any) -> str:
    return f"{_count(k)} of {_count(n)}"


def _p(p: Any) -> str:
    return "—" if not isinstance(p, (int, float)) or isinstance(p, bool) else f"{p:.3g}"


def gate_junit(data: Mapping[str, Any]) -> str:
    """The gate's verdict as JUnit XML: one test case per candidate template."""
    cases = []
    for c in data["candidates"]:
        name = quoteattr(xml_text(f"{c['template']} ({c['node']})"))
        if c["verdict"] in ("fail", "re-evaluate"):  # an undecided outcome is no pass either
            said = c["failures"] or c.get("re_evaluate_because") or ["re-evaluate"]
            message = quoteattr(xml_text("; ".join(said)))
            body = escape(xml_text("\n".join(said)))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <failure message={message} type="gate">{body}</failure>\n  </testcase>')
        else:
            out = escape(xml_text("re-evaluate: " + (", ".join(m["node"] for m in c["re_evaluate"]) or "nothing")))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <system-out>{out}</system-out>\n  </testcase>')
    failures = sum(c["verdict"] in ("fail", "re-evaluate") for c in data["candidates"])
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuite name="quiver gate" tests="{len(data["candidates"])}" failures="{failures}" errors="0" '
            f'time="{data.get("seconds", 0)}">\n' + "\n".join(cases) + "\n</testsuite>\n")
