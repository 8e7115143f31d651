"""Recording completes through injected 429s, 500s, timeouts and malformed bodies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver import iter_traces
from quiver.replay import (
    FaultConfig,
    InputItem,
    LLMClient,
    RetryPolicy,
    Simulator,
    SimulatorConfig,
    load_pipeline,
    record_corpus,
)

FAULTS = FaultConfig(rate_429=0.10, rate_500=0.05, rate_timeout=0.02, rate_malformed=0.02,
                     retry_after_s=0.02, seed=3)
INPUTS = [InputItem(f"in{i}", {"text": f"ticket number {i} about invoices and exports"}) for i in range(10)]


@pytest.fixture(scope="module")
def faulty() -> Iterator[Simulator]:
    with Simulator(SimulatorConfig(faults=FAULTS)) as sim:
        yield sim


def test_recording_survives_faults_and_reports_every_retry(
    faulty: Simulator, pipelines_dir: Path, tmp_path: Path
) -> None:
    fn = load_pipeline(f"{pipelines_dir / 'chatty.py'}:pipeline")
    client = LLMClient(
        base_url=faulty.url, model="sim-json", api_key="sk-test", timeout_s=2.0,
        retry=RetryPolicy(attempts=10, initial_s=0.02, max_s=0.2),
    )
    before = faulty.stats()
    result = record_corpus(
        fn, pipeline_name="chatty", inputs=INPUTS, repeats=3, output_dir=tmp_path,
        llm=client, concurrency=4, progress_stream=None,
    )
    injected = {k: faulty.stats()[k] - before[k] for k in before}
    traces = list(iter_traces(result.traces_path))

    assert len(traces) == 30 and result.failed == 0
    assert {(t.input_id, t.repeat) for t in traces} == {(i.input_id, r) for i in INPUTS for r in range(3)}
    assert all(t.status == "ok" for t in traces)
    # every injected fault was retried once and reported under its reason
    assert result.retries == {
        "rate_limited": injected["rate_limited"],
        "server_error": injected["server_error"],
        "timeout": injected["timeout"],
        "malformed": injected["malformed"],
    }
    assert min(result.retries.values()) >= 1
    assert injected["ok"] == 30 * 5
    # the wire counted every request the endpoint answered, whatever it answered, and those it did not
    assert result.llm_calls == injected["ok"] + injected["rate_limited"] + injected["server_error"] \
        + injected["malformed"]
    assert result.unanswered == injected["timeout"]
    # per trace and per call too
    assert sum(sum(t.tags.get("retries", {}).values()) for t in traces) == sum(result.retries.values())
    attempts = sum(c.response.attempts for t in traces for c in t.calls if c.response is not None)
    assert attempts == 150 + sum(result.retries.values())
    summary = result.summary_path.read_text()
    assert '"rate_limited"' in summary and '"timeout"' in summary


def test_a_failing_input_is_recorded_as_failed_and_the_others_go_on(
    llm_client: LLMClient, pipelines_dir: Path, tmp_path: Path
) -> None:
    fn = load_pipeline(f"{pipelines_dir / 'chatty.py'}:pipeline")
    inputs = INPUTS[:3] + [InputItem("bad", {"text": 42})]
    result = record_corpus(
        fn, pipeline_name="chatty", inputs=inputs, repeats=2, output_dir=tmp_path,
        llm=llm_client, progress_stream=None,
    )
    traces = {(t.input_id, t.repeat): t for t in iter_traces(result.traces_path)}
    assert len(traces) == 8 and result.failed == 2
    failed = traces[("bad", 0)]
    assert failed.status == "failed" and failed.error is not None
    assert all(traces[(i.input_id, r)].status == "ok" for i in INPUTS[:3] for r in range(2))
    assert "trace" in result.log_path.read_text() and "failed" in result.log_path.read_text()


def test_exhausted_retries_fail_the_trace_with_llm_unavailable(pipelines_dir: Path, tmp_path: Path) -> None:
    with Simulator(SimulatorConfig(faults=FaultConfig(rate_500=1.0))) as sim:
        client = LLMClient(base_url=sim.url, model="sim-json", retry=RetryPolicy(attempts=2, initial_s=0.01))
        fn = load_pipeline(f"{pipelines_dir / 'chatty.py'}:pipeline")
        result = record_corpus(
            fn, pipeline_name="chatty", inputs=INPUTS[:1], repeats=1, output_dir=tmp_path,
            llm=client, progress_stream=None,
        )
    trace = next(iter_traces(result.traces_path))
    assert trace.status == "failed" and trace.error is not None
    assert trace.error.type == "LLMUnavailable"
    assert "after 2 attempt(s), last: server_error" in trace.error.message
    assert trace.calls[-1].error is not None and trace.calls[-1].node == "step"


def test_a_json_body_that_is_no_chat_completion_is_retried_as_malformed() -> None:
    """An endpoint answering 200 with JSON that has no ``choices`` (a proxy's error page,
    say): every attempt counts as malformed, and the call fails with the reason."""
    import http.server
    import json
    import threading

    from quiver import LLMUnavailable

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook
            self.rfile.read(int(self.headers["Content-Length"]))
            hits.append(self.path)
            body = json.dumps({"object": "error", "detail": "upstream busy"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = LLMClient(base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m",
                           retry=RetryPolicy(attempts=3, initial_s=0.01, max_s=0.02))
        with pytest.raises(LLMUnavailable, match="after 3 attempt.*malformed.*not a chat completion"):
            client.chat(messages=[{"role": "user", "content": "hi"}])
        assert hits == ["/v1/chat/completions"] * 3
        client.close()
    finally:
        server.shutdown()
        server.server_close()
