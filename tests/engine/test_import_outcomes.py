"""Imported traces carry the outcome their source gives: Langfuse scores, evaluation
annotations on the root span (``eval.NAME.label`` / ``.score``), a benchmark's reward;
a source with no verdict gives no outcome, and an export of recorded traces keeps theirs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from quiver import import_traces
from quiver._outcome import outcome_from_attributes, outcome_from_scores

DATA = Path(__file__).parents[1] / "data" / "traces"


def _langfuse(scores: list[dict[str, Any]]) -> dict[str, Any]:
    record = json.loads((DATA / "langfuse" / "agno-2025-06-11.trace.json").read_text())
    record = copy.deepcopy(record)
    record["trace"]["scores"] = scores
    return record


def test_langfuse_scores_become_the_traces_outcome() -> None:
    record = _langfuse([
        {"name": "correct", "value": 1, "dataType": "BOOLEAN"},
        {"name": "helpfulness", "value": 0.3, "dataType": "NUMERIC", "comment": "too short"},
        {"name": "tone", "stringValue": "good", "value": 0, "dataType": "CATEGORICAL"},
        {"name": "latency_ms", "value": 5400, "dataType": "NUMERIC"},  # no verdict in it: left out
    ])
    result = import_traces("langfuse", [record])
    (trace,) = result.traces
    outcome = trace.outcome
    assert outcome is not None and outcome.source == "langfuse scores"
    assert {c.name: c.status for c in outcome.checks} == {"correct": "pass", "helpfulness": "fail", "tone": "pass"}
    assert outcome.status == "fail" and outcome.failed_checks() == ["helpfulness"]
    assert outcome.checks[1].detail == "too short" and outcome.score == pytest.approx((1 + 0.3 + 1) / 3)


def test_a_source_without_a_verdict_gives_no_outcome() -> None:
    (trace,) = import_traces("langfuse", [_langfuse([])]).traces
    assert trace.outcome is None
    assert "outcome" not in trace.model_dump(mode="json")


@pytest.mark.parametrize("attributes, status, source", [
    ({"eval.correctness.label": "correct", "eval.correctness.score": 1.0}, "pass", "evaluation annotations"),
    ({"eval.hallucination.label": "hallucinated"}, None, None),
    ({"eval.qa.score": 0.2, "eval.qa.explanation": "wrong city"}, "fail", "evaluation annotations"),
    ({"reward": 1.0}, "pass", "reward"),
    ({"tau_bench.reward": 0.5}, "fail", "reward"),
    ({"eval.qa.label": "incorrect", "reward": 1}, "fail", "evaluation annotations and reward"),
])
def test_span_annotations_and_rewards(attributes: dict[str, Any], status: str | None, source: str | None) -> None:
    outcome = outcome_from_attributes(attributes)
    assert (outcome.status if outcome else None) == status
    assert (outcome.source if outcome else None) == source


def test_an_openinference_root_span_with_evaluations_imports_its_outcome(tmp_path: Path) -> None:
    spans = Path(__file__).parents[1] / "data" / "spans" / "openinference-langchain" / "chain.jsonl"
    rows = [json.loads(line) for line in spans.read_text().splitlines()]
    root = next(r for r in rows if r["parent_id"] is None)
    root["attributes"].update({"eval.correctness.label": "incorrect",
                               "eval.correctness.explanation": "names another city"})
    path = tmp_path / "chain.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (trace,) = import_traces("openinference", [path]).traces
    assert trace.outcome is not None and trace.outcome.status == "fail"
    assert trace.outcome.checks[0].detail == "names another city"
    assert trace.outcome.source == "evaluation annotations"


def test_scores_that_are_no_list_give_nothing() -> None:
    assert outcome_from_scores(None) is None and outcome_from_scores({"a": 1}) is None


def test_quiver_import_runs_a_specs_checks_on_traces_without_an_outcome(tmp_path: Path) -> None:
    import subprocess
    import sys

    spec = tmp_path / "checks.yaml"
    spec.write_text('outcome:\n  - {name: paris, regex: "Paris"}\n  - {name: rome, regex: "Rome"}\n')
    spans = Path(__file__).parents[1] / "data" / "spans" / "openinference-langchain" / "chain.jsonl"
    out = tmp_path / "imported.jsonl"
    done = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", "import", "openinference", str(spans),
                           "--out", str(out), "--outcome", str(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = out.read_text().splitlines()
    outcome = json.loads(line)["outcome"]
    assert outcome["status"] == "fail" and [c["status"] for c in outcome["checks"]] == ["pass", "fail"]
    assert "outcome: pass rate 0.000 [0.000, 0.000] (0 of 1 traces over 1 inputs passed); from the spec's checks" \
        in done.stdout
