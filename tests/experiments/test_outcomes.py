"""Outcome checks: what a right answer is, on every trace, counted where it is true.

A quiz pipeline (tests/pipelines/judged) is recorded through a counting front with
built-in checks against an input field, a Python check, and an LLM judge: the judge's
requests reach the front and are counted apart from the pipeline's; a frozen check sends
nothing and finds the recording's outcomes; a check that raises is an error, never a
pass; a check naming an input field the inputs lack is refused before anything runs.
Every bundled demo's recording carries its outcome, recomputed here independently from
the stored outputs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import string
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_front import CountingFront
from fuzzing import run_cli

from quiver import Trace, load_traces
from quiver._outcome import CheckSpec, evaluate, outcome_spec
from quiver.replay import Simulator, SimulatorConfig

ROOT = Path(__file__).parents[2]
QUIZ = ROOT / "tests" / "pipelines" / "judged"
SECONDS = 300.0

RECORD = """\
pipeline: {quiz}/pipeline.py:run
llm: {{base_url: {url}, model: quiz-answer, api_key_env: QUIVER_QUIZ_KEY}}
inputs: {quiz}/inputs.jsonl
repeats: 3
concurrency: 2
seed: 0
outcome:
{checks}
output: {out}
"""

CHECKS = """\
  - {name: exact, field: answer, equals: {input: capital}}
  - {name: judged, judge: {rubric: "The answer names the capital of the country.", model: quiz-judge,
                           reference: {input: capital}}}
  - {name: long, python: {quiz}/checks.py:length_score, threshold: 0.5}
