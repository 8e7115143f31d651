"""``quiver record`` says why traces failed, on the console: the first reason of each
kind with how many traces failed that way (it said "N trace(s) failed; see record.log",
the reason in the log only).

A pipeline asks the spec's default model, one the simulator does not serve (HTTP 404),
for some inputs and a model it serves for the others; the session's in-process simulator
answers (no subprocess, about a second).
"""

from __future__ import annotations

import json
from pathlib import Path

from fuzzing import run_cli

from quiver.replay import Simulator

PIPELINE = '''\
import quiver


@quiver.node("ask", kind="llm")
def ask(question: str, served: bool) -> str:
    model = "sim-echo" if served else None  # None: the spec's default model
    return quiver.llm().chat(None, messages=[{"role": "user", "content": question}], model=model).content


def pipeline(question: str, served: bool) -> str:
    if question == "boom":
        raise ValueError("the pipeline's own error")
    return ask(question, served)
'''


def test_record_prints_the_first_reason_of_each_kind_of_failure_with_its_count(simulator: Simulator,
                                                                              tmp_path: Path) -> None:
    inputs = [{"input_id": f"q{i}", "question": f"question {i}", "served": i % 3 == 0} for i in range(6)]
    inputs.append({"input_id": "boom", "question": "boom", "served": True})
    (tmp_path / "inputs.jsonl").write_text("".join(json.dumps(i) + "\n" for i in inputs), encoding="utf-8")
    (tmp_path / "pipe.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "record.yaml").write_text(
        f"pipeline: pipe.py:pipeline\nllm: {{base_url: '{simulator.url}', model: sim-nope, retry: {{attempts: 1}}}}\n"
        f"inputs: inputs.jsonl\nrepeats: 2\noutput: {tmp_path / 'out'}\n", encoding="utf-8")
    result = run_cli(["record", str(tmp_path / "record.yaml"), "--quiet"])
    assert result.code == 1, result.stderr
    said = [line for line in result.stderr.splitlines() if "failed like this" in line]
    print("\n".join(said))
    assert len(said) == 2, result.stderr
    assert said[0].startswith("quiver record: 8 trace(s) failed like this: LLMRequestError: ")
    assert "The model 'sim-nope' does not exist" in said[0]
    assert said[1] == "quiver record: 2 trace(s) failed like this: ValueError: the pipeline's own error"
    assert "10 trace(s) failed; see " in result.stderr
