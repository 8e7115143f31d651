"""The dose-response of adaptive ladders in ``report.md`` and ``report.html``.

``tests/data/campaign_adaptive.json`` is the ``campaign.json`` of a finished adaptive run
of a test pipeline (one perturbation: a numeric shift whose decision flips with a
logistic probability, midpoint 0.37; 420 replays over 13 levels in 4 rounds). The report
is rendered from it (and from copies with one thing changed): the section's numbers are
the JSON's, the curve marks the onset and the midpoint at their doses, ``quiver report``
rebuilds both pages from the JSON alone, and a campaign without adaptive ladders gets
neither the section nor a curve.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver._interventional import CampaignEstimates
from quiver._report import campaign_markdown, interventional_report
from quiver._report.adaptive import TITLE, adaptive_charts, fmt_dose
from quiver._report.pages import campaign_page
from quiver._stats import fmt, fmt_n

DATA = Path(__file__).parents[1] / "data" / "campaign_adaptive.json"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def _without_adaptive(raw: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(raw)
    for p in data["perturbations"]:
        p.pop("adaptive", None)
    return data


def _section(md: str) -> str:
    start = md.index(f"## {TITLE}\n")
    end = md.find("\n## ", start + 1)
    return md[start:] if end < 0 else md[start:end + 1]


def _rows(block: str, header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header row starts with ``header``."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _est(value: Any, ci: Any, *, signed: bool = False) -> str:
    return f"{fmt(value, signed=signed)} [{fmt(ci[0], signed=signed)}, {fmt(ci[1], signed=signed)}]"


# --------------------------------------------------------------------------- report.md


def test_the_section_gives_the_search_and_both_curves_summaries_as_campaign_json(raw: dict[str, Any]) -> None:
    [p] = raw["perturbations"]
    a = p["adaptive"]
    section = _section(interventional_report(raw))
    assert f"### `{p['id']}`: amount of numeric_edit at score, over [0.000, 1.000]" in section
    assert (f"Resolution 0.020; {a['replays']} replays of at most {a['settings']['max_replays']:,} over "
            f"{len(a['levels'])} levels in 4 round(s); stopped: {a['stopped']}.") in section
    rows = _rows(section, "| curve | event | midpoint")
    assert [r[0] for r in rows] == ["beta_shape (followed)", "beta_iter"]  # the search placed levels by D_shape
    for row, key in zip(rows, ("beta_shape", "beta_iter"), strict=True):
        d = a[key]
        assert row[2] == _est(d["midpoint"], d["midpoint_ci"])
        assert row[3] == fmt_n(d["midpoint_n"])
        assert row[4] == fmt(d["defined"])
        assert row[5] == _est(d["plateau"], d["plateau_ci"], signed=True)
        assert row[6] == f"{fmt(d['onset'])} in ({fmt(d['below'])}, {fmt(d['onset'])}]" == "0.300 in (0.280, 0.300]"
        assert row[7] == fmt(d["onset_d"])
    assert rows[0][2] == "0.361 [0.354, 0.368]"  # the known answer: the logistic midpoint 0.37


def test_the_rounds_and_the_curve_tables_are_campaign_json_level_for_level(raw: dict[str, Any]) -> None:
    [p] = raw["perturbations"]
    a = p["adaptive"]
    section = _section(interventional_report(raw))
    rounds = _rows(section, "| round | levels added")
    assert [int(r[0]) for r in rounds] == [r["round"] for r in a["rounds"]]
    for row, r in zip(rounds, a["rounds"], strict=True):
        assert row[1] == (", ".join(f"{fmt(x)} ({n})" for x, n in r["add"]) or "—")
        assert row[2] == (r["reason"] or f"stop: {r['stop']}")
        if r["known"]:
            assert row[3].startswith(f"midpoint {_est(r['known']['midpoint'], r['known']['midpoint_ci'])}; "
                                     f"onset {fmt(r['known']['onset'])} in ({fmt(r['known']['below'])}, "
                                     f"{fmt(r['known']['onset'])}]")
    points = _rows(section, "| amount | n | inputs")
    d = a["beta_shape"]
    assert len(points) == len(d["points"]) == len(a["levels"])
    for row, x in zip(points, d["points"], strict=True):
        assert row == [fmt(x["level"]), fmt_n(x["n"]), fmt_n(x["inputs"]), fmt_n(x["n_events"]),
                       _est(x["excess"], x["excess_ci"], signed=True), fmt(x["fit"], signed=True),
                       f"[{fmt(x['band'][0], signed=True)}, {fmt(x['band'][1], signed=True)}]",
                       "yes" if x["qualifies"] else "no"]
    assert [float(r[0]) for r in points] == sorted(a["levels"])
    assert "beta_iter curve (D_iter excess over controls): the same as beta_shape's, level for level." in section


def test_a_d_iter_curve_of_its_own_gets_its_own_table_and_plot(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    d = data["perturbations"][0]["adaptive"]["beta_iter"]
    d["points"] = d["points"][:-1]
    d.update(midpoint=None, midpoint_ci=None, onset=None, below=None, onset_d=None, defined=0.4,
             reason="no level's excess interval lies above 0")
    section = _section(interventional_report(data))
    iter_rows = _rows(section.split("beta_iter curve (D_iter")[1], "| amount | n | inputs")
    assert len(iter_rows) == len(d["points"])
    [row] = [r for r in _rows(section, "| curve | event | midpoint") if r[0] == "beta_iter"]
    assert row[2] == row[6] == row[7] == "—" and row[8] == "no level's excess interval lies above 0"
    charts = adaptive_charts(CampaignEstimates.from_json(data))
    assert len(charts) == 2
    svg, caption = charts[1]
    assert 'data-plot="adaptive-shift-beta_iter"' in svg and 'data-mark="onset"' not in svg
    assert 'data-mark="midpoint"' not in svg and "no midpoint, no onset" in caption


def test_a_midpoint_defined_in_too_few_resamples_is_shown_without_interval(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    d = data["perturbations"][0]["adaptive"]["beta_shape"]
    d.update(midpoint_ci=None, defined=0.9)
    [row, _] = _rows(_section(interventional_report(data)), "| curve | event | midpoint")
    assert row[2] == "0.361" and row[4] == "0.900"
    assert row[8] == "no midpoint interval: defined in 0.900 of the resamples (under 0.950)"
    [(svg, _), _] = adaptive_charts(CampaignEstimates.from_json(data))
    assert 'data-mark="midpoint"' in svg and 'data-mark="midpoint-span"' not in svg


def test_an_onset_at_the_smallest_level_is_bracketed_by_the_range_low_end(raw: dict[str, Any]) -> None:
    data = copy.deepcopy(raw)
    for key in ("beta_shape", "beta_iter"):
        data["perturbations"][0]["adaptive"][key].update(onset=0.2, below=None)
    [row, _] = _rows(_section(interventional_report(data)), "| curve | event | midpoint")
    assert row[6] == "0.200 in (0.000, 0.200]"
    [(chart, caption)] = adaptive_charts(CampaignEstimates.from_json(data))
    span = _marks(chart, "adaptive-shift-beta_shape").marks["onset-span"]
    assert (span["data-lo"], span["data-hi"]) == ("0.0", "0.2") and "onset 0.200 in (0.000, 0.200]" in caption


def test_a_whole_number_dose_is_written_as_one(raw: dict[str, Any]) -> None:
    """A variant level or a count: levels 0, 1, 2, the onset at the range's low end."""
    data = copy.deepcopy(raw)
    a = data["perturbations"][0]["adaptive"]
    a["settings"].update(param="level", lo=0, hi=2, resolution=1, integer=True)
    a["levels"] = [0, 1, 2]
    for key in ("beta_shape", "beta_iter"):
        d = a[key]
        d.update(param="level", onset=0, below=None, points=[dict(x, level=k, step=k) for k, x in
                                                            enumerate(d["points"][-3:])])
    section = _section(interventional_report(data))
    assert "### `shift`: level of numeric_edit at score, over [0, 2]" in section
    assert "Resolution 1; " in section
    assert [r[0] for r in _rows(section, "| level | n | inputs")] == ["0", "1", "2"]
    assert _rows(section, "| curve | event | midpoint")[0][6] == "0 (the smallest dose)"
    [(chart, _)] = adaptive_charts(CampaignEstimates.from_json(data))
    marks = _marks(chart, "adaptive-shift-beta_shape")
    assert "onset-span" not in marks.marks and marks.marks["onset"]["data-value"] == "0"


