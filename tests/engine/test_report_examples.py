"""Example pairs and findings of a campaign with the problems a user must see first:
replays not applied, failed replays, requests the replay contract does not account for.

A three-call pipeline (classify, then act or escalate) is written here as traces: a
baseline, and replays of it for an effective pair (the route flips, another node runs),
a no-op, a not-applied one and a failed one. The examples are chosen, written and read
back as a campaign does it (:func:`quiver._report.examples.write_examples`), and the
findings of ``tests/data/campaign_adaptive.json`` with not-applied replays and
unaccounted requests added open with them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from quiver._diff import diff_traces
from quiver._interventional import PairRow
from quiver._report.examples import EXAMPLES_FILE, load_examples, write_examples
from quiver._report.examples_html import examples_section
from quiver._report.findings import campaign_findings
from quiver._report.markup import Markup
from quiver._trace import Trace

DATA = Path(__file__).parents[1] / "data" / "campaign_adaptive.json"


def _trace(tid: str, urgency: str, route: str, answer: str) -> Trace:
    act = "act" if route == "answer" else "escalate"
    calls = [
        {"call_id": "c0", "node": "input", "occurrence": 0, "call_path": "input#0", "kind": "source",
         "output": {"q": "my bill"}},
        {"call_id": "c1", "node": "classify", "occurrence": 0, "call_path": "classify#0", "kind": "llm",
         "parents": ["c0"], "output": {"urgency": urgency, "topic": "billing"}, "decision": {"route": route}},
        {"call_id": "c2", "node": act, "occurrence": 0, "call_path": f"{act}#0", "kind": "transform",
         "parents": ["c1"], "output": answer},
    ]
    return Trace.model_validate({"trace_id": tid, "run_id": "r", "pipeline": "p", "input_id": "bill", "repeat": 0,
                                 "inputs": {"q": "my bill"}, "calls": calls, "output": answer})


def _row(job: str, status: str, stratum: str | None, repeat: int, **more: Any) -> PairRow:
    data = {"perturbation_id": "urgency", "status": status, "trace_id": "t0", "input_id": "bill", "repeat": repeat,
            "node": "classify", "op": "override", "params": {"set": {"urgency": "low"}}, "job_id": job,
            "replay_id": "urgency#0", "step": 0}
    if status != "failed":
        data.update({"occurrence": 0, "stratum": stratum, "magnitude": 0.5 if stratum == "effective" else 0.0,
                     "D_iter": 2 if stratum == "effective" else 0, "D_shape": stratum == "effective",
                     "D_output": stratum == "effective", "D_struct": stratum == "effective",
                     "d": {"classify": 0.5 if stratum == "effective" else 0.0, "act": 1.0 if stratum == "effective"
                           else 0.0}, **more})
    else:
        data["error"] = "RuntimeError: the endpoint went away"
    return PairRow.from_json(data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("examples")
    base = _trace("t0", "high", "answer", "we refund the double charge today")
    (out / "baseline.jsonl").write_text(base.model_dump_json() + "\n", encoding="utf-8")
    replays = [_trace("t0~urgency#0/0", "low", "escalate", "a person will call you back"),
               _trace("t0~urgency#0/1", "high", "answer", "we refund the double charge today"),
               _trace("t0~urgency#0/2", "high", "answer", "we refund the double charge today")]
    (out / "replays.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in replays), encoding="utf-8")
    rows = [_row("urgency/0/t0/0", "ok", "effective", 0), _row("urgency/0/t0/1", "ok", "noop", 1),
            _row("urgency/0/t0/2", "ok", "not_applied", 2), _row("urgency/0/t0/3", "failed", None, 3)]
    campaign = {"perturbations": [{"id": "urgency", "downstream": ["act", "escalate"]}]}
    write_examples(out, rows, [base], campaign, out / "baseline.jsonl",
                   {"urgency": "the output has no field urgency"})
    return out


def test_the_examples_show_the_not_applied_and_the_failed_replay(folder: Path) -> None:
    pairs = load_examples(folder)
    assert pairs is not None
    assert [p.rule for p in pairs] == ["typical effective", "no-op", "not applied", "failed"]
    effective, noop, not_applied, failed = pairs
    assert effective.first == "classify#0" and [s.call for s in effective.steps if s.first] == ["classify#0"]
    said = diff_traces(_trace("t0", "high", "answer", "we refund the double charge today"),
                       _trace("t0~urgency#0/0", "low", "escalate", "a person will call you back")).first
    assert said is not None and effective.first == f"{said.node}#{said.occurrence}"  # as quiver diff finds it
    assert effective.changed == (("urgency", "high", "low"),)
    assert [(s.call, s.baseline is not None, s.replay is not None) for s in effective.steps] == [
        ("classify#0", True, True), ("act#0", True, False), ("escalate#0", False, True)]
    assert ("-", "we refund the double charge today") in effective.output_diff
    assert noop.first is None and noop.changed == () and not noop.output_changed
    assert not_applied.note == "the output has no field urgency"
    assert "not applied: the output has no field urgency" in not_applied.render()
    assert failed.replay_trace is None and failed.steps == () and failed.error == "RuntimeError: the endpoint went away"
    assert "the replay failed" in failed.render()
    page = Markup("").join(examples_section(pairs, ["urgency"]))
    assert page.count('data-rule="') == 4 and 'data-rule="not applied"' in page and 'data-rule="failed"' in page
    assert json.loads((folder / EXAMPLES_FILE).read_text())["baseline"] == str((folder / "baseline.jsonl").resolve())


def test_the_findings_open_with_replays_not_applied_and_requests_not_accounted_for() -> None:
    raw: dict[str, Any] = json.loads(DATA.read_text())
    clean = campaign_findings(copy.deepcopy(raw))
    assert all(f.kind != "problem" for f in clean)
    p = raw["perturbations"][0]
    p["not_applied"], p["not_applied_reasons"] = 12, {"the output has no field value": 12}
    raw["unaccounted_requests"] = [{"node": "score", "endpoint": "GET 127.0.0.1:9/v1/models", "requests": 6}]
    found = campaign_findings(raw)
    assert [f.kind for f in found[:2]] == ["problem", "problem"] and found[2].kind != "problem"
    assert found[0].text() == (f"{p['id']}: 12 of {p['pairs']:,} replays were not applied (counted in no stratum): "
                               "the output has no field value.")
    assert found[0].data["value"] == 12
    assert found[1].text().startswith("Node score sent 6 request(s) to GET 127.0.0.1:9/v1/models that the replay "
                                      "contract does not account for")
    assert found[1].data["value"] == 6 and len(found) == len(clean) + 2
