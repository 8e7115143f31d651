"""An unmodified program that builds ``openai.OpenAI()`` from the environment is recorded
and perturbed by ``quiver record`` and ``quiver run``, and a node whose requests no hook
sees is named, on the console and in campaign.json, instead of reading as a no-op.

The commands run as a user runs them (subprocesses, the bundled simulator started by
the spec) with no ``OPENAI_*`` variable in their environment: the endpoint reaches the
program through the variables the commands set.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from quiver import iter_traces

from .conftest import quiver_command

PIPELINE = '''\
import json
import os
import urllib.request

import openai
import quiver


@quiver.node("ask", kind="llm")
def ask(question):
    client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY, as the command set them
    reply = client.chat.completions.create(
        model="sim-echo", messages=[{"role": "user", "content": question}], temperature=0.0,
    )
    return reply.choices[0].message.content


@quiver.node("blind", kind="llm")
def blind(text):
    # urllib: a client the engine does not hook
    body = json.dumps({"model": "sim-echo", "messages": [{"role": "user", "content": text + "?"}]}).encode()
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
    )
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)["choices"][0]["message"]["content"]


def pipeline(question):
    return blind(ask(question))
'''

SIM_MODELS = '''\
from quiver.replay import Fields, sim_model


@sim_model("capture-fixed")
def fixed(req):
    return Fields(answer="always this")
'''

RECORD = """\
pipeline: pipeline.py:pipeline
llm:
  simulator: {{models: [sim_models.py]}}
  model: sim-echo
inputs:
  - {{id: q1, question: where is the key}}
  - {{id: q2, question: what is the door}}
repeats: 2
output: {out}
"""

CAMPAIGN = """\
pipeline: pipeline.py:pipeline
name: capture
llm:
  simulator: {{models: [sim_models.py]}}
  model: sim-echo
baseline: {baseline}
perturbations:
  - id: ask-fixed
    node: ask
    op: param_change
    params: {{model: capture-fixed}}
replay: {{repeats: 1}}
analysis: {{resamples: 100, permutations: 100}}
output: {out}
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([*quiver_command(), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str],
                                                              subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("capture-cli")
    (root / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    (root / "sim_models.py").write_text(SIM_MODELS, encoding="utf-8")
    (root / "record.yaml").write_text(RECORD.format(out=root / "rec"), encoding="utf-8")
    record = _run(["record", "record.yaml", "--quiet"], root)
    assert record.returncode == 0, record.stderr
    (root / "campaign.yaml").write_text(
        CAMPAIGN.format(baseline=root / "rec" / "traces.jsonl", out=root / "campaign"), encoding="utf-8"
    )
    run = _run(["run", "campaign.yaml"], root)
    return root, record, run


def test_record_points_the_environment_at_the_spec_endpoint(runs: tuple[Path, ...]) -> None:
    root = runs[0]
    traces = list(iter_traces(root / "rec" / "traces.jsonl"))
    assert len(traces) == 4 and all(t.status == "ok" for t in traces)
    for trace in traces:
        ask = next(c for c in trace.calls if c.node == "ask")
        assert ask.model is not None and ask.model.name == "sim-echo"
        assert ask.response is not None and ask.output == trace.inputs["question"]


def test_record_names_the_llm_node_no_hook_saw(runs: tuple[Path, subprocess.CompletedProcess[str], ...]) -> None:
    record = runs[1]
    lines = [line for line in record.stderr.splitlines() if "recorded no LLM call" in line]
    assert len(lines) == 1 and "(blind)" in lines[0]


def test_param_change_on_a_captured_call_and_the_unseen_count(runs: tuple[Path, ...]) -> None:
    root, _, run = runs
    assert run.returncode in (0, 1), run.stderr
    data = json.loads((root / "campaign" / "campaign.json").read_text(encoding="utf-8"))
    entry = next(p for p in data["perturbations"] if p["id"] == "ask-fixed")
    assert entry["unseen_llm_nodes"] == ["blind"]
    # the wire saw its requests: they are named, node and endpoint, instead of the node alone
    assert "node 'blind' sent " in run.stderr and "does not account for" in run.stderr
    assert [u["node"] for u in data["unaccounted_requests"]] == ["blind"]
    assert "did not see" in (root / "campaign" / "report.md").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in (root / "campaign" / "pairs.jsonl").read_text().splitlines()]
    perturbed = [r for r in rows if r["perturbation_id"] == "ask-fixed"]
    assert perturbed and all(r["llm_calls"].get("ask") == 1 for r in perturbed)
    assert all(r["stratum"] == "effective" for r in perturbed)
