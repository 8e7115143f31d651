"""One chat completion seen on a hooked transport, recorded with the replay contract.

A transport hook hands every request it sees to :meth:`CapturedChat.begin`. Inside a
recorded or replayed trace, with capture on for the current call, a ``POST`` to a URL
whose path ends in ``/chat/completions`` with a JSON body naming a model and messages
becomes a :class:`CapturedChat`: the same :class:`~quiver.replay._llm.PendingChat` an
``LLMClient`` call opens (on the current ``llm`` call when it holds no LLM call yet,
else on a child ``llm`` call), so the record has the same shape. Anything else passes
through untouched: outside a trace :meth:`begin` costs one context-variable read.

The request is rewritten before it goes out: a replay's ``param_change`` (model and
sampling parameters, :func:`~quiver.replay.request_overrides`) is applied to the
body, and the sample key goes in the ``X-Quiver-Sample-Key`` header. When the replay
serves the call from the recording, no request is made: :meth:`served_body` is the
chat completion the hook answers with.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections import Counter
from typing import Any

from quiver._canonical import content_hash
from quiver._errors import InstrumentationError, LLMRequestError, LLMUnavailable
from quiver._trace import Message, PromptInfo
from quiver.replay._instrument import capture_enabled, current_builder, current_call
from quiver.replay._keys import SAMPLE_KEY_HEADER
from quiver.replay._llm import (
    PARAM_NAMES,
    PendingChat,
    current_cache,
    current_overrides,
    endpoints,
    in_engine_request,
    is_connection_failure,
    origin_of,
)

__all__ = ["CapturedChat", "CaptureCounter", "counter", "is_chat_request", "wants_capture"]

_PATH_SUFFIX = "/chat/completions"
TOOL_CALLS_TAG = "tool_calls"
"""The tag a captured call keeps its response's tool calls in (the trace's response
holds the text), so that a served answer gives them back."""


class CaptureCounter:
    """Counts what the capture did in this process: ``calls`` sent live, ``served``
    from a recording, ``failed`` (an error status or an unreadable body)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()


counter = CaptureCounter()


def wants_capture() -> bool:
    """Whether a chat completion sent now would be captured (inside a trace, capture on
    for the current call, not one of the engine's own requests)."""
    return current_builder.get() is not None and capture_enabled.get() and not in_engine_request()


def is_chat_request(method: str, url: str) -> bool:
    """A ``POST`` to an OpenAI-compatible chat completions URL."""
    if method.upper() != "POST":
        return False
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    return path.endswith(_PATH_SUFFIX)


def _text(content: Any) -> str:
    """A message's content as text: a string as it is, the text parts of a list of
    content parts joined, anything else (None for a tool-calling assistant message) empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _prompt(messages: list[Any]) -> PromptInfo:
    """The prompt as the trace records it: each message's role and text, and one
    fragment hash per message over the whole message as sent (tool calls, names and
    content parts included, so that two requests that differ only there differ)."""
    assembled = [Message(role=str(m.get("role", "")), content=_text(m.get("content"))) for m in messages]
    return PromptInfo(assembled=assembled, fragments=[content_hash(m) for m in messages])


def _with_overrides(body: dict[str, Any]) -> dict[str, Any]:
    """The request body with a replay's request overrides applied (``param_change``)."""
    overrides = current_overrides()
    if not overrides:
        return body
    out = dict(body)
    if overrides.get("model"):
        out["model"] = overrides["model"]
    for name, value in overrides.items():
        if name not in PARAM_NAMES:
            continue
        if name == "max_tokens" and "max_completion_tokens" in out and "max_tokens" not in out:
            out["max_completion_tokens"] = value  # the newer spelling the SDK may send
        else:
            out[name] = value
    return out


