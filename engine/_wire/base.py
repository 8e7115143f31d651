"""The interface every wire format implements, and what they share.

A :class:`WireFormat` is one LLM API as it goes over the wire (chat completions, the
Responses API, Anthropic's Messages API, embeddings). It knows, for its own bodies:

* a request as the replay contract records it (:meth:`WireFormat.read_request`: model,
  parameters, the assembled prompt as ``(role, text)`` messages and the piece of the body
  behind each, whether it streams);
* where a parameter lives (:attr:`WireFormat.param_fields`, :meth:`WireFormat.with_params`:
  ``param_change`` written into the format's own fields) and where each message of the
  assembled prompt lives (:meth:`WireFormat.with_message`: an inline prompt swapped);
* an answer read from a body or assembled from a stream (:meth:`WireFormat.read_answer`,
  :meth:`WireFormat.assembler`), and an answer written back as the format's body or as
  its server-sent events (:meth:`WireFormat.render`, :meth:`WireFormat.render_events`).

The transport capture, the simulator and the importers use the same adapters, so that
what is recorded, what a replay serves and what the simulator answers have one shape.
Nothing here makes a request or imports a client library.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "WireRequest", "WireFormat", "StreamAssembler", "SSEParser", "encode_sse", "int_usage",
           "text_of", "pieces"]


@dataclass
class Answer:
    """A model's answer, whatever format carried it.

    Attributes:
        text: The text of the answer (every text part joined).
        tool_calls: Tool calls in the chat completions' shape (``{"id", "type": "function",
            "function": {"name", "arguments"}}``, ``arguments`` JSON text), the neutral
            form every format converts to and from.
        finish_reason: Why it ended, in the format's own words (``stop``, ``completed``,
            ``end_turn``...).
        usage: Token counts under the format's own keys (integers only).
        logprobs: Log-probability entries (``{token, logprob, bytes, top_logprobs}``), when sent.
        model: The model the endpoint reported.
        id: The response's id (a Responses API chain refers to it).
        extra: What else the format keeps (``system_fingerprint``).
    """

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] | None = None
    model: str | None = None
    id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WireRequest:
    """A request as the replay contract records it.

    Attributes:
        model: The model asked for.
        params: Every other field of the body but the prompt and the streaming switches.
        messages: The assembled prompt: ``(role, text)`` per message, in order.
        parts: The piece of the body behind each message, as sent (its fragment hash).
        stream: Whether the answer is asked for as a stream of events.
    """

    model: str
    params: dict[str, Any]
    messages: list[tuple[str, str]]
    parts: list[Any]
    stream: bool = False


def text_of(content: Any) -> str:
    """A message's content as text: a string as it is, the text of a list of parts
    (``text`` of every part that has one, or a string part) joined, anything else empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                out.append(part["text"])
        return "".join(out)
    return ""


def pieces(text: str, size: int = 3) -> list[str]:
    """A text cut into pieces of about ``size`` words (with their spaces), as a stream sends it."""
    if not text:
        return []
    words = text.split(" ")
    return [" ".join(words[i:i + size]) + (" " if i + size < len(words) else "") for i in range(0, len(words), size)]


def int_usage(usage: Any) -> dict[str, int]:
    """The integer counts of a usage object (nested detail objects left out)."""
    if not isinstance(usage, Mapping):
        return {}
    return {str(k): v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}


class StreamAssembler(ABC):
    """Builds an :class:`Answer` from a format's server-sent events, one at a time."""

    def __init__(self) -> None:
        self.events = 0

    def feed(self, event: str | None, data: str) -> None:
        """One event (its ``event:`` name, if any, and its ``data:`` text)."""
        self.events += 1
        if data.strip() == "[DONE]":
            return
        try:
            payload = json.loads(data)
        except ValueError:
            return
        if isinstance(payload, dict):
            self.take(event or str(payload.get("type") or ""), payload)

    @abstractmethod
    def take(self, event: str, payload: dict[str, Any]) -> None:
        """One parsed event."""

    @abstractmethod
    def answer(self) -> Answer | None:
        """The answer assembled so far (None: nothing that makes one came)."""


