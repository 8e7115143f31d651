"""The bundled simulator serves local processes, not web pages: a request for another host
(DNS rebinding), a browser's cross-origin request (CSRF) and a client that trickles its
request (slowloris) are refused or cut off, while the clients the engine uses get through."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from quiver.replay import Simulator, SimulatorConfig

GOOD = {"model": "sim-echo", "messages": [{"role": "user", "content": "who is there?"}]}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(SimulatorConfig()) as simulator:
        yield simulator


def post(sim: Simulator, headers: dict[str, str]) -> httpx.Response:
    """POST ``GOOD`` as JSON text with ``headers`` (and no Content-Type unless they set one)."""
    with httpx.Client(timeout=10) as client:
        return client.post(f"{sim.url}/chat/completions", headers=headers, content=json.dumps(GOOD).encode())


def refused(reply: httpx.Response, status: int, words: str) -> None:
    """A refusal in OpenAI's error shape that closes the connection."""
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"] and "\n" not in error["message"], error
    assert reply.headers["connection"] == "close"
    assert not any(name.lower().startswith("access-control-") for name in reply.headers)


def raw_answer(port: int, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
        return answer


# --------------------------------------------------------------------------- Host


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "localhost", "127.0.0.1:{other}",
                                  "127.0.0.1.nip.io:{port}", "[::2]:{port}", "localhost:{port}.evil.example"])
def test_a_request_for_a_foreign_host_is_refused_with_421(sim: Simulator, host: str) -> None:
    """What a page whose name was rebound to 127.0.0.1 sends: its own name in ``Host``."""
    host = host.format(port=sim.port, other=sim.port + 1 if sim.port < 65535 else 1)
    refused(post(sim, {"Host": host, "Content-Type": "application/json"}), 421, "Host")


def test_a_foreign_host_is_refused_on_a_get_and_before_the_body_is_read(sim: Simulator) -> None:
    before = sim.stats()["requests"]
    with httpx.Client(timeout=10) as client:
        listing = client.get(f"{sim.url}/models", headers={"Host": f"evil.example:{sim.port}"})
    huge = raw_answer(sim.port, (f"POST /v1/chat/completions HTTP/1.1\r\nHost: evil.example:{sim.port}\r\n"
                                 "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{").encode())

    refused(listing, 421, f"evil.example:{sim.port}")
    assert huge.startswith(b"HTTP/1.1 421 ") and b"Connection: close" in huge
    assert sim.stats()["requests"] == before  # no completion was attempted


def test_a_request_in_absolute_form_is_judged_by_the_host_of_its_url(sim: Simulator) -> None:
    own = f"127.0.0.1:{sim.port}"
    foreign = raw_answer(sim.port, f"GET http://evil.example:{sim.port}/health HTTP/1.1\r\n"
                                   f"Host: {own}\r\n\r\n".encode())
    served = raw_answer(sim.port, f"GET http://{own}/health HTTP/1.1\r\nHost: evil.example\r\n"
                                  "Connection: close\r\n\r\n".encode())
    with httpx.Client(timeout=10) as client:
        query = client.get(f"{sim.url}/models?next=http://evil.example/")

    assert foreign.startswith(b"HTTP/1.1 421 ")
    assert served.startswith(b"HTTP/1.1 200 ")
    assert query.status_code == 200


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
def test_the_simulator_s_own_names_are_accepted(sim: Simulator, name: str) -> None:
    reply = post(sim, {"Host": f"{name}:{sim.port}", "Content-Type": "application/json"})

    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "who is there?"


def test_the_sdk_reaches_the_simulator_as_localhost(sim: Simulator) -> None:
    with openai.OpenAI(base_url=f"http://localhost:{sim.port}/v1", api_key="sk-test", max_retries=0) as sdk:
        answer = sdk.chat.completions.create(**GOOD)  # type: ignore[call-overload]

    assert answer.choices[0].message.content == "who is there?"


