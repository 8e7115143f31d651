"""``quiver replay --check`` says what it replayed, checked against a counting front.

The openai-agents support desk of ``tests/pipelines/agent_desk.py`` (two ``llm`` nodes:
the agents' run, whose calls nest under it, and a summary) and its chat completions
router (a ``transform`` node whose body makes the LLM calls) are recorded with
``quiver record`` against the simulator behind a counting front the test owns, then
replayed with ``quiver replay --check``. The line it prints gives the node calls
replayed (as many as the replayed traces it writes hold), those served from the
recording with the calls nested under them, the LLM answers taken from the recording
and the LLM calls made (as many as the front received: none frozen, some with
``--live model``, whose new samples may part from the recording: exit 1 then).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_desk_front import APP, desk_front
from counting_front import CountingFront
from fuzzing import run_cli

MESSAGES = ("Thanks for your help yesterday", "I was charged twice on INV-77", "The mail server is down")
LINE = re.compile(r"(\d+) of (\d+) traces reproduce exactly \((.*?)\): ([\d,]+) node calls replayed, ([\d,]+) of "
                  r"them served from the recording \(nested calls included\) and ([\d,]+) run again; ([\d,]+) LLM "
                  r"answers from the recording, ([\d,]+) LLM calls made")


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    with desk_front() as counting, pytest.MonkeyPatch.context() as mp:
        mp.setenv("DESK_KEY", "sk-desk")
        yield counting


def _spec(folder: Path, app: str, front: CountingFront) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inputs.jsonl").write_text("".join(json.dumps({"message": m}) + "\n" for m in MESSAGES))
    spec = folder / "record.yaml"
    spec.write_text(f"pipeline: {APP}:{app}\nllm:\n  base_url: {front.url}\n  model: desk-summary\n"
                    "  api_key_env: DESK_KEY\n"
                    f"inputs: inputs.jsonl\nrepeats: 2\nseed: 0\noutput: {folder / 'record'}\n")
    return spec


def _calls(path: Path) -> list[dict[str, Any]]:
    return [c for line in path.read_text().splitlines() for c in json.loads(line)["calls"] if c["kind"] != "source"]


def _check(spec: Path, front: CountingFront, out: Path, *extra: str) -> tuple[list[int], int]:
    """The numbers ``--check`` printed, and the requests the front received meanwhile."""
    start = len(front.requests())
    done = run_cli(["replay", str(spec.parent / "record" / "traces.jsonl"), "--spec", str(spec), "--check",
                    "--out", str(out), "--quiet", *extra], seconds=120)
    assert done.code == (1 if extra else 0) or extra and done.code == 0, done.stdout + done.stderr
    found = LINE.search(done.stdout)
    assert found is not None, done.stdout
    return [int(x.replace(",", "")) for x in found.groups()[3:]], len(front.requests()) - start


@pytest.mark.parametrize(("app", "served_whole"), [("support_desk", True), ("chat_router", False)])
def test_check_counts_node_calls_served_answers_and_llm_calls_as_the_front_saw_them(
        tmp_path: Path, front: CountingFront, app: str, served_whole: bool) -> None:
    spec = _spec(tmp_path / app, app, front)
    recorded = run_cli(["record", str(spec), "--quiet"], seconds=120)
    assert recorded.code == 0, recorded.stderr
    baseline = _calls(spec.parent / "record" / "traces.jsonl")
    answers = sum(1 for c in baseline if c["model"] and c["response"])

    (calls, served, again, from_recording, made), requests = _check(spec, front, tmp_path / "frozen")
    assert calls == len(_calls(tmp_path / "frozen" / "replayed.jsonl")) == len(baseline)
    assert made == requests == 0 and from_recording == answers
    top = len(MESSAGES) * 2 * (2 if served_whole else 0)  # the served nodes of each trace, without what they nest
    assert served == (calls if served_whole else 0) and again == calls - served and served >= top

    (calls, served, again, from_recording, made), requests = _check(spec, front, tmp_path / "live", "--live",
                                                                    "model")
    replayed = _calls(tmp_path / "live" / "replayed.jsonl")
    assert made == requests > 0 and calls == len(replayed)
    assert from_recording == sum(1 for c in replayed if c["model"] and c["response"]) - made
