"""The simulator's HTTP layer: one thread per connection, with bounds on everything a
client controls.

* **Who.** Requests for another host, and requests from web pages (another ``Origin``,
  ``Sec-Fetch-Site: cross-site``, a ``POST`` that is not ``application/json``) are
  refused before their body is read (``421``, ``403``); see :mod:`.guard`.
* **Connections.** Each connection has its own thread. A connection takes one of
  ``max_connections`` slots once it has sent a whole request, and keeps it until it
  closes (keep-alive included); a request that finds every slot taken is answered
  ``503`` with ``Retry-After`` and its connection closed. Connections still sending
  their first request hold no slot; beyond ``max_pending_connections`` of them, the one
  that has been sending longest is closed without an answer, so that slow clients cannot
  keep prompt ones out. The listen backlog holds up to :data:`_BACKLOG` connections not
  yet accepted (the kernel caps it at ``net.core.somaxconn``), so a burst of hundreds of
  clients is queued, not reset.
* **Time.** A request (request line, headers and body) must be complete within
  ``request_timeout_s`` of its first byte (of the connection's accept, for its first
  request), however steadily its bytes come; and a connection that sends nothing for
  ``read_timeout_s`` is closed. Either way the connection is closed silently when it
  was idle between requests (keep-alive) or had not finished a request line, with a
  ``408`` when it was inside a request's headers or body.
* **Size.** A body larger than ``max_body_bytes`` is answered ``413`` from its
  ``Content-Length`` alone, before any of it is read (and instead of ``100 Continue``
  when the client asks first); the connection is then closed.
* **Errors.** Every request that reaches the simulator gets an answer in OpenAI's error
  shape when it cannot be served: malformed HTTP (``400``, ``414``, ``431``), an unknown
  method (``405``), a missing or wrong ``Content-Length`` (``400``, ``411``). A request
  whose HTTP framing is intact keeps its connection open whatever its body holds.
  Should the simulator itself fail, the client gets a ``500`` and stderr one line with
  the method, path, status and sizes: never a message's content nor a header.
"""

from __future__ import annotations

import io
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from quiver.replay._keys import SAMPLE_KEY_HEADER

from .formats import ROUTES, endpoints
from .guard import _Guard
from .models import sim_model_names
from .wire import _HTTPError, _json_bytes, _model_body, _retry_headers, _unknown_model

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

    from .server import Simulator

_BACKLOG = min(1024, socket.SOMAXCONN)
"""The listen backlog: connections the kernel queues until the server accepts them."""

_MAX_LINE = 65536
"""The longest request line, as :mod:`http.server` allows."""

_BLANK_LINES = 8
"""How many empty lines may come before a request line."""

_BUSY_RETRY_S = 1.0
"""The wait a 503 for too many connections asks for."""

_DRAIN_BYTES = 1 << 20
"""The most unread input discarded before a refused connection is closed (so that the
close sends FIN, not a reset that could destroy the answer before the client reads it)."""

_LINGER_S = 1.0
"""How long a closing connection waits for the client to close its side."""

_STATUS_FOR = {501: 405, 505: 400}
"""Status codes :mod:`http.server` uses for bad requests that would look like server
faults: an unknown method is 405, an unsupported HTTP version 400."""


class _RequestClock:
    """The time a connection may take: ``idle_s`` without a byte at most, and ``request_s``
    for a whole request (request line, headers and body), counted from its first byte or,
    for a connection's first request, from when the connection was accepted."""

    def __init__(self, idle_s: float, request_s: float) -> None:
        self.idle_s, self.request_s = idle_s, request_s
        self._deadline: float | None = time.monotonic() + request_s

    def received(self) -> None:
        """Bytes came: a request is under way (its deadline starts now if it has none)."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self.request_s

    def finished(self) -> None:
        """The request is complete: until the next one begins, only ``idle_s`` applies."""
        self._deadline = None

    @property
    def expired(self) -> bool:
        """Whether the request under way is past its deadline."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def budget(self) -> float:
        """How long the next read may wait; raises :class:`TimeoutError` past the deadline."""
        if self._deadline is None:
            return self.idle_s
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline has passed")
        return min(self.idle_s, left)


