"""``report.html`` and ``report.md`` of the README's runs, opened in a real headless Chromium.

The README campaign and the README gate (``planner_strict.txt``) are the session's
(``tests/experiments/conftest.py``); the quickstart analysis is recorded and analysed here.
Each page is loaded from disk with the network blocked from the page's point of view (it
has nothing to fetch): no console error, no failed request, every ``<img>`` decoded, every
plot drawn. Screenshots of the first screen are kept under the pytest tmp folder.

``quiver report DIR`` rebuilds the reports from the JSON alone, to the same Markdown; a
folder with no report JSON, or garbled JSON, is one error line (a fuzz suite).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st
from pagecheck import screenshots, text_count, text_problems

from quiver._interventional import CampaignEstimates
from quiver._report.summary import control_replay_count, excess

ROOT = Path(__file__).parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
MAX_PAGE_BYTES = 1_000_000


@pytest.fixture(scope="module")
def quickstart(quiver_cli: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``quiver record experiments/quickstart/record.yaml`` then ``quiver analyze`` of it."""
    base = tmp_path_factory.mktemp("quickstart")
    rec = subprocess.run([*quiver_cli, "record", str(ROOT / "experiments" / "quickstart" / "record.yaml"),
                          "--output", str(base / "rec"), "--quiet"], capture_output=True, text=True, timeout=600)
    assert rec.returncode == 0, rec.stderr[-2000:]
    ana = subprocess.run([*quiver_cli, "analyze", str(base / "rec" / "traces.jsonl"), "--out", str(base / "analysis"),
                          "--resamples", "300", "--quiet"], capture_output=True, text=True, timeout=600)
    assert ana.returncode == 0, ana.stderr[-2000:]
    assert str(base / "analysis" / "report.html") in ana.stdout
    return base / "analysis"


@pytest.fixture(scope="module")
def gate_dir(strict_gate: tuple[Any, dict[str, Any] | None, Path]) -> Path:
    proc, data, out = strict_gate
    assert data is not None, proc.stderr[-2000:]
    return out


# --------------------------------------------------------------------------- the HTML table