class CapturedChat:
    """One captured chat completion: its contract record and the request to send."""

    def __init__(self, call: PendingChat, body: dict[str, Any], url: str) -> None:
        self.call = call
        self.body = body
        self.url = url
        self.origin = origin_of(url)
        self._messages = body["messages"]
        self._prompt = call.prompt

    @classmethod
    def begin(cls, method: str, url: str, read_body: Any) -> CapturedChat | None:
        """A captured call for this request, or None to let it pass untouched.

        ``read_body`` returns the request body's bytes; it is called only for a chat
        completion request inside a trace.

        Raises:
            InstrumentationError: A streaming request (``"stream": true``) inside a
                trace: it cannot be recorded.
        """
        if not wants_capture() or not is_chat_request(method, url):
            return None
        try:
            body = json.loads(read_body())
        except (ValueError, TypeError):
            return None
        if not isinstance(body, dict) or not isinstance(body.get("model"), str) \
                or not isinstance(body.get("messages"), list) \
                or not all(isinstance(m, dict) for m in body["messages"]):
            return None
        if body.get("stream"):
            record = current_call.get()
            where = f"in call {record.call_path}" if record is not None else "in this trace"
            raise InstrumentationError(
                f"a streaming chat completion (\"stream\": true) to {url} {where} cannot be recorded: "
                "send it without streaming (stream=False; streaming=False for LangChain), or mark its node "
                "@quiver.node(..., capture=False) to send it unrecorded"
            )
        body = _with_overrides(body)
        params = {k: v for k, v in body.items() if k not in ("model", "messages")}
        call = PendingChat.open(counter, body["model"], params, _prompt(body["messages"]), None, strict_json=False)
        return cls(call, body, url)

    # -- served from the recording -----------------------------------------------------
    def served_body(self) -> bytes | None:
        """The chat completion the recording answers with, or None to send the request.

        Raises:
            EndpointDown: The request is to be sent, and its endpoint was declared down
                (:mod:`quiver.replay._llm.health`): the call is closed as failed.
        """
        result = self.call.served()
        if result is None:
            return self._cached()
        record = self.call.record
        response = record.response if record is not None else None
        message: dict[str, Any] = {"role": "assistant", "content": result.content}
        recorded = getattr(record.replay, "recorded", None) if record is not None else None
        tool_calls = recorded.tags.get(TOOL_CALLS_TAG) if recorded is not None else None
        if tool_calls:
            message["tool_calls"] = tool_calls
            if record is not None:
                record.tags[TOOL_CALLS_TAG] = tool_calls
            if not result.content:
                message["content"] = None
        completion: dict[str, Any] = {
            "id": "chatcmpl-quiver-" + (self.call.sample_key or "served"),
            "object": "chat.completion",
            "created": 0,
            "model": result.model or self.call.model,
            "choices": [{
                "index": 0, "message": message,
                "finish_reason": response.finish_reason if response is not None else "stop",
                "logprobs": {"content": result.logprobs} if result.logprobs is not None else None,
            }],
            "usage": result.usage,
        }
        if record is not None and record.tags.get("system_fingerprint"):
            completion["system_fingerprint"] = record.tags["system_fingerprint"]
        return json.dumps(completion).encode()

    def _cached(self) -> bytes | None:
        """The run's response cache's answer to this very request and sample key, recorded
        as the endpoint's (no request is made), or None to send it.

        Raises:
            EndpointDown: The request is to be sent, and its endpoint was declared down
                (:mod:`quiver.replay._llm.health`): the call is closed as failed.
        """
        key = self._cache_key()
        hit = current_cache().get(key) if key is not None else None  # type: ignore[union-attr]
        if hit is not None and self._record_answer(hit, attempts=0):
            return json.dumps(hit).encode()
        try:
            endpoints.check(self.origin)
        except LLMUnavailable as exc:
            self.fail(exc)
            raise
        return None

    def _cache_key(self) -> str | None:
        """The key of this request in the run's response cache (None: no cache in force,
        or no sample key: an answer not fixed by the request is never cached)."""
        cache = current_cache()
        if cache is None or not self.call.sample_key:
            return None
        return cache.key(json.loads(self.request_body()), self.call.sample_key)

    # -- sent live ---------------------------------------------------------------------
    def request_body(self) -> bytes:
        """The body to send: the caller's, with the overrides applied; under a resample
        replay, with the recorded model, parameters or messages the replay asks for."""
        messages = self._messages
        if self.call.prompt is not self._prompt:  # the recorded messages (resend)
            messages = [m.model_dump() for m in self.call.prompt.assembled]
        body = {"model": self.call.model, **self.call.params, "messages": messages}
        return json.dumps(body).encode()

    def headers(self) -> dict[str, str]:
        """The headers to add: the sample key."""
        return {SAMPLE_KEY_HEADER: self.call.sample_key} if self.call.sample_key else {}

    def finish(self, status: int, content: bytes) -> None:
        """Record the endpoint's answer (an error status or a body that is not a chat
        completion closes the call as failed; the caller's client reads it as usual)."""
        endpoints.succeeded(self.origin)
        if status >= 400:
            error_type = LLMUnavailable if status == 429 or status >= 500 else LLMRequestError
            self.fail(error_type(f"the endpoint answered HTTP {status} to the chat completion at {self.url}"))
            return
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if not self._record_answer(data, attempts=1):
            self.fail(LLMUnavailable(f"the answer of {self.url} is not a chat completion: {content[:200]!r}"))
            return
        key = self._cache_key()
        if key is not None:
            current_cache().put(key, data)  # type: ignore[union-attr]

    def _record_answer(self, data: Any, *, attempts: int) -> bool:
        """Record a chat completion as the call's answer (``attempts`` 0: the response
        cache's); False, recording nothing, when ``data`` is not one."""
        try:
            choice = data["choices"][0]
            if not isinstance(choice.get("message"), dict):
                raise TypeError("no message")
        except (TypeError, KeyError, IndexError, AttributeError):
            return False
        tool_calls = choice["message"].get("tool_calls")
        if tool_calls and self.call.record is not None:
            self.call.record.tags[TOOL_CALLS_TAG] = tool_calls
        self.call.finish(data, attempts)
        return True

    def fail(self, exc: BaseException) -> None:
        """Close the call as failed (the request raised, or was answered with an error);
        a failure to connect counts against the endpoint's health."""
        if is_connection_failure(exc):
            endpoints.failed(self.origin, exc)
        with counter._lock:
            counter.stats["failed"] += 1
        self.call.fail(exc)
