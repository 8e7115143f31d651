"""An agent app against the bundled simulator behind a counting front, run with the CLI.

The tests of the agent integrations (openai-agents, pydantic-ai, LangGraph's prebuilt ReAct
agent) share this: :func:`serving` registers an app's simulated models and yields a
:class:`~counting_front.CountingFront` (with request bodies) in front of a simulator;
:func:`record` and :func:`campaign` run ``quiver record`` / ``quiver run`` through it and
return what the front received meanwhile; the readers pick the LLM requests, the
customer's message a request carries, the tool call a request's conversation carries and
the LLM-call count the engine printed. The checks say what every tool-calling agent's
recording and replays must show: the conversation as parents (:func:`check_conversation`),
a tool flip that runs the flipped tool (:func:`check_tool_flips`), a tool override the
next turn reads (:func:`check_override_read`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_front import CountingFront
from fuzzing import CliResult, run_cli

from quiver import Trace, load_traces
from quiver.replay import Simulator, SimulatorConfig

__all__ = ["CAMPAIGN", "KEY_ENV", "SECONDS", "campaign", "check", "check_conversation", "check_override_read",
           "check_tool_flips", "llm_requests", "message_of", "printed_llm_calls", "record", "serving", "tool_called",
           "turns"]

SECONDS = 300.0
KEY_ENV = "QUIVER_AGENT_APP_KEY"

RECORD = """\
pipeline: {app}/pipeline.py:{function}
llm: {{base_url: {url}, model: {model}, api_key_env: {key}}}
inputs: {app}/inputs.jsonl
repeats: {repeats}
concurrency: 4
seed: 0
output: {out}
"""

CAMPAIGN = """\
pipeline: {app}/pipeline.py:{function}
llm: {{base_url: {url}, model: {model}, api_key_env: {key}}}
baseline: {baseline}
perturbations:
{perturbations}
replay: {{repeats: 1, controls: {controls}, downstream: live}}
executor: {{kind: local, concurrency: 4}}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {out}
"""


@contextlib.contextmanager
def serving(models: Path) -> Iterator[CountingFront]:
    """A front (with bodies) before a simulator that knows the simulated models of the file ``models``."""
    spec = importlib.util.spec_from_file_location(f"{models.parent.name}_{models.stem}", models)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers the app's simulated models
    with Simulator(SimulatorConfig()) as sim, CountingFront(sim.url, bodies=True) as front, \
            pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_ENV, "sk-agent-app-test")
        yield front


def llm_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if r["path"].endswith(("/responses", "/chat/completions"))]


def message_of(request: dict[str, Any]) -> str:
    """The customer's message a request carries (its first user message)."""
    body = request["body"] or {}
    items = body.get("input") if "input" in body else body.get("messages")
    if isinstance(items, str):
        return items
    for item in items or []:
        if item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return ""


def printed_llm_calls(text: str) -> int:
    """The last LLM-call count the engine printed."""
    found = re.findall(r"([\d,]+) LLM calls", text)
    assert found, text
    return int(found[-1].replace(",", ""))