"""


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    spec = importlib.util.spec_from_file_location("quiz_sim_models", QUIZ / "sim_models.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    with Simulator(SimulatorConfig()) as sim, CountingFront(sim.url, bodies=True) as counting, \
            pytest.MonkeyPatch.context() as env:
        env.setenv("QUIVER_QUIZ_KEY", "sk-quiz-test")
        yield counting


def _write(root: Path, name: str, front: CountingFront, checks: str) -> Path:
    spec = root / f"{name}.yaml"
    spec.write_text(RECORD.format(quiz=QUIZ, url=front.url, checks=checks.replace("{quiz}", str(QUIZ)),
                                  out=root / name))
    return spec


@pytest.fixture(scope="module")
def recorded(front: CountingFront, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], Any]:
    root = tmp_path_factory.mktemp("quiz")
    spec = _write(root, "rec", front, CHECKS)
    mark = front.mark()
    done = run_cli(["record", str(spec)], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return root, front.requests()[mark:], done


def test_every_trace_carries_its_outcome_and_the_judge_is_counted_apart(
        recorded: tuple[Path, list[dict[str, Any]], Any]) -> None:
    root, sent, done = recorded
    traces = load_traces(root / "rec" / "traces.jsonl").traces
    assert len(traces) == 15 and all(t.outcome is not None for t in traces)
    for trace in traces:
        outcome = trace.outcome
        assert outcome is not None
        right = trace.output["answer"] == trace.inputs["capital"]
        checks = {c.name: c for c in outcome.checks}
        assert checks["exact"].status == ("pass" if right else "fail")
        assert checks["judged"].status == ("pass" if right else "fail")
        assert checks["judged"].judge is not None and checks["judged"].judge.model == "quiz-judge"
        assert checks["long"].score == pytest.approx(min(len(trace.output["answer"]) / 8, 1.0))
        assert outcome.status == ("pass" if right and checks["long"].status == "pass" else "fail")
    by_model = Counter(r["model"] for r in sent if r["path"].endswith("/chat/completions"))
    summary = json.loads((root / "rec" / "summary.json").read_text())
    assert by_model == {"quiz-answer": 15, "quiz-judge": 15}
    assert summary["llm_calls"] == by_model["quiz-answer"] and summary["judge_calls"] == by_model["quiz-judge"]
    rate = summary["outcome"]
    passed = sum(t.outcome.status == "pass" for t in traces if t.outcome is not None)
    assert rate["passed"] == passed and rate["pass_rate"] == pytest.approx(passed / 15)
    assert rate["pass_rate_ci"][0] <= rate["pass_rate"] <= rate["pass_rate_ci"][1]
    line = next(line for line in done.stdout.splitlines() if line.startswith("outcome: pass rate"))
    assert f"({passed} of 15 traces over 5 inputs passed)" in line and "15 judge LLM calls" in line


def test_a_frozen_check_is_served_the_judges_answers_and_finds_the_recorded_outcomes(
        recorded: tuple[Path, list[dict[str, Any]], Any], front: CountingFront) -> None:
    root, _, _ = recorded
    mark = front.mark()
    done = run_cli(["replay", "--spec", str(root / "rec.yaml"), "--check", str(root / "rec" / "traces.jsonl")],
                   seconds=SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    assert front.requests()[mark:] == []
    assert "outcomes: 15 of 15 replays have the recording's outcome; 0 judge LLM calls made" in done.stdout


def test_a_check_that_raises_is_an_error_and_never_a_pass(front: CountingFront, tmp_path: Path) -> None:
    spec = _write(tmp_path, "fragile", front, "  - {name: fragile, python: {quiz}/checks.py:fragile}\n"
                                              "  - any: [{regex: '.*', field: answer}]\n")
    done = run_cli(["record", str(spec), "--quiet"], seconds=SECONDS)
    assert done.code == 0, done.stderr
    traces = load_traces(tmp_path / "fragile" / "traces.jsonl").traces
    peru = [t for t in traces if t.input_id == "peru"]
    assert peru and all(t.outcome is not None and t.outcome.status == "error" for t in peru)
    assert all(t.outcome is not None and t.outcome.error_checks() == ["fragile"] for t in peru)
    assert "KeyError" in (peru[0].outcome.checks[0].detail or "")  # type: ignore[union-attr]
    rate = json.loads((tmp_path / "fragile" / "summary.json").read_text())["outcome"]
    assert rate["errors"] == 3 and rate["passed"] <= 12
    assert "3 could not be evaluated (counted as not passing)" in done.stdout


def test_a_check_naming_a_missing_input_field_is_refused_before_anything_runs(
        front: CountingFront, tmp_path: Path) -> None:
    spec = _write(tmp_path, "missing", front, "  - {name: gold, field: answer, equals: {input: expected}}\n")
    mark = front.mark()
    done = run_cli(["record", str(spec)], seconds=SECONDS)
    assert done.code == 2 and front.requests()[mark:] == []
    (line,) = done.error_lines()
    assert "outcome[0].equals.input: input field 'expected' is missing from 5 of 5 inputs" in line
    assert "question" in line and "capital" in line and not (tmp_path / "missing" / "traces.jsonl").exists()


@pytest.mark.parametrize("checks, message", [
    ("  - {equals: 1, contains: 2}\n", "a check gives exactly one of"),
    ("  - {regex: '('}\n", "does not compile"),
    ("  - {python: {quiz}/checks.py:nothing}\n", "has no attribute 'nothing'"),
])
def test_a_bad_check_is_refused_in_one_line(checks: str, message: str, front: CountingFront, tmp_path: Path) -> None:
    spec = _write(tmp_path, "bad", front, checks)
    done = run_cli(["record", str(spec)], seconds=SECONDS)
    assert done.code == 2
    (line,) = done.error_lines()
    assert message in line and "outcome" in line


# --------------------------------------------------------------------------- built-in checks


def _trace(output: Any, inputs: dict[str, Any] | None = None, status: str = "ok") -> Trace:
    return Trace(trace_id="t", run_id="r", pipeline="p", input_id="i", inputs=inputs or {}, output=output,
                 status=status)  # type: ignore[arg-type]


@pytest.mark.parametrize("check, output, inputs, status", [
    ({"field": "a", "equals": {"input": "gold"}}, {"a": "The Eiffel Tower!"}, {"gold": "eiffel tower"}, "fail"),
    ({"field": "a", "equals": {"input": "gold"}, "normalize": "answer"}, {"a": "The Eiffel Tower!"},
     {"gold": "eiffel tower"}, "pass"),
    ({"field": "$.items[1].id", "equals": 7}, {"items": [{"id": 3}, {"id": 7}]}, {}, "pass"),
    ({"field": "items.1.id", "equals": 7}, {"items": [{"id": 3}, {"id": 8}]}, {}, "fail"),
    ({"field": "nope", "equals": 1}, {"a": 1}, {}, "fail"),
    ({"contains": "Paris"}, "It is Paris.", {}, "pass"),
    ({"field": "tags", "contains": {"input": "tag"}}, {"tags": ["x", "y"]}, {"tag": "y"}, "pass"),
    ({"one_of": ["a", "b"]}, "c", {}, "fail"),
    ({"number": {"input": "n"}, "tolerance": 0.1}, 3.05, {"n": 3}, "pass"),
    ({"number": 3, "tolerance": 0.01}, "three", {}, "fail"),
    ({"any": [{"equals": 1}, {"equals": 2}]}, 2, {}, "pass"),
    ({"all": [{"equals": 2}, {"regex": "^3$"}]}, 2, {}, "fail"),
    ({"equals": {"input": "gone"}}, 2, {}, "error"),
])
def test_builtin_checks(check: dict[str, Any], output: Any, inputs: dict[str, Any], status: str) -> None:
    assert evaluate(CheckSpec.model_validate(check), _trace(output, inputs)).status == status


def test_a_failed_pipeline_fails_its_outcome_and_groups_are_three_valued() -> None:
    spec = CheckSpec.model_validate(outcome_spec([{"equals": 1}]))
    assert evaluate(spec, _trace(None, status="failed")).status == "fail"
    errors = CheckSpec.model_validate({"any": [{"equals": {"input": "gone"}}, {"equals": 5}]})
    assert evaluate(errors, _trace(4)).status == "error"  # no pass, one error: never a pass
    assert evaluate(errors, _trace(5)).status == "pass"


# --------------------------------------------------------------------------- the bundled demos


def _normalize(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _f1(pred: str, gold: str) -> float:
    p, g = _normalize(pred), _normalize(gold)
    if {p, g} & {"yes", "no", "noanswer"}:
        return float(p == g)
    common = sum((Counter(p.split()) & Counter(g.split())).values())
    return 0.0 if common == 0 else 2 * common / (len(p.split()) + len(g.split()))


def _qa(gold: str, answer: str) -> bool:
    return _normalize(answer) == _normalize(gold) or _f1(answer, gold) >= 0.8


def _hotpot() -> dict[str, str]:
    data = json.loads((ROOT / "experiments" / "multihop_qa" / "data" / "hotpot_dev_distractor_v1_100.json").read_text())
    return {q["_id"]: q["answer"] for q in data}


def _dspy_gold() -> dict[str, str]:
    rows = (ROOT / "experiments" / "dspy_multihop" / "data" / "questions.jsonl").read_text().splitlines()
    return {json.loads(r)["question"]: json.loads(r)["answer"] for r in rows if r.strip()}


QUICKSTART = {"urgent-outage": "escalate", "thanks-note": "smalltalk", "hello-anyone": "smalltalk"}


def _right(demo: str, trace: Trace) -> bool:
    """Each demo's right answer, as its record.yaml states it, written again here."""
    out = trace.output or {}
    if demo == "multihop_qa":
        return _qa(_hotpot()[trace.inputs["question_id"]], str(out.get("answer", "")))
    if demo == "dspy_multihop":
        return _qa(_dspy_gold()[trace.inputs["question"]], str(out.get("answer", "")))
    if demo == "quickstart":
        want = QUICKSTART.get(trace.input_id, "answer")
        return out.get("route") == want and (want != "answer" or bool(out.get("refs")))
    if demo == "agents_example":
        refunds = trace.input_id.split("-")[0] in ("refund", "return", "damaged")
        return out.get("desk") == ("Refunds desk" if refunds else "Order desk")
    if demo == "langgraph_agent":
        want = "compose" if trace.input_id == "greeting" else "retrieve"
        return out.get("route") == want and bool(str(out.get("answer") or "").strip())
    if demo == "invoice_chain":  # the customer's tier discount off the amount the request names
        from quiver.experiments.invoice_chain.book import RATES, TIERS

        request = str(trace.inputs["request"])
        [customer] = [name for name in TIERS if name in request.replace(",", " ").replace(".", " ").split()]
        amount = float(next(w for w, nxt in zip(request.split(), request.split()[1:], strict=False)
                            if nxt.startswith("dollar")))
        return f"is {amount * (1 - RATES[TIERS[customer]]):.2f} dollars" in str(out.get("reply", ""))
    if demo == "support_bot":
        if trace.input_id.startswith("smalltalk-"):
            return out.get("path") == "smalltalk"
        if trace.input_id.startswith("account-"):
            return out.get("path") == "answer"
        return out.get("path") == "answer" and bool(out.get("refs"))
    raise AssertionError(demo)


