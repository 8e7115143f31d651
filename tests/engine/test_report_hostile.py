"""Every page and Markdown report the engine writes, with hostile strings in every field.

Node names, template ids, perturbation ids, field names, categorical values, input ids,
error messages and spec names come from traces, specs and JSON files that a report is
rebuilt from; any of them may be ``x"><script>...``. The reports are built here, once
with hostile strings and once with plain ones in the same places:

* an analysis: ``quiver analyze`` of a small corpus written here (four nodes in a chain
  after the source, one of them named with 5,007 characters, a categorical routing field,
  several runs per input) with its plots;
* a campaign: ``quiver report`` of ``tests/data/campaign_adaptive.json`` with its
  identifiers renamed, a second perturbation without a ladder, downstream nodes, failed
  replays, a failed negative control and a validation row added, and the analysis above
  as its ``observational/`` folder;
* a gate: ``quiver report`` of a ``gate.json`` shaped as the README gate's (two
  candidates), and its JUnit XML;
* ``quiver compare`` of the corpus against a variant of itself, and an attribution;
* two example pairs of the campaign (``examples.json``, shown on its page) and
  ``quiver show`` of each, and its ``--list``.

Each page is opened in headless Chromium: no script runs (``window.__pwned`` stays
undefined, no dialog, no console message), no element is injected (as many ``script``,
``img``, ``iframe``, ``a`` elements and ``on...`` attributes as the plain page), every
hostile string is there as text, no chart label runs beyond a bounded width and the page
(its details open) is about as wide as the plain one: a name wraps in its cell. Each
Markdown file has no tag outside its code spans, and markdown-it (HTML enabled, as a
sanitizer would get it) renders it to the same elements as the plain one.

Writers build markup through ``quiver._report.markup``: the page and chart assemblers
take :class:`Markup` only, and ``Markup(...)`` is only ever called on a string literal.
"""

from __future__ import annotations

import ast
import copy
import json
import random
import re
import struct
import time
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fuzzing import CliResult, run_cli

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data" / "campaign_adaptive.json"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
LONG = "L" * 4999 + "-the-end"  # 5,007 characters

# role -> (hostile, plain): the same structure, other names
ROLES: dict[str, tuple[str, str]] = {
    "source": ("input", "input"),  # path products start after the node named "input" (the recorders' source)
    "target": ('x"><script>window.__pwned=1</script><b x"', "planner"),
    "middle": ("<img src=x onerror=window.__pwned=3>", "executor"),
    "bidi": ("\u202eevil\u202c $\\frac{x}$ <svg/onload=window.__pwned=9>", "composer"),  # $: mathtext
    "long": (LONG, "critic"),
    "field": ("</style><script>window.__pwned=6</script>", "intent"),
    "value": ("`|\n<img src=x onerror=__pwned=8>", "alpha"),  # categorical: 32 characters at most
    "value2": ("' onmouseover='__pwned=7' x='", "beta"),
    "input": ("javascript:window.__pwned=4//", "in"),
    "pid": ("]]><!--<svg onload=window.__pwned=5>-->", "shift"),
    "pid2": ("</title><script>window.__pwned=2</script>`|x|", "shift-2"),
    "control": ('"><a href="javascript:window.__pwned=11">c</a>', "control-1"),
    "param": ("</textarea><object data=javascript:window.__pwned=12>", "amount"),
    "reason": ("<!-- --><script>window.__pwned=13</script>\n# heading\n| a | b |", "endpoint timed out"),
    "template": ('x"><script>window.__pwned=14</script><b x"', "support_bot.planner"),
    "template2": (LONG[:-8] + "-tmpl-id", "support_bot.rewriter"),
    "path": ("javascript:alert(15)//<script>window.__pwned=15</script>", "prompts/planner.txt"),
    "spec": ("<base href=javascript:window.__pwned=16>", "specs/support_bot.yaml"),
}



def names(hostile: bool) -> dict[str, str]:
    return {role: pair[0 if hostile else 1] for role, pair in ROLES.items()}


# --------------------------------------------------------------------------- inputs


