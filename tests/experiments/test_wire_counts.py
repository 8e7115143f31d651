"""Every count of LLM calls a command prints or writes is what went over the wire.

The session's simulator sits behind a counting front (``tests/counting_front.py``, a
process of its own that forwards each request and logs it): what the front logged is
what the endpoint received, whatever the engine says. A pipeline with an LLM node on the
engine's client and one on a plain ``openai`` SDK client (``tests/pipelines/wire_mix.py``)
is recorded, checked, replayed with a perturbation, run as a campaign, gated and
attributed; each command's printed and written counts must equal the front's. A variant
whose transform node also fetches a model's description from the endpoint with ``urllib`` must be
named, node and endpoint, as sending requests the replay contract does not account for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_front import CountingFront
from fuzzing import run_cli

from quiver.replay import Simulator

RUN_SECONDS = 180.0
"""The longest one command may take here on a loaded 2-core machine."""
PIPELINES = Path(__file__).parents[1] / "pipelines"
QUESTIONS = ["where is my invoice", "how do I reset the password", "cancel my plan"]

RECORD = """\
pipeline: {pipelines}/wire_mix.py:{function}
llm: {{base_url: {url}, model: sim-echo, api_key_env: QUIVER_WIRE_KEY}}
inputs: inputs.jsonl
repeats: 2
concurrency: 2
{extra}output: {out}
"""

CAMPAIGN = """\
pipeline: {pipelines}/wire_mix.py:pipeline
llm: {{base_url: {url}, model: sim-echo, api_key_env: QUIVER_WIRE_KEY}}
baseline: {baseline}
perturbations:
  - {{id: write-hot, node: write, op: param_change, params: {{temperature: 1.3}}}}
replay: {{repeats: 1, controls: 1, downstream: live}}
executor: {{kind: local, concurrency: 2}}
analysis: {{resamples: 100, permutations: 100, cache_dir: {embeddings}}}
gate: {{probes: 2, repeats: 1}}
output: {out}
"""


@pytest.fixture(scope="module")
def front(simulator: Simulator) -> Iterator[CountingFront]:
    with CountingFront(simulator.url) as counting, pytest.MonkeyPatch.context() as env:
        env.setenv("QUIVER_WIRE_KEY", "sk-wire-test")
        yield counting


def _record(front: CountingFront, root: Path, function: str, name: str, extra: str = "") -> tuple[Path, int, Any]:
    """``quiver record`` of ``function`` through the front into ``root/name``: its spec,
    the front's mark before it, and the command's result."""
    spec = root / f"{name}.yaml"
    spec.write_text(RECORD.format(pipelines=PIPELINES, function=function, url=front.url, extra=extra,
                                  out=root / name))
    mark = front.mark()
    return spec, mark, run_cli(["record", str(spec), "--quiet"], seconds=RUN_SECONDS)


@pytest.fixture(scope="module")
def recorded(front: CountingFront, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The corpus, the chat completions the recording sent (front), and its stdout."""
    root = tmp_path_factory.mktemp("wire")
    (root / "inputs.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": q}) + "\n"
                                               for i, q in enumerate(QUESTIONS)), encoding="utf-8")
    _, mark, done = _record(front, root, "pipeline", "rec")
    assert done.code == 0, done.stderr
    return root, len(front.since(mark)), done.stdout


def _printed(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} not in {text!r}"
    return int(found.group(1).replace(",", ""))


def test_record_prints_and_writes_the_requests_the_endpoint_received(recorded: tuple[Path, int, str]) -> None:
    root, sent, stdout = recorded
    assert sent == 2 * len(QUESTIONS) * 2  # two LLM nodes, two repeats
    assert _printed(r"and (\d+) LLM calls", stdout) == sent
    assert json.loads((root / "rec" / "summary.json").read_text())["llm_calls"] == sent


