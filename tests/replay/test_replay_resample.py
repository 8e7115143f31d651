"""``ReplayMode(resample=True)``: LLM calls sent again with the replay's sample key, the
frozen dimensions taken from the recording. Recorded on the support bot at v1 and
replayed with the v2 composer prompt and the v2 planner model deployed, so that today's
request differs from the recorded one in a known way at two nodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import quiver.experiments.support_bot.sim_models  # noqa: F401  (registers the demo's models)
from quiver._trace import NodeCall, Trace, iter_traces
from quiver.replay import (
    InputItem,
    LLMClient,
    ReplayMode,
    ReplayResult,
    Simulator,
    SimulatorConfig,
    load_pipeline,
    record_corpus,
    replay_trace,
)

DEMO = Path(__file__).parents[2] / "experiments" / "support_bot"
INPUTS = ("twoterm-archive-workspace", "howto-reset-password", "howto-import-trello", "web-eu-outage",
          "followup-token-limit", "account-seats-left")
RESAMPLE = ReplayMode(resample=True)


@dataclass
class Bot:
    v1: Any
    v2: Any
    client: LLMClient
    sim: Simulator
    traces: list[Trace]

    def replay(self, trace: Trace, mode: ReplayMode, *, v2: bool = True, repeat: int = 0) -> ReplayResult:
        return replay_trace(trace, self.v2 if v2 else self.v1, mode=mode, client=self.client, seed=5, repeat=repeat)

    def requests(self) -> int:
        return int(self.sim.stats()["requests"])


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bot]:
    records = [json.loads(line) for line in (DEMO / "inputs.jsonl").read_text().splitlines() if line.strip()]
    inputs = [InputItem.from_record(r) for r in records if r["input_id"] in INPUTS]
    v1 = load_pipeline("pipeline.py:run", DEMO)
    v2 = load_pipeline("pipeline.py:run_v2_prompt_model", DEMO)
    with Simulator(SimulatorConfig(nondeterminism=0.15)) as sim:
        client = LLMClient(base_url=sim.url, model="support-bot-planner", api_key="sk-test",
                           params={"temperature": 0, "seed": 42})
        result = record_corpus(v1, pipeline_name="support_bot", inputs=inputs, repeats=1,
                               output_dir=tmp_path_factory.mktemp("resample"), llm=client, concurrency=4,
                               progress_stream=None, run_id="resample-tests")
        assert result.failed == 0
        yield Bot(v1, v2, client, sim, list(iter_traces(result.traces_path)))
        client.close()


def _llm_calls(trace: Trace) -> dict[str, NodeCall]:
    return {c.call_path: c for c in trace.calls if c.kind == "llm"}


def _same_request(recorded: NodeCall, replayed: NodeCall) -> bool:
    assert recorded.prompt is not None and replayed.prompt is not None
    assert recorded.model is not None and replayed.model is not None
    return bool(recorded.prompt.assembled == replayed.prompt.assembled
                and (recorded.model.name, recorded.model.params) == (replayed.model.name, replayed.model.params))


def _node(trace: Trace, node: str) -> NodeCall:
    return next(c for c in trace.calls if c.node == node)


def test_resample_sends_every_recorded_request_again_whatever_is_deployed(bot: Bot) -> None:
    for trace in bot.traces:
        before = bot.requests()
        result = bot.replay(trace, RESAMPLE)
        recorded, replayed = _llm_calls(trace), _llm_calls(result.trace)
        assert result.total_llm_calls == len(recorded) == bot.requests() - before
        assert result.served_calls < len(trace.calls) - 1  # the LLM calls ran their bodies
        # inputs differ only where a resampled parent moved (a sampled path may skip a call)
        assert not [d for d in result.divergences if d.reason == "inputs"], result.first_divergence
        for path, call in replayed.items():
            # a call whose inputs a resampled parent changed renders today's prompt, with the recorded model
            if call.input_hash == recorded[path].input_hash:
                assert _same_request(recorded[path], call), path
            else:
                assert call.model is not None and call.model.name == recorded[path].model.name  # type: ignore[union-attr]


def test_resample_is_a_function_of_the_sample_key(bot: Bot) -> None:
    for trace in bot.traces:
        first, again = bot.replay(trace, RESAMPLE), bot.replay(trace, RESAMPLE)
        assert [c.output for c in first.trace.calls] == [c.output for c in again.trace.calls]
    outputs = [[c.output for c in bot.replay(t, RESAMPLE, repeat=r).trace.calls] for t in bot.traces for r in (0, 1)]
    assert any(outputs[i] != outputs[i + 1] for i in range(0, len(outputs), 2))  # another repeat, other samples


def test_prompt_live_renders_today_s_template_with_the_recorded_model(bot: Bot) -> None:
    mode = RESAMPLE.unfreeze("prompt")
    for trace in (t for t in bot.traces if any(c.node == "composer" for c in t.calls)):
        result = bot.replay(trace, mode)
        composer, planner = _node(result.trace, "composer"), _node(result.trace, "planner")
        assert composer.prompt is not None and "offering a call back" in composer.prompt.assembled[0].content
        assert composer.model is not None and composer.model.name == "support-bot-composer"
        assert planner.model is not None and planner.model.name == "support-bot-planner"  # model frozen
        assert "call back" not in str(_node(trace, "composer").output)
        assert "ring you back" in str(composer.output)


def test_model_live_sends_the_recorded_messages_to_today_s_model(bot: Bot) -> None:
    mode = RESAMPLE.unfreeze("model")
    checked = 0
    for trace in (t for t in bot.traces if any(c.node == "planner" for c in t.calls)):
        result = bot.replay(trace, mode)
        recorded, planner = _node(trace, "planner"), _node(result.trace, "planner")
        assert planner.model is not None and planner.model.name == "support-bot-planner-v2"
        assert planner.prompt is not None and recorded.prompt is not None
        if planner.input_hash == recorded.input_hash:
            assert planner.prompt.assembled == recorded.prompt.assembled
        composer = next((c for c in result.trace.calls if c.node == "composer"), None)
        if composer is not None and composer.input_hash == _node(trace, "composer").input_hash:
            # the v2 composer template stays out: the prompt is frozen (a composer the new
            # planner handed other inputs renders today's template: the recorded one does not fit)
            assert composer.prompt is not None and "offering a call back" not in composer.prompt.assembled[0].content
            checked += 1
    assert checked


def test_without_resample_the_modes_mean_what_they_meant(bot: Bot) -> None:
    trace = next(t for t in bot.traces if any(c.node == "composer" for c in t.calls))
    before = bot.requests()
    frozen = bot.replay(trace, ReplayMode())
    assert frozen.reproduced and frozen.total_llm_calls == 0 and bot.requests() == before
    # a live model sends today's request, the v2 template included
    live = bot.replay(trace, ReplayMode().unfreeze("model"))
    composer = _node(live.trace, "composer")
    assert composer.prompt is not None and "offering a call back" in composer.prompt.assembled[0].content
    assert _node(live.trace, "planner").model.name == "support-bot-planner-v2"  # type: ignore[union-attr]
    # a live prompt on v1 code asks nothing: every rendered prompt is the recorded one
    assert bot.replay(trace, ReplayMode().unfreeze("prompt"), v2=False).total_llm_calls == 0
    assert not ReplayMode(resample=True).all_frozen and ReplayMode().all_frozen
