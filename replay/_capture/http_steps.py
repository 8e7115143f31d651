"""HTTP requests to non-LLM services, recorded as ``tool`` calls of the node that sends them.

A pipeline that calls a weather API, a search service or an internal REST endpoint from
an ``llm`` or ``transform`` node with ``requests`` or ``httpx`` would send the request
again on every replay. The hosts named by :func:`http_tools` (a spec's ``tools: {http:
[hosts or URL prefixes]}``, or ``all`` for every non-LLM request) are recorded instead:
each request opens a child ``tool`` call named ``http HOST`` whose inputs are the method,
the URL and the hash of the body; its tool step holds the status, content type and body
of the answer. A replay serves it while the tools dimension is frozen and sends it again
when it is live, as for any tool call. Requests to other hosts pass through, counted on
the wire as live requests. Requests sent from a ``tool`` or ``retrieval`` call are
already accounted for (its output is served) and are left alone.

The setting travels with the corpus: a trace records it in its tags, and a replay of
the trace (on Ray too) applies the recorded setting.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from quiver._canonical import content_hash
from quiver._errors import LLMUnavailable
from quiver._trace import ToolStep
from quiver.replay._instrument import capture_enabled, current_builder, current_call
from quiver.replay._llm import in_engine_request

from .children import CapturedChild, ChildAnswer
from .wire import llm_api

__all__ = ["CapturedHTTP", "http_tools", "HTTP_TOOLS_TAG", "http_tools_setting", "matches"]

HTTP_TOOLS_TAG = "http_tools"
"""The trace tag that holds the setting in force when it was recorded."""

_lock = threading.Lock()
_stack: list[list[str] | str] = []


@contextlib.contextmanager
def http_tools(hosts: Sequence[str] | str | None) -> Iterator[None]:
    """Record HTTP requests to ``hosts`` (host names, ``host:port``, URL prefixes, or
    ``"all"``) as tool calls in the traces recorded within the block (process-wide: the
    recording threads start from empty contexts). None or empty: no change."""
    if not hosts:
        yield
        return
    value: list[str] | str = "all" if hosts == "all" else list(hosts)
    with _lock:
        _stack.append(value)
    try:
        yield
    finally:
        with _lock:
            _stack.remove(value)


def http_tools_setting() -> list[str] | str | None:
    """The setting :func:`http_tools` put in force (the innermost), if any."""
    with _lock:
        return _stack[-1] if _stack else None


def matches(setting: Any, url: str) -> bool:
    """Whether a request to ``url`` is recorded under ``setting``."""
    if llm_api(url) is not None or not setting:
        return False
    if setting == "all":
        return True
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    authority = f"{host}:{parts.port}" if parts.port else host
    for entry in setting if isinstance(setting, list) else []:
        entry = str(entry)
        if "://" in entry and url.startswith(entry):
            return True
        if entry.lower() in (host, authority):
            return True
    return False


def _setting() -> Any:
    builder = current_builder.get()
    return builder.tags.get(HTTP_TOOLS_TAG) if builder is not None else None


class CapturedHTTP(CapturedChild):
    """One HTTP request recorded as a tool call."""

    def __init__(self, method: str, url: str, body: bytes) -> None:
        self.args = {
            "method": method.upper(),
            "url": url,
            "body": content_hash(body.decode("utf-8", "replace")) if body else None,
        }
        host = urllib.parse.urlsplit(url).netloc or "?"
        self.name = f"http {host}"
        super().__init__(self.name, "tool", self.args)
        self.url = url

    @classmethod
    def begin(cls, method: str, url: str, read_body: Callable[[], bytes]) -> CapturedHTTP | None:
        """A tool call for this request when the trace's setting names its host, else None."""
        if current_builder.get() is None or not capture_enabled.get() or in_engine_request():
            return None
        record = current_call.get()
        if record is not None and record.kind in ("tool", "retrieval"):
            return None
        if not matches(_setting(), url):
            return None
        return cls(method, url, read_body() or b"")

    def answer_served(self) -> ChildAnswer:
        step = self.record.tool if self.record is not None else None
        response = step.response if step is not None and isinstance(step.response, dict) else {}
        body = response.get("body")
        raw = base64.b64decode(response["body_base64"]) if "body_base64" in response else str(body or "").encode()
        return ChildAnswer(int(response.get("status", 200)), str(response.get("content_type") or ""), raw)

    def finish(self, status: int, content_type: str | None, content: bytes) -> None:
        response: dict[str, Any] = {"status": status, "content_type": content_type or ""}
        try:
            response["body"] = content.decode("utf-8")
        except UnicodeDecodeError:
            response["body_base64"] = base64.b64encode(content).decode("ascii")
        if self.record is not None:
            self.record.tool = ToolStep(
                name=self.name, args=self.args, response=response, response_hash=content_hash(response)
            )
        if status >= 500:
            self.close(response, LLMUnavailable(f"{self.url} answered HTTP {status}"))
            return
        self.close(response)


def patch_requests(module: Any) -> bool:
    """Wrap ``requests.adapters.HTTPAdapter.send`` once (requests to the hosts of the
    setting: recorded and served; others untouched, counted by the ``http.client``
    hook); True when patched now."""
    from quiver.replay._llm import engine_request

    adapter = module.adapters.HTTPAdapter
    if getattr(adapter.send, "__quiver_capture__", False):
        return False
    original = adapter.send

    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        body = request.body.encode() if isinstance(request.body, str) else request.body
        captured = CapturedHTTP.begin(
            request.method or "GET", request.url or "", lambda: body if isinstance(body, bytes) else b""
        )
        if captured is None:
            return original(self, request, *args, **kwargs)
        served = captured.served()
        if served is not None:
            return _requests_response(module, request, served)
        try:
            with engine_request(captured.node):  # counted on the wire as the tool call's, accounted for
                response = original(self, request, *args, **kwargs)
            content = response.content
        except BaseException as exc:
            captured.fail(exc)
            raise
        captured.finish(response.status_code, response.headers.get("content-type"), content)
        return response

    send.__quiver_capture__ = True  # type: ignore[attr-defined]
    adapter.send = send
    return True


def _requests_response(module: Any, request: Any, served: ChildAnswer) -> Any:
    response = module.Response()
    response.status_code = served.status
    response._content = served.body
    response.headers = module.structures.CaseInsensitiveDict({"content-type": served.content_type})
    response.url = request.url
    response.request = request
    response.encoding = "utf-8"
    response.reason = "OK" if served.status < 400 else "Error"
    return response