class _Cells(HTMLParser):
    """Every ``<td data-field>`` of the rows of ``<table id=TABLE>``: row key -> field -> attributes."""

    def __init__(self, table: str, row_key: str) -> None:
        super().__init__()
        self.table, self.row_key = table, row_key
        self.inside = False
        self.row: str | None = None
        self.rows: dict[str, dict[str, dict[str, str | None]]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.inside = a.get("id") == self.table
        elif self.inside and tag == "tr" and a.get(self.row_key):
            self.row = a[self.row_key]
            self.rows[str(self.row)] = {}
        elif self.inside and tag == "td" and self.row is not None and a.get("data-field"):
            self.rows[self.row][str(a["data-field"])] = a

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False


def _cells(html: str, table: str, row_key: str) -> dict[str, dict[str, dict[str, str | None]]]:
    parser = _Cells(table, row_key)
    parser.feed(html)
    return parser.rows


def _value(attrs: dict[str, str | None], key: str = "data-value") -> Any:
    return json.loads(attrs[key] or "null")


def test_the_summary_in_report_html_equals_campaign_json(support_bot_run: Path) -> None:
    from quiver._report.findings import EVENTS, strongest_event
    from quiver._report.glance import EVENT_FIELDS

    raw = json.loads((support_bot_run / "campaign.json").read_text())
    html = (support_bot_run / "report.html").read_text()
    rows = _cells(html, "summary", "data-perturbation")
    assert list(rows) == [p["id"] for p in raw["perturbations"]]
    campaign = CampaignEstimates.from_json(raw)
    for p, typed in zip(raw["perturbations"], campaign.perturbations, strict=True):
        row = rows[p["id"]]
        assert _value(row["id"], "data-node") == p["node"] and _value(row["id"], "data-op") == p["op"]
        assert _value(row["pairs"]) == p["pairs"]
        for field in ("effective", "noop", "failed", "not_applied"):
            assert _value(row["pairs"], f"data-{field.replace('_', '-')}") == p[field], (p["id"], field)
        assert _value(row["beta_shape"]) == p["beta_shape"]["value"]
        assert _value(row["beta_shape"], "data-upper-bound") == p["beta_shape"]["upper_bound"]
        assert _value(row["negative_control"]) == p["negative_control"]["passed"]
        failures = p.get("failures") or {"count": p["failed"], "by_reason": {}}
        assert _value(row["pairs"], "data-failures") == failures["count"]
        assert _value(row["pairs"], "data-by-reason") == failures["by_reason"]
        control = p["control_replays"]
        for key, name, _ in EVENTS:  # every event's excess over the control replays, with its MOVER interval
            cell = row[EVENT_FIELDS[key]]
            assert _value(cell, "data-rate") == p["strata"]["effective"][name]
            assert _value(cell, "data-control-rate") == control[name]
            e = excess(getattr(typed.stratum("effective").rates, key), getattr(typed.control_replays.rates, key))
            assert _value(cell) == pytest.approx(p["strata"]["effective"][name] - control[name])
            assert [_value(cell, "data-lo"), _value(cell, "data-hi")] == pytest.approx([e.lo, e.hi])
        top = strongest_event(typed)
        assert top is not None and _value(row["strongest"]) == top.name
    strongest = {pid: _value(row["strongest"]) for pid, row in rows.items()}
    print(f"moved most: {strongest}")
    assert strongest["small-talk"] == "D_struct" and strongest["turn-type-flip"] == "D_output"  # not D_shape alone
    controls = control_replay_count(campaign)
    assert controls == raw["pairs"] - sum(p["pairs"] for p in raw["perturbations"]) > 0
    assert f'id="control-replays" data-value="{controls}"' in html


def test_the_files_list_names_every_file_and_no_size_it_cannot_know(support_bot_run: Path) -> None:
    """The page lists itself and summary.json, and gives no size for a file the run was
    still writing (the ledger, closed after it)."""
    html = (support_bot_run / "report.html").read_text()
    table = html[html.index('<table id="files">'):]
    table = table[:table.index("</table>")]
    listed = dict(re.findall(r"<code>([^<]+)</code></td><td>[^<]*</td><td[^>]*data-value=\"([^\"]*)\"", table))
    for name in ("campaign.json", "pairs.jsonl", "replays.jsonl", "report.md", "report.html", "summary.json",
                 "ledger.sqlite", "examples.json"):
        assert name in listed, (name, listed)
    assert listed["report.html"] == "null"  # the page itself
    for name, size in listed.items():  # a size given is the file's (the run's page gives none for the ledger)
        assert size == "null" or int(size) == (support_bot_run / name).stat().st_size, name
    print({name: size for name, size in listed.items()})


# --------------------------------------------------------------------------- what was found


class _Findings(HTMLParser):
    """Every ``<li class="finding ...">`` of the page: its attributes and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[tuple[dict[str, str | None], list[str]]] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "li" and "finding" in (a.get("class") or "").split():
            self.items.append((a, []))
            self.depth = 1
        elif self.depth and tag == "li":
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag == "li":
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.items[-1][1].append(data)


def findings_of(html: str) -> list[tuple[dict[str, str | None], str]]:
    parser = _Findings()
    parser.feed(html)
    return [(a, "".join(text)) for a, text in parser.items]


def _excess_of(p: dict[str, Any], name: str) -> tuple[float, float, float]:
    """The excess of ``name`` over the control replays with its MOVER interval, from campaign.json."""
    from quiver._stats import Estimate

    eff, ctl = p["strata"]["effective"], p["control_replays"]
    e = excess(Estimate(eff[name], tuple(eff[f"{name}_ci"]), eff[f"{name}_n"]),
               Estimate(ctl[name], tuple(ctl[f"{name}_ci"]), ctl[f"{name}_n"]))
    assert e.value is not None and e.lo is not None and e.hi is not None
    return e.value, e.lo, e.hi


def check_findings(raw: dict[str, Any], found: list[tuple[dict[str, str | None], str]]) -> dict[str, str]:
    """Each finding's number is campaign.json's (and is the one its sentence writes);
    returns perturbation id -> the event its effect sentence reports."""
    from quiver._stats import fmt

    by_id = {p["id"]: p for p in raw["perturbations"]}
    events: dict[str, str] = {}
    for attrs, text in found:
        kind = (attrs.get("class") or "").split()[-1]
        pid = attrs.get("data-perturbation")
        if kind == "finding-effect" and attrs["data-event"] == "pass_rate":  # the outcome effect
            assert pid is not None
            o = by_id[pid]["outcome"]
            value, (lo, hi) = o["difference"]["value"], o["difference"]["ci"]
            assert json.loads(attrs["data-value"] or "null") == pytest.approx(value, abs=1e-9), pid
            assert json.loads(attrs["data-lo"] or "null") == pytest.approx(lo) and \
                json.loads(attrs["data-hi"] or "null") == pytest.approx(hi)
            if hi < 0 or lo > 0:  # lowers or raises it: in points, the interval's nearer end first
                near, far = (hi, lo) if hi < 0 else (lo, hi)
                said = f"by {abs(value) * 100:.0f} points [{abs(near) * 100:.0f}, {abs(far) * 100:.0f}]"
            else:
                said = f"{fmt(value, signed=True)} [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]"
            assert said in text and "pass rate" in text, (text, said)
        elif kind == "finding-effect":
            assert pid is not None
            event = str(attrs["data-event"])
            value, lo, hi = _excess_of(by_id[pid], event)
            assert json.loads(attrs["data-value"] or "null") == pytest.approx(value, abs=1e-9), (pid, event)
            assert json.loads(attrs["data-lo"] or "null") == pytest.approx(lo) and \
                json.loads(attrs["data-hi"] or "null") == pytest.approx(hi)
            assert f"{fmt(value, signed=True)} [{fmt(lo, signed=True)}, {fmt(hi, signed=True)}]" in text, text
            events[pid] = event
        elif kind == "finding-threshold":
            assert pid is not None
            beta = by_id[pid]["beta_shape"]
            assert json.loads(attrs["data-value"] or "null") == beta["value"] and fmt(beta["value"]) in text
            first = next(b for b in beta["bins"] if b["qualifies"])
            assert json.loads(attrs["data-excess"] or "null") == first["excess"]
            assert fmt(first["excess"], signed=True) in text
        elif kind == "finding-validation":
            agree = sum(v["verdict"] == "agree" for v in raw["validation"])
            assert f"agrees with intervention on {agree} of {len(raw['validation'])} edge(s)" in text
    return events


def test_each_finding_states_the_number_campaign_json_holds(support_bot_run: Path) -> None:
    """The page's first list, report.md's first section and the end of `quiver run`'s
    output are the same sentences, each with the number and interval campaign.json gives."""
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    html = (support_bot_run / "report.html").read_text()
    assert html.index('id="findings"') < html.index('id="summary"')  # the answer first
    found = findings_of(html)
    findings = html[html.index('id="findings"'):html.index("</ul>", html.index('id="findings"'))]
    links = re.findall(r'href="#([^"]+)"', findings)
    assert len(links) == len(found) and all(f'id="{link}"' in html for link in links), links  # evidence there
    events = check_findings(raw, found)
    assert set(events) == {p["id"] for p in raw["perturbations"]}  # every perturbation says what it moved
    print("\n".join(text for _, text in found))
    kinds = [(a.get("class") or "").split()[-1] for a, _ in found]
    assert kinds.count("finding-threshold") >= 2 and kinds.count("finding-validation") == 1
    md = (support_bot_run / "report.md").read_text()
    assert md.split("\n## ")[1].startswith("What was found")
    held = json.loads((Path(os.environ["QUIVER_TEST_SHARED"]) / "support_bot_campaign.json").read_text())
    said, report = _said(held["stdout"], "the campaign", len(found))
    assert Path(report).resolve() == (support_bot_run / "report.html").resolve()
    assert said == [f"* {' '.join(text.replace(' evidence', '').split())}" for _, text in found]


def test_a_perturbation_that_moves_the_loop_most_is_reported_on_iterations(support_bot_run: Path,
                                                                          tmp_path: Path) -> None:
    """cs-override made to change the loop counts in every pair while its path and its
    nodes stay as under control: the finding, the glance table and `quiver report`'s
    page report iterations (D_iter), with campaign.json's number."""
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    p = next(x for x in raw["perturbations"] if x["id"] == "cs-override")
    eff, ctl = p["strata"]["effective"], p["control_replays"]
    for name in ("D_shape", "D_struct"):
        eff[name], eff[f"{name}_ci"] = ctl[name], ctl[f"{name}_ci"]
    eff["D_iter"], eff["D_iter_ci"] = 1.0, [1.0, 1.0]
    folder = _copy_json(support_bot_run, tmp_path / "loop")
    (folder / "campaign.json").write_text(json.dumps(raw))
    result = run_cli(["report", str(folder)])
    assert result.code == 0, result.stderr
    html = (folder / "report.html").read_text()
    events = check_findings(raw, findings_of(html))
    assert events["cs-override"] == "D_iter"
    text = next(t for a, t in findings_of(html) if a.get("data-perturbation") == "cs-override"
                and "finding-effect" in (a.get("class") or "") and a.get("data-event") != "pass_rate")
    assert "changes the loop iterations in" in text, text
    assert _value(_cells(html, "summary", "data-perturbation")["cs-override"]["strongest"]) == "D_iter"


def test_each_dose_response_marks_the_threshold_campaign_json_gives(support_bot_run: Path) -> None:
    from quiver._stats import fmt

    raw = json.loads((support_bot_run / "campaign.json").read_text())
    html = (support_bot_run / "report.html").read_text()
    ladders, single = 0, []
    for p in raw["perturbations"]:
        beta = p["beta_shape"]
        if len(beta["bins"]) == 1:  # one magnitude: an estimate, not a one-point curve
            assert f'data-plot="dose-{p["id"]}"' not in html
            single.append(p["id"])
            continue
        if not beta["bins"]:
            continue
        start = html.index(f'data-plot="dose-{p["id"]}"')
        chart = html[start:html.index("</svg>", start)]
        assert chart.count("<circle") + chart.count('fill="white" stroke="#1f5fa8"') >= len(beta["bins"])
        if beta["value"] is not None:
            assert f"beta_shape {'≤' if beta['upper_bound'] else '='} {fmt(beta['value'])}" in chart
        if beta["bin_rule"] == "ladder":
            ladders += 1
            assert all(f"step {b['step']}" in chart for b in beta["bins"])
    assert ladders >= 1  # fragments-drop
    start = html.index('data-plot="single"')
    chart = html[start:html.index("</svg>", start)]
    assert single == ["turn-type-flip", "web-search-certain", "small-talk", "cs-override"]
    assert all(f"{pid} (d_i = " in chart for pid in single)


def test_report_md_opens_with_the_summary_and_links_only_images_that_exist(support_bot_run: Path) -> None:
    import re

    raw = json.loads((support_bot_run / "campaign.json").read_text())
    text = (support_bot_run / "report.md").read_text()
    head = text.split("\n## ")[:3]
    assert head[1].startswith("What was found") and head[2].startswith("At a glance")
    perturbed = sum(p["pairs"] for p in raw["perturbations"])
    controls = raw["pairs"] - perturbed
    assert f"{perturbed:,} perturbed pairs and {controls:,} control replays counted apart" in head[0]
    for p in raw["perturbations"]:
        assert f"| `{p['id']}` | {p['node']} | {p['op']} | {p['pairs']:,} ({p['effective']:,} / " in head[2]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links and all((support_bot_run / link).is_file() for link in links), links
    assert "observational/graph.png" in links


def test_the_gate_difference_is_the_candidate_mean_minus_the_current_mean(gate_dir: Path) -> None:
    """A downstream node only some replays reach (account_api) is measured in other
    replays by each arm: its difference is that of the means, not of the replays where
    both arms reached it (which read +0.000 [+0.000, +0.000] under 0.438 and 0.182)."""
    data = json.loads((gate_dir / "gate.json").read_text())
    [c] = data["candidates"]
    rows = [c["d_i"], *c["rates"].values(), *c["downstream"].values(), *c["fields"].values()]
    for row in rows:
        cand, curr, diff = row["candidate"]["value"], row["current"]["value"], row["difference"]
        if cand is None or curr is None:
            assert diff["value"] is None
            continue
        assert diff["value"] == pytest.approx(cand - curr, abs=2e-6)
        assert diff["ci"][0] <= diff["value"] + 1e-6 and diff["value"] - 1e-6 <= diff["ci"][1]
    html = (gate_dir / "report.html").read_text()
    cells = _cells(html.replace('class="gate"', 'id="gate"'), "gate", "data-measure")
    for v, row in c["downstream"].items():
        assert _value(cells[f"d:{v}"]["difference"]) == row["difference"]["value"]
    assert 'id="verdict"' in html and f'data-value="{data["verdict"]}"' in html


def _said(stdout: str, what: str, count: int) -> tuple[list[str], str]:
    """The findings a command printed last (``What WHAT found:`` and ``count`` lines) and
    the report path after them."""
    tail = stdout.rstrip("\n").splitlines()
    assert tail[-2 - count] == f"What {what} found:", tail[-3 - count:]
    assert tail[-1].startswith("Open the report: ")
    return tail[-1 - count:-1], tail[-1].removeprefix("Open the report: ")


def test_the_gate_and_the_analysis_say_first_what_they_found(strict_gate: tuple[Any, dict[str, Any] | None, Path],
                                                             quickstart: Path) -> None:
    """The gate's page opens with the verdict's sentences and its console output ends with them,
    each number as gate.json holds it; the analysis' page with how often reruns diverge
    and its amplifiers, as profile.json holds them."""
    proc, data, out = strict_gate
    assert data is not None
    [c] = data["candidates"]
    found = findings_of((out / "report.html").read_text())
    kinds = [(a.get("class") or "").split()[-1] for a, _ in found]
    assert kinds[0] == "finding-verdict" and "finding-effect" in kinds
    for attrs, text in found:
        if attrs.get("data-event"):
            row = c["rates"][attrs["data-event"]]
            assert json.loads(attrs["data-value"] or "null") == row["difference"]["value"], text
        outcome = "answers fail" in text or attrs.get("data-decision") is not None  # the outcome criterion's
        if attrs.get("data-inputs"):  # the inputs whose path (or answers) moved, as the per-input tests found them
            moved = c["outcome"]["per_input"]["moved"] if outcome else c["per_input"]["moved"]
            assert json.loads(attrs["data-inputs"] or "[]") == moved, text
        if kinds[found.index((attrs, text))] == "finding-verdict" and outcome:
            assert attrs["data-decision"] == c["outcome"]["decision"], text
        elif kinds[found.index((attrs, text))] == "finding-verdict":
            assert attrs["data-verdict"] == c["verdict"].upper() and c["verdict"].upper() in text
    said, report = _said(proc.stdout, "the gate", len(found))
    assert said == [f"* {' '.join(text.replace(' evidence', '').split())}" for _, text in found]
    assert Path(report).resolve() == (out / "report.html").resolve()
    profile = json.loads((quickstart / "profile.json").read_text())
    found = findings_of((quickstart / "report.html").read_text())
    noise = next(a for a, _ in found if "finding-noise" in (a.get("class") or ""))
    assert json.loads(noise["data-value"] or "null") == profile["divergence"]["D_shape"]
    amplifiers = {(e["source"], e["target"]): e["sigma"] for e in profile["edges"] if e["class"] == "amplifier"}
    for attrs, text in found:
        if attrs.get("data-source"):
            sigma = amplifiers[attrs["data-source"], attrs["data-target"]]
            assert json.loads(attrs["data-value"] or "null") == sigma and f"sigma = {sigma:.3f}" in text, text


# --------------------------------------------------------------------------- example pairs


def _lines_with(path: Path, ids: set[str]) -> dict[str, str]:
    """The lines of a trace file whose trace_id is one of ``ids``."""
    keys = [json.dumps(i) for i in ids]
    found = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if any(k in line[:2000] for k in keys) and (tid := json.loads(line)["trace_id"]) in ids:
                found[tid] = line
    return found


def test_each_example_pair_marks_the_first_divergent_call_quiver_diff_finds(support_bot_run: Path,
                                                                            tmp_path: Path) -> None:
    """Every perturbation of the README campaign has example pairs on its page; for each,
    the call marked first divergent is what `quiver diff BASELINE REPLAY` prints, and
    `quiver show` marks it too."""
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    examples = json.loads((support_bot_run / "examples.json").read_text())
    pairs = examples["pairs"]
    assert {p["perturbation"] for p in pairs} == {p["id"] for p in raw["perturbations"]}
    for pid in {p["perturbation"] for p in pairs}:
        rules = [p["rule"] for p in pairs if p["perturbation"] == pid]
        assert rules[0] == "typical effective" and ("no-op" in rules) == (
            next(x for x in raw["perturbations"] if x["id"] == pid)["noop"] > 0), (pid, rules)
    baselines = _lines_with(Path(examples["baseline"]), {p["baseline_trace"] for p in pairs})
    replays = _lines_with(support_bot_run / "replays.jsonl", {p["replay_trace"] for p in pairs})
    html = (support_bot_run / "report.html").read_text()
    for i, pair in enumerate(pairs):
        a, b = tmp_path / f"{i}-a.jsonl", tmp_path / f"{i}-b.jsonl"
        a.write_text(baselines[pair["baseline_trace"]])
        b.write_text(replays[pair["replay_trace"]])
        said = run_cli(["diff", str(a), str(b), "--json"])
        assert said.code == 0, said.stderr
        first = json.loads(said.stdout)["first_divergence"]
        expected = None if first is None else f"{first['node']}#{first['occurrence']}"
        assert pair["first"] == expected, (pair["pair_id"], pair["first"], expected)
        marked = [s["call"] for s in pair["steps"] if s["first"]]
        assert marked == ([] if expected is None else [expected]), (pair["pair_id"], marked)
        block = html[html.index(f'data-pair="{pair["pair_id"]}"'):]
        block = block[:block.index("</table>", block.index('class="path"'))] if pair["steps"] else block[:2000]
        assert re.findall(r'data-call="([^"]+)" data-first="true"', block) == marked
    shown = run_cli(["show", str(support_bot_run), pairs[1]["pair_id"]])
    assert shown.code == 0, shown.stderr
    first_line = next(line for line in shown.stdout.splitlines() if "<- first divergent call" in line)
    assert first_line.split()[0] == pairs[1]["first"]
    print(f"{len(pairs)} example pairs, each first divergent call as quiver diff finds it")


def test_quiver_show_lists_pairs_and_refuses_an_unknown_one_in_one_line(support_bot_run: Path) -> None:
    listed = run_cli(["show", str(support_bot_run), "--list", "--perturbation", "small-talk", "--stratum", "noop"])
    assert listed.code == 0, listed.stderr
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    noop = next(p for p in raw["perturbations"] if p["id"] == "small-talk")["noop"]
    lines = listed.stdout.splitlines()
    assert lines[0] == f"small-talk  noop ({noop}):" and len(lines) == 1 + noop
    for argv, says in ((["show", str(support_bot_run), "no-such-pair"], "has no pair 'no-such-pair'"),
                       (["show", str(support_bot_run)], "give a PAIR_ID"),
                       (["show", str(support_bot_run / "nothing-here"), "x"], "is not a folder"),
                       (["show", str(support_bot_run), "--list", "--perturbation", "nope"], "no such perturbation")):
        result = run_cli(argv)
        assert result.code == 2 and says in result.error_lines()[0], (argv, result.stderr)


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


_PLOTS = """() => Array.from(document.querySelectorAll('svg.plot, img.plot')).map(e => {
  const r = e.getBoundingClientRect();
  return {name: e.dataset.plot, tag: e.tagName, w: r.width, h: r.height,
          marks: e.tagName === 'IMG' ? e.naturalWidth
                                     : e.querySelectorAll('line,rect,circle,polygon,path,text').length};
})"""
_IMAGES = "() => Array.from(document.images).map(i => [i.dataset.plot || i.alt, i.complete, i.naturalWidth])"


@pytest.fixture(scope="session")
def screenshots_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the pages' screenshots go (the test output folder)."""
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.parametrize("which", ["campaign", "analysis", "gate"])
def test_each_report_html_renders_in_chromium(
        which: str, browser: Any, support_bot_run: Path, quickstart: Path, gate_dir: Path,
        screenshots_folder: Path) -> None:
    """Each page opens with no console error and no request out, draws every plot, is
    one file under 1 MB, and no text of any chart is drawn over another or outside its
    chart (every ``<details>`` opened); screenshots of its first screen and of each
    section are kept."""
    folder = {"campaign": support_bot_run, "analysis": quickstart, "gate": gate_dir}[which]
    path = folder / "report.html"
    size = path.stat().st_size
    print(f"{which}: {path} {size:,} bytes")
    assert size < MAX_PAGE_BYTES
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"failed request {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    shots = screenshots(page, screenshots_folder, which)
    print(f"screenshots: {', '.join(s.name for s in shots)} in {screenshots_folder}")
    plots = page.evaluate(_PLOTS)
    images = page.evaluate(_IMAGES)
    details = page.evaluate("() => document.querySelectorAll('details').length")
    untitled = page.evaluate("() => Array.from(document.querySelectorAll('abbr')).filter(a => !a.title).length")
    overlaps, texts = text_problems(page), text_count(page)
    page.close()
    print(f"{texts} chart texts checked; overlapping or outside: {overlaps}")
    assert overlaps == []
    assert errors == []
    assert [r for r in requests if not r.startswith(("file:", "data:"))] == []
    assert all(complete and width > 0 for _, complete, width in images), images
    names = {p["name"] for p in plots}
    expected = {"campaign": {"forest", "cascade", "graph", "sigma_matrix", "validation", "single"},
                "analysis": {"graph", "sigma_matrix", "ratios"}, "gate": set()}[which]
    assert expected <= names, names
    if which == "campaign":
        raw = json.loads((folder / "campaign.json").read_text())
        binned = [p["id"] for p in raw["perturbations"] if len(p["beta_shape"]["bins"]) > 1]
        assert binned and {f"dose-{pid}" for pid in binned} <= names
    if which == "gate":
        assert any(n.startswith("gate-d-") for n in names) and any(n.startswith("gate-rates-") for n in names)
    assert all(p["w"] > 50 and p["h"] > 50 and p["marks"] > 5 for p in plots), plots
    assert details >= 1 and untitled == 0
    assert len(shots) >= 4 and all(s.stat().st_size > 10_000 for s in shots)


def test_the_overlap_check_finds_text_over_text_and_outside_a_chart(browser: Any, tmp_path: Path) -> None:
    """The check above on a page built to overlap: two labels at one place, one past the
    chart's right edge."""
    from quiver._report import svg
    from quiver._report.html import page as html_page
    from quiver._report.markup import Markup

    chart = svg.chart("built-to-overlap", "overlap", 300, 120, [
        svg._text(40, 60, "a label over", size=12), svg._text(44, 62, "another label", size=12),
        svg._text(280, 100, "past the edge", size=12), svg._text(40, 100, "alone", size=12)])
    (tmp_path / "report.html").write_text(html_page("overlap", [Markup("<h2>Charts</h2>"), chart]))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((tmp_path / "report.html").as_uri(), wait_until="load")
    found = text_problems(page)
    page.close()
    assert found == ["built-to-overlap: 'past the edge' outside the chart",
                     "built-to-overlap: 'a label over' over 'another label' (" + found[1].split(" (", 1)[1]], found


# --------------------------------------------------------------------------- quiver report


def _copy_json(src: Path, dst: Path) -> Path:
    """The folder's JSON files (and its observational/ JSON and plots), nothing else."""
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.is_file() and p.suffix in (".json", ".md") and p.name != "report.md":
            shutil.copy(p, dst / p.name)
    obs = src / "observational"
    if obs.is_dir():
        (dst / "observational").mkdir()
        for p in obs.iterdir():
            if p.suffix in (".json", ".png"):
                shutil.copy(p, dst / "observational" / p.name)
    return dst


@pytest.mark.parametrize("which", ["campaign", "analysis", "gate"])
def test_quiver_report_rebuilds_the_reports_from_the_json(
        which: str, support_bot_run: Path, quickstart: Path, gate_dir: Path, tmp_path: Path) -> None:
    folder = {"campaign": support_bot_run, "analysis": quickstart, "gate": gate_dir}[which]
    copy = _copy_json(folder, tmp_path / which)
    if which == "analysis":
        for name in ("ratios.png", "sigma_matrix.png", "graph.png"):
            shutil.copy(folder / name, copy / name)
    md = "gate.md" if which == "gate" else "report.md"
    (copy / md).unlink(missing_ok=True)
    result = run_cli(["report", str(copy)])
    assert result.code == 0, result.stderr
    assert (copy / md).read_text() == (folder / md).read_text()
    assert str(copy / "report.html") in result.stdout.splitlines()
    html = (copy / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<details>" in html


def test_a_folder_without_report_json_is_one_line(support_bot_run: Path, tmp_path: Path) -> None:
    for folder, says in ((support_bot_run / "baseline", "holds no campaign.json, gate.json or profile.json"),
                         (tmp_path / "missing", "does not exist")):
        result = run_cli(["report", str(folder)])
        assert result.code == 2 and says in result.error_lines()[0]


def _garble(data: Any, rng: random.Random, replacement: Any) -> Any:
    """``data`` with one value somewhere inside replaced (or one key dropped)."""
    if isinstance(data, dict) and data:
        key = rng.choice(sorted(data))
        if rng.random() < 0.3:
            return replacement if rng.random() < 0.2 else {k: v for k, v in data.items() if k != key}
        return {**data, key: _garble(data[key], rng, replacement)}
    if isinstance(data, list) and data:
        i = rng.randrange(len(data))
        if rng.random() < 0.3:
            return replacement
        return [*data[:i], _garble(data[i], rng, replacement), *data[i + 1:]]
    return replacement


_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                  st.text(max_size=8), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                                             st.integers(), max_size=2))


