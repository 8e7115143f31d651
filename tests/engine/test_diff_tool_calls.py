"""Causes read tool calls and handoffs as part of an answer, on every wire format.

``tests/pipelines/agent_desk.py`` holds real apps: an async openai-agents support desk (a
triage agent handing off to a billing or a technical agent, each on a model of its own,
with function tools; a chat completion summarises), a chat completions router and an
Anthropic router that choose a tool, and a Responses API chain. They are recorded with
repeats against the bundled simulator, through a counting front the test owns (which
keeps each request's body), as ``quiver record`` records them. The triage model hands an
unclear message to either agent by sampling, so repeats of one message hand off
differently while every recorded input of the triage call is the same. Then:

* no pair of repeats is put down to ``model`` (no model changed): a pair whose triage
  call handed off differently first diverges there, by ``sampling``, and says
  ``tool calls: transfer_to_... -> transfer_to_...``; the other agent's model, met at the
  same place after the handoff, is listed as a consequence, not a cause;
* sampled tool arguments (a ticket's severity), chat ``tool_calls``, Anthropic
  ``tool_use`` blocks and a Responses API chain (``previous_response_id``: another id in
  every repeat) give ``sampling`` at the call that answered differently;
* a real model change (the triage agent on another model name) still gives ``model``,
  and ``quiver compare`` lists it;
* ``quiver attribute`` counts another tool chosen as a node's divergence.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_desk_front import APP, desk_front
from counting_front import CountingFront
from fuzzing import run_cli

from quiver import Trace, compare_corpora, diff_traces, load_traces, write_traces
from quiver.experiments._attribute import attribute
from quiver.replay import InputItem, LLMClient, load_pipeline, record_corpus

MESSAGES = ("Thanks for your help yesterday", "Can you help me with my account?", "I was charged twice on INV-77",
            "The mail server is down, error 500", "Hello, I have a question", "Is anyone there?")
UNCLEAR = [m for m in MESSAGES if not any(w in m.lower() for w in ("invoice", "charged", "down", "error"))]
REPEATS = 4
Recorder = Callable[..., list[Trace]]


@pytest.fixture(scope="module")
def front() -> Iterator[CountingFront]:
    """The simulator behind a counting front; the SDK clients of the apps point at the front."""
    with desk_front(bodies=True, aliases={"desk-triage-v2": "desk-triage"}) as counting, \
            pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", counting.url)
        mp.setenv("OPENAI_API_KEY", "sk-desk")
        yield counting


@pytest.fixture(scope="module")
def record(front: CountingFront, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorder]:
    """``record(app, **env)``: the app's corpus (MESSAGES x REPEATS, seed 0), recorded once
    per app and environment."""
    root = tmp_path_factory.mktemp("desk")
    client = LLMClient(base_url=front.url, model="desk-summary", api_key="sk-desk")
    done: dict[tuple[str, tuple[tuple[str, str], ...]], list[Trace]] = {}

    def run(app: str, **env: str) -> list[Trace]:
        key = (app, tuple(sorted(env.items())))
        if key not in done:
            with pytest.MonkeyPatch.context() as mp:
                for name, value in env.items():
                    mp.setenv(name, value)
                out = root / f"{app}-{len(done)}"
                result = record_corpus(load_pipeline(f"{APP}:{app}"), pipeline_name=app, repeats=REPEATS,
                                       inputs=[InputItem(f"m{i}", {"message": m}) for i, m in enumerate(MESSAGES)],
                                       output_dir=out, llm=client, seed=0, progress_stream=None)
            traces = load_traces(result.traces_path).traces
            assert len(traces) == len(MESSAGES) * REPEATS and all(t.status == "ok" for t in traces)
            done[key] = traces
        return done[key]

    yield run
    client.close()


def _pairs(traces: list[Trace]) -> list[tuple[Trace, Trace]]:
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        groups.setdefault(t.input_id, []).append(t)
    return [p for ts in groups.values() for p in itertools.combinations(ts, 2)]


def _call(trace: Trace, node: str, occurrence: int = 0) -> Any:
    return next(c for c in trace.calls if (c.node, c.occurrence) == (node, occurrence))


def tool_calls(call: Any) -> list[tuple[str, Any]]:
    """The tool calls a call's answer held, as the capture recorded them (chat-shaped,
    whatever the wire format), ids left out."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call.tags.get("tool_calls", [])]


def _names(call: Any) -> list[str]:
    return [name for name, _ in tool_calls(call)]


def test_repeats_that_hand_off_differently_are_sampling_at_the_triage_call(record: Recorder,
                                                                           front: CountingFront) -> None:
    traces = record("support_desk")
    handed = 0
    for a, b in _pairs(traces):
        diff = diff_traces(a, b)
        assert diff.first is None or diff.first.cause == "sampling", diff.render()
        assert not [e for e in diff.changes if e.dimension == "model"], diff.render()
        triage_a, triage_b = _names(_call(a, "desk")), _names(_call(b, "desk"))
        if triage_a != triage_b:
            handed += 1
            first = diff.first
            assert first is not None and (first.node, first.occurrence, first.cause) == ("desk", 0, "sampling")
            assert f"tool calls: {triage_a[0]} -> {triage_b[0]}" in first.what
            assert {triage_a[0], triage_b[0]} == {"transfer_to_billing_agent", "transfer_to_tech_agent"}
            assert "every recorded input is identical and its tool calls differ" in first.summary()
            assert {e.detail for e in diff.downstream if e.dimension == "model"} >= {
                f"model desk-{triage_a[0].split('_')[2]} -> desk-{triage_b[0].split('_')[2]}"}
    assert handed >= 3
    both = 0
    for message in UNCLEAR:  # the agents the handoffs named were asked about the message, on the wire
        handoffs = {_names(_call(t, "desk"))[0] for t in traces if t.inputs["message"] == message}
        asked = {r["model"] for r in front.requests() if message in json.dumps(r.get("body"))}
        assert {f"desk-{h.split('_')[2]}" for h in handoffs} <= asked, (message, handoffs, asked)
        both += len(handoffs) == 2
    assert both >= 2


