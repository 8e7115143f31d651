"""The bundled LLM simulator: an OpenAI-compatible HTTP server on loopback.

The simulator stands in for an LLM provider in tests and demos. It serves the models of
:mod:`quiver.replay._sim` -- seeded stochastic Python functions registered by
name -- to the unmodified OpenAI SDK::

    with Simulator() as sim:
        client = openai.OpenAI(base_url=sim.url, api_key="sk-anything", max_retries=0)
        client.chat.completions.create(
            model="sim-echo",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={SAMPLE_KEY_HEADER: "trace-7/flip-2/0"},
        )

Endpoints (:func:`~.formats.endpoints`): ``GET /v1/models``, ``/v1/models/{id}`` and
``/health``; ``POST /v1/chat/completions``, ``/v1/responses`` (the Responses API),
``/v1/messages`` (Anthropic's Messages API) and ``/v1/embeddings``, each answer as a body
or, asked with ``"stream": true``, as the format's server-sent events. Any
``Authorization`` header is accepted.

**Purity.** A completion is a pure function of (model, messages, parameters, sample
key); the sample key comes in the ``X-Quiver-Sample-Key`` header (missing = ``""``). The
response id is derived from the request and ``created`` is always 0, so the same request
with the same key gives a byte-identical body in any process.

**Faults.** Each attempt that passes validation draws its fate from a separate
``random.Random(faults.seed)`` stream, shared by all connections under a lock: one
uniform draw decides, in this order, a 429 (with ``retry-after-ms`` and ``Retry-After``
headers), a 500, a timeout (the connection is held without an answer for
``timeout_hang_s``, then closed; :meth:`Simulator.stop` releases it at once), a
malformed body (status 200, ``application/json``, the valid body cut in half), or a
normal answer. Latency is then drawn from the same stream and applied to every
answered request, counted from the request's arrival: the simulator computes the answer
first and sends it once the latency has passed since the request came in, so its own
work lies inside the latency instead of adding to it (an answer that takes longer to
compute than the latency goes out as soon as it is ready). Faults never touch the
content: a retried request gets the same answer. Which attempt gets which fault depends
on the order in which concurrent attempts arrive.

**What the OpenAI SDK raises** (``openai`` 3.x with ``max_retries=0``), which the
engine's retry policy maps to :class:`~quiver._errors.LLMUnavailable`:

=========================  ============================================================
fault                      exception
=========================  ============================================================
429                        ``openai.RateLimitError`` (``.response.headers`` carries
                           ``retry-after-ms``)
500                        ``openai.InternalServerError``
timeout                    ``openai.APITimeoutError`` when the client's timeout is
                           shorter than ``timeout_hang_s``; otherwise
                           ``openai.APIConnectionError`` ("Server disconnected
                           without sending a response") when the hang ends
malformed body             ``json.JSONDecodeError`` -- *not* an ``openai.OpenAIError``:
                           the SDK calls ``response.json()`` on a 200 with a JSON
                           content type and lets the decoder's error through
                           (``JSONDecodeError`` is a ``ValueError``)
=========================  ============================================================

Requests the simulator cannot serve get OpenAI's error body
``{"error": {"message", "type", "param", "code"}}``: 400 (``openai.BadRequestError``) for
a body that is not strict JSON (see :mod:`~quiver.replay._sim.wire`: lone surrogates,
``NaN``, numbers beyond a double, integers of more than 100 digits, nesting deeper than
128 levels), a missing or invalid parameter, a ``json_schema`` response format nested
deeper than 64 levels or expanding to more than 4096 fields, or a
simulated model that refuses the request by raising ``SimRequestError``; 404
(``openai.NotFoundError``) for an unknown model, listing the known ones. A malformed
request never gets a 5xx: the only 5xx are the configured faults, a simulated model
that fails (500), and a request beyond ``max_connections`` (503).

**Limits** (:class:`SimulatorConfig`; the HTTP side is described in
:mod:`~quiver.replay._sim.handler`): ``read_timeout_s`` (30 s) closes a connection that
sends nothing for that long, and ``request_timeout_s`` (10 s) one whose request is not
complete that long after it began, however steadily it trickles in, each with a 408 when
it was inside a request; ``max_connections`` (1024) connections that have sent a whole
request are served at once, and a request beyond them gets a 503 with ``Retry-After:
1``; of the connections still sending their first request, at most
``max_pending_connections`` (1024) are kept, the oldest closed to make room; a body
over ``max_body_bytes`` (8 MiB) gets a 413 before it is read. The listen backlog holds
1024 connections (at most ``net.core.somaxconn``).

**Who may ask** (:mod:`~quiver.replay._sim.guard`): a request whose ``Host`` is not
the simulator's own address (``127.0.0.1``, ``localhost``, ``[::1]`` or the bound host,
with its port) gets a 421: a web page whose name was rebound to 127.0.0.1 cannot use it.
A request with another ``Origin``, one marked ``Sec-Fetch-Site: cross-site`` or
``same-site``, and a ``POST`` whose ``Content-Type`` is not ``application/json`` get a
403, and no answer carries an ``Access-Control-Allow-*`` header: a page in the user's
browser can neither make the simulator work nor read its answers. Both close the
connection before the body is read. An HTTP/1.0 request without ``Host`` is served (it
comes from a local process: browsers always send one); an HTTP/1.1 one gets a 400.

**Logs.** The simulator writes nothing while it serves, except one line on stderr
when it fails on a request: method, path (without query), status, exception type and
body size -- never a message's content nor a header.

The simulator listens on loopback only (:func:`check_loopback`). Run it in-process with
:class:`Simulator`; :mod:`quiver.replay._sim` runs it as a process (``serve``, the
``SimulatorProcess`` subprocess, ``python -m quiver.replay._sim.process``).
"""