def test_doses_are_written_exactly_and_whole_numbers_as_such() -> None:
    assert [fmt_dose(x) for x in (0.2, 0.36, 1.0, 0.2375, 0.123456, None)] == [
        "0.200", "0.360", "1.000", "0.2375", "0.123456", "—"]
    assert [fmt_dose(x, integer=True) for x in (3, 3.0, 1200)] == ["3", "3", "1,200"]


def test_a_campaign_without_adaptive_ladders_has_no_such_section_and_is_otherwise_the_same(
        raw: dict[str, Any]) -> None:
    full, plain = interventional_report(raw), interventional_report(_without_adaptive(raw))
    assert TITLE not in plain and "adaptive ladder searched" not in plain
    said = [line for line in full.splitlines(keepends=True) if "(an adaptive ladder over" in line]
    assert len(said) == 1 and said[0].startswith("- Perturbation `shift` (an adaptive ladder over amount)")
    assert plain == full.replace(_section(full), "").replace(said[0], "")  # and its finding
    html = campaign_page(_without_adaptive(raw), None, DATA.parent, [])
    assert 'data-plot="adaptive-' not in html and "Adaptive ladders" not in html and TITLE not in html


# --------------------------------------------------------------------------- the curve


class _Marks(HTMLParser):
    """The ``data-`` attributes of every element of the adaptive curve ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name, self.inside = name, False
        self.levels: list[dict[str, str | None]] = []
        self.marks: dict[str, dict[str, str | None]] = {}
        self.circles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.inside = a.get("data-plot") == self.name
        elif self.inside and a.get("data-level") is not None:
            self.levels.append(a)
        elif self.inside and a.get("data-mark") is not None:
            self.marks[str(a["data-mark"])] = a
        elif self.inside and tag == "circle":
            self.circles += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.inside = False


def _marks(html: str, name: str) -> _Marks:
    parser = _Marks(name)
    parser.feed(html)
    return parser


def _x(attrs: dict[str, str | None]) -> float:
    return float(attrs["data-x"] or "nan")


def test_the_curve_marks_the_onset_and_the_midpoint_at_their_doses(raw: dict[str, Any]) -> None:
    d = raw["perturbations"][0]["adaptive"]["beta_shape"]
    html = campaign_page(raw, None, DATA.parent, [])
    m = _marks(html, "adaptive-shift-beta_shape")
    assert 'data-plot="adaptive-shift-beta_iter"' not in html  # the same curve: drawn once
    assert [float(a["data-level"] or "nan") for a in m.levels] == [x["level"] for x in d["points"]]
    assert [int(a["data-n"] or 0) for a in m.levels] == [x["n"] for x in d["points"]]
    assert m.circles == len(d["points"]) + 2  # and the legend's two
    xs = {float(a["data-level"] or "nan"): _x(a) for a in m.levels}
    assert list(xs.values()) == sorted(xs.values())
    onset = m.marks["onset"]
    assert float(onset["data-value"] or "nan") == d["onset"]
    assert _x(onset) == pytest.approx(xs[d["onset"]], abs=0.11)
    assert [float(m.marks["onset-span"][k] or "nan") for k in ("data-lo", "data-hi")] == [d["below"], d["onset"]]
    mid = m.marks["midpoint"]
    assert float(mid["data-value"] or "nan") == d["midpoint"]
    lo = max(x for x in xs if x <= d["midpoint"])
    hi = min(x for x in xs if x > d["midpoint"])
    expected = xs[lo] + (d["midpoint"] - lo) / (hi - lo) * (xs[hi] - xs[lo])
    assert _x(mid) == pytest.approx(expected, abs=0.2)
    assert [float(m.marks["midpoint-span"][k] or "nan") for k in ("data-lo", "data-hi")] == d["midpoint_ci"]
    assert float(m.marks["half"]["data-value"] or "nan") == d["plateau"] / 2
    assert {"fit", "band"} <= set(m.marks)
    chart = html[html.index('data-plot="adaptive-shift-beta_shape"'):]
    chart = chart[:chart.index("</svg>")]
    assert "excess D_shape rate over controls" in chart and "amount (the dose of numeric_edit at score)" in chart
    assert "onset 0.300" in chart and "midpoint 0.361" in chart and "plateau/2 = 0.500" in chart


# --------------------------------------------------------------------------- quiver report


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder holding the campaign.json alone, its pages rebuilt by ``quiver report``."""
    folder = tmp_path_factory.mktemp("adaptive") / "run"
    folder.mkdir()
    shutil.copy(DATA, folder / "campaign.json")
    result = run_cli(["report", str(folder)])
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [str(folder / "report.md"), str(folder / "report.html")]
    yield folder


