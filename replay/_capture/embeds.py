"""Embeddings requests, recorded as ``retrieval`` calls.

An embeddings request inside a trace (``client.embeddings.create``, LangChain's
``OpenAIEmbeddings``, a raw post) opens a child ``retrieval`` call named ``embeddings``
whose inputs are the model, the hashes of the inputs and the other parameters. The
record holds the model (name, version, parameters), the inputs as its retrieval set
(one entry per input: its hash and rank) and the vectors, packed (base64 of float32:
:func:`quiver._wire.packed`) in the ``embeddings`` tag; its output is the hash of each
vector. A replay serves the vectors while the retrieval dimension is frozen;
``quiver attribute``'s retrieval dimension sends the request again.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Any

from quiver._canonical import content_hash, to_jsonable
from quiver._errors import InstrumentationError, LLMRequestError, LLMUnavailable
from quiver._trace import ModelInfo, RetrievalDoc
from quiver._wire import EMBEDDINGS, EmbeddingAnswer, EmbeddingRequest

from .calls import wants_capture
from .children import CapturedChild, ChildAnswer

__all__ = ["CapturedEmbedding", "EMBEDDINGS_TAG"]

EMBEDDINGS_TAG = "embeddings"
"""The tag an embeddings call keeps its vectors and usage in."""


class CapturedEmbedding(CapturedChild):
    """One captured embeddings request."""

    def __init__(self, request: EmbeddingRequest, url: str) -> None:
        super().__init__(
            "embeddings",
            "retrieval",
            {
                "model": request.model,
                "inputs": [content_hash(i) for i in request.inputs],
                "params": request.params,
            },
        )
        self.request = request
        self.url = url
        if self.record is not None:
            self.record.model = ModelInfo(name=request.model, params=to_jsonable(request.params))

    @classmethod
    def begin(cls, method: str, url: str, read_body: Callable[[], bytes]) -> CapturedEmbedding | None:
        """A captured call for an embeddings request inside a trace, else None."""
        if (
            not wants_capture()
            or method.upper() != "POST"
            or not urllib.parse.urlsplit(url).path.rstrip("/").endswith(EMBEDDINGS.suffix)
        ):
            return None
        try:
            body = json.loads(read_body())
        except (ValueError, TypeError):
            return None
        request = EMBEDDINGS.read_request(body) if isinstance(body, dict) else None
        return cls(request, url) if request is not None else None

    def answer_served(self) -> ChildAnswer:
        record = self.record
        held = record.tags.get(EMBEDDINGS_TAG) if record is not None else None
        if not isinstance(held, dict) or not isinstance(held.get("vectors"), list):
            raise InstrumentationError(
                f"call {record.call_path if record else 'embeddings'} was recorded without its vectors (a recording "
                "of an earlier version): record the corpus again, or replay with the retrieval dimension live"
            )
        version = record.model.version if record is not None and record.model is not None else None
        answer = EmbeddingAnswer(list(held["vectors"]), version, dict(held.get("usage") or {}))
        return ChildAnswer(200, "application/json", json.dumps(EMBEDDINGS.render(answer, self.request)).encode())

    def finish(self, status: int, content_type: str | None, content: bytes) -> None:
        if status >= 400:
            error_type = LLMUnavailable if status == 429 or status >= 500 else LLMRequestError
            self.fail(error_type(f"the endpoint answered HTTP {status} to the embeddings request at {self.url}"))
            return
        try:
            answer = EMBEDDINGS.read_answer(json.loads(content))
        except ValueError:
            answer = None
        if answer is None:
            self.fail(LLMUnavailable(f"the answer of {self.url} is not an embeddings list: {content[:200]!r}"))
            return
        record = self.record
        if record is not None:
            record.model = ModelInfo(
                name=self.request.model, version=answer.model, params=to_jsonable(self.request.params)
            )
            record.retrieval = [
                RetrievalDoc(doc_id=str(i), content_hash=content_hash(text), rank=i)
                for i, text in enumerate(self.request.inputs)
            ]
            record.tags[EMBEDDINGS_TAG] = {"vectors": answer.vectors, "usage": answer.usage}
        output: Any = {"model": answer.model, "vectors": [content_hash(v) for v in answer.vectors]}
        self.close(output)
