"""The simulator's OpenAI wire format: request bodies in, response and error bodies out.

:func:`_parse_request` turns a chat completion body into a
:class:`~quiver.replay._sim.SimRequest` or raises :class:`_HTTPError` (a 400, or a
404 for an unknown model); the other functions build the JSON bodies the
:class:`~quiver.replay._sim.Simulator` sends: completions, models, OpenAI error
bodies, and the headers of a 429.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .models import (
    SimChoice,
    SimRequest,
    SimRequestError,
    request_digest,
    sim_model_names,
)


class _HTTPError(Exception):
    """An error answer: status and OpenAI error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type, "param": param, "code": code}}


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _word_count(text: str) -> int:
    return len(text.split())


def _completion_body(req: SimRequest, choices: Sequence[SimChoice]) -> dict[str, Any]:
    completion_tokens = sum(_word_count(c.content) for c in choices)
    prompt_tokens = _word_count(req.text)
    return {
        "id": "chatcmpl-" + request_digest(req)[:24],
        "object": "chat.completion",
        "created": 0,
        "model": req.model,
        "system_fingerprint": "quiver-sim",
        "choices": [_choice_body(i, c) for i, c in enumerate(choices)],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _choice_body(index: int, choice: SimChoice) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": choice.content, "refusal": None},
        "finish_reason": choice.finish_reason,
        "logprobs": (
            None if choice.logprobs is None else {"content": choice.logprobs, "refusal": None}
        ),
    }


def _model_body(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "quiver-sim"}


def _unknown_model(name: str) -> _HTTPError:
    return _HTTPError(
        404,
        f"The model {name!r} does not exist in the quiver simulator; "
        f"known models: {', '.join(sim_model_names())}",
        param="model",
        code="model_not_found",
    )


def _parse_request(raw: bytes, sample_key: str) -> SimRequest:
    """The request of a chat completion body; raises :class:`_HTTPError` 400/404."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _HTTPError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _HTTPError(400, f"the request body must be a JSON object; got {type(body).__name__}")
    if body.get("stream"):
        raise _HTTPError(400, "streaming is not supported by the simulator", param="stream")
    try:
        req = SimRequest.from_openai(body, sample_key)
    except SimRequestError as exc:
        raise _HTTPError(400, str(exc), param=exc.param) from None
    if req.model not in sim_model_names():
        raise _unknown_model(req.model)
    return req


def _retry_headers(retry_after_s: float) -> dict[str, str]:
    return {
        "retry-after-ms": f"{retry_after_s * 1000:g}",
        "Retry-After": str(math.ceil(retry_after_s)),
    }