def test_a_frozen_check_sends_nothing_and_says_so(recorded: tuple[Path, int, str], front: CountingFront) -> None:
    root, _, _ = recorded
    mark = front.mark()
    done = run_cli(["replay", str(root / "rec" / "traces.jsonl"), "--spec", str(root / "rec.yaml"), "--check"],
                   seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    assert front.since(mark, "") == []
    assert _printed(r"(\d+) LLM calls made", done.stdout) == 0


def test_a_replayed_perturbation_counts_what_it_sent(recorded: tuple[Path, int, str], front: CountingFront) -> None:
    root, _, _ = recorded
    mark = front.mark()
    done = run_cli(["replay", str(root / "rec" / "traces.jsonl"), "--spec", str(root / "rec.yaml"),
                    "--node", "write", "--op", "param_change", "--params", '{"temperature": 1.3}',
                    "--out", str(root / "op"), "--quiet"], seconds=RUN_SECONDS)
    assert done.code in (0, 1), done.stdout + done.stderr
    sent = len(front.since(mark))
    assert sent == 2 * len(QUESTIONS), front.requests()[mark:]  # the target's request per trace; none downstream
    summary = json.loads((root / "op" / "summary.json").read_text())
    assert sum(summary["llm_calls"].values()) == sent


def test_a_campaign_and_its_gate_count_what_they_sent(recorded: tuple[Path, int, str], front: CountingFront) -> None:
    root, _, _ = recorded
    spec = root / "campaign.yaml"
    spec.write_text(CAMPAIGN.format(pipelines=PIPELINES, url=front.url, baseline=root / "rec" / "traces.jsonl",
                                    embeddings=root / "embeddings", out=root / "run"))
    mark = front.mark()
    done = run_cli(["run", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    sent = len(front.since(mark))
    assert sent == 2 * 2 * len(QUESTIONS)  # the perturbation and its control, one write request per trace
    assert _printed(r"; (\d+) LLM calls", done.stdout) == sent
    assert json.loads((root / "run" / "summary.json").read_text())["llm_calls"] == sent
    assert json.loads((root / "run" / "campaign.json").read_text())["llm_calls"] == sent
    candidate = root / "plan_candidate.txt"
    candidate.write_text("[system]\nPlan the answer in three words.\n[user]\n{question}\n")
    mark = front.mark()
    done = run_cli(["gate", str(spec), "--candidate", f"wire_plan={candidate}", "--profile", str(root / "run"),
                    "--output", str(root / "gate"), "--quiet"], seconds=RUN_SECONDS)
    assert done.code in (0, 1), done.stdout + done.stderr
    assert json.loads((root / "gate" / "gate.json").read_text())["llm_calls"] == len(front.since(mark)) > 0
    assert _printed(r"; ([\d,]+) LLM calls \(counted on the wire\)", done.stdout) == len(front.since(mark))


def test_attribution_pays_only_for_sampling_on_an_unchanged_deployment(
    recorded: tuple[Path, int, str], front: CountingFront
) -> None:
    root, _, _ = recorded
    mark = front.mark()
    done = run_cli(["attribute", str(root / "rec" / "traces.jsonl"), "--spec", str(root / "rec.yaml"),
                    "--repeats", "2", "--out", str(root / "attribution")], seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    sent = front.since(mark)
    calls = json.loads((root / "attribution" / "attribution.json").read_text())["llm_calls"]
    assert calls["frozen"] == 0 and calls["sampling"] == len(sent) == 2 * 2 * len(QUESTIONS) * 2, calls
    assert all(calls[d] == 0 for d in ("retrieval", "tools", "prompt", "model")), calls
    assert CountingFront.repeated(sent) == []
    assert "attribution replays" in done.stderr  # progress while it works


def test_requests_the_contract_does_not_account_for_are_named(
    recorded: tuple[Path, int, str], front: CountingFront
) -> None:
    root, _, _ = recorded
    spec, mark, done = _record(front, root, "pipeline_peeking", "rec_peeking")
    assert done.code == 0, done.stderr
    peeked = len(front.since(mark, "/models/sim-echo"))
    assert peeked == len(QUESTIONS) * 2
    warnings = [line for line in done.stderr.splitlines() if "does not account for" in line]
    assert len(warnings) == 1 and "'peek'" in warnings[0] and f"{peeked} request(s) to GET" in warnings[0], warnings
    summary = json.loads((root / "rec_peeking" / "summary.json").read_text())
    assert [(u["node"], u["requests"]) for u in summary["unaccounted_requests"]] == [("peek", peeked)]
    mark = front.mark()
    done = run_cli(["replay", str(root / "rec_peeking" / "traces.jsonl"), "--spec", str(spec), "--check"],
                   seconds=RUN_SECONDS)
    assert len(front.since(mark, "/models/sim-echo")) == peeked  # the transform runs again on every replay
    assert any("'peek'" in line and "does not account for" in line for line in done.stderr.splitlines()), done.stderr


def test_a_tool_host_the_spec_names_is_recorded_and_served(
    recorded: tuple[Path, int, str], front: CountingFront
) -> None:
    """The same request over httpx, its host named in ``tools: {http: [...]}``: recorded as
    a tool call of its node, accounted for, and served by a frozen replay (nothing sent)."""
    root, _, _ = recorded
    host = front.url.split("//", 1)[1].split("/", 1)[0]
    spec, mark, done = _record(front, root, "pipeline_fetching", "rec_fetching", f"tools: {{http: [\"{host}\"]}}\n")
    assert done.code == 0 and "does not account for" not in done.stderr, done.stderr
    assert len(front.since(mark, "/models/sim-echo")) == len(QUESTIONS) * 2
    summary = json.loads((root / "rec_fetching" / "summary.json").read_text())
    assert summary["unaccounted_requests"] == [] and summary["http_requests"] == len(QUESTIONS) * 2
    mark = front.mark()
    done = run_cli(["replay", str(root / "rec_fetching" / "traces.jsonl"), "--spec", str(spec), "--check"],
                   seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr
    assert front.since(mark, "") == []


def test_the_gate_takes_a_prompt_written_inline(recorded: tuple[Path, int, str], front: CountingFront) -> None:
    """``--candidate NODE/SELECTOR=FILE``: the system message ``write`` sends through the
    SDK, swapped in the node's call on the candidate arm; a selector that picks no message
    is refused before any replay."""
    root, _, _ = recorded
    spec = root / "campaign.yaml"
    assert spec.is_file(), "the campaign test writes the spec first"
    candidate = root / "write_system.txt"
    candidate.write_text("Follow the outline, in one sentence.\n")
    mark = front.mark()
    done = run_cli(["gate", str(spec), "--candidate", f"write/system={candidate}", "--profile", str(root / "run"),
                    "--output", str(root / "gate_inline"), "--quiet"], seconds=RUN_SECONDS)
    assert done.code in (0, 1), done.stdout + done.stderr
    data = json.loads((root / "gate_inline" / "gate.json").read_text())
    assert [c["template"] for c in data["candidates"]] == ["write/system"]
    assert data["llm_calls"] == len(front.since(mark)) > 0
    done = run_cli(["gate", str(spec), "--candidate", f"write/contains:no such text={candidate}", "--profile",
                    str(root / "run"), "--output", str(root / "gate_refused"), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 2 and "matches no message" in done.stderr, done.stderr
