"""The bundled simulator under hostile and heavy traffic: every request gets an answer
(2xx or 4xx, in OpenAI's error shape), a burst gets no resets, stalled connections are
closed, oversized bodies are refused unread, and the logs hold no content."""

from __future__ import annotations

import copy
import json
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import openai
import pytest
from fuzzing import FUZZ, time_limit, tried
from hypothesis import example, given, settings, strategies as st

from quiver.replay import Fields, SimRequest, Simulator, SimulatorConfig, sim_model

SUITE = "simulator requests"
GOOD = {"model": "sim-echo", "messages": [{"role": "user", "content": "still there?"}]}
SECRET = "the-patient-is-named-Zanzibar"

# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(SimulatorConfig()) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def http(sim: Simulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        yield client


def check_answer(status: int, body: bytes) -> Any:
    """An answer the contract allows: 2xx with a JSON body, or 4xx with an OpenAI error."""
    assert 200 <= status < 500 and not 300 <= status < 400, (status, body[:300])
    answer = json.loads(body)
    if status >= 400:
        error = answer["error"]
        assert isinstance(error["message"], str) and error["message"], answer
        assert error["type"] == "invalid_request_error", answer
        assert set(error) == {"message", "type", "param", "code"}, answer
    return answer


def still_answers(http: httpx.Client) -> None:
    reply = http.post("/chat/completions", json=GOOD)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "still there?"


def post_bytes(http: httpx.Client, body: bytes) -> httpx.Response:
    """POST a body with the right framing; the answer must keep the connection open."""
    with time_limit(20, "one request"):
        reply = http.post("/chat/completions", content=body,
                          headers={"Content-Type": "application/json"})
    check_answer(reply.status_code, reply.content)
    assert reply.headers.get("connection", "").lower() != "close", reply.text
    return reply


def read_until_closed(sock: socket.socket, deadline_s: float = 10) -> bytes:
    """Everything the server sends until it closes the connection (or the deadline)."""
    sock.settimeout(deadline_s)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


