"""``quiver run SPEC --plan``: the replays, LLM calls, tokens and cost of a campaign,
predicted from its baseline without sending a call, against what the run then makes.

The README campaign is planned against the session's run of it (``support_bot_run``);
small specs on that run's baseline check the numbers per perturbation against the
support bot's known structure (the first wave runs in parallel, then the planner loop
and the composer, or smalltalk alone), and the cost arithmetic with prices chosen so
that the cost is a token count.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver._trace import Trace, load_traces
from quiver.experiments._campaign import CampaignRun, live_llm_calls, plan_campaign
from quiver.replay import ReplayMode, Target

from .conftest import ROOT, SPEC, quiver_command

DEMO = ROOT / "experiments" / "support_bot"
AFTER_FIRST_WAVE = {"planner", "composer", "smalltalk"}
"""The support bot's LLM nodes after its parallel first wave (rewriter, signal_analysis,
context_sufficiency): what a replay perturbing one of the first wave runs live."""

SMALL = """\
pipeline: {demo}/pipeline.py:run
name: support_bot
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.15
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
baseline: {baseline}
graph: {demo}/graph.yaml
select: {{mode: sample, n: 6, seed: 1}}
perturbations:
  - id: cs-override
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variants: [{demo}/prompts/rewriter_terse.txt, {demo}/prompts/rewriter_polite.txt]}}
    repeats: 2
  - id: planner-model
    node: planner
    op: param_change
    params: {{model: support-bot-composer}}
