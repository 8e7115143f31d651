"""The wire ledger: every HTTP request that leaves the process inside a trace, counted
where it leaves.

The transport hooks (``httpx``/``httpx2`` ``send``, DSPy's engine) see every request of
the libraries they hook, whoever built the client. Each request sent inside a trace is
counted on that trace's :class:`Wire`, by the node it belongs to (the call site) and by
what it is:

* **LLM** when its path is an LLM API's (chat completions, completions, the Responses
  API, Anthropic's messages, embeddings), **HTTP** otherwise;
* **accounted** when the replay contract knows of it: an LLM request of the engine's own
  client or one the capture recorded, or an HTTP request of a ``tool`` or ``retrieval``
  call (its output is what a replay serves); anything else is **unaccounted**: an LLM
  API the capture does not record, or HTTP from a node whose output a replay does not
  serve (it goes out again on every replay). Unaccounted requests are named, by node and
  endpoint, by every command that runs traces.

A request answered by the endpoint (whatever its status) counts as *answered*; one that
got no answer (refused, reset, timed out) as *unanswered*. Every count of LLM calls the
engine prints or writes is :attr:`Wire.llm`: the LLM requests the endpoint answered.
A response served from a recording or from the response cache makes no request and is
not counted.

A request a hook sees with no trace in its context while traces run in the process (a
thread the trace does not follow) cannot be put on a trace: it is counted process-wide
(:func:`stray_requests`).
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from quiver.replay._instrument import Wire, active_recordings, current_builder, current_call
from quiver.replay._llm import engine_request_node, in_engine_request

__all__ = [
    "Wire",
    "Site",
    "LLM_PATHS",
    "llm_api",
    "endpoint_of",
    "begin",
    "counted",
    "node_of",
    "stray_requests",
    "merge_unaccounted",
    "unaccounted_json",
    "unaccounted_lines",
]

LLM_PATHS = (
    ("/chat/completions", "chat completions"),
    ("/completions", "completions"),
    ("/responses", "responses"),
    ("/messages", "messages"),
    ("/embeddings", "embeddings"),
)
"""Path endings of the LLM APIs, and what each is (a suffix: ``/v1/responses`` and
``/openai/deployments/x/chat/completions`` alike)."""

_ACCOUNTED_KINDS = frozenset({"tool", "retrieval"})
"""Call kinds whose HTTP requests the replay contract accounts for: their output is
recorded, and served while their dimension is frozen."""


def llm_api(url: str) -> str | None:
    """The LLM API a URL's path belongs to (``"chat completions"``, ``"responses"``...), or None."""
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    for suffix, name in LLM_PATHS:
        if path.endswith(suffix):
            return name
    return "responses" if "/responses/" in path else None  # a stored response: /responses/{id}[/input_items]


def endpoint_of(method: str, url: str) -> str:
    """``METHOD host:port/path`` of a request (no query: it may hold keys)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{method.upper()} {host}{port}{parts.path or '/'}"


@dataclass(frozen=True)
class Site:
    """Where a request was sent from, and what it is."""

    wire: Wire
    node: str
    endpoint: str
    llm: bool
    accounted: bool

    def done(self, answered: bool) -> None:
        """The request was answered (any status), or got no answer."""
        self.wire.add(self.node, self.endpoint, llm=self.llm, accounted=self.accounted, answered=answered)


_stray_lock = threading.Lock()
_stray: Counter[str] = Counter()


def stray_requests() -> dict[str, int]:
    """Requests seen outside any trace while traces ran in this process, by endpoint."""
    with _stray_lock:
        return dict(_stray)


def begin(method: str, url: str, captured_node: str | None = None) -> Site | None:
    """The site of a request about to be sent (None outside a trace: then counted as
    stray when traces run). ``captured_node``: the node of the LLM call the capture
    recorded for it, when it did."""
    builder = current_builder.get()
    if builder is None:
        if active_recordings.count:
            with _stray_lock:
                _stray[endpoint_of(method, url)] += 1
        return None
    wire = builder.wire
    record = current_call.get()
    llm = llm_api(url) is not None
    engine = in_engine_request()
    if captured_node is not None:
        node, accounted = captured_node, True
    elif engine:
        node, accounted = engine_request_node() or (record.node if record is not None else "(trace)"), True
    else:
        node = record.node if record is not None else "(trace)"
        accounted = not llm and record is not None and record.kind in _ACCOUNTED_KINDS
    return Site(wire, node, endpoint_of(method, url), llm, accounted)


def node_of(captured: Any) -> str | None:
    """The node a captured LLM call (:class:`~quiver.replay._capture.calls.CapturedChat`) is recorded on."""
    record = captured.call.record
    return record.node if record is not None else None


@contextlib.contextmanager
def counted(site: Site | None) -> Iterator[None]:
    """Count the request sent within the block on its trace's wire: answered unless the
    block raised (no site: nothing to count)."""
    try:
        yield
    except BaseException:
        if site is not None:
            site.done(answered=False)
        raise
    if site is not None:
        site.done(answered=True)


def merge_unaccounted(parts: Iterable[Mapping[str, Any] | None]) -> Counter[tuple[str, str]]:
    """The unaccounted requests of many wires' :meth:`Wire.to_json`, by (node, endpoint)."""
    total: Counter[tuple[str, str]] = Counter()
    for part in parts:
        for row in (part or {}).get("unaccounted") or []:
            total[(str(row.get("node")), str(row.get("endpoint")))] += int(row.get("requests") or 0)
    return total


def unaccounted_json(unaccounted: Mapping[tuple[str, str], int]) -> list[dict[str, Any]]:
    """The unaccounted requests as written in summaries: ``[{node, endpoint, requests}]``."""
    return [{"node": n, "endpoint": e, "requests": k} for (n, e), k in sorted(unaccounted.items())]


def unaccounted_lines(unaccounted: Mapping[tuple[str, str], int], what: str) -> list[str]:
    """One warning line per (node, endpoint) of requests the replay contract did not
    account for, the most first; ``what`` names the command's traces (``recording``,
    ``replays``)."""
    lines = []
    for (node, endpoint), n in sorted(unaccounted.items(), key=lambda kv: (-kv[1], kv[0])):
        path = endpoint.split(" ", 1)[-1]
        api = llm_api("http://" + path)
        why = (
            f"an LLM API ({api}) the engine does not record: its calls are not served on replay nor "
            "perturbed, and go to the endpoint again on every replay"
            if api is not None
            else "HTTP from a node whose output a replay does not serve: it is sent again on every replay "
            "(give the node kind='tool' to have it recorded and served)"
        )
        lines.append(
            f"node {node!r} sent {n:,} request(s) to {endpoint} during the {what} that the replay "
            f"contract does not account for: {why}"
        )
    return lines