def split_answers(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP/1.1 answers in a byte stream, each with its status, headers and body;
    anything that is not a whole answer fails the test."""
    answers = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"an answer without the end of its headers: {data[:200]!r}"
        status_line, *lines = head.decode("iso-8859-1").split("\r\n")
        version, status, _ = status_line.split(" ", 2)
        assert version == "HTTP/1.1", status_line
        if status.startswith("1"):  # 100 Continue: an interim answer without a body
            data = rest
            continue
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        length = int(headers["content-length"])
        assert len(rest) >= length, f"a body cut short: {rest!r}"
        answers.append((int(status), headers, rest[:length]))
        data = rest[length:]
    return answers


def exchange(port: int, data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Send raw bytes, close the sending side, and read every answer until the server
    closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return split_answers(read_until_closed(sock))


def request_bytes(port: int, body: bytes, length: int | None = None,
                  head: str = "POST /v1/chat/completions HTTP/1.1") -> bytes:
    length = len(body) if length is None else length
    return (f"{head}\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode() + body


# --------------------------------------------------------------------------- strategies

# Text, some of it with a lone surrogate (valid in a JSON escape, not in Unicode).
surrogates = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"])
texts = st.one_of(
    st.text(max_size=12),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), surrogates, st.text(max_size=4)),
)
huge_ints = st.integers(min_value=-(10**120), max_value=10**120)
scalars = st.one_of(st.none(), st.booleans(), huge_ints, st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)

TYPES = ["object", "string", "integer", "number", "boolean", "array", "null", ["string", "null"], 7, "weird"]
REFS = ["#", "#/properties/a", "#/$defs/x", "#/properties/a/items", "nowhere", "", "#/0/~1/~0"]
names = st.one_of(st.sampled_from(["a", "b", "self", "type", "properties", "$ref"]), texts)
schema_leaves = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(TYPES),
    "enum": st.lists(json_values, max_size=4),
    "const": json_values,
    "minimum": st.one_of(huge_ints, st.floats(allow_nan=False, allow_infinity=False)),
    "maximum": huge_ints,
    "$ref": st.sampled_from(REFS),
})
schemas = st.recursive(
    schema_leaves,
    lambda inner: st.one_of(
        st.builds(lambda props, base: {**base, "type": "object", "properties": props},
                  st.one_of(st.dictionaries(names, inner, max_size=4), json_values), schema_leaves),
        st.builds(lambda branches: {"anyOf": branches}, st.lists(inner, max_size=3)),
        st.builds(lambda items: {"type": "array", "items": items}, inner),
        st.builds(lambda defs, root: {**root, "$defs": {"x": defs}}, inner, inner),
    ),
    max_leaves=16,
)


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


deep_schemas = st.integers(1, 400).map(nested_schema)
REF_BOMB = {"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}}}

BASE = {
    "model": "sim-json",
    "messages": [
        {"role": "system", "content": "You fill forms."},
        {"role": "user", "content": [{"type": "text", "text": "a billing question"}]},
    ],
    "temperature": 0.5, "top_p": 1, "seed": 3, "max_tokens": 8, "n": 2, "logprobs": True,
    "top_logprobs": 2, "stream": False,
    "response_format": {"type": "json_schema", "json_schema": {"name": "form", "schema": nested_schema(2)}},
}


def key_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value``, containers and leaves alike."""
    paths = [prefix] if prefix else []
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        paths += key_paths(item, (*prefix, key))
    return paths


BASE_PATHS = key_paths(BASE)


def replaced(path: tuple[Any, ...], value: Any, delete: bool) -> dict[str, Any]:
    """``BASE`` with the value at ``path`` replaced (or deleted)."""
    body = copy.deepcopy(BASE)
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


def with_schema(schema: Any, **fields: Any) -> dict[str, Any]:
    """``BASE`` asking for ``schema``, with other fields changed."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    return {**BASE, **fields, "response_format": fmt}


wrong_fields = st.builds(replaced, st.sampled_from(BASE_PATHS), json_values, st.booleans())
schema_requests = st.builds(
    lambda schema, model, n: with_schema(schema, model=model, n=n),
    st.one_of(schemas, deep_schemas, st.just(REF_BOMB)),
    st.sampled_from(["sim-json", "sim-json", "sim-echo"]),
    st.integers(1, 3),
)


def nested_body(depth: int, opener: str) -> bytes:
    inner = ('{"a": ' * depth + "1" + "}" * depth) if opener == "{" else ("[" * depth + "]" * depth)
    return ('{"model": "sim-echo", "messages": [{"role": "user", "content": "x"}], "extra": ' + inner + "}").encode()


deep_bodies = st.builds(nested_body, st.integers(100, 100_000), st.sampled_from(["{", "["]))
NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e99999", "1" * 5000, "-" + "9" * 101, "1" * 100,
           "0." + "1" * 2000, "1e-400", "123456789012345678901234567890"]
number_bodies = st.builds(
    lambda field, number: (
        '{"model": "sim-echo", "messages": [{"role": "user", "content": "x"}], '
        f'"{field}": {number}}}'
    ).encode(),
    st.sampled_from(["temperature", "top_p", "seed", "n", "max_tokens", "top_logprobs", "extra"]),
    st.sampled_from(NUMBERS),
)


def encode(body: Any, how: str) -> bytes:
    if how == "ascii":  # lone surrogates travel as \ud800 escapes
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")  # raw, invalid UTF-8


json_bodies = st.one_of(
    st.builds(encode, st.one_of(json_values, wrong_fields, schema_requests), st.sampled_from(["ascii", "raw"])),
    deep_bodies,
    number_bodies,
)


# --------------------------------------------------------------------------- fuzz: bodies


@settings(parent=FUZZ, max_examples=220)
@given(body=json_bodies)
@example(body=b'{"model": "sim-echo", "messages": [{"role": "user", "content": "\\ud800"}]}')
@example(body=json.dumps(with_schema(nested_schema(300))).encode())
@example(body=b"[" * 100_000 + b"]" * 100_000)
@example(body=json.dumps(with_schema(REF_BOMB)).encode())
def test_any_json_body_gets_an_answer_and_the_connection_stays_usable(
    sim: Simulator, http: httpx.Client, body: bytes
) -> None:
    tried(SUITE)
    post_bytes(http, body)
    still_answers(http)


@settings(parent=FUZZ, max_examples=60)
@given(body=st.binary(max_size=3000))
def test_bytes_that_are_not_json_get_a_400(sim: Simulator, http: httpx.Client, body: bytes) -> None:
    tried(SUITE)
    reply = post_bytes(http, body)
    try:
        json.loads(body)
    except ValueError:
        assert reply.status_code == 400
    still_answers(http)


# --------------------------------------------------------------------------- fuzz: framing

methods = st.sampled_from(["POST", "GET", "PUT", "HEAD", "DELETE", "FOO", "P\x00ST", ""])
paths = st.sampled_from(["/v1/chat/completions", "/v1/models", "/health", "/nowhere", "*", "", "/v1/models/%ff%00"])
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/x", "FOO/1.1", ""])
raw_bodies = st.one_of(st.binary(max_size=200), st.just(json.dumps(GOOD).encode()))


@settings(parent=FUZZ, max_examples=140)
@given(method=methods, path=paths, version=versions, body=raw_bodies, delta=st.integers(-30, 30),
       extra=st.sampled_from(["", "Transfer-Encoding: chunked\r\n", "Expect: 100-continue\r\n",
                              "Content-Length: -5\r\n", "X: " + "y" * 70_000 + "\r\n",
                              "".join(f"X-{i}: {i}\r\n" for i in range(120)), "no colon here\r\n"]))
@example(method="POST", path="/v1/chat/completions", version="HTTP/1.1", body=json.dumps(GOOD).encode(),
         delta=10, extra="")
@example(method="", path="", version="", body=b"", delta=0, extra="")
@example(method="GET\x85/v1/models", path="", version="", body=b"", delta=0, extra="")
@example(method="POST", path="/v1/chat/completions", version="HTTP/1.1", body=json.dumps(GOOD).encode(),
         delta=-10, extra="")
def test_any_http_framing_gets_whole_answers_on_a_raw_socket(
    sim: Simulator, http: httpx.Client, method: str, path: str, version: str, body: bytes, delta: int, extra: str
) -> None:
    """Wrong Content-Length, bad request lines, methods, versions and headers: the server
    answers each request it can make out with a whole HTTP/1.1 answer, then closes."""
    tried(SUITE)
    line = " ".join(part for part in (method, path, version) if part)
    head = (f"{line}\r\nHost: 127.0.0.1:{sim.port}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {max(0, len(body) + delta)}\r\n\r\n").encode("latin-1")
    with time_limit(20, "one exchange"):
        answers = exchange(sim.port, head + body)
    assert answers, f"no answer to {head[:120]!r}"
    for status, _headers, answer in answers:
        check_answer(status, answer)
    still_answers(http)


# --------------------------------------------------------------------------- heavy traffic


def test_a_burst_of_5000_requests_on_200_connections_at_once_sees_no_reset() -> None:
    """Every request on a fresh connection, 200 clients started together: the listen
    backlog holds the burst (a backlog of 5 loses about one connection in 40 here)."""
    body = json.dumps(GOOD).encode()
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    with Simulator(SimulatorConfig()) as burst:
        data = request_bytes(burst.port, body).replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
        start = threading.Barrier(200)

        def client() -> None:
            start.wait()
            for _ in range(25):
                try:
                    with socket.create_connection(("127.0.0.1", burst.port), timeout=10) as sock:
                        sock.sendall(data)
                        statuses.update(status for status, _, _ in split_answers(read_until_closed(sock)))
                except (OSError, AssertionError, ValueError) as exc:
                    failures.append(type(exc).__name__)

        threads = [threading.Thread(target=client) for _ in range(200)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ok = burst.stats()["ok"]

    assert failures == []
    assert statuses == {200: 5000}
    assert ok == 5000


def test_half_open_connections_are_closed_after_the_read_timeout() -> None:
    """300 connections that go quiet (idle, inside the headers, inside the body) are
    closed after ``read_timeout_s``; those inside a request get a 408 first; the threads
    that served them end."""
    with Simulator(SimulatorConfig(read_timeout_s=0.5)) as quiet:
        baseline = threading.active_count()
        partial = [b"", f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{quiet.port}\r\nContent-Le".encode(),
                   request_bytes(quiet.port, b'{"model": "sim-ec', length=100)]
        socks = [socket.create_connection(("127.0.0.1", quiet.port)) for _ in range(300)]
        try:
            for i, sock in enumerate(socks):
                sock.sendall(partial[i % 3])
            answers = [read_until_closed(sock) for sock in socks]  # b"" or a 408, then EOF
        finally:
            for sock in socks:
                sock.close()
        deadline = time.monotonic() + 10
        while threading.active_count() > baseline + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        remaining = threading.active_count()

    assert answers[0::3] == [b""] * 100
    for data in answers[1::3] + answers[2::3]:
        [(status, headers, body)] = split_answers(data)
        assert status == 408 and headers["connection"] == "close"
        assert "the connection is closed" in check_answer(status, body)["error"]["message"]
    assert remaining <= baseline + 2


def test_a_connection_beyond_max_connections_gets_503_with_retry_after() -> None:
    with Simulator(SimulatorConfig(max_connections=2)) as small:
        held = [httpx.Client(base_url=small.url, timeout=10) for _ in range(2)]
        try:
            for client in held:  # both connections are being served, kept alive
                assert client.post("/chat/completions", json=GOOD).status_code == 200
            with openai.OpenAI(base_url=small.url, api_key="sk-test", max_retries=0) as sdk:
                with pytest.raises(openai.InternalServerError) as refused:
                    sdk.chat.completions.create(model="sim-echo", messages=GOOD["messages"])  # type: ignore[arg-type]
            held[0].close()
            deadline = time.monotonic() + 10
            status = 503
            while status == 503 and time.monotonic() < deadline:  # until the server sees the close
                with httpx.Client(base_url=small.url, timeout=10) as fresh:
                    status = fresh.post("/chat/completions", json=GOOD).status_code
        finally:
            for client in held:
                client.close()

    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "1"
    assert "maximum of 2 connections" in refused.value.message
    assert status == 200


# --------------------------------------------------------------------------- bodies too large


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak RSS from /proc")
def test_a_60_mb_body_gets_413_without_the_server_reading_it(sim: Simulator) -> None:
    size = 60 * 1024 * 1024
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        sock.sendall(request_bytes(sim.port, b"", length=size))  # the headers alone
        [(status, headers, body)] = split_answers(read_until_closed(sock))
    assert status == 413 and headers["connection"] == "close"
    assert "62914560 bytes" in check_answer(status, body)["error"]["message"]

    chunk = b" " * (1 << 16)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset the peak RSS of this process, client and server
    before = peak_rss_mb()
    with httpx.Client(timeout=30) as client:  # streamed: the client holds 64 KiB at a time
        reply = client.post(f"{sim.url}/chat/completions", content=(chunk for _ in range(size // len(chunk))),
                            headers={"Content-Length": str(size), "Content-Type": "application/json"})
    grown = peak_rss_mb() - before

    assert reply.status_code == 413
    assert "at most 8388608" in reply.json()["error"]["message"]
    assert grown < 20, f"the peak RSS grew by {grown:.0f} MB for a refused 60 MB body"


def test_expect_100_continue_with_too_large_a_body_is_refused_before_it_is_sent(sim: Simulator) -> None:
    head = request_bytes(sim.port, b"", length=9 * 1024 * 1024)
    head = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n", 1)
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        sock.sendall(head)
        [(status, _, body)] = split_answers(read_until_closed(sock))

    assert status == 413
    assert "SimulatorConfig.max_body_bytes" in check_answer(status, body)["error"]["message"]


# --------------------------------------------------------------------------- logs


class Exploding(Mapping[str, float]):
    """Candidates whose reading fails with a message that quotes the prompt."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt

    def __getitem__(self, key: str) -> float:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError(f"cannot read candidates for {self.prompt}")

    def __len__(self) -> int:
        raise RuntimeError(f"cannot count candidates for {self.prompt}")


@sim_model("test-exploding")
def _exploding(req: SimRequest) -> Fields:
    return Fields(label=Exploding(req.last_user))


def test_the_simulator_logs_no_content_nor_authorization(
    sim: Simulator, http: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    secret_headers = {"Authorization": f"Bearer sk-{SECRET}"}
    messages = [{"role": "user", "content": f"my name is {SECRET}"}]
    bad = http.post("/chat/completions", json={"model": "sim-echo", "messages": messages, "n": "many"},
                    headers=secret_headers)
    failed = http.post("/chat/completions?key=" + SECRET, json={"model": "test-exploding", "messages": messages},
                       headers=secret_headers)
    logged = capsys.readouterr()

    assert bad.status_code == 400
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    assert failed.headers["connection"] == "close"
    assert SECRET not in logged.out + logged.err
    assert logged.out == ""
    [line] = logged.err.splitlines()
    assert line.startswith("quiver sim: POST /v1/chat/completions -> 500 (RuntimeError; request body ")
    still_answers(http)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("read_timeout_s", 0, "read_timeout_s must be a finite number of seconds > 0"),
        ("read_timeout_s", float("inf"), "read_timeout_s must be a finite number of seconds > 0"),
        ("request_timeout_s", 0, "request_timeout_s must be a finite number of seconds > 0"),
        ("request_timeout_s", float("nan"), "request_timeout_s must be a finite number of seconds > 0"),
        ("max_connections", 0, "max_connections must be an integer >= 1"),
        ("max_pending_connections", 0, "max_pending_connections must be an integer >= 1"),
        ("max_body_bytes", -1, "max_body_bytes must be an integer >= 1"),
    ],
)
def test_limits_must_be_positive(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimulatorConfig.model_validate({field: value})


def test_the_default_limits_are_documented_values() -> None:
    config = SimulatorConfig()

    assert (config.read_timeout_s, config.request_timeout_s) == (30.0, 10.0)
    assert (config.max_connections, config.max_pending_connections, config.max_body_bytes) == (1024, 1024, 8 << 20)
    assert config.faults.latency.dist == "none"  # tests run without latency