def test_quiver_report_rebuilds_the_section_and_the_curve_from_campaign_json(rebuilt: Path,
                                                                            raw: dict[str, Any]) -> None:
    md = (rebuilt / "report.md").read_text()
    assert md == campaign_markdown(raw, "")
    assert _section(md) == _section(interventional_report(raw))
    html = (rebuilt / "report.html").read_text()
    assert html.count('data-plot="adaptive-') == 1 and "Adaptive ladders: excess over controls by dose</h3>" in html
    assert re.search(r"<summary>Dose-response \(adaptive ladders\)</summary>", html)


def test_the_curve_is_drawn_in_chromium_without_error(rebuilt: Path) -> None:
    sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (CI installs Debian's chromium)")
    with sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto((rebuilt / "report.html").as_uri(), wait_until="load")
        drawn = page.evaluate("""() => { const e = document.querySelector('svg[data-plot="adaptive-shift-beta_shape"]');
            const r = e.getBoundingClientRect();
            const box = s => { const b = e.querySelector(s).getBBox(); return [b.x, b.width, b.height]; };
            return {w: r.width, h: r.height, marks: e.querySelectorAll('line,rect,circle,polygon,polyline').length,
                    onset: box('[data-mark="onset"] line'), band: box('[data-mark="band"]')}; }""")
        browser.close()
    assert errors == []
    assert [r for r in requests if not r.startswith(("file:", "data:"))] == []
    assert drawn["w"] > 600 and drawn["h"] > 250 and drawn["marks"] > 40
    assert drawn["onset"][2] > 200  # the onset line spans the plot's height
    assert drawn["band"][1] > 100 and drawn["band"][2] > 50  # the band is an area, not a line


# --------------------------------------------------------------------------- garbled


def _garble(data: Any, rng: random.Random, replacement: Any) -> Any:
    """``data`` with one value somewhere inside replaced (or one key dropped)."""
    if isinstance(data, dict) and data:
        key = rng.choice(sorted(data))
        if rng.random() < 0.25:
            return replacement if rng.random() < 0.2 else {k: v for k, v in data.items() if k != key}
        return {**data, key: _garble(data[key], rng, replacement)}
    if isinstance(data, list) and data:
        i = rng.randrange(len(data))
        if rng.random() < 0.25:
            return replacement
        return [*data[:i], _garble(data[i], rng, replacement), *data[i + 1:]]
    return replacement


_EXTREME = st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 1e16, -0.0, 10**30])
_JUNK = st.one_of(_EXTREME, _EXTREME, st.none(), st.booleans(), st.integers(-10**9, 10**9), st.floats(),
                  st.text(max_size=6),
                  st.lists(st.one_of(st.integers(-3, 3), st.floats()), max_size=3),
                  st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@pytest.fixture(scope="module")
def garbled_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("garbled-adaptive")


def _numbers(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every number inside ``data``."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _numbers(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _numbers(v, (*path, i))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield path


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _render(folder: Path, data: dict[str, Any]) -> None:
    """``quiver report`` of ``data``: rendered, or refused in one line naming campaign.json."""
    (folder / "campaign.json").write_text(json.dumps(data))
    result = run_cli(["report", str(folder)])
    assert result.code in (0, 2), result.stderr
    if result.code == 2:
        assert "campaign.json" in result.error_lines()[0]
    else:
        assert (folder / "report.html").read_text().startswith("<!DOCTYPE html>")


@settings(parent=FUZZ, max_examples=150)
@given(seed=st.integers(0, 2**32), junk=_JUNK, twice=st.booleans())
def test_a_garbled_adaptive_entry_is_rendered_or_refused_in_one_line(
        garbled_folder: Path, raw: dict[str, Any], seed: int, junk: Any, twice: bool) -> None:
    tried("quiver report: garbled adaptive entry")
    rng = random.Random(seed)
    data = copy.deepcopy(raw)
    adaptive = data["perturbations"][0]["adaptive"]
    for _ in range(2 if twice else 1):
        adaptive = _garble(adaptive, rng, junk)
    data["perturbations"][0]["adaptive"] = adaptive
    _render(garbled_folder, data)


@settings(parent=FUZZ, max_examples=150)
@given(seed=st.integers(0, 2**32), values=st.lists(_EXTREME, min_size=1, max_size=3))
def test_extreme_numbers_in_an_adaptive_entry_are_rendered_or_refused_in_one_line(
        garbled_folder: Path, raw: dict[str, Any], seed: int, values: list[Any]) -> None:
    """Any number of the entry (a level, an excess, the midpoint, the range, ...) made
    infinite, NaN or huge: the curve leaves out what it cannot draw."""
    tried("quiver report: extreme numbers in an adaptive entry")
    rng = random.Random(seed)
    data = copy.deepcopy(raw)
    adaptive = data["perturbations"][0]["adaptive"]
    paths = list(_numbers(adaptive))
    for value in values:
        _set(adaptive, rng.choice(paths), value)
    _render(garbled_folder, data)
