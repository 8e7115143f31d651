"""``experiments/specs/support_bot_adaptive.yaml``: adaptive ladders on the support bot
give thresholds consistent with ``truth.yaml``, with their intervals.

* **The rewriter's prompt variants, in order of strength** (polite, verbose, terse: a
  ladder over ``level``). truth.yaml says how many of the 70 answering inputs each variant
  moves at every model's argmax (polite 0, verbose 12, terse 19): each level's excess
  over the control replays must have an interval covering ``moves / 70`` (or lie within
  0.05 of it, truth.yaml's tolerance). The onset is verbose, polite below it: the
  threshold lies between polite's and verbose's mean rewriter distance, and truth.yaml's
  threshold (0.094, the smallest distance of a swap that moves a decision) lies in that
  bracket.
* **The share of the initial discovery's fragments removed** (a ladder over ``fraction``).
  The smallest fraction removes one fragment from every list, which at argmax moves a
  decision in 24.5% of the cases, averaged over inputs (truth.yaml
  ``moving_share_by_input``): the excess there must cover it, the onset is that smallest
  level, and the smallest discovery distance that bifurcated at it is truth.yaml's
  threshold (one fragment of six, 0.1667) within 0.05.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from findings_claims import check_claims

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "experiments" / "specs" / "support_bot_adaptive.yaml"
TRUTH = yaml.safe_load((ROOT / "experiments" / "support_bot" / "truth.yaml").read_text())
TOLERANCE = 0.05  # truth.yaml: an estimate within 0.05 of a stated value, or whose 95% CI covers it


def _consistent(estimate: float, ci: list[float], truth: float) -> bool:
    return ci[0] <= truth <= ci[1] or abs(estimate - truth) <= TOLERANCE


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, quiver_cli: list[str]) -> Path:
    out = tmp_path_factory.mktemp("adaptive") / "support_bot_adaptive"
    proc = subprocess.run([*quiver_cli, "run", str(SPEC), "--output", str(out), "--quiet"], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_no_finding_claims_an_absence_beyond_the_margin(run_dir: Path) -> None:
    check_claims(json.loads((run_dir / "campaign.json").read_text()))


@pytest.fixture(scope="module")
def campaign(run_dir: Path) -> dict[str, Any]:
    data = json.loads((run_dir / "campaign.json").read_text())
    return {p["id"]: p for p in data["perturbations"]}


def test_each_rewriter_variant_moves_as_many_inputs_as_truth_says(campaign: dict[str, Any]) -> None:
    adaptive = campaign["rewriter-variants"]["adaptive"]
    curve = adaptive["beta_shape"]
    variants = TRUTH["rewriter"]["variants"]
    inputs = TRUTH["rewriter"]["answering_inputs"]
    expected = {0.0: variants["polite"]["moves"] / inputs, 1.0: variants["verbose"]["moves"] / inputs,
                2.0: variants["terse"]["moves"] / inputs}
    points = {p["level"]: p for p in curve["points"]}
    assert sorted(points) == [0.0, 1.0, 2.0] and adaptive["stopped"] == "resolution reached"
    for level, share in expected.items():
        point = points[level]
        assert point["inputs"] >= 60, point
        assert _consistent(point["excess"], point["excess_ci"], share), (level, share, point)


def test_the_rewriter_threshold_lies_between_polite_and_verbose(campaign: dict[str, Any]) -> None:
    curve = campaign["rewriter-variants"]["adaptive"]["beta_shape"]
    assert curve["onset"] == 1.0 and curve["below"] == 0.0
    points = {p["level"]: p for p in curve["points"]}
    below, onset = points[0.0]["mean_d"], points[1.0]["mean_d"]
    assert below < TRUTH["rewriter"]["interventional_beta_shape"] <= onset + TOLERANCE, (below, onset)
    assert abs(onset - TRUTH["rewriter"]["variants"]["verbose"]["mean_d"]) <= TOLERANCE
    assert abs(points[0.0]["mean_d"] - TRUTH["rewriter"]["variants"]["polite"]["mean_d"]) <= TOLERANCE
    assert curve["midpoint"] is not None and curve["midpoint_ci"] is not None


def test_one_fragment_of_each_list_already_moves_the_share_truth_says(campaign: dict[str, Any]) -> None:
    adaptive = campaign["fragments-share"]["adaptive"]
    curve = adaptive["beta_shape"]
    first = curve["points"][0]
    assert curve["onset"] == first["level"] and curve["below"] is None
    truth = TRUTH["discovery_ladder"]
    assert _consistent(first["excess"], first["excess_ci"], truth["moving_share_by_input"]), first
    assert abs(curve["onset_d"] - truth["interventional_beta_shape"]) <= TOLERANCE, curve["onset_d"]
    assert adaptive["replays"] <= adaptive["settings"]["max_replays"]


def test_the_fraction_curve_has_a_midpoint_with_an_interval_inside_its_resolution(campaign: dict[str, Any]) -> None:
    adaptive = campaign["fragments-share"]["adaptive"]
    curve = adaptive["beta_shape"]
    lo, hi = curve["midpoint_ci"]
    assert lo <= curve["midpoint"] <= hi and hi - lo <= adaptive["settings"]["resolution"] + 1e-9
    fits = [p["fit"] for p in curve["points"]]
    assert fits == sorted(fits) and curve["plateau"] == fits[-1]
    assert len(adaptive["rounds"]) >= 2 and adaptive["rounds"][-1]["stop"] == adaptive["stopped"]


def test_the_adaptive_campaign_page_draws_no_text_over_another(run_dir: Path,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """The adaptive campaign's report.html in Chromium: its findings say each ladder's
    onset and midpoint, no text of a chart is drawn over another or outside its chart
    (every <details> opened), and screenshots of its first screen and each section are
    kept in the test output folder."""
    sync = pytest.importorskip("playwright.sync_api")
    if not Path("/usr/bin/chromium").is_file():
        pytest.skip("no Chromium at /usr/bin/chromium (CI installs Debian's chromium)")
    from pagecheck import screenshots, text_count, text_problems

    html = (run_dir / "report.html").read_text()
    assert html.count('class="finding finding-adaptive"') == 2
    folder = tmp_path_factory.mktemp("screenshots")
    with sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto((run_dir / "report.html").as_uri(), wait_until="load")
        shots = screenshots(page, folder, "adaptive")
        problems, texts = text_problems(page), text_count(page)
        browser.close()
    print(f"{texts} chart texts checked; screenshots in {folder}: {', '.join(s.name for s in shots)}")
    assert problems == [] and texts > 100
    assert [r for r in requests if not r.startswith(("file:", "data:"))] == []
    assert (run_dir / "report.html").stat().st_size < 1_000_000 and len(shots) >= 4
