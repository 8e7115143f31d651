"""What ``quiver localize`` found, for people: the findings first, then each failure's
steps with their effects (``localize.md``, and the folder's ``report.html``; the console
prints the findings). Every number is read from ``localize.json``."""

from __future__ import annotations

import re
from typing import Any

from quiver._stats import fmt

from .html import details, markdown_html, md_sections, page
from .markup import Markup, element, md_code, md_text

__all__ = ["localize_findings", "localize_markdown", "localize_page"]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def localize_findings(data: dict[str, Any]) -> list[str]:
    """A few sentences, each number from ``localize.json`` with its n and interval."""
    n = data["localized"]
    if n == 0:
        return [f"No failing run to localise: {data['failing']} of {data['traces']} traces failed their outcome "
                "checks."]
    out = []
    for share in data["nodes"][:3]:
        lo, hi = share["share_ci"] or (None, None)
        out.append(f"{share['node']} is the decisive step in {_pct(share['share'])} of failures [{_pct(lo)}, "
                   f"{_pct(hi)}] ({share['decisive']} of {share['failures']} failures localised).")
    v = data["verdicts"]
    rest = []
    if v.get("undecided"):
        rest.append(f"{v['undecided']} undecided (the replay budget of {data['settings']['budget']} per failure "
                    "ran out first)")
    if v.get("no single step"):
        rest.append(f"{v['no single step']} with no single step whose intervention raises the pass rate")
    if v.get("observational only"):
        rest.append(f"{v['observational only']} imported, answered observationally only (the first step that "
                    "differs from a passing run of the same input)")
    if rest:
        out.append("Of the failures, " + "; ".join(rest) + ".")
    per = data["replays_per_failure"]
    out.append(f"{data['replays']} replays ({per['mean']:.1f} per failure on average, at most {per['max']}), "
               f"{data['llm_calls']} LLM calls" + (f" and {data['judge_calls']} judge calls" if data["judge_calls"]
                                                   else "") + ".")
    return out


def _step_row(step: dict[str, Any]) -> str:
    effect = step.get("effect")
    ci = step.get("effect_ci") or [None, None]
    arms = ""
    if "intervention" in step:
        i, c = step["intervention"], step["control"]
        arms = f"{i['passed']}/{i['n']} vs {c['passed']}/{c['n']}"
    return (f"| {step['index']} | {md_code(step['node'])}#{step['occurrence']} | {step['how']} | {arms or '—'} | "
            f"{fmt(effect, signed=True)} [{fmt(ci[0], signed=True)}, {fmt(ci[1], signed=True)}] | "
            f"{step.get('state', md_text(step.get('why') or '—'))} |")


def localize_markdown(data: dict[str, Any]) -> str:
    """``localize.md``."""
    lines = ["# Which step broke each failing run", "", "## What was found", ""]
    lines += [f"* {md_text(s)}" for s in localize_findings(data)]
    s = data["settings"]
    lines += ["", f"{data['failing']} of {data['traces']} traces failed their outcome checks; {data['localized']} "
              f"localised. A step is decisive when its intervention (a transplant from a passing run of the same "
              f"input, or a resample) passes more often than its control (the step kept, what follows re-run) by "
              f"a one-sided Fisher exact test at {s['alpha']} over the failure's tested steps (Bonferroni); the "
              f"earliest such step is the failure's decisive step. Replays per arm {s['n_min']} to {s['n_max']}, "
              f"at most {s['budget']} per failure.", "", "## Failures", ""]
    for row in data["failures"]:
        d = row.get("decisive")
        at = f" at {md_code(d['node'])}#{d['occurrence']}" if d else ""
        head = f"### {md_code(row['trace_id'])}: {row['verdict']}{at}"
        lines += [head, ""]
        if row.get("decisive"):
            d = row["decisive"]
            ci = d.get("effect_ci") or [None, None]
            lines.append(f"Decisive: {md_code(d['node'])}#{d['occurrence']} (step {d['step']}, {d['how']}), "
                         f"effect {fmt(d.get('effect'), signed=True)} [{fmt(ci[0], signed=True)}, "
                         f"{fmt(ci[1], signed=True)}].")
        obs = row.get("observational")
        if obs:
            lines.append(f"Observational answer (the first step that differs from the passing run "
                         f"{md_code(obs['against'])}): {md_code(obs['node'])}#{obs['occurrence']}.")
        if row.get("steps"):
            lines += ["", "| step | call | intervention | passed (intervention vs control) | effect [95% CI] | "
                      "state |", "|---|---|---|---|---|---|"]
            lines += [_step_row(step) for step in row["steps"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def localize_page(data: dict[str, Any]) -> str:
    """The localisation's page: the findings first, then each failure folded, its steps'
    effects in a table."""
    findings = element("section", element("h2", "What was found"),
                       element("ul", Markup("").join(element("li", f) for f in localize_findings(data)),
                               id="findings"), class_="findings")
    md = localize_markdown(data)
    sections = dict(md_sections(md))
    intro = sections.get("What was found", "").split("\n\n", 1)[-1]
    failures = sections.get("Failures", "")
    body: list[Markup] = [findings, markdown_html(intro), Markup("<h2>Failures</h2>")]
    for block in re.split(r"(?m)^### ", failures)[1:]:
        title, _, rest = block.partition("\n")
        body.append(details(title.replace("`", ""), [markdown_html(rest)]))
    return page("QUIVER localisation report", body)
