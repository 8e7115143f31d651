"""LLM wire formats: one adapter per API, behind one interface (:class:`WireFormat`).

* ``base``: the interface, the neutral :class:`Answer` and :class:`WireRequest`,
  server-sent events;
* ``chat``, ``responses``, ``messages``: OpenAI's chat completions and Responses API,
  Anthropic's Messages API;
* ``embeddings``: OpenAI's embeddings (vectors, not a prompt and an answer).

The transport capture (:mod:`quiver.replay._capture`), the simulator
(:mod:`quiver.replay._sim`) and the importers read and write bodies through these. They
are pure functions of JSON values: no client library, no network.
"""

from __future__ import annotations

import urllib.parse

from .base import Answer, SSEParser, StreamAssembler, WireFormat, WireRequest, encode_sse, int_usage, pieces, text_of
from .chat import CHAT, ChatFormat, logprob_entry
from .embeddings import EMBEDDINGS, EmbeddingAnswer, EmbeddingRequest, EmbeddingsFormat, packed, unpacked
from .messages import MESSAGES, MessagesFormat
from .responses import RESPONSES, ResponsesFormat

__all__ = [
    "Answer", "WireRequest", "WireFormat", "StreamAssembler", "SSEParser", "encode_sse", "int_usage", "pieces",
    "text_of", "CHAT", "ChatFormat", "logprob_entry", "RESPONSES", "ResponsesFormat", "MESSAGES", "MessagesFormat",
    "EMBEDDINGS", "EmbeddingsFormat", "EmbeddingRequest", "EmbeddingAnswer", "packed", "unpacked", "FORMATS",
    "format_for", "format_named",
]

FORMATS: tuple[WireFormat, ...] = (CHAT, RESPONSES, MESSAGES)
"""The formats of a prompt and an answer, by the end of their URL path."""


def format_for(url: str) -> WireFormat | None:
    """The format of a request to ``url`` (by the end of its path), or None."""
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    return next((f for f in FORMATS if path.endswith(f.suffix)), None)


def format_named(name: str | None) -> WireFormat:
    """The format a trace names (``chat`` when it names none: recordings made before formats)."""
    return next((f for f in FORMATS if f.name == name), CHAT)
