"""The response cache: keyed by (request body, sample key), used when a replay asks."""

from __future__ import annotations

import contextvars
import sys
from pathlib import Path

from quiver import iter_traces
from quiver._trace import Redactor
from quiver.perturbations import make_operator
from quiver.replay import (
    InputItem,
    LLMClient,
    ReplayMode,
    ResponseCache,
    Simulator,
    Target,
    TraceBuilder,
    load_pipeline,
    record_corpus,
    replay_trace,
)
from quiver.replay._instrument import current_builder

PIPELINES = Path(__file__).parent.parent / "pipelines"


def _client(simulator: Simulator, cache: ResponseCache) -> LLMClient:
    return LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-test", cache=cache)


def test_cached_replays_ask_nothing_twice_and_repeats_get_their_own_samples(
    simulator: Simulator, llm_client: LLMClient, tmp_path: Path
) -> None:
    fn = load_pipeline(f"{PIPELINES / 'structured.py'}:pipeline")
    module = sys.modules[fn.__module__]
    module.JITTER.seed(0)
    item = InputItem("a4", {"text": "Cannot change billing address anywhere", "rounds": 3})
    recorded = record_corpus(fn, pipeline_name="structured", inputs=[item], repeats=1, output_dir=tmp_path / "rec",
                             llm=llm_client, progress_stream=None)
    trace = next(iter(iter_traces(recorded.traces_path)))
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    operator = make_operator("param_change", {"temperature": 1.5})
    cached = ReplayMode(downstream="cached")

    def run(mode: ReplayMode, repeat: int = 0) -> tuple[int, list[object]]:
        before = simulator.stats()["requests"]
        result = replay_trace(trace, fn, target=Target("draft"), operator=operator, client=client, mode=mode,
                              repeat=repeat)
        assert result.trace.status == "ok", result.trace.error
        return simulator.stats()["requests"] - before, [c.output for c in result.trace.calls]

    first_calls, first = run(cached)
    assert first_calls >= 2 and len(cache) == first_calls
    again_calls, again = run(cached)
    assert again_calls == 0 and again == first  # every live call answered from the cache
    live_calls, live = run(ReplayMode())
    assert live_calls == first_calls and live == first  # live asks again; same key, same answer
    other_calls, _ = run(cached, repeat=1)
    assert other_calls == first_calls  # another repeat, other sample keys: nothing cached
    assert client.stats["cache_hits"] == first_calls
    client.close()
    cache.close()


def test_calls_without_a_sample_key_are_never_cached(simulator: Simulator, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    client.chat(messages=[{"role": "user", "content": "hello"}], model="sim-echo")
    assert len(cache) == 0
    client.close()
    cache.close()


def test_cached_responses_are_redacted(simulator: Simulator, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache", redactor=Redactor())
    client = _client(simulator, cache)
    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0, inputs={},
                           sample_key="k" * 32)

    def ask() -> str:
        current_builder.set(builder)
        return client.chat(messages=[{"role": "user", "content": "write to jane.doe@example.com"}],
                           model="sim-echo").content

    assert "jane.doe@example.com" in contextvars.Context().run(ask)
    assert len(cache) == 1
    raw = (tmp_path / "cache").rglob("*")
    stored = [cache._cache[k] for k in cache._cache]  # noqa: SLF001 - the stored value itself
    assert "jane.doe@example.com" not in str(stored) and list(raw)
    client.close()
    cache.close()
