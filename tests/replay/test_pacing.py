"""Pacing a run to the endpoint's rate limits, and the simulator's limits and headers.

The simulator counts what it admitted and refused (a front the test owns); the client
side is the engine's own client and a plain ``openai`` client, both seen at the hooked
transport, from many threads at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from quiver.replay import LLMClient, RetryPolicy, Simulator, SimulatorConfig
from quiver.replay._capture import install
from quiver.replay._llm import RateLimits, pacing
from quiver.replay._sim import LimitsConfig
from quiver.replay._sim.limits import format_reset


def _post(sim: Simulator, model: str = "sim-echo", key: str = "k1", text: str = "hello there") -> httpx.Response:
    return httpx.post(f"{sim.url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": text}]})


@pytest.fixture(scope="module")
def two_a_minute() -> Iterator[Simulator]:
    """Two requests and 40 tokens a minute per key and model (a window no test outlives)."""
    config = SimulatorConfig(limits=LimitsConfig(requests_per_minute=2, tokens_per_minute=1000,
                                                 models={"sim-json": {"tokens_per_minute": 6}}))
    with Simulator(config) as sim:
        yield sim


def test_the_simulator_limits_each_key_and_model_and_says_so_in_its_headers(two_a_minute: Simulator) -> None:
    first, second, third = (_post(two_a_minute) for _ in range(3))
    assert [r.status_code for r in (first, second, third)] == [200, 200, 429]
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-reset-requests"] == "0ms"
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert pacing.parse_reset(second.headers["x-ratelimit-reset-requests"]) > 50  # the first leaves in ~60 s
    assert first.headers["x-ratelimit-limit-tokens"] == "1000"
    assert int(first.headers["x-ratelimit-remaining-tokens"]) < 1000
    assert 50 < float(third.headers["retry-after-ms"]) / 1000 <= 60 and int(third.headers["retry-after"]) <= 60
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert _post(two_a_minute, key="k2").status_code == 200  # another key: a window of its own
    assert _post(two_a_minute, model="sim-json", text="one two three four five six seven").status_code == 429
    counts = two_a_minute.limit_stats()
    assert counts["sim-echo"]["admitted"] == 3 and counts["sim-echo"]["refused"] == 1
    assert counts["sim-json"]["refused"] == 1  # its own token limit: 7 words > 6


def test_reset_durations_are_written_and_read_as_openai_writes_them() -> None:
    assert [format_reset(s) for s in (0.02, 1.5, 63.25)] == ["20ms", "1.5s", "1m3.25s"]
    assert [pacing.parse_reset(v) for v in ("20ms", "1.5s", "6m0s", "1h2m3s", "2", "soon")] == [
        0.02, 1.5, 360.0, 3723.0, 2.0, None]


def test_usage_is_read_from_every_answer_format() -> None:
    assert pacing.usage_tokens(b'{"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}') == (
        7, 10)
    assert pacing.usage_tokens(b'{"usage": {"input_tokens": 7, "output_tokens": 3}}') == (7, 10)
    assert pacing.usage_tokens(b'{"choices": []}') is None


def test_a_bucket_spaces_requests_evenly_below_the_limit_and_a_429_holds_the_whole_run() -> None:
    bucket = pacing.Bucket(RateLimits(requests_per_minute=600, utilization=0.5))
    waits = [bucket.reserve(100.0, 0) for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.2, 0.4, 0.6])  # 600 a minute at half: 5 a second
    bucket.limited(100.0, retry_after=3.0)
    assert bucket.reserve(100.0, 0) == pytest.approx(3.0)  # nobody goes before the retry-after
    assert bucket.reserve(100.0, 0) == pytest.approx(3.0 + 0.2 / 0.9)  # and the pace dropped by a tenth


def test_a_bucket_learns_the_limits_from_the_headers_and_tokens_from_the_usage() -> None:
    bucket = pacing.Bucket(RateLimits())
    assert not bucket.active and bucket.reserve(0.0, 10) == 0.0  # nothing known: nothing waits
    bucket.learn(0.0, {"x-ratelimit-limit-requests": "120", "x-ratelimit-limit-tokens": "6000",
                       "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"})
    assert (bucket.rpm, bucket.tpm) == (120, 6000)
    assert bucket.reserve(0.0, 0) == pytest.approx(2.0)  # nothing remaining: wait for the reset
    stated = pacing.Bucket(RateLimits(requests_per_minute=60))
    stated.learn(0.0, {"x-ratelimit-limit-requests": "600"})
    assert stated.rpm == 60  # the lower of the stated and the sent limit
    tokens = pacing.Bucket(RateLimits(tokens_per_minute=600, utilization=1.0))
    assert tokens.estimate(100.0, None) == 100.0
    tokens.settle(100.0, 100.0, prompt=50, total=80)  # half the estimate's prompt, and 30 of completion
    assert tokens.estimate(100.0, None) == pytest.approx(50.0 + 30.0)


def _hammer(send: object, threads: int, each: int) -> None:
    def work() -> None:
        for i in range(each):
            send(i)  # type: ignore[operator]

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


@pytest.fixture
def bursty() -> Iterator[Simulator]:
    """40 requests a second per key and model, counted over half a second (20 at once)."""
    install()  # the transport hooks, as every recording installs them
    with Simulator(SimulatorConfig(limits=LimitsConfig(requests_per_minute=2400, window_s=0.5))) as sim:
        yield sim


@pytest.mark.parametrize("stated", [True, False], ids=["stated", "from-headers"])
def test_threads_paced_together_get_no_429(bursty: Simulator, stated: bool) -> None:
    """8 threads x 4 calls of the engine's client and of a plain openai client: each
    request waits for its place in one schedule, stated by the spec or learnt from the
    first answers' headers."""
    limits = RateLimits(requests_per_minute=2400 if stated else None, utilization=0.5)
    client = LLMClient(base_url=bursty.url, model="sim-echo", api_key="k1", limits=limits,
                       retry=RetryPolicy(attempts=1))
    plain = openai.OpenAI(base_url=bursty.url, api_key="k1", max_retries=0)
    try:
        _hammer(lambda i: client.chat(messages=[{"role": "user", "content": f"hi {i}"}]), 4, 4)
        _hammer(lambda i: plain.chat.completions.create(model="sim-echo", messages=[
            {"role": "user", "content": f"ho {i}"}]), 4, 4)
    finally:
        client.close()
        plain.close()
    counts = bursty.limit_stats()["sim-echo"]
    assert counts["admitted"] == 32 and counts["refused"] == 0


def test_without_pacing_the_same_threads_meet_429s(bursty: Simulator) -> None:
    """The control: with ``pace: false`` each call backs off on its own after a 429."""
    client = LLMClient(base_url=bursty.url, model="sim-echo", api_key="k1", limits=RateLimits(pace=False),
                       retry=RetryPolicy(attempts=20, initial_s=0.01, max_s=0.05))
    try:
        _hammer(lambda i: client.chat(messages=[{"role": "user", "content": f"hi {i}"}]), 8, 4)
    finally:
        client.close()
    counts = bursty.limit_stats()["sim-echo"]
    assert counts["admitted"] == 32 and counts["refused"] > 0