def test_sampled_tool_arguments_are_sampling_at_the_call_that_chose_them(record: Recorder) -> None:
    traces = record("support_desk")
    seen = 0
    for a, b in _pairs(traces):
        for x, y in zip(a.calls, b.calls, strict=False):
            calls_x, calls_y = tool_calls(x), tool_calls(y)
            if x.node != "llm" or not calls_x or [n for n, _ in calls_x] != [n for n, _ in calls_y] \
                    or calls_x == calls_y:
                continue
            first = diff_traces(a, b).first
            assert first is not None and (first.node, first.occurrence, first.cause) == ("llm", x.occurrence,
                                                                                         "sampling")
            severity = calls_x[0][1]["severity"], calls_y[0][1]["severity"]
            assert f"tool calls: open_ticket arguments severity {severity[0]} -> {severity[1]}" in first.what
            seen += 1
            break
    assert seen >= 1


@pytest.mark.parametrize(("app", "path"), [("chat_router", "/v1/chat/completions"),
                                           ("claude_router", "/v1/messages")])
def test_another_tool_chosen_on_the_chat_and_anthropic_apis_is_sampling(record: Recorder, front: CountingFront,
                                                                        app: str, path: str) -> None:
    traces = record(app)
    assert {r["path"] for r in front.requests() if r["model"] == f"desk-{'chat' if 'chat' in app else 'claude'}"
            "-router"} == {path}
    chose = 0
    for a, b in _pairs(traces):
        first = diff_traces(a, b).first
        tools = _names(_call(a, "llm")), _names(_call(b, "llm"))
        if tools[0] == tools[1]:
            assert first is None
            continue
        chose += 1
        assert a.output == b.output == "handled"  # the tool chosen is the only difference
        assert first is not None and (first.node, first.occurrence, first.cause) == ("llm", 0, "sampling")
        assert first.what == (f"tool calls: {tools[0][0]} -> {tools[1][0]}",)
    assert chose >= 3


def test_a_responses_chain_continuing_another_response_id_is_not_a_model_change(record: Recorder) -> None:
    traces = record("chain")
    ids = {json.dumps(_call(t, "llm", 1).model.params["previous_response_id"]) for t in traces}
    assert len(ids) > len(MESSAGES)  # each repeat continues a response id of its own
    causes = Counter(d.first.cause for d in (diff_traces(a, b) for a, b in _pairs(traces)) if d.first is not None)
    assert causes and set(causes) == {"sampling"}, causes


def test_diff_on_the_command_line_names_sampling_and_the_handoff(record: Recorder, tmp_path: Path) -> None:
    traces = record("support_desk")
    corpus = tmp_path / "desk.jsonl"
    write_traces(corpus, traces)
    table = run_cli(["diff", str(corpus), "--json", "--resamples", "50"])
    assert table.code == 0, table.stderr
    data = json.loads(table.stdout)
    assert set(data["causes"]) == {"sampling"} and data["pairs"] == len(_pairs(traces))
    a, b = next((a, b) for a, b in _pairs(traces) if _names(_call(a, "desk")) != _names(_call(b, "desk")))
    write_traces(tmp_path / "a.jsonl", [a])
    write_traces(tmp_path / "b.jsonl", [b])
    pair = run_cli(["diff", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    assert pair.code == 0 and "cause: sampling" in pair.stdout and "cause: model" not in pair.stdout
    assert "tool calls: transfer_to_" in pair.stdout and "consequences, not causes" in pair.stdout


def test_a_real_model_change_still_gives_model(record: Recorder, tmp_path: Path) -> None:
    before, after = record("support_desk"), record("support_desk", DESK_TRIAGE_MODEL="desk-triage-v2")
    moved = 0
    for a, b in ((x, y) for x in before for y in after if x.input_id == y.input_id):
        first = diff_traces(a, b).first
        if first is not None and (first.node, first.occurrence) == ("desk", 0):
            assert first.cause == "model" and first.evidence[0].detail == "model desk-triage -> desk-triage-v2"
            moved += 1
    assert moved >= 1
    changes = compare_corpora(before, after, resamples=50).data["changes"]
    assert any(line.startswith("model: desk-triage") and "desk-triage-v2" in line for line in changes["desk"])
    assert set(changes) == {"desk"}, changes
    write_traces(tmp_path / "before.jsonl", before)
    write_traces(tmp_path / "after.jsonl", after)
    cli = run_cli(["compare", str(tmp_path / "before.jsonl"), str(tmp_path / "after.jsonl"), "--out",
                   str(tmp_path / "cmp"), "--resamples", "50"])
    assert cli.code in (0, 1) and "desk-triage-v2" in (tmp_path / "cmp" / "compare.md").read_text()


def test_attribution_counts_another_tool_chosen_as_a_divergence(record: Recorder, front: CountingFront) -> None:
    traces = record("chat_router")
    client = LLMClient(base_url=front.url, model="desk-chat-router", api_key="sk-desk")
    try:
        result = attribute(traces, load_pipeline(f"{APP}:chat_router"), client=client, repeats=2, dimensions=(),
                           resamples=50, concurrency=2)
    finally:
        client.close()
    assert result.reproduced == len(traces)
    assert result.rates["sampling"]["chat_router"].value == 0.0  # it answers "handled" whatever tool ran
    rate = result.rates["sampling"]["llm"]
    assert rate.value is not None and rate.value > 0.2, rate  # another tool chosen in resampled replays