def test_http_1_0_without_host_is_served_and_http_1_1_without_host_is_refused(sim: Simulator) -> None:
    """Browsers always send ``Host``; a loopback process speaking HTTP/1.0 may omit it."""
    old = raw_answer(sim.port, b"GET /health HTTP/1.0\r\n\r\n")
    new = raw_answer(sim.port, b"GET /health HTTP/1.1\r\n\r\n")

    assert old.startswith(b"HTTP/1.1 200 ") and old.endswith(b'{"status": "ok"}')
    assert new.startswith(b"HTTP/1.1 400 ") and b"Host" in new


# --------------------------------------------------------------------------- browsers


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          None])
def test_a_post_a_page_can_send_without_preflight_is_refused(sim: Simulator, content_type: str | None) -> None:
    """``fetch(url, {method: "POST", mode: "no-cors", body})`` with a simple content type (or
    none, for a blob or buffer) reaches a server with no preflight: it must do nothing."""
    before = sim.stats()["requests"]
    reply = post(sim, {} if content_type is None else {"Content-Type": content_type})

    refused(reply, 403, "application/json")
    assert sim.stats()["requests"] == before


@pytest.mark.parametrize("origin", ["http://evil.example", "http://evil.example:8765", "null",
                                    "http://127.0.0.1", "https://127.0.0.1:{port}", "http://127.0.0.1:{port}/x"])
def test_a_request_from_another_origin_is_refused(sim: Simulator, origin: str) -> None:
    origin = origin.format(port=sim.port)
    refused(post(sim, {"Origin": origin, "Content-Type": "application/json"}), 403, "Origin")
    with httpx.Client(timeout=10) as client:
        refused(client.get(f"{sim.url}/models", headers={"Origin": origin}), 403, "Origin")


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_request_a_browser_marks_as_cross_site_is_refused(sim: Simulator, site: str) -> None:
    with httpx.Client(timeout=10) as client:
        refused(client.get(f"{sim.url}/models", headers={"Sec-Fetch-Site": site}), 403, "Sec-Fetch-Site")


def test_requests_from_the_simulator_s_own_origin_are_served(sim: Simulator) -> None:
    reply = post(sim, {"Origin": f"http://localhost:{sim.port}", "Sec-Fetch-Site": "same-origin",
                       "Content-Type": "application/json; charset=utf-8"})

    assert reply.status_code == 200, reply.text