@pytest.mark.parametrize("demo", ["quickstart", "multihop_qa", "support_bot", "agents_example", "langgraph_agent",
                                  "dspy_multihop", "invoice_chain"])
def test_every_bundled_demo_records_its_pass_rate_and_each_outcome_recomputes(demo: str, tmp_path: Path) -> None:
    out = tmp_path / demo
    proc = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "record",
                           str(ROOT / "experiments" / demo / "record.yaml"), "--output", str(out), "--repeats", "1",
                           "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = load_traces(out / "traces.jsonl").traces
    assert traces and all(t.outcome is not None for t in traces)
    for trace in traces:
        assert trace.outcome is not None and trace.outcome.status == ("pass" if _right(demo, trace) else "fail"), \
            (trace.input_id, trace.output, trace.outcome)
    rate = json.loads((out / "summary.json").read_text())["outcome"]
    passed = sum(_right(demo, t) for t in traces)
    assert rate["passed"] == passed and rate["n"] == len(traces)
    lo, hi = rate["pass_rate_ci"]
    assert lo <= passed / len(traces) <= hi
    said = re.search(r"^outcome: pass rate \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] \(\d+ of \d+ traces over \d+ inputs.*$",
                     proc.stdout, re.MULTILINE)
    assert said, proc.stdout
    print(f"{demo}: {said.group(0)}")


def test_analyze_splits_sensitivities_by_outcome(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    proc = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "record",
                           str(ROOT / "experiments" / "support_bot" / "record.yaml"), "--output", str(rec),
                           "--repeats", "2", "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = load_traces(rec / "traces.jsonl").traces
    out = tmp_path / "analysis"
    done = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "analyze", str(rec / "traces.jsonl"),
                           "--out", str(out), "--by-outcome", "--no-plots", "--quiet", "--resamples", "200"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    compared = json.loads((out / "by-outcome.json").read_text())
    for status in ("pass", "fail"):
        profile = json.loads((out / "by-outcome" / status / "profile.json").read_text())
        assert profile["traces"] == compared["traces"][status] == sum(
            (t.outcome is not None and t.outcome.status == "pass") == (status == "pass") for t in traces)
        for edge in profile["edges"]:
            row = next(r for r in compared["edges"] if (r["source"], r["target"]) == (edge["source"], edge["target"]))
            assert row[status]["sigma"] == edge["sigma"] and row[status]["n"] == edge["n"]
    assert "by outcome: pass" in done.stdout