from __future__ import annotations

import ipaddress
import math
import random
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from quiver._errors import SimulatorError
from quiver._wire import CHAT, RESPONSES, encode_sse

from .formats import ROUTES, ResponseStore, Route, answer_of, chat_body, embeddings_body, remember
from .handler import _Server
from .limits import Admission, LimitsConfig, RateLimiter
from .models import SimRequest, SimRequestError, complete, load_model_modules, request_digest
from .wire import (
    _completion_body,
    _decode_body,
    _HTTPError,
    _json_bytes,
    _retry_headers,
    _sim_request,
    _usage,
    _word_count,
)

if TYPE_CHECKING:
    from .handler import _Handler

__all__ = [
    "LatencyConfig",
    "FaultConfig",
    "SimulatorConfig",
    "check_loopback",
    "Simulator",
]

_STAT_KEYS = (
    "requests", "ok", "rate_limited", "server_error", "timeout", "malformed", "bad_request"
)
_STOP_JOIN_S = 5.0

Outcome = Literal["ok", "rate_limited", "server_error", "timeout", "malformed"]

# --------------------------------------------------------------------------- config

_MODEL_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class LatencyConfig(BaseModel):
    """The time from a request's arrival to its answer, for every answered request
    (faulty answers included); the simulator's own work lies inside it."""

    model_config = _MODEL_CONFIG

    dist: Literal["none", "constant", "uniform", "lognormal"] = "none"
    """The distribution: ``none``; ``constant`` (``ms``); ``uniform`` (between ``low_ms``
    and ``high_ms``); ``lognormal`` (median ``ms``, log-scale spread ``sigma``)."""

    ms: float = 0.0
    """The constant latency, or the median of the lognormal, in milliseconds."""

    low_ms: float = 0.0
    """The lower bound of the uniform latency, in milliseconds."""

    high_ms: float = 0.0
    """The upper bound of the uniform latency, in milliseconds."""

    sigma: float = 0.5
    """The standard deviation of the log-latency for ``lognormal``."""

    @model_validator(mode="after")
    def _check_parameters(self) -> LatencyConfig:
        for name in ("ms", "low_ms", "high_ms", "sigma"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"latency.{name} must be a finite number >= 0; got {value}")
        if self.dist == "uniform" and self.high_ms < self.low_ms:
            raise ValueError(
                f"latency.high_ms ({self.high_ms}) must be >= latency.low_ms ({self.low_ms}) "
                "for a uniform latency"
            )
        if self.dist == "lognormal" and self.ms <= 0:
            raise ValueError("latency.ms is the median of a lognormal latency; it must be > 0")
        return self

    def draw_s(self, rng: random.Random) -> float:
        """Draw one latency, in seconds (no draw for ``none`` and ``constant``)."""
        if self.dist == "constant":
            return self.ms / 1000
        if self.dist == "uniform":
            return (self.low_ms + (self.high_ms - self.low_ms) * rng.random()) / 1000
        if self.dist == "lognormal":
            return self.ms * math.exp(self.sigma * rng.normalvariate(0.0, 1.0)) / 1000
        return 0.0


