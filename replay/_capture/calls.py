"""One LLM call seen on a hooked transport, recorded with the replay contract.

A transport hook hands every request it sees to :meth:`CapturedCall.begin`. Inside a
recorded or replayed trace, with capture on for the current call, a ``POST`` whose URL
path is a prompt-and-answer API's (:data:`quiver._wire.FORMATS`: chat completions, the
Responses API, Anthropic's Messages API) with a body that format reads becomes a
:class:`CapturedCall`: the same :class:`~quiver.replay._llm.PendingChat` an
``LLMClient`` call opens (on the current ``llm`` call when it holds no LLM call yet,
else on a child ``llm`` call), so the record has the same shape whatever the format.
Anything else passes through untouched: outside a trace :meth:`begin` costs one
context-variable read.

The request is rewritten before it goes out, in the format's own fields: a replay's
``param_change`` (:func:`~quiver.replay.request_overrides`) and an inline prompt swap
(:func:`~quiver.replay._llm.message_swaps`), and the sample key goes in the
``X-Quiver-Sample-Key`` header. When the replay serves the call from the recording (or
the run's response cache answers it) no request is made: :meth:`served` is the body, or
the server-sent events of a streamed request, that the hook answers with. A streamed
answer sent live reaches the caller as it comes and is recorded once it ends
(:meth:`finish_stream`), with the timing of its events.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quiver._canonical import content_hash
from quiver._errors import InstrumentationError, LLMRequestError, LLMUnavailable
from quiver._trace import Message, PromptInfo
from quiver._wire import CHAT, RESPONSES, Answer, StreamAssembler, WireFormat, WireRequest, encode_sse, format_for
from quiver.replay._instrument import TraceBuilder, capture_enabled, current_builder, current_call
from quiver.replay._keys import SAMPLE_KEY_HEADER
from quiver.replay._llm import (
    PARAM_NAMES,
    ChatResult,
    PendingChat,
    current_cache,
    current_overrides,
    endpoints,
    in_engine_request,
    is_connection_failure,
    message_swaps,
    origin_of,
)

__all__ = ["CapturedCall", "CapturedChat", "CaptureCounter", "Served", "counter", "wants_capture", "rewritten"]


class CaptureCounter:
    """Counts what the capture did in this process: ``calls`` sent live, ``served``
    from a recording, ``failed`` (an error status or an unreadable body)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()


counter = CaptureCounter()

_served_ids: weakref.WeakKeyDictionary[TraceBuilder, set[str]] = weakref.WeakKeyDictionary()
"""Response ids a trace's replay served from the recording: the endpoint never made them."""


def wants_capture() -> bool:
    """Whether an LLM request sent now would be captured (inside a trace, capture on for
    the current call, not one of the engine's own requests)."""
    return current_builder.get() is not None and capture_enabled.get() and not in_engine_request()


@dataclass(frozen=True)
class Served:
    """An answer made without a request: the body's pieces and its content type."""

    chunks: list[bytes]
    stream: bool

    @property
    def content_type(self) -> str:
        return "text/event-stream" if self.stream else "application/json"