def test_a_preflight_gets_no_cors_permission(sim: Simulator) -> None:
    with httpx.Client(timeout=10) as client:
        reply = client.options(f"{sim.url}/chat/completions", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization"})

    refused(reply, 403, "Origin")


CHROMIUM = "/usr/bin/chromium"
NO_LOCAL_NETWORK_CHECKS = ("--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
                           "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults")
ATTACK = """async ([simulator, body]) => {
  const attempt = async (url, init) => {
    try { const r = await fetch(url, init); return [r.type, r.status, await r.text()]; }
    catch (e) { return ["error", 0, String(e)]; }
  };
  const json = {"Content-Type": "application/json"};
  return {
    rebound: await attempt("/v1/chat/completions", {method: "POST", headers: json, body}),
    simple: await attempt(simulator, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}),
    preflighted: await attempt(simulator, {method: "POST", headers: json, body}),
  };
}"""


def test_a_page_in_a_real_browser_can_neither_use_nor_read_the_simulator(sim: Simulator) -> None:
    """A page at ``http://evil.example:PORT`` whose name resolves to 127.0.0.1, in Chromium
    with its local-network checks off (as in browsers that have none): its same-origin
    request (DNS rebinding) gets a 421, its no-cors ``text/plain`` POST runs nothing, its
    JSON POST fails at the preflight. None reaches a completion."""
    sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    page_url = f"http://evil.example:{sim.port}/attack"
    before = sim.stats()["requests"]
    with sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--host-resolver-rules=MAP evil.example 127.0.0.1", NO_LOCAL_NETWORK_CHECKS])
        try:
            page = browser.new_page()
            page.route(page_url, lambda route: route.fulfill(content_type="text/html", body="<p>prizes</p>"))
            page.goto(page_url)
            got = page.evaluate(ATTACK, [f"http://127.0.0.1:{sim.port}/v1/chat/completions", json.dumps(GOOD)])
        finally:
            browser.close()

    assert got["rebound"][:2] == ["basic", 421], got
    assert got["simple"][:2] == ["opaque", 0], got
    assert got["preflighted"][0] == "error", got
    assert sim.stats()["requests"] == before


# --------------------------------------------------------------------------- slowloris


TRICKLES = {
    "request line": (b"", b"G"),
    "headers": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", b"X-Pad: 1\r\n"),
    "body": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
             b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", b" "),
}


def trickle(socks: dict[socket.socket, bytes], answers: dict[socket.socket, bytes], give_up_s: float) -> None:
    """Send each open connection its next byte(s) every 0.1 s, faster than any read
    timeout, and collect what the server sends until it closes the connection."""
    by_fd = {sock.fileno(): sock for sock in socks}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + give_up_s
    while len(answers) < len(socks) and time.monotonic() < deadline:
        for sock in socks:
            if sock not in answers:
                try:
                    sock.send(socks[sock])
                except OSError:  # the server closed it; what it sent is read below
                    pass
        for fd, _ in poller.poll(100):
            answers[by_fd[fd]] = read_rest(by_fd[fd])
            poller.unregister(fd)


def read_rest(sock: socket.socket) -> bytes:
    data = b""
    sock.settimeout(5)
    try:
        while chunk := sock.recv(1 << 16):
            data += chunk
    except OSError:  # a reset after the server closed an evicted connection
        pass
    return data


def test_trickling_clients_hold_no_slot_and_are_cut_off_at_the_request_deadline() -> None:
    """More trickling connections than connection slots and than connections allowed to be
    sending a request: a normal request is still served, and every trickler is closed once
    its request is not complete ``request_timeout_s`` after it began (a 408 when it was
    inside a request's headers or body), or earlier to make room for a newer connection."""
    config = SimulatorConfig(max_connections=2, max_pending_connections=6, request_timeout_s=1.0)
    kinds = list(TRICKLES) * 3  # 9 tricklers: more than 6 pending, more than 2 slots
    started = time.monotonic()
    with Simulator(config) as small:
        socks: dict[socket.socket, bytes] = {}
        answers: dict[socket.socket, bytes] = {}
        for kind in kinds:
            sock = socket.create_connection(("127.0.0.1", small.port), timeout=10)
            first, every = TRICKLES[kind]
            sock.sendall(first.replace(b"{port}", str(small.port).encode()))
            socks[sock] = every
        trickler = threading.Thread(target=trickle, args=(socks, answers, 10.0))
        trickler.start()
        try:
            with openai.OpenAI(base_url=small.url, api_key="sk-test", max_retries=0, timeout=10) as sdk:
                answer = sdk.chat.completions.create(**GOOD)  # type: ignore[call-overload]
        finally:
            trickler.join()
            for sock in socks:
                sock.close()
    got = [answers.get(sock) for sock in socks]
    print(f"slowloris test: {time.monotonic() - started:.2f} s")

    assert answer.choices[0].message.content == "who is there?"
    assert None not in got, "a trickling connection was still open after 10 s"
    evicted, cut = got[:4], list(zip(kinds[4:], got[4:], strict=True))  # the 4 oldest made room for the others
    assert evicted == [b""] * 4
    for kind, data in cut:
        assert data is not None
        if kind == "request line":
            assert data == b""
        else:
            status, _, body = data.partition(b"\r\n\r\n")
            assert status.startswith(b"HTTP/1.1 408 ") and b"Connection: close" in status, data[:300]
            assert "request_timeout_s" in json.loads(body)["error"]["message"]