_RATES = ("rate_429", "rate_500", "rate_timeout", "rate_malformed")


class FaultConfig(BaseModel):
    """Faults injected per attempt, drawn from a seeded stream separate from content."""

    model_config = _MODEL_CONFIG

    latency: LatencyConfig = LatencyConfig()
    """The time from a request's arrival to its answer, for every answered request."""

    rate_429: float = 0.0
    """Probability that an attempt is answered 429 (rate limited)."""

    retry_after_s: float = 0.05
    """The wait a 429 asks for: sent as ``retry-after-ms`` and as ``Retry-After`` (whole
    seconds, rounded up)."""

    rate_500: float = 0.0
    """Probability that an attempt is answered 500 (server error)."""

    rate_timeout: float = 0.0
    """Probability that an attempt is never answered (held, then closed)."""

    timeout_hang_s: float = 30.0
    """How long an unanswered attempt holds its connection, in seconds; cut short when
    the server stops."""

    rate_malformed: float = 0.0
    """Probability that an attempt gets a 200 whose JSON body is truncated."""

    seed: int = 0
    """Seed of the fault stream."""

    @field_validator(*_RATES)
    @classmethod
    def _check_rate(cls, value: float, info: Any) -> float:
        if not 0 <= value <= 1:
            raise ValueError(
                f"faults.{info.field_name} must be a probability in [0, 1]; got {value}"
            )
        return value

    @field_validator("retry_after_s", "timeout_hang_s")
    @classmethod
    def _check_duration(cls, value: float, info: Any) -> float:
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(
                f"faults.{info.field_name} must be a finite number of seconds >= 0; got {value}"
            )
        return value

    @model_validator(mode="after")
    def _check_rate_sum(self) -> FaultConfig:
        total = sum(getattr(self, name) for name in _RATES)
        if total > 1 + 1e-12:
            terms = " + ".join(f"{name}={getattr(self, name)}" for name in _RATES)
            raise ValueError(
                f"the fault rates {terms} sum to {total:g}; each attempt gets at most one "
                "fault, so they must sum to at most 1"
            )
        return self