def rewritten(fmt: WireFormat, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with a replay's changes in force applied in ``fmt``'s own fields: request
    overrides (``param_change``) and inline prompt swaps."""
    overrides = {k: v for k, v in current_overrides().items() if k == "model" or k in PARAM_NAMES}
    if overrides:
        body = fmt.with_params(body, overrides)
    for swap in message_swaps():
        request = fmt.read_request(body)
        index = swap.find(request.messages, [content_hash(p) for p in request.parts]) if request else None
        if index is not None:
            body = fmt.with_message(body, index, swap.text)
    return body


def _prompt(request: WireRequest) -> PromptInfo:
    """The prompt as the trace records it: each message's role and text, and one
    fragment hash per message over the piece of the body behind it (tool calls, names
    and content parts included, so that two requests that differ only there differ)."""
    return PromptInfo(
        assembled=[Message(role=r, content=t) for r, t in request.messages],
        fragments=[content_hash(p) for p in request.parts],
    )


class CapturedCall:
    """One captured LLM call: its contract record and the request to send."""

    def __init__(self, fmt: WireFormat, call: PendingChat, body: dict[str, Any], url: str, stream: bool) -> None:
        self.fmt = fmt
        self.call = call
        self.body = body
        self.url = url
        self.stream = stream
        self.origin = origin_of(url)
        self._prompt = call.prompt

    @classmethod
    def begin(cls, method: str, url: str, read_body: Callable[[], bytes]) -> CapturedCall | None:
        """A captured call for this request, or None to let it pass untouched.

        ``read_body`` returns the request body's bytes; it is called only for a request
        of a known format inside a trace.
        """
        if not wants_capture() or method.upper() != "POST":
            return None
        fmt = format_for(url)
        if fmt is None:
            return None
        try:
            body = json.loads(read_body())
        except (ValueError, TypeError):
            return None
        if not isinstance(body, dict) or fmt.read_request(body) is None:
            return None
        body = rewritten(fmt, body)
        request = fmt.read_request(body)
        assert request is not None  # a rewrite keeps the fields the format reads
        call = PendingChat.open(counter, request.model, request.params, _prompt(request), None, strict_json=False)
        if call.record is not None and fmt is not CHAT:
            call.record.tags["wire"] = {"format": fmt.name}
        return cls(fmt, call, body, url, request.stream)

    # -- served from the recording -----------------------------------------------------
    def served(self) -> Served | None:
        """The answer the recording (or the run's response cache) gives, or None to send
        the request.

        Raises:
            EndpointDown: The request is to be sent, and its endpoint was declared down
                (:mod:`quiver.replay._llm.health`): the call is closed as failed.
            InstrumentationError: The request continues a Responses API chain whose
                previous response the replay served from the recording.
        """
        result = self.call.served()
        if result is None:
            return self._cached()
        answer = self._recorded_answer(result)
        edit = getattr(self.call.record.replay, "answer_edit", None) if self.call.record is not None else None
        if edit is not None:
            answer = self._edited(edit, answer)
        builder = current_builder.get()
        if builder is not None and answer.id:
            _served_ids.setdefault(builder, set()).add(answer.id)
        return self._rendered(answer)

    def _recorded_answer(self, result: ChatResult) -> Answer:
        record = self.call.record
        tags = record.tags if record is not None else {}
        held = tags.get("wire")
        wire: dict[str, Any] = held if isinstance(held, dict) else {}
        response = record.response if record is not None else None
        fingerprint = tags.get("system_fingerprint")
        return Answer(
            text=result.content,
            tool_calls=list(tags.get("tool_calls") or []),
            finish_reason=response.finish_reason if response is not None else None,
            usage=result.usage,
            logprobs=result.logprobs,
            model=result.model or self.call.model,
            id=wire.get("id") or "chatcmpl-quiver-" + (self.call.sample_key or "served"),
            extra={**({"system_fingerprint": fingerprint} if fingerprint else {}),
                   **({"item_ids": wire["items"]} if wire.get("items") else {})},
        )

    def _edited(self, edit: Callable[[Answer], Answer], answer: Answer) -> Answer:
        """The recorded answer as a replay's output perturbation serves it, recorded as
        the call's (its text and tool calls)."""
        answer = edit(answer)
        record = self.call.record
        assert record is not None
        if answer.tool_calls:
            record.tags["tool_calls"] = answer.tool_calls
        else:
            record.tags.pop("tool_calls", None)
        if record.response is not None:
            record.response = record.response.model_copy(update={"content": answer.text})
        return answer

    def _rendered(self, answer: Answer) -> Served:
        if self.stream:
            return Served(encode_sse(self.fmt.render_events(answer, self.call.model, self.body)), True)
        return Served([json.dumps(self.fmt.render(answer, self.call.model)).encode()], False)

    def _cached(self) -> Served | None:
        """The run's response cache's answer to this very request and sample key, recorded
        as the endpoint's (no request is made), or None to send it."""
        key = self._cache_key()
        hit = current_cache().get(key) if key is not None else None  # type: ignore[union-attr]
        answer = self.fmt.read_answer(hit) if hit is not None else None
        if answer is not None:
            self._record(answer, attempts=0)
            return self._rendered(answer)
        self._check_chain()
        try:
            endpoints.check(self.origin)
        except LLMUnavailable as exc:
            self.fail(exc)
            raise
        return None

    def _check_chain(self) -> None:
        """Refuse to send a request that continues a response the endpoint never made."""
        previous = self.body.get("previous_response_id") if self.fmt is RESPONSES else None
        builder = current_builder.get()
        if previous and builder is not None and previous in _served_ids.get(builder, ()):
            record = current_call.get()
            where = f"call {record.call_path}" if record is not None else "this trace"
            exc = InstrumentationError(
                f"{where} sends a Responses API request live that continues response {previous!r}, which the "
                "replay served from the recording: the endpoint holds no such response; run the calls of the chain "
                "live together (unfreeze the node that started it, or perturb it), or send the conversation as "
                "input items instead of previous_response_id"
            )
            self.fail(exc)
            raise exc

    def _cache_key(self) -> str | None:
        """The key of this request in the run's response cache (None: no cache in force,
        or no sample key: an answer not fixed by the request is never cached)."""
        cache = current_cache()
        if cache is None or not self.call.sample_key:
            return None
        return cache.key(json.loads(self.request_body()), self.call.sample_key)

    # -- sent live ---------------------------------------------------------------------
    def request_body(self) -> bytes:
        """The body to send: the caller's, with the replay's changes applied; under a
        resample replay, with the recorded model, parameters or (chat) messages."""
        fmt = self.fmt
        kept = {k: v for k, v in self.body.items() if k in fmt.prompt_keys or k in fmt.stream_keys}
        if fmt is CHAT and self.call.prompt is not self._prompt:  # the recorded messages (resend)
            kept["messages"] = [m.model_dump() for m in self.call.prompt.assembled]
        return json.dumps({"model": self.call.model, **self.call.params, **kept}).encode()

    def headers(self) -> dict[str, str]:
        """The headers to add: the sample key; a stream is asked for without compression."""
        added = {SAMPLE_KEY_HEADER: self.call.sample_key} if self.call.sample_key else {}
        return {**added, "Accept-Encoding": "identity"} if self.stream else added

    def finish(self, status: int, content: bytes) -> None:
        """Record the endpoint's answer (an error status or a body the format does not
        read closes the call as failed; the caller's client reads it as usual)."""
        if not self._answered(status):
            return
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        answer = self.fmt.read_answer(data)
        if answer is None:
            self.fail(LLMUnavailable(f"the answer of {self.url} is not a {self.fmt.api} response: {content[:200]!r}"))
            return
        self._record(answer, attempts=1)
        self._store(data)

    def stream_assembler(self) -> StreamAssembler:
        """What assembles the streamed answer as its events come."""
        return self.fmt.assembler()

    def finish_stream(self, status: int, assembler: StreamAssembler, timing: dict[str, Any]) -> None:
        """Record a streamed answer once its stream ended (or was closed)."""
        if not self._answered(status):
            return
        answer = assembler.answer()
        if answer is None:
            self.fail(
                LLMUnavailable(f"the stream of {self.url} held no {self.fmt.api} answer ({assembler.events} event(s))")
            )
            return
        if self.call.record is not None:
            self.call.record.tags["stream"] = timing
        self._record(answer, attempts=1)
        self._store(self.fmt.render(answer, self.call.model))

    def _answered(self, status: int) -> bool:
        endpoints.succeeded(self.origin)
        if status < 400:
            return True
        error_type = LLMUnavailable if status == 429 or status >= 500 else LLMRequestError
        self.fail(error_type(f"the endpoint answered HTTP {status} to the {self.fmt.api} request at {self.url}"))
        return False

    def _store(self, data: Any) -> None:
        key = self._cache_key()
        if key is not None and isinstance(data, dict):
            current_cache().put(key, data)  # type: ignore[union-attr]

    def _record(self, answer: Answer, *, attempts: int) -> None:
        """Record ``answer`` as the call's (``attempts`` 0: the response cache's)."""
        record = self.call.record
        if record is not None and answer.id:  # served with them again: SDKs carry ids into later requests
            record.tags["wire"] = {"format": self.fmt.name, "id": answer.id,
                                   **({"items": answer.extra["item_ids"]} if answer.extra.get("item_ids") else {})}
        self.call.finish(answer, attempts)

    def fail(self, exc: BaseException) -> None:
        """Close the call as failed (the request raised, or was answered with an error);
        a failure to connect counts against the endpoint's health."""
        if is_connection_failure(exc):
            endpoints.failed(self.origin, exc)
        with counter._lock:
            counter.stats["failed"] += 1
        self.call.fail(exc)

    # -- the chat completions' interface of earlier hooks ---------------------------------
    def served_body(self) -> bytes | None:
        """The whole answer's bytes when there is one to give without a request."""
        served = self.served()
        return b"".join(served.chunks) if served is not None else None


CapturedChat = CapturedCall
"""The name the DSPy hook uses (its engine sends chat completions only)."""
