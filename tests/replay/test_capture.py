"""Chat completions of clients the engine did not build are recorded at their transport.

A pipeline whose nodes call the session simulator through a plain ``openai.OpenAI()``,
an ``openai.AsyncOpenAI()``, raw ``httpx`` and ``httpx2`` posts, LangChain's
``ChatOpenAI`` and ``dspy.LM`` (DSPy's own engine) is recorded 3 x with no integration:
every call carries the replay contract, repeats differ where the simulator samples, a
frozen replay reproduces with no LLM request, ``param_change`` rewrites the captured
request and the calls after it go live, a node with ``capture=False`` is left alone,
and nothing is recorded outside a trace.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

import quiver
from quiver import iter_traces
from quiver.perturbations import make_operator
from quiver.replay import (
    Fields,
    InputItem,
    LLMClient,
    Replayer,
    Simulator,
    Target,
    capture_stats,
    record_corpus,
    sim_model,
)
from quiver.replay._pipeline import run_traced

SIDES = ("north", "south", "east", "west", "up", "down")


@sim_model("capture-compass")
def compass(req: Any) -> Fields:
    """Six equally likely answers: repeats at temperature 1 differ."""
    return Fields(side=dict.fromkeys(SIDES, 0.0))


MODEL = "capture-compass"


def _messages(q: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer with a side."}, {"role": "user", "content": q}]


@quiver.node("sdk_sync", kind="llm")
def sdk_sync(q: str) -> str:
    client = openai.OpenAI()  # from OPENAI_BASE_URL / OPENAI_API_KEY
    r = client.chat.completions.create(model=MODEL, messages=_messages(q), temperature=1.0, logprobs=True)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


@quiver.node("sdk_async", kind="llm")
async def sdk_async(q: str) -> str:
    client = openai.AsyncOpenAI()
    r = await client.chat.completions.create(model=MODEL, messages=_messages(q), temperature=1.0)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


def _post_body(q: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": _messages(q + " (raw)"), "temperature": 1.0}


@quiver.node("raw_httpx", kind="llm")
def raw_httpx(q: str) -> str:
    r = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json=_post_body(q))
    return str(r.json()["choices"][0]["message"]["content"])


@quiver.node("raw_httpx2", kind="llm")
def raw_httpx2(q: str) -> str:
    r = httpx2.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json=_post_body(q + "!"))
    return str(r.json()["choices"][0]["message"]["content"])


@quiver.node("langchain", kind="llm")
def langchain(q: str) -> str:
    from langchain_openai import ChatOpenAI

    return str(ChatOpenAI(model=MODEL, temperature=1.0).invoke(q + " (lc)").content)


@quiver.node("helper")
def helper(answers: list[str]) -> str:
    """A transform whose body sends a request: captured as a child ``llm`` call."""
    r = openai.OpenAI().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": " | ".join(answers)}], temperature=1.0,
    )
    return r.choices[0].message.content or ""


@quiver.node("quiet", capture=False)
def quiet(q: str) -> str:
    r = openai.OpenAI().chat.completions.create(model=MODEL, messages=_messages(q), temperature=1.0)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


@quiver.node("final", kind="llm")
def final(summary: str) -> str:
    r = openai.OpenAI().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": summary}], temperature=1.0,
    )
    return r.choices[0].message.content or ""


def pipeline(q: str) -> dict[str, str]:
    answers = [sdk_sync(q), asyncio.run(sdk_async(q)), raw_httpx(q), raw_httpx2(q), langchain(q)]
    summary = helper(answers)
    return {"summary": summary, "final": final(summary), "quiet": quiet(q)}


LLM_NODES = ("sdk_sync", "sdk_async", "raw_httpx", "raw_httpx2", "langchain", "final")


@pytest.fixture(scope="module")
def endpoint(simulator: Simulator) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", simulator.url)
        mp.setenv("OPENAI_API_KEY", "sk-capture")
        yield simulator.url


@pytest.fixture(scope="module")
def recorded(endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    out = tmp_path_factory.mktemp("capture")
    result = record_corpus(
        pipeline, pipeline_name="capture", inputs=[InputItem("q1", {"q": "Which way?"})], repeats=3,
        output_dir=out, seed=7, progress_stream=None,
    )
    assert result.failed == 0
    return list(iter_traces(result.traces_path))


def _call(trace: Any, node: str) -> Any:
    return next(c for c in trace.calls if c.node == node)


def test_every_client_path_records_the_full_contract(recorded: list[Any]) -> None:
    for trace in recorded:
        for node in LLM_NODES:
            call = _call(trace, node)
            assert call.model is not None and call.model.name == MODEL and call.model.params["temperature"] == 1.0
            assert call.prompt is not None and call.prompt.assembled[-1].role == "user"
            assert len(call.prompt.fragments) == len(call.prompt.assembled)
            assert call.response is not None and call.response.content == call.output
            assert call.response.usage["total_tokens"] > 0 and call.response.finish_reason == "stop"
        assert _call(trace, "sdk_sync").response.logprobs  # requested by that node only
        assert _call(trace, "sdk_async").response.logprobs is None


def test_repeats_differ_where_the_simulator_samples(recorded: list[Any]) -> None:
    answers = [tuple(_call(t, n).output for n in LLM_NODES) for t in recorded]
    assert len(set(answers)) == 3, answers


def test_a_transform_that_sends_a_request_gets_a_child_llm_call(recorded: list[Any]) -> None:
    for trace in recorded:
        parent = _call(trace, "helper")
        children = [c for c in trace.calls if c.call_path.startswith(parent.call_path + "/")]
        assert [c.kind for c in children] == ["llm"] and children[0].response.content == parent.output


def test_capture_false_leaves_a_node_alone(recorded: list[Any]) -> None:
    for trace in recorded:
        call = _call(trace, "quiet")
        assert call.model is None and call.output.startswith('{"side"')
        assert not [c for c in trace.calls if c.call_path.startswith(call.call_path + "/")]


def test_frozen_replay_reproduces_every_trace_and_sends_only_what_the_capture_was_told_to_leave(
    recorded: list[Any], simulator: Simulator
) -> None:
    """Every captured call is served; the node with ``capture=False`` runs its body and
    its request goes out on every replay: the wire counts it, and names it as a request
    the replay contract does not account for."""
    before = capture_stats().get("served", 0)
    sent = simulator.stats().get("requests", 0)
    results = [Replayer(pipeline).replay(t) for t in recorded]
    assert all(r.reproduced for r in results), [r.divergences for r in results]
    assert [r.llm_calls for r in results] == [{"quiet": 1}] * 3
    assert simulator.stats().get("requests", 0) - sent == sum(r.total_llm_calls for r in results) == 3
    assert all([row["node"] for row in r.wire["unaccounted"]] == ["quiet"] for r in results)
    assert capture_stats().get("served", 0) - before == 3  # helper's child calls ran their body, served


@pytest.mark.parametrize("params", [{"model": "sim-echo"}, {"temperature": 0.0, "seed": 3}])
def test_param_change_rewrites_the_captured_request(recorded: list[Any], params: dict[str, Any]) -> None:
    baseline = recorded[0]
    result = Replayer(pipeline).replay(
        baseline, target=Target("sdk_sync"), operator=make_operator("param_change", params),
    )
    target = _call(result.trace, "sdk_sync")
    assert target.model is not None
    for name, value in params.items():
        assert (target.model.name if name == "model" else target.model.params[name]) == value
    assert result.llm_calls.get("sdk_sync") == 1
    assert result.llm_calls.get("final") == 1  # downstream goes live with the replay's key
    if "model" in params:
        assert target.output == "Which way?"  # sim-echo answers the last user message


def test_replays_of_one_trace_with_other_keys_sample_again(recorded: list[Any]) -> None:
    replayer = Replayer(pipeline)
    outs = {
        _call(replayer.replay(recorded[0], target=Target("final"), repeat=r).trace, "final").output
        for r in range(4)
    }
    assert len(outs) > 1


def test_outside_a_recording_nothing_is_captured(endpoint: str) -> None:
    before = capture_stats()
    out = pipeline("Which way?")
    assert set(out) == {"summary", "final", "quiet"}
    assert capture_stats() == before


def test_the_engine_client_is_recorded_once(endpoint: str) -> None:
    client = LLMClient(base_url=endpoint, model=MODEL, api_key="sk-x")

    @quiver.node("engine", kind="llm")
    def engine(q: str) -> str:
        return quiver.llm().chat(messages=_messages(q), temperature=1.0).content

    before = capture_stats()
    trace = _run(engine, {"q": "x"}, client)
    assert trace.status == "ok" and [c.kind for c in trace.calls] == ["source", "llm"]
    assert trace.calls[1].response is not None and capture_stats() == before


def _run(fn: Any, inputs: dict[str, Any], client: LLMClient | None = None) -> Any:
    import logging

    from quiver.replay import TraceBuilder, trace_sample_key

    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0, inputs=inputs,
                           sample_key=trace_sample_key(0, "i", 0))
    return run_traced(builder, fn, inputs, client, log=logging.getLogger("quiver.test"))


# --------------------------------------------------------------------------- DSPy


@pytest.mark.parametrize("cache", [True, False])
def test_dspy_own_engine_is_recorded_and_its_cache_does_not_cross_sample_keys(
    simulator: Simulator, tmp_path: Path, cache: bool
) -> None:
    import dspy

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OPENAI_BASE_URL", raising=False)  # DSPy's own engine: no base URL in the environment
        lm = dspy.LM(f"openai/{MODEL}", api_base=simulator.url, api_key="sk-x", temperature=1.0, cache=cache)

        @quiver.node("predict", kind="llm")
        def predict(q: str) -> str:
            return str(lm(q)[0])

        traces = [_run_repeat(predict, {"q": f"dspy cache={cache}"}, r) for r in range(3)]
    for trace in traces:
        call = _call(trace, "predict")
        assert trace.status == "ok" and call.model.name == MODEL and call.response.content == call.output
    assert len({_call(t, "predict").output for t in traces}) > 1
    again = Replayer(lambda q: predict(q)).replay(traces[0])
    assert again.reproduced and again.total_llm_calls == 0


def _run_repeat(fn: Any, inputs: dict[str, Any], repeat: int) -> Any:
    import logging

    from quiver.replay import TraceBuilder, trace_sample_key

    builder = TraceBuilder(trace_id=f"t{repeat}", run_id="r", pipeline="p", input_id="i", repeat=repeat,
                           inputs=inputs, sample_key=trace_sample_key(0, "i", repeat))
    return run_traced(builder, fn, inputs, None, log=logging.getLogger("quiver.test"))