@pytest.fixture(scope="module")
def garble_sources(support_bot_run: Path, quickstart: Path, gate_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                   ) -> dict[str, tuple[Path, str, Any]]:
    """Per kind: a folder to garble in (copied once), its JSON file name and content."""
    base = tmp_path_factory.mktemp("garbled")
    out = {}
    for kind, folder, name in (("analysis", quickstart, "profile.json"), ("gate", gate_dir, "gate.json"),
                               ("campaign", support_bot_run, "campaign.json")):
        copy = _copy_json(folder, base / kind)
        out[kind] = (copy, name, json.loads((folder / name).read_text()))
    return out


@settings(parent=FUZZ, max_examples=120)
@given(kind=st.sampled_from(["analysis", "analysis", "gate", "gate", "campaign"]), seed=st.integers(0, 2**32),
       junk=_JUNK, raw=st.one_of(st.none(), st.binary(max_size=40)))
def test_garbled_report_json_is_rendered_or_refused_in_one_line(
        garble_sources: dict[str, tuple[Path, str, Any]], kind: str, seed: int, junk: Any, raw: bytes | None) -> None:
    tried("quiver report: garbled json")
    folder, name, data = garble_sources[kind]
    if raw is not None:
        (folder / name).write_bytes(raw)
    else:
        (folder / name).write_text(json.dumps(_garble(data, random.Random(seed), junk)))
    result = run_cli(["report", str(folder)])
    assert result.code in (0, 2), result.stderr
    if result.code == 2:
        assert result.error_lines()[0].startswith("quiver report: error: ")
