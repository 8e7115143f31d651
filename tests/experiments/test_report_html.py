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
import random
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver._interventional import CampaignEstimates
from quiver._report.summary import control_replay_count, excess

ROOT = Path(__file__).parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
MAX_PAGE_BYTES = 2_000_000


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
    raw = json.loads((support_bot_run / "campaign.json").read_text())
    html = (support_bot_run / "report.html").read_text()
    rows = _cells(html, "summary", "data-perturbation")
    assert list(rows) == [p["id"] for p in raw["perturbations"]]
    campaign = CampaignEstimates.from_json(raw)
    for p, typed in zip(raw["perturbations"], campaign.perturbations, strict=True):
        row = rows[p["id"]]
        for field in ("node", "op", "pairs", "effective", "noop", "failed"):
            assert _value(row[field]) == p[field], (p["id"], field)
        assert _value(row["beta_shape"]) == p["beta_shape"]["value"]
        assert _value(row["beta_shape"], "data-upper-bound") == p["beta_shape"]["upper_bound"]
        assert _value(row["negative_control"]) == p["negative_control"]["passed"]
        failures = p.get("failures") or {"count": p["failed"], "by_reason": {}}
        assert _value(row["failures"]) == failures["count"]
        assert _value(row["failures"], "data-by-reason") == failures["by_reason"]
        control = p["control_replays"]
        assert _value(row["excess"], "data-rate") == p["strata"]["effective"]["D_shape"]
        assert _value(row["excess"], "data-control-rate") == control["D_shape"]
        e = excess(typed.stratum("effective").rates.d_shape, typed.control_replays.rates.d_shape
                   if typed.control_replays else None)
        assert _value(row["excess"]) == pytest.approx(p["strata"]["effective"]["D_shape"] - control["D_shape"])
        assert [_value(row["excess"], "data-lo"), _value(row["excess"], "data-hi")] == pytest.approx([e.lo, e.hi])
    controls = control_replay_count(campaign)
    assert controls == raw["pairs"] - sum(p["pairs"] for p in raw["perturbations"]) > 0
    assert f'id="control-replays" data-value="{controls}"' in html


def test_each_dose_response_marks_the_threshold_campaign_json_gives(support_bot_run: Path) -> None:
    from quiver._stats import fmt

    raw = json.loads((support_bot_run / "campaign.json").read_text())
    html = (support_bot_run / "report.html").read_text()
    ladders = 0
    for p in raw["perturbations"]:
        beta = p["beta_shape"]
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


def test_report_md_opens_with_the_summary_and_links_only_images_that_exist(support_bot_run: Path) -> None:
    import re

    raw = json.loads((support_bot_run / "campaign.json").read_text())
    text = (support_bot_run / "report.md").read_text()
    head = text.split("\n## ")[:2]
    assert head[1].startswith("At a glance")
    perturbed = sum(p["pairs"] for p in raw["perturbations"])
    controls = raw["pairs"] - perturbed
    assert f"{perturbed:,} perturbed pairs and {controls:,} control replays counted apart" in head[0]
    for p in raw["perturbations"]:
        assert f"| `{p['id']}` | {p['node']} | {p['op']} | {p['pairs']:,} ({p['effective']:,} / " in head[1]
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


@pytest.mark.parametrize("which", ["campaign", "analysis", "gate"])
def test_each_report_html_renders_in_chromium(
        which: str, browser: Any, support_bot_run: Path, quickstart: Path, gate_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
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
    shot = tmp_path_factory.mktemp("screenshots") / f"{which}.png"
    page.screenshot(path=str(shot))
    print(f"screenshot of the first screen: {shot}")
    plots = page.evaluate(_PLOTS)
    images = page.evaluate(_IMAGES)
    details = page.evaluate("() => document.querySelectorAll('details').length")
    page.close()
    assert errors == []
    assert [r for r in requests if not r.startswith(("file:", "data:"))] == []
    assert all(complete and width > 0 for _, complete, width in images), images
    names = {p["name"] for p in plots}
    expected = {"campaign": {"forest", "cascade", "graph", "sigma_matrix"},
                "analysis": {"graph", "sigma_matrix", "ratios"}, "gate": set()}[which]
    assert expected <= names, names
    if which == "campaign":
        raw = json.loads((folder / "campaign.json").read_text())
        binned = [p["id"] for p in raw["perturbations"] if p["beta_shape"]["bins"]]
        assert binned and {f"dose-{pid}" for pid in binned} <= names
    if which == "gate":
        assert any(n.startswith("gate-d-") for n in names) and any(n.startswith("gate-rates-") for n in names)
    assert all(p["w"] > 50 and p["h"] > 50 and p["marks"] > 5 for p in plots), plots
    assert details >= 1
    assert shot.stat().st_size > 10_000


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