def record(front: CountingFront, app: Path, root: Path, *, function: str, model: str, repeats: int
           ) -> tuple[Path, list[dict[str, Any]], CliResult]:
    """``quiver record`` of the app into ``root/rec``: the spec, the LLM requests the front
    received and the CLI's result."""
    spec = root / "record.yaml"
    spec.write_text(RECORD.format(app=app, function=function, url=front.url, model=model, key=KEY_ENV,
                                  repeats=repeats, out=root / "rec"))
    mark = front.mark()
    done = run_cli(["record", str(spec), "--quiet"], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return spec, llm_requests(front.requests()[mark:]), done


def check(front: CountingFront, spec: Path, traces: Path) -> tuple[list[dict[str, Any]], CliResult]:
    """``quiver replay --check``: what the front received meanwhile, and the CLI's result."""
    mark = front.mark()
    done = run_cli(["replay", "--spec", str(spec), "--check", str(traces)], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return front.requests()[mark:], done


def campaign(front: CountingFront, app: Path, root: Path, name: str, perturbations: str, *, function: str,
             model: str, controls: int) -> tuple[Path, list[dict[str, Any]], CliResult]:
    """``quiver run`` of a campaign on ``root/rec``: its output folder, the LLM requests the
    front received and the CLI's result."""
    spec = root / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(app=app, function=function, url=front.url, model=model, key=KEY_ENV,
                                    baseline=root / "rec" / "traces.jsonl", perturbations=perturbations,
                                    controls=controls, cache=root / "embeddings", out=root / name))
    mark = front.mark()
    done = run_cli(["run", str(spec)], seconds=SECONDS)
    assert done.code in (0, 1), done.stderr
    return root / name, llm_requests(front.requests()[mark:]), done


def tool_called(request: dict[str, Any]) -> str | None:
    """The tool whose call a chat request's conversation carries (its last assistant message's)."""
    calls = [c for m in request["body"]["messages"] if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    return calls[-1]["function"]["name"] if calls else None


def tool_result_says(request: dict[str, Any], text: str) -> bool:
    """Whether a tool result the chat request carries holds ``text``."""
    return any(m.get("role") == "tool" and text in str(m.get("content")) for m in request["body"]["messages"])


def turns(trace: Trace, node: str) -> list[Any]:
    """The calls of ``node`` in a trace, in order."""
    return [c for c in trace.calls if c.node == node]


def check_conversation(trace: Trace, agent: str) -> tuple[Any, list[Any], list[Any]]:
    """The parents and decisions of a tool-calling agent's trace: its first turn reads the
    run's input, its tools the turn that asked for them, each later turn the turn before
    it and those tools. Returns (first turn, later turns, tool calls)."""
    by_id = {c.call_id: c for c in trace.calls}
    first, *rest = turns(trace, agent)
    assert first.kind == "llm" and [by_id[p].node for p in first.parents] == ["input"]
    assert first.decision == {"tools": [c["name"] for c in first.output["tool_calls"]]}
    tools = [c for c in trace.calls if c.kind == "tool"]
    assert [c.node for c in tools] == first.decision["tools"] == trace.output["tools"]
    for tool in tools:
        assert [by_id[p].node for p in tool.parents] == [agent] and tool.tool is not None
        assert tool.tool.args == first.output["tool_calls"][0]["arguments"]
    for turn in rest:
        assert sorted(by_id[p].node for p in turn.parents) == sorted([agent, *(t.node for t in tools)])
    return first, rest, tools


def check_tool_flips(out: Path, baseline: Path, agent: str, tools: set[str], messages: dict[str, str]
                     ) -> tuple[Counter[tuple[str, str]], list[Trace]]:
    """Every replay of a flip of the agent's first turn's ``tool`` says another tool, ran
    that tool and not the recorded one, and went on live. Returns (flipped tool,
    customer's message) -> the turns that ran after the flipped one, and the replays."""
    (row,) = json.loads((out / "campaign.json").read_text())["perturbations"]
    replays = load_traces(out / "replays.jsonl").traces
    assert row["effective"] == len(replays) and row["not_applied"] == 0 and row["failed"] == 0
    baselines = {t.trace_id: t for t in load_traces(baseline).traces}
    named: Counter[tuple[str, str]] = Counter()
    for replay in replays:
        before = turns(baselines[replay.trace_id.split("~")[0]], agent)[0].output["tool"]
        first, *rest = turns(replay, agent)
        after = first.output["tool"]
        assert after in tools and after != before and first.decision["tools"] == [after]
        assert [c.node for c in replay.calls if c.kind == "tool"] == [after] == replay.output["tools"] and rest
        named[(after, messages[replay.input_id])] += len(rest)
    return named, replays


def check_override_read(replays: list[Trace], perturbation: str, agent: str, input_id: str) -> int:
    """Every replay of the override ``perturbation`` (``lookup_invoice.status = paid``)
    whose tool said "paid" ends in an answer that says it. Returns how many of them are
    of ``input_id``."""
    read = 0
    for replay in replays:
        if f"~{perturbation}/" in replay.trace_id and turns(replay, "lookup_invoice")[0].output["status"] == "paid":
            assert "paid" in turns(replay, agent)[-1].output["text"]
            read += replay.input_id == input_id
    return read