class _ClockedReader(io.RawIOBase):
    """A connection's input, each read bounded by what its :class:`_RequestClock` allows
    (a socket timeout alone restarts with every byte, which a trickling client exploits)."""

    def __init__(self, sock: socket.socket, clock: _RequestClock) -> None:
        super().__init__()
        self._sock, self._clock = sock, clock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._sock.settimeout(self._clock.budget())
        try:
            received = self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._clock.idle_s)  # for the writes
        if received:
            self._clock.received()
        return received


class _Handler(BaseHTTPRequestHandler):
    """One connection; keeps it alive across requests (HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.1"  # a malformed request line is answered with a status line
    server_version = "quiver-sim"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def setup(self) -> None:
        super().setup()
        config = self.server.sim.config
        self._clock = _RequestClock(config.read_timeout_s, config.request_timeout_s)
        self.connection.settimeout(config.read_timeout_s)  # writes; each read sets its own
        self.rfile.close()
        self.rfile = io.BufferedReader(_ClockedReader(self.connection, self._clock))
        self._responded = False
        self._body_bytes = 0
        self._arrived = 0.0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Stay quiet: the simulator's clients report what matters (see :meth:`_failed`)."""

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:  # the client went away, or stop() shut the connection down
            self.close_connection = True

    def handle_one_request(self) -> None:
        """Read one request and answer it; never raises but :class:`OSError`."""
        self._responded, self._body_bytes = False, 0
        self.close_connection = True
        try:
            self._handle_one()
        except OSError:
            raise
        except Exception as exc:  # a fault of the simulator itself
            self._failed(exc)

    def _handle_one(self) -> None:
        if not self._read_request_line():
            return
        self.close_connection = False
        if len(self.raw_requestline) > _MAX_LINE:
            self.command, self.request_version = "", self.default_request_version
            self.requestline = ""
            self.send_error(414, f"the request line is longer than {_MAX_LINE} bytes")
            return
        if not self._read_head() or not self._allowed():
            return
        method = getattr(self, f"do_{self.command}", None)
        if method is None:
            self.send_error(501)
            return
        self._arrived = time.monotonic()
        body = self._read_body()
        if body is None:
            return
        self._clock.finished()
        if not self.server.admit(self.connection):
            self._refuse(self.server.busy_error(), _retry_headers(_BUSY_RETRY_S))
            return
        method(body)

    def _read_request_line(self) -> bool:
        """Read the request line; ``False`` when none came (the connection is closed)."""
        try:
            self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
            for _ in range(_BLANK_LINES):  # blank lines before a request line are allowed
                if self.raw_requestline.strip(b"\r\n") or not self.raw_requestline:
                    break
                self.raw_requestline = self.rfile.readline(_MAX_LINE + 1)
        except TimeoutError:  # idle between requests, or a request line never finished
            return False
        return bool(self.raw_requestline)

    def _allowed(self) -> bool:
        """Refuse a request a local process would not send (see :mod:`.guard`)."""
        refusal = self.server.guard.refusal(self.command, self.path, self.request_version, self.headers)
        if refusal is not None:
            self._refuse(refusal)
        return refusal is None

    def _read_head(self) -> bool:
        """Parse the request line and headers (``parse_request``), a stall included."""
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if len(requestline.split()) == 2:  # as HTTP/0.9, it would be answered without a status line
            self.command, self.request_version = "", self.default_request_version
            self.requestline = requestline
            self.send_error(400, "the request line has no HTTP version; the simulator speaks "
                            "HTTP/1.0 and HTTP/1.1")
            return False
        try:
            return self.parse_request()
        except TimeoutError:
            self._refuse(self._timed_out(
                f"the request headers were not complete after {self._clock.idle_s:g} s without data"))
            return False

    def _timed_out(self, stalled: str) -> _HTTPError:
        """The 408 for a read that timed out: the request's deadline, or a stall."""
        if self._clock.expired:
            stalled = (f"the request was not complete within {self._clock.request_s:g} s "
                       "(SimulatorConfig.request_timeout_s)")
        return _HTTPError(408, f"{stalled}; the connection is closed")

    def handle_expect_100(self) -> bool:
        """Refuse a request before its body is sent: one the simulator does not serve, or
        one whose body is too large."""
        if not self._allowed():
            return False
        try:
            self._content_length()
        except _HTTPError as err:
            self._refuse(err)
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer a malformed request (found by :mod:`http.server`) in OpenAI's error shape."""
        code = _STATUS_FOR.get(code, code)
        if code == 405:
            message = f"unsupported method {self.command!r}; the simulator serves GET and POST"
        reason = message or self.responses.get(code, ("bad request",))[0]
        self._refuse(_HTTPError(code, f"malformed HTTP request: {reason}"),
                     {"Allow": "GET, POST"} if code == 405 else None)

    # ------------------------------------------------------------------ endpoints

    def do_GET(self, body: bytes) -> None:  # noqa: N802
        """Answer a GET (a body is read and ignored)."""
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/health":
            self._send(200, {"status": "ok"})
        elif path == "/v1/models":
            models = [_model_body(name) for name in [*sim_model_names(), *self.server.sim.config.aliases]]
            self._send(200, {"object": "list", "data": models})
        elif path.startswith("/v1/models/"):
            name = unquote(path.removeprefix("/v1/models/"))
            if name in sim_model_names() or name in self.server.sim.config.aliases:
                self._send(200, _model_body(name))
            else:
                self._send_error(_unknown_model(name))
        else:
            self._send_error(self._unknown_url("GET"))

    def do_POST(self, body: bytes) -> None:  # noqa: N802
        """Answer a POST: a chat completion, a response, a message or embeddings."""
        path = urlsplit(self.path).path.rstrip("/")
        if path not in ROUTES:
            self._send_error(self._unknown_url("POST"))
            return
        self.server.sim._answer(self, path, body, self.headers.get(SAMPLE_KEY_HEADER, ""), self._arrived)

    # ------------------------------------------------------------------ bodies

    def _content_length(self) -> int:
        """The announced body size; raises :class:`_HTTPError` 400, 411 or 413."""
        if "Transfer-Encoding" in self.headers:
            raise _HTTPError(
                411, "the simulator reads bodies of a known Content-Length only; "
                f"Transfer-Encoding {self.headers['Transfer-Encoding']!r:.40} is not supported",
            )
        value = self.headers.get("Content-Length", "0").strip()
        if not (value.isascii() and value.isdigit() and len(value) <= 20):
            raise _HTTPError(400, f"Content-Length must be a whole number of bytes; got {value!r:.40}")
        limit = self.server.sim.config.max_body_bytes
        if int(value) > limit:
            raise _HTTPError(
                413, f"the request body is {int(value)} bytes (Content-Length); the simulator "
                f"accepts at most {limit} (SimulatorConfig.max_body_bytes)",
            )
        return int(value)

    def _read_body(self) -> bytes | None:
        """The request body, or ``None`` once a refusal has been sent."""
        try:
            length = self._content_length()
        except _HTTPError as err:
            self._refuse(err)  # nothing of the body is read: the connection cannot go on
            return None
        chunks: list[bytes] = []
        received = 0
        try:
            while received < length:
                chunk = self.rfile.read1(min(length - received, 1 << 16))
                if not chunk:
                    break
                chunks.append(chunk)
                received += len(chunk)
        except TimeoutError:
            self._refuse(self._timed_out(
                f"the request body stalled for {self._clock.idle_s:g} s after {received} of "
                f"the {length} bytes its Content-Length announced"))
            return None
        if received < length:
            self._refuse(_HTTPError(
                400, f"the request body ended after {received} of the {length} bytes its "
                "Content-Length announced",
            ))
            return None
        self._body_bytes = received
        return b"".join(chunks)

    # ------------------------------------------------------------------ answers

    def _unknown_url(self, method: str) -> _HTTPError:
        return _HTTPError(
            404,
            f"Unknown request URL: {method} {self.path}. The quiver simulator serves {endpoints()}.",
            code="unknown_url",
        )

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, _json_bytes(body), headers)

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self._responded = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: list[bytes], headers: dict[str, str] | None = None) -> None:
        """Send a stream of server-sent events, one HTTP chunk each."""
        self._responded = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _send_error(self, err: _HTTPError, headers: dict[str, str] | None = None) -> None:
        self._send(err.status, err.body, headers)

    def _refuse(self, err: _HTTPError, headers: dict[str, str] | None = None) -> None:
        """Answer ``err`` and close the connection (its framing can no longer be trusted)."""
        self.close_connection = True
        self._send_error(err, headers)

    def _failed(self, exc: Exception) -> None:
        """The simulator failed on a request: log one line without content, answer 500
        when nothing was sent yet, and close the connection."""
        command = str(getattr(self, "command", None) or "-")[:16]
        path = urlsplit(getattr(self, "path", "") or "-").path[:200]
        path = path.encode("ascii", "backslashreplace").decode()
        print(f"quiver sim: {command} {path} -> 500 "
              f"({type(exc).__name__}; request body {self._body_bytes} bytes)",
              file=sys.stderr, flush=True)
        self.close_connection = True
        if not self._responded:
            self._refuse(_HTTPError(
                500, f"the simulator failed on this request ({type(exc).__name__}); "
                "this is a bug in the simulator or in a simulated model", type="server_error",
            ))


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that gives a connection one of ``max_connections`` slots
    once it has sent a whole request, bounds the connections still sending their first
    one, and can close its open connections on stop."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = _BACKLOG

    def __init__(self, host: str, port: int, sim: Simulator) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sim = sim
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._pending: dict[socket.socket, None] = {}  # no whole request yet; oldest first
        self._admitted: set[socket.socket] = set()  # holding a slot
        super().__init__((host.strip("[]"), port), _Handler)
        self.guard = _Guard((host, str(self.server_address[0])), self.server_address[1])

    def server_bind(self) -> None:
        """Bind without the reverse DNS lookup ``HTTPServer`` does."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve a new connection on a thread of its own; beyond
        ``max_pending_connections`` still sending their first request, close the oldest."""
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"quiver-sim-{self.server_address[1]}-connection-{client_address[1]}",
            daemon=True,
        )
        with self._lock:
            self._connections[request] = thread
            self._pending[request] = None
            oldest = None
            if len(self._pending) > self.sim.config.max_pending_connections:
                oldest = next(iter(self._pending))
                del self._pending[oldest]
        if oldest is not None:
            _shut_down(oldest)  # its thread ends at its next read or write
        thread.start()

    def admit(self, request: socket.socket) -> bool:
        """Give a connection whose request is complete a slot, or keep the one it holds;
        ``False`` when all ``max_connections`` are taken, or the connection was closed to
        make room."""
        with self._lock:
            if request in self._admitted:
                return True
            if request not in self._pending or len(self._admitted) >= self.sim.config.max_connections:
                return False
            del self._pending[request]
            self._admitted.add(request)
            return True

    def busy_error(self) -> _HTTPError:
        """The 503 for a request beyond ``max_connections``."""
        return _HTTPError(
            503, f"the simulator is serving its maximum of {self.sim.config.max_connections} connections "
            "(SimulatorConfig.max_connections); retry later", type="server_error",
            code="too_many_connections",
        )

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._connections.pop(request, None)
                self._pending.pop(request, None)
                self._admitted.discard(request)

    def shutdown_request(self, request: Any) -> None:
        """Close a connection after discarding what the client sent and nobody read, so
        that the close is a FIN and the answer reaches the client."""
        _close(request, linger_s=_LINGER_S)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line on stderr, with no content, instead of ``socketserver``'s traceback."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            print(f"quiver sim: a connection ended with {type(exc).__name__}",
                  file=sys.stderr, flush=True)

    def close_connections(self, timeout_s: float) -> None:
        """Shut every open connection down and wait (bounded) for its thread."""
        with self._lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            _shut_down(sock)
        deadline = time.monotonic() + timeout_s
        for _, thread in connections:
            thread.join(max(0.0, deadline - time.monotonic()))


def _shut_down(sock: socket.socket) -> None:
    """End both directions of a connection, waking the thread that reads it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by its handler


def _close(sock: Any, linger_s: float) -> None:
    """Close a connection: our side first (FIN), then drop what the client still sends
    until it closes its side or ``linger_s`` passes (a lingering close: bytes that arrive
    after a plain close make the kernel answer with a reset, which can destroy the answer
    before the client reads it), then the socket."""
    try:
        sock.shutdown(socket.SHUT_WR)
        _discard_input(sock, linger_s)
    except OSError:
        pass
    sock.close()


def _discard_input(sock: socket.socket, linger_s: float) -> None:
    """Read and drop what arrives (bounded in bytes, and in time by ``linger_s``; with
    0, only what has arrived already) until the client closes its side."""
    dropped, deadline = 0, time.monotonic() + linger_s
    while dropped < _DRAIN_BYTES:
        left = deadline - time.monotonic()
        if left > 0:
            sock.settimeout(left)
        else:
            sock.setblocking(False)
        try:
            chunk = sock.recv(1 << 16)
        except (TimeoutError, BlockingIOError, InterruptedError):
            return
        if not chunk:
            return
        dropped += len(chunk)