class WireFormat(ABC):
    """One LLM API's bodies (see the module docstring)."""

    name: str
    """Short name, as traces record it (``chat``, ``responses``, ``messages``, ``embeddings``)."""
    api: str
    """What the wire ledger calls it (``chat completions``...)."""
    suffix: str
    """The end of its URL path (``/chat/completions``)."""
    prompt_keys: tuple[str, ...] = ()
    """The body's fields the prompt lives in (left out of the parameters)."""
    stream_keys: tuple[str, ...] = ("stream", "stream_options")
    """The body's fields that ask for a stream (left out of the parameters)."""
    param_fields: Mapping[str, str | None] = {}
    """Where a ``param_change`` parameter lives in this format's body, where it is not
    under its own name (None: the format has no such field)."""

    def param_field(self, name: str) -> str | None:
        """The body field of the parameter ``name`` (``max_tokens`` -> ``max_output_tokens``)."""
        return self.param_fields.get(name, name) if name != "model" else "model"

    def read_request(self, body: Mapping[str, Any]) -> WireRequest | None:
        """The request as the contract records it; None for a body this format cannot record."""
        if not isinstance(body.get("model"), str):
            return None
        prompt = self.prompt(body)
        if prompt is None:
            return None
        messages, parts = prompt
        skip = {"model", *self.prompt_keys, *self.stream_keys}
        params = {k: v for k, v in body.items() if k not in skip}
        return WireRequest(body["model"], params, messages, parts, stream=bool(body.get("stream")))

    @abstractmethod
    def prompt(self, body: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[Any]] | None:
        """The assembled messages and the body's piece behind each; None when the body
        holds no prompt this format reads."""

    def with_params(self, body: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with ``overrides`` (``model`` and sampling parameters, by their
        ``param_change`` names) written where this format keeps them; a parameter the
        format has no field for is left out."""
        out = dict(body)
        for name, value in overrides.items():
            where = self.param_field(name)
            if where is not None:
                out[where] = value
        return out

    @abstractmethod
    def with_message(self, body: Mapping[str, Any], index: int, text: str) -> dict[str, Any]:
        """``body`` with the text of the ``index``-th message of its assembled prompt
        replaced by ``text`` (an inline prompt swapped)."""

    @abstractmethod
    def read_answer(self, body: Any) -> Answer | None:
        """The answer a (non-streamed) response body holds; None when it is not one."""

    @abstractmethod
    def assembler(self) -> StreamAssembler:
        """A new assembler of this format's streamed answer."""

    @abstractmethod
    def render(self, answer: Answer, model: str) -> dict[str, Any]:
        """The response body that carries ``answer`` (``model``: the name asked for,
        when the answer names none)."""

    @abstractmethod
    def render_events(self, answer: Answer, model: str, request: Mapping[str, Any] | None = None
                      ) -> list[tuple[str | None, Any]]:
        """The streamed response that carries ``answer``: ``(event name or None, data)``
        per server-sent event, in order (data a JSON value, or text such as ``[DONE]``);
        ``request``: the body asked with, where it says what the stream holds."""

    def total_tokens(self, usage: Mapping[str, int]) -> int:
        """Prompt and completion tokens of a usage in this format's keys."""
        if "total_tokens" in usage:
            return int(usage["total_tokens"])
        return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))

    def stream_body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A streamed request's body as it is sent (the chat format asks for usage)."""
        return dict(body)

    @staticmethod
    def copied(body: Mapping[str, Any]) -> dict[str, Any]:
        """A deep copy of a body, to rewrite."""
        return copy.deepcopy(dict(body))


def encode_sse(events: Iterable[tuple[str | None, Any]]) -> list[bytes]:
    """Server-sent events as the bytes of each (``event: NAME`` when named, ``data: ...``)."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {text}\n\n".encode())
    return out


class SSEParser:
    """Splits a byte stream into server-sent events (``event`` name and ``data`` text)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events completed by ``chunk``."""
        self._buffer += chunk.replace(b"\r\n", b"\n")
        events = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            event = _event(block.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[tuple[str | None, str]]:
        """An event left without its closing blank line."""
        block, self._buffer = self._buffer, b""
        event = _event(block.decode("utf-8", "replace")) if block.strip() else None
        return [event] if event is not None else []


def _event(block: str) -> tuple[str | None, str] | None:
    name: str | None = None
    data: list[str] = []
    for line in block.split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return (name, "\n".join(data)) if data else None
