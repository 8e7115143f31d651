"""quiver record counts every LLM call its traces made: the engine client's and those
captured at the transport (a plain ``openai.OpenAI()``), once each, in the result and in
``summary.json``; a call that failed is not counted, nor a call made outside a trace.

The pipeline calls the session simulator: per trace one ``quiver.llm()`` call, one or two
calls of a plain ``openai`` client (two for the second input), and, for the third input,
a plain call the simulator refuses (an unknown model) that the node survives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import quiver
from quiver import Trace, iter_traces
from quiver.replay import InputItem, LLMClient, Simulator, record_corpus

MESSAGES = [{"role": "user", "content": "count me"}]


@quiver.node("engine_call", kind="llm")
def engine_call(q: str) -> str:
    return str(quiver.llm().chat(messages=[{"role": "user", "content": q}]).content)


@quiver.node("plain_call", kind="llm")
def plain_call(q: str, times: int) -> str:
    client = openai.OpenAI(max_retries=0)  # from OPENAI_BASE_URL / OPENAI_API_KEY
    out = ""
    for _ in range(times):
        out += client.chat.completions.create(model="sim-echo", messages=MESSAGES).choices[0].message.content or ""  # type: ignore[arg-type]
    return out


@quiver.node("refused_call", kind="llm")
def refused_call(q: str) -> str:
    try:
        openai.OpenAI(max_retries=0).chat.completions.create(model="no-such-model", messages=MESSAGES)  # type: ignore[arg-type]
    except openai.NotFoundError:
        return "refused"
    return "answered"


def pipeline(q: str, times: int, refuse: bool) -> dict[str, Any]:
    out = {"engine": engine_call(q), "plain": plain_call(q, times)}
    if refuse:
        out["refused"] = refused_call(q)
    return out


@pytest.fixture
def endpoint(simulator: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMClient]:
    monkeypatch.setenv("OPENAI_BASE_URL", simulator.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    client = LLMClient(base_url=simulator.url, model="sim-echo", api_key="sk-test")
    yield client
    client.close()


def test_record_counts_every_llm_request_the_endpoint_received(
    endpoint: LLMClient, simulator: Simulator, tmp_path: Path
) -> None:
    plain_call("outside a trace", 1)  # not part of the run: not counted
    before = simulator.stats().get("requests", 0)
    inputs = [InputItem("one", {"q": "a", "times": 1, "refuse": False}),
              InputItem("two", {"q": "b", "times": 2, "refuse": False}),
              InputItem("three", {"q": "c", "times": 1, "refuse": True})]
    result = record_corpus(pipeline, pipeline_name="counts", inputs=inputs, repeats=2, output_dir=tmp_path,
                           llm=endpoint, concurrency=3, progress_stream=None)
    traces: list[Trace] = list(iter_traces(result.traces_path))
    answered = sum(c.response is not None for t in traces for c in t.calls)
    assert answered == 2 * (2 + 3 + 2)  # engine + plain per trace; the refused call has no answer
    refused = [c for t in traces for c in t.calls if c.node == "refused_call"]
    assert len(refused) == 2 and all(c.output == "refused" for c in refused)
    received = simulator.stats()["requests"] - before
    assert received == answered + 2  # the refused requests reached the endpoint too
    assert result.llm_calls == received  # what the wire saw, refused requests included
    assert json.loads(result.summary_path.read_text())["llm_calls"] == received
