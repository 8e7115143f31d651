"""OpenAI's embeddings: ``POST /embeddings``.

A request embeds one text or several (``input``: a string, a list of strings, or token
lists); the answer is one vector per input, as a list of floats or, with
``encoding_format: base64``, as the base64 of its little-endian float32 bytes (what the
``openai`` SDK asks for by default). A recording keeps each vector in that compact form.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import int_usage

__all__ = ["EmbeddingsFormat", "EMBEDDINGS", "EmbeddingRequest", "EmbeddingAnswer", "packed", "unpacked"]


def packed(vector: Any) -> str:
    """A vector as the base64 of its little-endian float32 bytes (a string is taken as packed already)."""
    if isinstance(vector, str):
        return vector
    values = [float(v) for v in vector]
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def unpacked(text: str) -> list[float]:
    """The floats of a packed vector."""
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


@dataclass
class EmbeddingRequest:
    """An embeddings request: the model, the inputs (texts, or token lists), the other fields."""

    model: str
    inputs: list[Any]
    params: dict[str, Any]

    @property
    def base64(self) -> bool:
        """Whether the vectors are asked for in base64."""
        return self.params.get("encoding_format") == "base64"


@dataclass
class EmbeddingAnswer:
    """The vectors of an embeddings answer, each packed (:func:`packed`), in input order."""

    vectors: list[str]
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


class EmbeddingsFormat:
    """Embeddings (see the module docstring)."""

    name = "embeddings"
    api = "embeddings"
    suffix = "/embeddings"

    def read_request(self, body: Mapping[str, Any]) -> EmbeddingRequest | None:
        model, given = body.get("model"), body.get("input")
        if not isinstance(model, str) or given is None:
            return None
        inputs = [given] if isinstance(given, str) or (isinstance(given, list) and given
                                                       and isinstance(given[0], int)) else given
        if not isinstance(inputs, list):
            return None
        return EmbeddingRequest(model, list(inputs), {k: v for k, v in body.items() if k not in ("model", "input")})

    def read_answer(self, body: Any) -> EmbeddingAnswer | None:
        try:
            rows = sorted(body["data"], key=lambda row: int(row.get("index", 0)))
            vectors = [packed(row["embedding"]) for row in rows]
        except (TypeError, KeyError, ValueError, AttributeError, struct.error):
            return None
        return EmbeddingAnswer(vectors, body.get("model"), int_usage(body.get("usage")))

    def render(self, answer: EmbeddingAnswer, request: EmbeddingRequest) -> dict[str, Any]:
        data = [{"object": "embedding", "index": i, "embedding": v if request.base64 else unpacked(v)}
                for i, v in enumerate(answer.vectors)]
        usage = {"prompt_tokens": 0, "total_tokens": 0, **answer.usage}
        return {"object": "list", "data": data, "model": answer.model or request.model, "usage": usage}


EMBEDDINGS = EmbeddingsFormat()
