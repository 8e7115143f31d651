"""An endpoint that is down stops the command at once, in one line (exit 2).

``quiver record``, ``run``, ``gate`` and ``replay --spec`` open the spec's endpoint
through ``open_llm``, which probes a ``base_url`` once (``GET /models``, a short timeout,
two attempts) before anything runs. Only a connection that cannot be made counts as
down: an endpoint that answers, whatever the status (401 without a key, 404 with no
model list), is used.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fuzzing import run_cli

from quiver._errors import LLMUnavailable
from quiver.experiments._config.llm import PROBE_ATTEMPTS, PROBE_TIMEOUT_S, probe_endpoint
from quiver.replay import Simulator

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
ROOT = Path(__file__).resolve().parents[2]

PROBE_BOUND_S = PROBE_ATTEMPTS * 3 * PROBE_TIMEOUT_S
"""The longest the probe may take: every attempt's connect and read timeouts."""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Refuses(BaseHTTPRequestHandler):
    """Answers every request with one status, like a server that wants a key or has no /models."""

    status = 401

    def _answer(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        body = b'{"error": {"message": "no", "type": "invalid_request_error"}}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(params=[401, 404])
def refusing_server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (_Refuses,), {"status": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def record_spec(tmp_path: Path, llm: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"pipeline: {PIPELINES / 'chatty.py'}:pipeline\nllm: {llm}\n"
        f"inputs: [{{id: a, text: one}}]\nrepeats: 1\noutput: {tmp_path / 'out'}\n",
        encoding="utf-8",
    )
    return spec


def test_record_with_the_endpoint_down_exits_2_in_one_line_within_the_probe(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    spec = record_spec(tmp_path, f"{{base_url: '{url}', model: m}}")
    result = run_cli(["record", str(spec), "--quiet"], seconds=PROBE_BOUND_S)
    assert result.code == 2
    [line] = result.error_lines()
    assert line.startswith(f"quiver record: error: the LLM endpoint {url} is not reachable (GET {url}/models: ")
    assert "refused" in line.lower() and line.endswith("start it, or fix llm.base_url")
    assert not (tmp_path / "out" / "traces.jsonl").exists()


def test_record_with_a_base_url_that_is_not_a_url_exits_2_before_any_probe(tmp_path: Path) -> None:
    spec = record_spec(tmp_path, "{base_url: not a url}")
    result = run_cli(["record", str(spec), "--quiet"], seconds=PROBE_BOUND_S)
    assert result.code == 2
    assert result.error_lines() == [
        f"quiver record: error: {spec}:2: llm.base_url: 'not a url' is not an http(s) URL; give the endpoint's "
        "base URL, such as http://localhost:8000/v1 or https://api.openai.com/v1"
    ]


def test_run_with_the_endpoint_down_exits_2_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    text = (ROOT / "experiments" / "specs" / "support_bot.yaml").read_text(encoding="utf-8")
    text = text.replace("../support_bot/", f"{ROOT / 'experiments' / 'support_bot'}/")
    start, end = text.index("llm:\n"), text.index("inputs:")
    spec = tmp_path / "campaign.yaml"
    spec.write_text(text[:start] + f"llm: {{base_url: '{url}', model: m}}\n" + text[end:], encoding="utf-8")
    result = run_cli(["run", str(spec), "--output", str(tmp_path / "run"), "--quiet"], seconds=60)
    assert result.code == 2
    [line] = result.error_lines()
    assert line.startswith(f"quiver run: error: the LLM endpoint {url} is not reachable")


def test_an_endpoint_that_answers_401_or_404_is_not_refused(tmp_path: Path, refusing_server: str) -> None:
    probe_endpoint(refusing_server)
    spec = record_spec(tmp_path, f"{{base_url: '{refusing_server}', model: m, retry: {{attempts: 1}}}}")
    result = run_cli(["record", str(spec), "--quiet"])
    assert result.code == 1, result  # every trace failed on the endpoint's answer: done, with problems
    assert "not reachable" not in result.stderr
    assert "1 trace(s) failed" in result.stderr


def test_an_endpoint_that_is_up_is_used(tmp_path: Path, simulator: Simulator) -> None:
    spec = record_spec(tmp_path, f"{{base_url: '{simulator.url}', model: sim-json}}")
    result = run_cli(["record", str(spec), "--quiet"])
    assert result.code == 0, result
    assert "(1 ok, 0 failed, 0 resumed)" in result.stdout


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "ftp://127.0.0.1/v1", "http://[::1/v1"])
def test_a_url_that_cannot_be_requested_is_down_at_once(url: str) -> None:
    with pytest.raises(LLMUnavailable, match=r"^the LLM endpoint .* is not reachable \(GET .*/models: .+\)"):
        probe_endpoint(url)
