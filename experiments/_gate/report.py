"""The gate's verdict for people and for CI: Markdown for a pull request, JUnit XML."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from quiver._report import fmt, fmt_est

__all__ = ["gate_markdown", "gate_junit"]


def _interval(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x")


def _signed(row: Mapping[str, Any]) -> str:
    return fmt_est({"x": row["value"], "x_ci": row["ci"]}, "x", signed=True)


def gate_markdown(data: Mapping[str, Any]) -> str:
    """The gate's verdict as Markdown, fit for a pull-request comment."""
    verdict = str(data["verdict"]).upper()
    lines = [f"## quiver gate: {verdict}", "",
             f"{len(data['candidates'])} candidate template(s); {data['probes']} probes x {data['repeats']} "
             f"replays per arm, seed {data['seed']}; impact sets at alpha {data['alpha']:g}; profile: "
             f"{data['profile']}.", ""]
    for c in data["candidates"]:
        lines += [f"### `{c['template']}` at node `{c['node']}`: {c['verdict'].upper()}", "",
                  f"Candidate `{c['path']}`; {c['probes']} probes over {c['inputs']} inputs, "
                  f"{c['pairs']['candidate']} replays per arm. Means with 95% intervals (bootstrap over "
                  "probe inputs); the difference is that of the means over the same resamples (replay by replay "
                  "where both arms measured the node in every replay).", "",
                  "| measure | candidate | current template | candidate - current |",
                  "| --- | ---: | ---: | ---: |"]
        table = [(f"d_i ({c['node']})", c["d_i"])]
        table += [(f"  field {f}", row) for f, row in c.get("fields", {}).items()]
        table += [(f"{k} rate", v) for k, v in c["rates"].items()]
        table += [(f"d ({v})", row) for v, row in c["downstream"].items()]
        for name, row in table:
            lines.append(f"| {name} | {_interval(row['candidate'])} | {_interval(row['current'])} | "
                         f"{_signed(row['difference'])} |")
        beta = c["beta_shape"]
        lines += ["", f"beta_shape of `{c['node']}`: {fmt(beta['value'])} ({beta['source']}).", ""]
        if c["failures"]:
            lines += ["**Fails:**", ""] + [f"- {f}" for f in c["failures"]] + [""]
            if c.get("rates_only_within_noise"):
                lines += [f"Only the rates fail, and d_i at `{c['node']}` is within the current template's own "
                          "noise: the rate test's false alarm (about 1 in 40 changes that move nothing, per rate) "
                          "is possible. Gating again at another `--seed` tells the two apart.", ""]
        if c["within_noise"]:
            lines += [f"d_i does not exceed the current template's own noise at `{c['node']}` by more than "
                      f"epsilon = {fmt(c['epsilon'])}: nothing to re-evaluate.", ""]
        elif c["re_evaluate"]:
            lines += ["**Re-evaluate** (impact set):", ""]
            lines += [f"- `{m['node']}`: {'; '.join(m['reasons'])}" for m in c["re_evaluate"]] + [""]
        else:
            lines += ["The profile's impact set is empty at this alpha: nothing to re-evaluate.", ""]
        if c["moved"]:
            lines += ["Measured: the distance rose at " + ", ".join(f"`{v}`" for v in c["moved"]) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


def gate_junit(data: Mapping[str, Any]) -> str:
    """The gate's verdict as JUnit XML: one test case per candidate template."""
    cases = []
    for c in data["candidates"]:
        name = quoteattr(f"{c['template']} ({c['node']})")
        if c["verdict"] == "fail":
            message = quoteattr("; ".join(c["failures"]))
            body = escape("\n".join(c["failures"]))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <failure message={message} type="gate">{body}</failure>\n  </testcase>')
        else:
            out = escape("re-evaluate: " + (", ".join(m["node"] for m in c["re_evaluate"]) or "nothing"))
            cases.append(f'  <testcase classname="quiver.gate" name={name}>\n'
                         f'    <system-out>{out}</system-out>\n  </testcase>')
    failures = sum(c["verdict"] == "fail" for c in data["candidates"])
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuite name="quiver gate" tests="{len(data["candidates"])}" failures="{failures}" errors="0" '
            f'time="{data.get("seconds", 0)}">\n' + "\n".join(cases) + "\n</testsuite>\n")