def write_corpus(path: Path, n: dict[str, str], seed: int) -> None:
    """Eight inputs, three runs each: source -> target (a categorical routing field,
    a numeric one, the decision) -> middle -> bidi -> long."""
    rng = random.Random(seed)
    values = [n["value"], n["value2"], "ok"]
    lines = []
    for i in range(8):
        for r in range(3):
            k = (i + (r if rng.random() < 0.4 else 0)) % len(values)
            x = float(k) + rng.random() * 0.01
            chain = [("target", {n["field"]: values[k], "score": x}), ("middle", {"n": x * 2 + rng.random() * 0.05}),
                     ("bidi", {"n": x * 3}), ("long", {"n": x * 3 + (r % 2) * 0.5})]
            calls = [{"call_id": "c0", "node": n["source"], "occurrence": 0, "call_path": "s#0", "kind": "source",
                      "output": {"q": i}}]
            for j, (role, output) in enumerate(chain, 1):
                calls.append({"call_id": f"c{j}", "node": n[role], "occurrence": 0, "call_path": f"n{j}#0",
                              "kind": "transform", "parents": [f"c{j - 1}"], "output": output,
                              "decision": {"route": values[k]} if role == "target" else {}})
            lines.append(json.dumps({"schema_version": 1, "trace_id": f"t{i}-{r}", "run_id": "r", "pipeline": "p",
                                     "input_id": f"{n['input']} {i}", "repeat": r, "inputs": {"q": i},
                                     "calls": calls, "output": x}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _rename(data: Any, values: dict[str, str], keys: dict[str, str]) -> Any:
    if isinstance(data, dict):
        return {keys.get(k, k): _rename(v, values, keys) for k, v in data.items()}
    if isinstance(data, list):
        return [_rename(v, values, keys) for v in data]
    return values.get(data, data) if isinstance(data, str) else data


def _estimates(nodes: list[str], value: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("mean_d", "mean_d_given_shape"):
        out[key] = dict.fromkeys(nodes, value)
        out[f"{key}_ci"] = {v: [value / 2, min(1.0, value * 1.5)] for v in nodes}
        out[f"{key}_n"] = dict.fromkeys(nodes, 40)
    return out


def campaign_json(n: dict[str, str]) -> dict[str, Any]:
    """``campaign_adaptive.json`` with its identifiers renamed and every kind of entry
    that carries a name added."""
    nodes = {"score": n["target"], "input": n["source"], "decide": n["middle"], "hold": n["bidi"],
             "route": n["long"]}
    raw = json.loads(DATA.read_text(encoding="utf-8"))
    data: dict[str, Any] = _rename(raw, {**nodes, "shift": n["pid"], "value": n["field"], "amount": n["param"],
                                         "control.score.0.served": n["control"]}, nodes)
    first = data["perturbations"][0]
    downstream = [n["middle"], n["bidi"], n["long"]]
    first["downstream"] = downstream
    for name, value in (("effective", 0.4), ("noop", 0.05)):
        first["strata"][name].update(_estimates(downstream, value))
    first["failed"] = 2
    first["failures"] = {"count": 2, "by_reason": {n["reason"]: 2}}
    first["negative_control"] = {
        "passed": False, "alpha": 0.05, "permutations": 2000, "statistic": 0.2, "p_value": 0.001,
        "rejected": [n["middle"]], "reason": None,
        "nodes": {n["middle"]: {"statistic": 0.2, "p_value": 0.001, "p_holm": 0.002, "n_noop": 38, "n_obs": 24,
                                "mean_noop": 0.3, "mean_obs": 0.1, "rejects": True},
                  n["long"]: {"statistic": None, "p_value": None, "p_holm": None, "n_noop": 0, "n_obs": 0,
                              "mean_noop": None, "mean_obs": None, "rejects": None, "reason": n["reason"]}}}
    second = copy.deepcopy(first)
    second["id"] = n["pid2"]
    second.pop("adaptive", None)
    second["ladder"] = None
    data["perturbations"].append(second)
    data["controls"][0]["perturbations"].append(n["pid2"])
    data["validation"] = [{
        "source": n["target"], "target": n["middle"], "perturbations": [n["pid"]], "sigma_obs": 1.2,
        "sigma_obs_ci": [0.9, 1.5], "n_obs": 24, "sigma_int": 1.1, "sigma_int_ci": [1.0, 1.3], "n_int": 200,
        "agree": True, "envelope": [0.01, 0.06], "n_envelope": 24, "sigma_matched": 1.0,
        "sigma_matched_ci": [0.8, 1.2], "n_matched": 120, "groups_matched": 20, "share_beyond": 0.5,
        "share_beyond_ci": [0.4, 0.6], "share_beyond_n": 200, "verdict": n["reason"]}]
    data["validation_skipped"] = [{"source": n["middle"], "target": n["long"], "perturbations": [n["pid2"]],
                                   "reason": n["reason"]}]
    return data


def _arm(value: float, n: int = 100) -> dict[str, Any]:
    return {"value": value, "ci": [value * 0.7, value * 1.3], "n": n}


def _measure(cand: float, curr: float) -> dict[str, Any]:
    return {"candidate": _arm(cand), "current": _arm(curr),
            "difference": {"value": cand - curr, "ci": [cand - curr - 0.05, cand - curr + 0.05], "n": 100},
            "rises": cand > curr + 0.05}


def gate_json(n: dict[str, str]) -> dict[str, Any]:
    """A ``gate.json`` in the shape of the README gate's: a failing candidate and a
    passing one."""
    def candidate(template: str, node: str, verdict: str) -> dict[str, Any]:
        fail = verdict == "fail"
        return {
            "template": template, "path": n["path"], "node": node, "probes": 50, "repeats": 2, "inputs": 40,
            "pairs": {"candidate": 100, "current": 100}, "d_i": _measure(0.09, 0.03),
            "fields": {n["field"]: _measure(0.36, 0.13), n["value"]: _measure(0.0, 0.0)},
            "rates": {"D_shape": _measure(0.43, 0.16), "D_iter": _measure(0.43, 0.16)},
            "beta_shape": {"value": 0.125, "source": n["reason"]},
            "downstream": {n["middle"]: _measure(0.44, 0.18), n["long"]: _measure(0.12, 0.04)},
            "verdict": verdict, "failures": [f"the D_shape rate rises at {node}: {n['reason']}"] if fail else [],
            "within_noise": not fail, "epsilon": 0.01,
            "re_evaluate": [{"node": n["middle"], "reasons": [n["reason"], f"path {node} -> {n['bidi']}"]}]
            if fail else [], "moved": [n["middle"], n["long"]] if fail else [], "rates_only_within_noise": fail,
        }

    return {"verdict": "fail", "spec": n["spec"], "profile": n["path"], "campaign_profile": True, "alpha": 0.5,
            "seed": 0, "probes": 50, "repeats": 2, "resamples": 1000,
            "candidates": [candidate(n["template"], n["target"], "fail"), candidate(n["template2"], n["bidi"], "pass")],
            "replays": 400, "llm_calls": 888, "baseline_lines_skipped": 0, "seconds": 12.5}


def attribution_md(folder: Path, n: dict[str, str]) -> Path:
    from quiver._stats import Estimate
    from quiver.experiments._attribute import Attribution, write_attribution

    nodes = [n["target"], n["middle"], n["long"]]
    rate = {v: Estimate(0.2, (0.1, 0.3), 40) for v in nodes}
    conditions = ("frozen", "sampling", "prompt", "model")
    result = Attribution(nodes=nodes, dimensions=["prompt", "model"], rates=dict.fromkeys(conditions, rate),
                         increments={d: rate for d in ("prompt", "model")}, reproduced=40, not_reproduced=[n["input"]],
                         repeats=2, llm_calls={"sampling": 80})
    return write_attribution(result, folder)[1]


def example_pairs(n: dict[str, str], campaign: Path, before: Path, after: Path) -> list[dict[str, Any]]:
    """Two pairs of the first perturbation (an effective one: the other corpus's run of
    the same input as its replay; a no-op), written as a campaign writes them
    (``pairs.jsonl``, ``replays.jsonl``, ``examples.json``); returns their rows."""
    from quiver._interventional import PairRow
    from quiver._report.examples import write_examples
    from quiver._trace import iter_traces

    base = next(iter_traces(before))
    other = next(t for t in iter_traces(after) if t.input_id == base.input_id)
    pid = n["pid"]
    rows, replays = [], []
    for repeat, (stratum, run) in enumerate((("effective", other), ("noop", base))):
        replays.append(run.model_copy(update={"trace_id": f"{base.trace_id}~{pid}#0/{repeat}"}))
        rows.append({"perturbation_id": pid, "status": "ok", "trace_id": base.trace_id, "input_id": base.input_id,
                     "repeat": repeat, "node": n["target"], "occurrence": 0, "op": "numeric_edit",
                     "params": {n["param"]: 0.2}, "stratum": stratum, "magnitude": 0.3 if repeat == 0 else 0.0,
                     "D_iter": 0, "D_shape": repeat == 0, "D_output": repeat == 0, "D_struct": False,
                     "d": {n["target"]: 0.3 if repeat == 0 else 0.0, n["middle"]: 0.5 if repeat == 0 else 0.0},
                     "job_id": f"{pid}/0/{base.trace_id}/{repeat}", "replay_id": f"{pid}#0", "step": 0})
    (campaign / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (campaign / "replays.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in replays), encoding="utf-8")
    write_examples(campaign, [PairRow.from_json(r) for r in rows], [base], campaign_json(n), before)
    return rows


def build(base: Path, hostile: bool) -> dict[str, Any]:
    """Every report, built from hostile or plain names under ``base``."""
    n = names(hostile)
    base.mkdir(parents=True)
    write_corpus(base / "before.jsonl", n, 0)
    write_corpus(base / "after.jsonl", n, 1)
    analysis = base / "analysis"
    command = ["analyze", str(base / "before.jsonl"), "--out", str(analysis), "--resamples", "200", "--quiet",
               "--cache", str(base / "embeddings")]
    try:
        analyzed: Any = run_cli(command, seconds=300)
    except Exception as exc:  # a traceback: test_the_commands_ran_without_error fails, the others get a page
        analyzed = f"{type(exc).__name__}: {exc}"
    if not isinstance(analyzed, CliResult) or analyzed.code != 0:
        run_cli([*command, "--no-plots"], seconds=300)
    campaign = base / "campaign"
    (campaign / "observational").mkdir(parents=True)
    for p in analysis.iterdir():
        if p.suffix in (".json", ".png"):
            (campaign / "observational" / p.name).write_bytes(p.read_bytes())
    (campaign / "campaign.json").write_text(json.dumps(campaign_json(n)), encoding="utf-8")
    rows = example_pairs(n, campaign, base / "before.jsonl", base / "after.jsonl")
    gate = base / "gate"
    gate.mkdir()
    (gate / "gate.json").write_text(json.dumps(gate_json(n)), encoding="utf-8")
    reports = {kind: run_cli(["report", str(folder)], seconds=120) for kind, folder in
               (("campaign", campaign), ("gate", gate))}
    shown = [run_cli(["show", str(campaign), row["job_id"]], seconds=60) for row in rows]
    shown.append(run_cli(["show", str(campaign), "--list"], seconds=60))
    compared = run_cli(["compare", str(base / "before.jsonl"), str(base / "after.jsonl"), "--out",
                        str(base / "compare"), "--resamples", "200"], seconds=120)
    from quiver.experiments._gate import gate_junit

    (gate / "junit.xml").write_text(gate_junit(gate_json(n)), encoding="utf-8")
    return {"names": n, "base": base, "analyzed": analyzed, "reports": reports, "compared": compared,
            "attribution": attribution_md(base / "attribution", n), "shown": shown}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    start = time.perf_counter()
    base = tmp_path_factory.mktemp("hostile")
    out = {hostile: build(base / ("hostile" if hostile else "plain"), hostile) for hostile in (True, False)}
    print(f"built every report twice in {time.perf_counter() - start:.1f} s")
    return out


PAGES = {"campaign": "campaign/report.html", "observational": "campaign/observational/report.html",
         "analysis": "analysis/report.html", "gate": "gate/report.html"}
MARKDOWN = {"campaign": "campaign/report.md", "observational": "campaign/observational/report.md",
            "analysis": "analysis/report.md", "gate": "gate/gate.md", "compare": "compare/compare.md",
            "attribution": "attribution/attribution.md"}
REACHES = {  # the roles each report must show
    "campaign": ["target", "middle", "bidi", "long", "pid", "pid2", "control", "param", "field", "reason"],
    "observational": ["target", "middle", "bidi", "long", "field"],
    "analysis": ["target", "middle", "bidi", "long", "field"],
    "gate": ["template", "template2", "target", "middle", "bidi", "long", "field", "value", "path", "reason"],
    "compare": ["target", "middle", "bidi", "long"],
    "attribution": ["target", "middle", "long"],
}

ON_THE_PAGE = {"campaign": ["input"]}  # the example pairs' input, on the page only
"""Roles a page shows beyond its Markdown's."""


# --------------------------------------------------------------------------- the runs


def test_the_commands_ran_without_error(built: dict[bool, dict[str, Any]]) -> None:
    for hostile, b in built.items():
        assert isinstance(b["analyzed"], CliResult), (hostile, b["analyzed"])
        assert b["analyzed"].code == 0, (hostile, b["analyzed"].stderr[-3000:])
        for kind, result in b["reports"].items():
            assert result.code == 0, (hostile, kind, result.stderr[-3000:])
        assert b["compared"].code in (0, 1), (hostile, b["compared"].stderr[-3000:])


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_a_long_node_name_is_plotted_with_a_shortened_label(built: dict[bool, dict[str, Any]]) -> None:
    """A 5,007-character node name: ``quiver analyze`` draws the three plots at their
    usual resolution (the label is cut, not the figure stretched)."""
    folder = built[True]["base"] / "analysis"
    plain = built[False]["base"] / "analysis"
    for name in ("ratios.png", "sigma_matrix.png", "graph.png"):
        assert (folder / name).is_file(), name
        (w, h), (pw, ph) = _png_size(folder / name), _png_size(plain / name)
        print(f"{name}: {w} x {h} (plain names: {pw} x {ph})")
        assert w < 3 * pw + 600 and h < 3 * ph + 600, name


# --------------------------------------------------------------------------- in Chromium


@pytest.fixture(scope="module")
def browser() -> Any:
    sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (CI installs Debian's chromium)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


_INSPECT = """() => {
  const all = Array.from(document.querySelectorAll('*'));
  const count = s => document.querySelectorAll(s).length;
  const own = e => Array.from(e.childNodes).filter(c => c.nodeType === 3).map(c => c.data).join('');
  return {
    pwned: typeof window.__pwned,
    tags: {script: count('script'), img: count('img'), iframe: count('iframe'), object: count('object'),
           embed: count('embed'), a: count('a'), base: count('base'), style: count('style'),
           title: count('head title'),
           svg: count('svg'), textarea: count('textarea'), p: count('p'), b: count('b'), table: count('table'),
           tr: count('tr'), td: count('td'), details: count('details'), code: count('code'), h1: count('h1'),
           h2: count('h2'), h3: count('h3'), li: count('li')},
    handlers: all.filter(e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
    text: document.documentElement.textContent,
    longest_label: Math.max(0, ...Array.from(document.querySelectorAll('svg text')).map(e => own(e).length)),
    widest_chart: Math.max(0, ...Array.from(document.querySelectorAll('svg.plot')).map(
      e => e.getBoundingClientRect().width)),
    width: (document.querySelectorAll('details').forEach(d => { d.open = true; }),
            document.documentElement.scrollWidth),
  };
}"""


def _open(browser: Any, path: Path) -> dict[str, Any]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    events: list[str] = []
    page.on("console", lambda m: events.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: events.append(f"page error: {e}"))
    page.on("dialog", lambda d: (events.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else events.append(f"request {r.url}"))
    page.goto(path.as_uri(), wait_until="load")
    page.mouse.move(300, 300)
    seen: dict[str, Any] = page.evaluate(_INSPECT)
    page.close()
    seen["events"] = events
    return seen


def _shown(text: str, value: str) -> bool:
    from quiver._report.markup import visible

    return value in text or visible(value) in text or " ".join(value.split()) in " ".join(text.split())


@pytest.mark.parametrize("kind", sorted(PAGES))
def test_no_script_runs_and_no_element_is_injected_in_report_html(
        kind: str, built: dict[bool, dict[str, Any]], browser: Any) -> None:
    start = time.perf_counter()
    hostile, plain = (_open(browser, built[h]["base"] / PAGES[kind]) for h in (True, False))
    print(f"{kind}: both pages opened in {time.perf_counter() - start:.1f} s")
    assert hostile["pwned"] == "undefined"
    assert hostile["events"] == plain["events"] == []
    assert hostile["handlers"] == plain["handlers"] == 0
    assert hostile["tags"] == plain["tags"]
    n = built[True]["names"]
    missing = [role for role in [*REACHES[kind], *ON_THE_PAGE.get(kind, [])] if not _shown(hostile["text"], n[role])]
    assert missing == [], f"not shown as text on the {kind} page: {missing}"
    assert hostile["longest_label"] <= 120, hostile["longest_label"]
    assert hostile["widest_chart"] <= max(1200, plain["widest_chart"] * 1.5), (hostile["widest_chart"],
                                                                                 plain["widest_chart"])
    assert hostile["width"] <= max(1600, plain["width"] * 1.25), (hostile["width"], plain["width"])  # names wrap


# --------------------------------------------------------------------------- Markdown


def _outside_code(md: str) -> str:
    """``md`` with its code spans (CommonMark: a backtick run to the next run of the same
    length) and backslash-escaped characters taken out."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "\\" and i + 1 < len(md):
            i += 2
            continue
        if md[i] == "`":
            run = re.match(r"`+", md[i:]).group(0)  # type: ignore[union-attr]
            close = re.compile(rf"(?<!`){run}(?!`)").search(md, i + len(run))
            if close is not None:
                i = close.end()
                continue
            out.append(run)
            i += len(run)
            continue
        out.append(md[i])
        i += 1
    return "".join(out)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.bad: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.bad.append(f"<{tag} {name}={value!r}>")
        if tag not in {"p", "h1", "h2", "h3", "h4", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "em",
                       "ul", "li", "hr", "blockquote", "img"}:
            self.bad.append(f"<{tag}>")
        if tag == "img" and dict(attrs).get("src") not in ("ratios.png", "sigma_matrix.png", "graph.png",
                                                           "observational/ratios.png",
                                                           "observational/sigma_matrix.png",
                                                           "observational/graph.png"):
            self.bad.append(f"<img {attrs}>")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _render(md: str) -> _Tags:
    from markdown_it import MarkdownIt

    parser = _Tags()
    parser.feed(MarkdownIt("commonmark", {"html": True}).enable("table").render(md))
    return parser


@pytest.mark.parametrize("kind", sorted(MARKDOWN))
def test_markdown_keeps_every_name_in_text(kind: str, built: dict[bool, dict[str, Any]]) -> None:
    md, plain = ((built[h]["base"] / MARKDOWN[kind]).read_text(encoding="utf-8") for h in (True, False))
    outside = _outside_code(md)
    tags = re.findall(r"<[A-Za-z/!?][^>\n]{0,40}", outside)
    assert tags == [], f"{kind}: raw HTML outside code spans: {tags[:5]}"
    rendered, reference = _render(md), _render(plain)
    assert rendered.bad == [], f"{kind}: {rendered.bad[:5]}"
    assert rendered.tags == reference.tags, (kind, rendered.tags - reference.tags, reference.tags - rendered.tags)
    from quiver._report.markup import visible

    text = "".join(rendered.text)
    n = built[True]["names"]
    missing = [role for role in REACHES[kind] if visible(n[role]) not in text and n[role] not in text]
    assert missing == [], f"not shown as text in {kind} Markdown: {missing}"


def test_the_junit_xml_reads_and_names_each_candidate(built: dict[bool, dict[str, Any]]) -> None:
    from quiver._report.markup import visible

    n = built[True]["names"]
    root = ET.parse(built[True]["base"] / "gate" / "junit.xml").getroot()
    cases = [c.get("name") or "" for c in root.iter("testcase")]
    assert [c.startswith(visible(n["template"])) or c.startswith(n["template"]) for c in cases] == [True, False]
    assert len(cases) == 2 and n["template2"] in cases[1]


# --------------------------------------------------------------------------- quiver show


def test_quiver_show_writes_every_name_as_one_visible_line(built: dict[bool, dict[str, Any]]) -> None:
    """`quiver show` of a pair whose node, perturbation, input and field names are
    hostile: the same lines as with plain names, no control or bidirectional character
    reaches the terminal, and every name is there, made visible."""
    from quiver._report.markup import visible

    hostile, plain = built[True]["shown"], built[False]["shown"]
    n = built[True]["names"]
    for mine, theirs in zip(hostile, plain, strict=True):
        assert mine.code == theirs.code == 0, mine.stderr
        assert len(mine.stdout.splitlines()) == len(theirs.stdout.splitlines()), mine.stdout
        bad = sorted({ch for ch in mine.stdout if ch != "\n" and (not ch.isprintable() or ch in "\u202e\u202c")})
        assert bad == [], bad
    text = hostile[0].stdout
    for role in ("pid", "target", "middle", "input"):
        assert visible(n[role]) in text or visible(n[role])[:20] in text, role
    assert "<- first divergent call" in text


def test_compare_and_attribution_end_with_what_they_found(built: dict[bool, dict[str, Any]]) -> None:
    """`quiver compare` ends with its findings and its report's path; an attribution's
    findings name each node's dimension with its increment; hostile names are one
    visible line each."""
    from quiver._report.findings import findings_console
    from quiver._report.findings_more import attribution_findings
    from quiver._stats import Estimate
    from quiver.experiments._attribute import Attribution

    for b in built.values():
        tail = b["compared"].stdout.rstrip("\n").splitlines()
        start = tail.index("What the comparison found:")
        assert tail[-1] == f"Open the report: {b['base'] / 'compare' / 'compare.md'}"
        assert all(line.startswith("* ") and line.isprintable() for line in tail[start + 1:-1]), tail[start:]
    n = built[True]["names"]
    rate = {v: Estimate(0.2, (0.1, 0.3), 40) for v in (n["target"], n["middle"])}
    result = Attribution(nodes=list(rate), dimensions=["prompt"], rates=dict.fromkeys(("frozen", "sampling", "prompt"),
                                                                                     rate),
                         increments={"prompt": rate}, reproduced=40, not_reproduced=["x"], repeats=2)
    lines = findings_console(attribution_findings(result.to_json()), "the attribution", "attribution.md")
    assert lines[1] == "* 1 trace(s) did not reproduce with every dimension frozen and are left out."
    assert lines[2].startswith(f"* {n['target']} diverges most because of its prompt: +0.200 [+0.100, +0.300]")
    assert all(line.isprintable() for line in lines) and lines[-1] == "Open the report: attribution.md"


# --------------------------------------------------------------------------- by construction


def test_the_assemblers_take_markup_only() -> None:
    from quiver._report import svg
    from quiver._report.html import details, page
    from quiver._report.markup import Markup, element, escape

    with pytest.raises(TypeError, match="Markup"):
        page("t", ["<p>x</p>"])
    with pytest.raises(TypeError, match="Markup"):
        details("t", [Markup("<p>ok</p>"), "<p>x</p>"])
    with pytest.raises(TypeError, match="Markup"):
        svg.chart("name", "title", 10, 10, ['<text x="0">x</text>'])
    text = page("<t>", [element("p", "<b>"), Markup("<p>{}</p>").format("<i>"), Markup("<hr>") + "<u>"])
    assert "<b>" not in text and "<i>" not in text and "<u>" not in text and "<hr>" in text
    assert escape(Markup("<b>")) == "<b>" and escape("<b>") == "&lt;b&gt;"
    assert element("td", "a", data_value='"><x', class_="num") == '<td data-value="&quot;>&lt;x" class="num">a</td>'


WRITERS = [*sorted((ROOT / "engine" / "_report").glob("*.py")), ROOT / "experiments" / "_gate" / "report.py"]


@pytest.mark.parametrize("path", WRITERS, ids=lambda p: p.name)
def test_markup_is_only_made_from_string_literals(path: Path) -> None:
    """``Markup(x)`` trusts ``x``: in the writers it only ever wraps a literal (the
    markup module itself excepted, which wraps what it escaped)."""
    if path.name == "markup.py":
        return
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Markup":
            if not (len(node.args) <= 1 and not node.keywords and all(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
                bad.append(f"{path.name}:{node.lineno}")
    assert bad == []