class SimulatorConfig(BaseModel):
    """How to run the simulator."""

    model_config = _MODEL_CONFIG

    host: str = "127.0.0.1"
    """The loopback address to listen on (127.0.0.0/8, ::1 or localhost)."""

    port: int = 0
    """The TCP port; 0 picks a free one."""

    models: list[str] = []
    """Modules to import before serving, which register models with ``@sim_model``:
    module names, or ``.py`` files (relative to the working directory)."""

    nondeterminism: float = 0.0
    """At temperature 0, the probability that a choice takes a runner-up value."""

    aliases: dict[str, str] = {}
    """Other names of simulated models (``{"gpt-4o-mini": "sim-echo"}``), for clients that
    accept only names they know; an answer reports the name asked for."""

    faults: FaultConfig = FaultConfig()
    """Injected faults and latency."""

    limits: LimitsConfig = LimitsConfig()
    """Rate limits per key and model over a sliding window, with ``x-ratelimit-*``
    headers on every answer and 429 past them (:mod:`~quiver.replay._sim.limits`)."""

    read_timeout_s: float = 30.0
    """How long a connection may send nothing, in seconds, before it is closed: at once
    when it was idle between requests (keep-alive), with a 408 when it stalled inside a
    request. Keep it above the clients' keep-alive expiry (httpx and the OpenAI SDK: 5 s),
    so that no client reuses a connection the simulator is closing."""

    request_timeout_s: float = 10.0
    """How long a client may take to send one whole request (request line, headers and
    body), in seconds, counted from its first byte (for a connection's first request,
    from when the connection was accepted), however steadily the bytes come: past it the
    connection is closed, with a 408 when the request line was complete. A client that
    trickles its request (slowloris) is cut off."""

    max_connections: int = 1024
    """Connections served at once (one thread each). A connection takes a slot once it has
    sent a whole request and keeps it until it closes; a request that finds every slot
    taken gets a 503 with ``Retry-After`` and its connection is closed. Connections still
    sending their first request take no slot (see ``max_pending_connections``)."""

    max_pending_connections: int = 1024
    """Connections that may be still sending their first request, at most (one thread
    each); when one more is accepted, the one that has been sending longest is closed
    without an answer, so that clients that send slowly cannot keep others out."""

    max_body_bytes: int = 8 * 1024 * 1024
    """The largest request body, in bytes; a larger ``Content-Length`` gets a 413 before
    any of the body is read."""

    @field_validator("port")
    @classmethod
    def _check_port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError(f"port must be in [0, 65535] (0 = a free port); got {value}")
        return value

    @field_validator("read_timeout_s", "request_timeout_s")
    @classmethod
    def _check_timeout(cls, value: float, info: Any) -> float:
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{info.field_name} must be a finite number of seconds > 0; got {value}")
        return value

    @field_validator("max_connections", "max_pending_connections", "max_body_bytes")
    @classmethod
    def _check_positive(cls, value: int, info: Any) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be an integer >= 1; got {value}")
        return value

    @field_validator("nondeterminism")
    @classmethod
    def _check_nondeterminism(cls, value: float) -> float:
        if not 0 <= value <= 1:
            raise ValueError(f"nondeterminism must be a probability in [0, 1]; got {value}")
        return value


def check_loopback(host: str) -> None:
    """Refuse any address that is not loopback.

    Raises:
        SimulatorError: ``host`` is neither ``localhost`` nor a loopback IP address.
    """
    if host.lower() == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SimulatorError(
            f"quiver sim refuses to listen on {host!r}: the simulator serves loopback only "
            "(127.0.0.0/8, ::1 or localhost)"
        )


# --------------------------------------------------------------------------- faults


class _FaultStream:
    """The per-attempt fault and latency draws, from one seeded stream under a lock."""

    def __init__(self, faults: FaultConfig) -> None:
        self._faults = faults
        self._rng = random.Random(faults.seed)
        self._lock = threading.Lock()

    def draw(self) -> tuple[Outcome, float]:
        """The outcome of the next attempt and its latency in seconds."""
        with self._lock:
            outcome = self._outcome(self._rng.random())
            latency = 0.0 if outcome == "timeout" else self._faults.latency.draw_s(self._rng)
        return outcome, latency

    def _outcome(self, u: float) -> Outcome:
        f = self._faults
        threshold = 0.0
        for outcome, rate in (
            ("rate_limited", f.rate_429),
            ("server_error", f.rate_500),
            ("timeout", f.rate_timeout),
            ("malformed", f.rate_malformed),
        ):
            threshold += rate
            if u < threshold:
                return outcome  # type: ignore[return-value]
        return "ok"


class _Stats:
    def __init__(self) -> None:
        self._counts = dict.fromkeys(_STAT_KEYS, 0)
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


# --------------------------------------------------------------------------- Simulator


