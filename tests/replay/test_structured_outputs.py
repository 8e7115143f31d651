"""Structured outputs reproduce on replay.

``tests/pipelines/structured_sdk.py`` asks for structured outputs through the plain
``openai`` SDK (``beta.chat.completions.parse`` sync and async, ``response_format``
``json_schema``) and through the engine's client with a pydantic model. It is recorded
against the session simulator, then replayed with everything frozen: every trace
reproduces, the SDK parses every served answer, and the simulator sees no request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver import iter_traces
from quiver.replay import InputItem, LLMClient, Replayer, Simulator, capture_stats, load_pipeline, record_corpus

TEXTS = ("The invoice charged me twice, urgent", "The app crashes on login", "Cannot reset my account password")


@pytest.fixture(scope="module")
def pipeline() -> Callable[..., Any]:
    return load_pipeline(f"{Path(__file__).parent.parent / 'pipelines' / 'structured_sdk.py'}:pipeline")


@pytest.fixture(scope="module")
def client(simulator: Simulator) -> Iterator[LLMClient]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", simulator.url)
        mp.setenv("OPENAI_API_KEY", "sk-structured")
        llm = LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-structured")
        yield llm
        llm.close()


@pytest.fixture(scope="module")
def recorded(pipeline: Callable[..., Any], client: LLMClient, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    t0 = time.monotonic()
    result = record_corpus(
        pipeline, pipeline_name="structured_sdk", repeats=2, llm=client, seed=3, progress_stream=None,
        inputs=[InputItem(f"t{i}", {"text": text}) for i, text in enumerate(TEXTS)],
        output_dir=tmp_path_factory.mktemp("structured_sdk"),
    )
    print(f"recorded {len(TEXTS) * 2} traces in {time.monotonic() - t0:.2f} s")
    assert result.failed == 0
    return list(iter_traces(result.traces_path))


def test_a_captured_structured_output_records_the_parsed_json(recorded: list[Any]) -> None:
    for trace in recorded:
        by_path = {c.call_path: c for c in trace.calls}
        for node in ("triage", "extract"):
            child = by_path[f"{node}#0/llm#0"]
            assert child.kind == "llm" and child.response is not None
            assert isinstance(child.output, dict) and child.output == by_path[f"{node}#0"].output
        assert trace.output["label"] == by_path["classify#0"].output


def test_a_frozen_replay_of_structured_outputs_reproduces_with_no_request(
    pipeline: Callable[..., Any], client: LLMClient, recorded: list[Any], simulator: Simulator
) -> None:
    t0 = time.monotonic()
    requests, served = simulator.stats().get("requests", 0), capture_stats().get("served", 0)
    results = [Replayer(pipeline, client=client).replay(t) for t in recorded]
    print(f"replayed {len(results)} traces in {time.monotonic() - t0:.2f} s")
    assert [r.divergences for r in results if not r.reproduced] == []
    assert [r.trace.output for r in results] == [t.output for t in recorded]
    assert simulator.stats().get("requests", 0) == requests
    assert capture_stats().get("served", 0) - served == 2 * len(recorded)  # triage and extract ran, served