replay: {{controls: 1}}
{extra}
output: {output}
"""


def _spec(folder: Path, baseline: Path, extra: str = "", name: str = "small") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SMALL.format(demo=DEMO, baseline=baseline, extra=extra, output=folder / name), encoding="utf-8")
    return path


def _plan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*quiver_command(), "run", *args, "--plan"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def baseline(support_bot_run: Path) -> Path:
    return support_bot_run / "baseline" / "traces.jsonl"


@pytest.fixture(scope="module")
def traces(baseline: Path) -> list[Trace]:
    return load_traces(baseline).traces


def _llm_calls(trace: Trace, nodes: set[str]) -> list[Any]:
    return [c for c in trace.calls if c.node in nodes and c.response is not None]


# --------------------------------------------------------------------------- the README campaign


def test_the_readme_campaign_plan_is_within_ten_percent_of_the_calls_it_made(support_bot_run: Path) -> None:
    proc = _plan_cli(str(SPEC), "--output", str(support_bot_run))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    total = re.search(r"^total\s+([\d,]+)\s+([\d,]+)\s+\(([\d,]+)-([\d,]+)\)", proc.stdout, re.M)
    assert total is not None, proc.stdout
    jobs, calls, low, high = (int(g.replace(",", "")) for g in total.groups())
    summary = json.loads((support_bot_run / "summary.json").read_text())
    made = summary["llm_calls"]
    assert jobs == summary["jobs"]
    assert abs(calls - made) <= 0.10 * made, f"planned {calls} LLM calls, the run made {made}"
    assert low <= made <= high
    # per perturbation and control: the replays exactly, the calls within the range of recorded paths
    by_row: Counter[str] = Counter()
    replays: Counter[str] = Counter()
    for line in (support_bot_run / "pairs.jsonl").read_text().splitlines():
        row = json.loads(line)
        group = row["perturbation_id"].split("#")[0]
        by_row[group] += sum(row["llm_calls"].values())
        replays[group] += 1
    assert sum(by_row.values()) == made
    printed = 0
    for line in proc.stdout.splitlines():
        m = re.match(r"^(\S+)\s+([\d,]+)\s+([\d,]+)\s+\(([\d,]+)-([\d,]+)\)", line)
        if m is None or m.group(1) == "total":
            continue
        n, planned, lo, hi = (int(g.replace(",", "")) for g in m.groups()[1:])
        assert n == replays[m.group(1)], m.group(1)
        assert lo <= by_row[m.group(1)] <= hi, (m.group(1), planned, by_row[m.group(1)])
        printed += 1
    assert printed == len(replays)
    assert "no prices given" in proc.stdout and "budget: none set" in proc.stdout


def test_a_spec_that_records_its_baseline_first_cannot_be_planned_before_it_has(tmp_path: Path) -> None:
    proc = _plan_cli(str(SPEC), "--output", str(tmp_path / "fresh"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quiver run: error: ")
    assert "75 inputs x 3 repeats" in lines[0] and "set `baseline:`" in lines[0]
    assert not (tmp_path / "fresh").exists()


# --------------------------------------------------------------------------- known answers


def test_each_region_of_a_replay_is_counted_as_the_replayer_runs_it(traces: list[Trace]) -> None:
    frozen = ReplayMode()
    for trace in traces[:40]:
        after = _llm_calls(trace, AFTER_FIRST_WAVE)
        # an output operator at a first-wave node: its parallel siblings and itself served
        assert live_llm_calls(trace, Target("context_sufficiency"), frozen, target_runs=False) == after
        # an execution operator there: the target too
        live = live_llm_calls(trace, Target("rewriter"), frozen, target_runs=True)
        assert live == sorted(after + _llm_calls(trace, {"rewriter"}), key=trace.calls.index)
        # the model unfrozen: every LLM call of the trace is sent but the target's, served transformed
        every = [c for c in trace.calls if c.response is not None and c.node != "context_sufficiency"]
        assert live_llm_calls(trace, Target("context_sufficiency"), frozen.unfreeze("model"),
                              target_runs=False) == every
        # a node always live is sent upstream too
        mode = ReplayMode(live_nodes=("signal_analysis",))
        assert live_llm_calls(trace, Target("context_sufficiency"), mode, target_runs=False) == sorted(
            after + _llm_calls(trace, {"signal_analysis"}), key=trace.calls.index)


def test_per_perturbation_numbers_and_the_cost_are_the_recorded_usage_at_the_given_prices(
    tmp_path: Path, baseline: Path, traces: list[Trace]
) -> None:
    # 1M input tokens of the planner cost 1M: its cost is its prompt tokens; the composer's
    # is half its completion tokens; the rest have no price
    prices = ("prices:\n  support-bot-planner: {input: 1000000, output: 0}\n"
              "  support-bot-composer: {input: 0, output: 500000}\n")
    run = CampaignRun.load(_spec(tmp_path, baseline, prices), stream=None)
    plan = plan_campaign(run)
    data = plan.to_json()
    rows = {r["id"]: r for r in data["rows"]}
    from quiver.experiments._campaign import select_traces

    chosen = {p.id: select_traces(run.spec, p, traces) for p in run.spec.perturbations}
    assert {i: len(t) for i, t in chosen.items()} == {"cs-override": 6, "rewriter-swap": 6, "planner-model": 6}

    def usage(calls: list[Any]) -> tuple[int, int, int]:
        return (len(calls), sum(c.response.usage["prompt_tokens"] for c in calls),
                sum(c.response.usage["completion_tokens"] for c in calls))

    cs = [c for t in chosen["cs-override"] for c in _llm_calls(t, AFTER_FIRST_WAVE)]
    assert (rows["cs-override"]["jobs"], *usage(cs)) == (6, rows["cs-override"]["calls"],
                                                         rows["cs-override"]["prompt_tokens"],
                                                         rows["cs-override"]["completion_tokens"])
    swap = [c for t in chosen["rewriter-swap"] for c in _llm_calls(t, AFTER_FIRST_WAVE | {"rewriter"})]
    n, prompt, completion = usage(swap)  # 2 variants x 2 repeats of each trace
    assert (rows["rewriter-swap"]["jobs"], rows["rewriter-swap"]["calls"], rows["rewriter-swap"]["tokens"]) == (
        24, 4 * n, 4 * (prompt + completion))
    # param_change of the planner's model: its first call is billed to the new model
    first = [next(c for c in t.calls if c.node == "planner") for t in chosen["planner-model"]]
    moved = rows["planner-model"]["by_model"]["support-bot-composer"]
    composer = [c for t in chosen["planner-model"] for c in _llm_calls(t, {"composer"})]
    assert moved["calls"] == len(first) + len(composer)
    assert moved["prompt_tokens"] == usage(first)[1] + usage(composer)[1]
    # controls apart: one served (context_sufficiency), two live (rewriter, planner)
    controls = sorted(r["id"] for r in data["rows"] if r["control"])
    assert controls == ["control.context_sufficiency.0.served", "control.planner.0.live",
                        "control.rewriter.0.live"]
    assert rows["control.context_sufficiency.0.served"]["calls"] == rows["cs-override"]["calls"]
    assert rows["control.rewriter.0.live"]["calls"] * 4 == rows["rewriter-swap"]["calls"]
    # the cost: the planner's prompt tokens plus half the composer's completion tokens
    for row in data["rows"]:
        by_model = row["by_model"]
        expected = (by_model.get("support-bot-planner", {}).get("prompt_tokens", 0)
                    + by_model.get("support-bot-composer", {}).get("completion_tokens", 0) / 2)
        assert row["cost"] == pytest.approx(expected, rel=1e-12)
        assert row["unpriced_models"] == sorted(m for m in by_model if m not in (
            "support-bot-planner", "support-bot-composer"))
    total = data["total"]
    assert total["calls"] == sum(r["calls"] for r in data["rows"])
    assert total["cost"] == pytest.approx(sum(r["cost"] for r in data["rows"]), rel=1e-12)
    assert total["calls_min"] <= total["calls"] <= total["calls_max"]


def test_the_plan_says_where_a_budget_would_stop_the_run(tmp_path: Path, baseline: Path) -> None:
    free = plan_campaign(CampaignRun.load(_spec(tmp_path, baseline), stream=None))
    calls = [c for _, c, _ in free.job_calls]
    limit = sum(calls[:10])  # reached at the end of the 10th job
    spec = _spec(tmp_path, baseline, f"budget: {{max_llm_calls: {limit}}}", name="capped")
    proc = _plan_cli(str(spec))
    assert proc.returncode == 1, proc.stderr
    assert (f"budget (max_llm_calls {limit:,}): the plan EXCEEDS it" in proc.stdout
            and f"after about 10 of {len(calls)} replays, in rewriter-swap" in proc.stdout), proc.stdout
    assert [group for group, _, _ in free.job_calls][5:7] == ["cs-override", "rewriter-swap"]  # 6 jobs, then 24
    roomy = _spec(tmp_path, baseline, f"budget: {{max_llm_calls: {sum(calls) + 1}}}", name="roomy")
    proc = _plan_cli(str(roomy))
    assert proc.returncode == 0 and "the plan fits" in proc.stdout
    assert not (tmp_path / "capped").exists() and not (tmp_path / "roomy").exists()  # nothing written


def test_the_plan_sends_no_call_to_the_endpoint(tmp_path: Path, baseline: Path) -> None:
    text = _spec(tmp_path, baseline).read_text()
    start, end = text.index("llm:"), text.index("baseline:")
    spec = tmp_path / "unreachable.yaml"  # nothing listens on port 9: a call would fail
    spec.write_text(text[:start] + "llm: {base_url: 'http://127.0.0.1:9/v1', model: m}\n" + text[end:])
    proc = _plan_cli(str(spec))
    assert proc.returncode == 0, proc.stderr
    assert "no LLM call was made" in proc.stdout


@pytest.mark.parametrize(("prices", "field"), [
    ("prices: {m: {input: -1, output: 1}}", "prices.m.input"),
    ("prices: {m: {input: 1}}", "prices.m.output"),
    ("prices: {m: {input: 1, output: 1, cached: 1}}", "prices.m.cached"),
    ("prices: {m: {input: '1', output: 1}}", "prices.m.input"),
    ("prices: {m: {input: .nan, output: 1}}", "prices.m.input"),
    ("prices: [1, 2]", "prices"),
])
def test_a_bad_prices_block_is_one_line_naming_the_field(tmp_path: Path, baseline: Path, prices: str,
                                                         field: str) -> None:
    result = run_cli(["run", str(_spec(tmp_path, baseline, prices)), "--plan"])
    assert result.code == 2
    assert len(result.error_lines()) == 1 and f": {field}:" in result.error_lines()[0], result.stderr


_VALUE = st.one_of(st.integers(-10, 2_000_000), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2))
_PRICE = st.one_of(st.fixed_dictionaries({"input": _VALUE, "output": _VALUE}),
                   st.dictionaries(st.sampled_from(["input", "output", "cached", ""]), _VALUE, max_size=3), _VALUE)
_MODELS = st.sampled_from(["support-bot-planner", "support-bot-composer", "support-bot-rewriter", "other", "", "1"])


@settings(parent=FUZZ, max_examples=120)
@given(prices=st.one_of(st.dictionaries(_MODELS, _PRICE, max_size=4), _VALUE))
def test_any_prices_block_is_planned_or_refused_in_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                             baseline: Path, prices: Any) -> None:
    tried("plan prices")
    folder = tmp_path_factory.mktemp("prices")
    result = run_cli(["run", str(_spec(folder, baseline, "prices: " + json.dumps(prices))), "--plan"])
    assert result.code in (0, 2), result.stderr
    if result.code == 2:
        assert "prices" in result.error_lines()[0], result.stderr
        return
    if prices is None:  # the same as no block
        assert "cost: no prices given" in result.stdout
        return
    assert isinstance(prices, dict)
    cost = re.search(r"^cost: ([\d,.]+) at the spec's prices", result.stdout, re.M)
    assert cost is not None, result.stdout
    assert float(cost.group(1).replace(",", "")) >= 0


# --------------------------------------------------------------------------- the budget


def test_a_budget_stops_the_run_says_where_and_a_resume_with_a_larger_one_finishes(
    tmp_path: Path, baseline: Path
) -> None:
    capped = _spec(tmp_path, baseline, "budget: {max_llm_calls: 30}\nexecutor: {kind: local, concurrency: 2}",
                   name="run")
    proc = subprocess.run([*quiver_command(), "run", str(capped), "--quiet"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by_budget"] and not summary["complete"]
    # in flight at the limit: each of the 2 threads' replay (at most 4 calls), and one more each may have begun
    # before the driver counted the replay the thread had just finished (it counts them one at a time, in order)
    assert 30 <= summary["llm_calls"] < 30 + 2 * 2 * 4, summary
    line = next(x for x in proc.stderr.splitlines() if x.startswith("stopped by the budget"))
    committed = re.search(r"; ([\d,]+) of 54 replays committed, (\S+) running\)", line)
    assert committed is not None, line
    assert int(committed.group(1)) == summary["done"] < 54
    assert committed.group(2) in ("cs-override", "rewriter-swap")  # the first perturbations in job order
    assert "max_llm_calls 30 reached" in line and f"`quiver run {capped} --resume` with a larger budget" in line
    larger = _spec(tmp_path, baseline, "budget: {max_llm_calls: 100000}\nexecutor: {kind: local, concurrency: 2}",
                   name="run")
    assert larger == capped
    proc = subprocess.run([*quiver_command(), "run", str(larger), "--resume", "--quiet"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode in (0, 1) and "stopped by the budget" not in proc.stderr, proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["complete"]