class Simulator:
    """The simulator in this process, on a daemon thread.

    Use as a context manager (``with Simulator(config) as sim: ...``) or call
    :meth:`start` and :meth:`stop`. A stopped simulator cannot be started again.
    """

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config if config is not None else SimulatorConfig()
        self._faults = _FaultStream(self.config.faults)
        self._limiter = RateLimiter(self.config.limits) if self.config.limits.enabled else None
        self._store = ResponseStore()
        self._stats = _Stats()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Simulator:
        """Import the configured model modules and start listening.

        Raises:
            SimulatorError: The host is not loopback, a model module cannot be imported,
                the address cannot be bound, or the simulator was started before.
        """
        if self._server is not None or self._stopping.is_set():
            raise SimulatorError("this Simulator was already started; create a new one")
        check_loopback(self.config.host)
        load_model_modules(self.config.models)
        try:
            self._server = _Server(self.config.host, self.config.port, self)
        except OSError as exc:
            raise SimulatorError(
                f"quiver sim cannot listen on {self.config.host}:{self.config.port}: {exc}; "
                "choose a free port, or port 0 to get one"
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name="quiver-sim", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening, release held connections and close open ones."""
        self._stopping.set()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections(_STOP_JOIN_S)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Simulator:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._bound()[1])

    @property
    def url(self) -> str:
        """The OpenAI base URL, ``http://HOST:PORT/v1``."""
        host = str(self._bound()[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        """Counts of chat completion attempts by outcome, and ``requests`` in all
        (``rate_limited``: the 429s of injected faults and of the rate limits alike)."""
        return self._stats.snapshot()

    def limit_stats(self) -> dict[str, dict[str, float]]:
        """What the rate limits counted, by model (:attr:`~quiver.replay._sim.limits.RateLimiter.stats`;
        empty without limits)."""
        return self._limiter.snapshot() if self._limiter is not None else {}

    def _bound(self) -> tuple[Any, ...]:
        if self._server is None:
            raise SimulatorError("the Simulator is not running; call start() first")
        return tuple(self._server.server_address)

    def _answer(self, handler: _Handler, path: str, raw: bytes, sample_key: str, arrived: float) -> None:
        """Answer one attempt at a POST endpoint, faults included, ``latency`` after
        ``arrived`` (``time.monotonic()`` when the request came in)."""
        self._stats.add("requests")
        route = ROUTES[path]
        try:
            job = self._job(route, raw, sample_key)
        except _HTTPError as err:
            self._stats.add("bad_request")
            handler._send(err.status, err.body_for(route.format is not None and route.format.name == "messages"))
            return
        admission = self._admit(handler, job)
        if admission is not None and not admission.admitted:
            self._stats.add("rate_limited")
            refusal = _HTTPError(429, "Rate limit reached for requests or tokens of this model (simulated limit).",
                                 type="requests", code="rate_limit_exceeded")
            handler._send_bytes(429, _json_bytes(refusal.body_for(_anthropic(route))),
                                {**admission.headers, **_retry_headers(admission.retry_after_s)})
            return
        outcome, latency_s = self._faults.draw()
        if outcome == "timeout":
            self._stats.add("timeout")
            self._hang(handler)
            return
        status, chunks, headers = self._respond(job, outcome)
        if admission is not None:
            admission.used(job.completion_tokens)
            headers = {**admission.headers, **(headers or {})}
        if self._stopping.wait(max(0.0, arrived + latency_s - time.monotonic())):
            handler.close_connection = True
        elif job.stream and status == 200:
            handler._send_stream(chunks, headers)
        else:
            handler._send_bytes(status, b"".join(chunks), headers)

    def _job(self, route: Route, raw: bytes, sample_key: str) -> _Job:
        """What one request asks; raises :class:`_HTTPError` 400/404."""
        body = _decode_body(raw)
        if not isinstance(body, dict):
            raise _HTTPError(400, f"the request body must be a JSON object; got {type(body).__name__}")
        shown = body.get("model")
        if not isinstance(shown, str):
            raise _HTTPError(400, "missing required parameter: 'model'", param="model")
        if route.format is None:
            return _Job(route, body, shown, None, {}, False)
        chat = dict(chat_body(route, body, self._store))
        chat["model"] = self.config.aliases.get(shown, shown)
        return _Job(route, body, shown, _sim_request(chat, sample_key), chat, bool(body.get("stream")))

    def _admit(self, handler: _Handler, job: _Job) -> Admission | None:
        """The rate limits' verdict on a request (None without limits)."""
        if self._limiter is None:
            return None
        auth = handler.headers.get("Authorization") or ""
        key = auth.removeprefix("Bearer ").strip() if auth else (handler.headers.get("x-api-key") or "")
        text = job.req.text if job.req is not None else str(job.body.get("input", ""))
        return self._limiter.admit(key, job.shown, _word_count(text))

    def _hang(self, handler: _Handler) -> None:
        handler.close_connection = True
        self._stopping.wait(self.config.faults.timeout_hang_s)

    def _respond(self, job: _Job, outcome: Outcome) -> tuple[int, list[bytes], dict[str, str] | None]:
        """The answer to send for ``outcome``: status, body (one chunk, or a stream's
        events) and extra headers."""
        anthropic = _anthropic(job.route)
        if outcome == "rate_limited":
            self._stats.add("rate_limited")
            err = _HTTPError(429, "Rate limit reached (simulated fault).", type="requests",
                             code="rate_limit_exceeded")
            return err.status, [_json_bytes(err.body_for(anthropic))], _retry_headers(
                self.config.faults.retry_after_s)
        if outcome == "server_error":
            self._stats.add("server_error")
            err = _HTTPError(500, "The server had an error (simulated fault).", type="server_error")
            return err.status, [_json_bytes(err.body_for(anthropic))], None
        try:
            chunks = self._answer_chunks(job)
        except _HTTPError as exc:
            self._stats.add("bad_request")
            error = exc
        except SimRequestError as exc:  # the model refuses the request
            self._stats.add("bad_request")
            error = _HTTPError(400, str(exc), param=exc.param)
        except SimulatorError as exc:
            self._stats.add("server_error")
            error = _HTTPError(500, str(exc), type="server_error")
        else:
            self._stats.add(outcome)
            if outcome == "malformed":  # cut in half: the body, or the stream's events
                whole = b"".join(chunks)
                chunks = chunks[: len(chunks) // 2] if job.stream else [whole[: len(whole) // 2]]
            return 200, chunks, None
        return error.status, [_json_bytes(error.body_for(anthropic))], None

    def _answer_chunks(self, job: _Job) -> list[bytes]:
        """The body of a valid request's answer (a stream: one chunk per event)."""
        fmt = job.route.format
        if fmt is None:
            return [_json_bytes(embeddings_body(job.body, job.shown))]
        assert job.req is not None
        choices = complete(job.req, self.config.nondeterminism)
        job.completion_tokens = _usage(job.req, choices)["completion_tokens"]
        if fmt is CHAT and not job.stream:
            completion = _completion_body(job.req, choices)
            completion["model"] = job.shown
            return [_json_bytes(completion)]
        prefix = {"chat": "chatcmpl-", "responses": "resp_", "messages": "msg_"}[fmt.name]
        rid = prefix + request_digest(job.req)[:24]
        answer = answer_of(job.route, job.req, choices[0], rid, job.shown, _usage(job.req, choices[:1]))
        if fmt is RESPONSES:
            remember(self._store, rid, job.chat, choices[0])
        if job.stream:
            return encode_sse(fmt.render_events(answer, job.shown, job.body))
        return [_json_bytes(fmt.render(answer, job.shown))]


class _Job:
    """One request to answer: its route, body, the model name asked for, the simulated
    request (None for embeddings), the chat body it amounts to, and whether it streams."""

    def __init__(self, route: Route, body: dict[str, Any], shown: str, req: SimRequest | None,
                 chat: dict[str, Any], stream: bool) -> None:
        self.route, self.body, self.shown, self.req, self.chat, self.stream = route, body, shown, req, chat, stream
        self.completion_tokens = 0


def _anthropic(route: Route) -> bool:
    return route.format is not None and route.format.name == "messages"
