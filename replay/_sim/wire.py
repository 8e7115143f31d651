"""The simulator's OpenAI wire format: request bodies in, response and error bodies out.

:func:`_parse_request` turns a chat completion body into a
:class:`~quiver.replay._sim.SimRequest` or raises :class:`_HTTPError` (a 400, or a
404 for an unknown model); the other functions build the JSON bodies the
:class:`~quiver.replay._sim.Simulator` sends: completions, models, OpenAI error
bodies, and the headers of a 429.

A body is strict JSON before it is a request: valid UTF-8, no lone surrogates in its
strings (``"\\ud800"``), finite numbers (no ``NaN``, ``Infinity`` or ``1e400``), integers
of at most :data:`_MAX_INT_DIGITS` digits, and arrays and objects nested at most
:data:`_MAX_JSON_DEPTH` levels. Anything else is a 400 that names the rule it broke.
"""

from __future__ import annotations

import json
import math
import re
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
        # A message may quote the request: a lone surrogate becomes the text \udxxx, so
        # that the body can be encoded.
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type, "param": param, "code": code}}

    def body_for(self, anthropic: bool) -> dict[str, Any]:
        """The error body in OpenAI's shape, or in Anthropic's (``{"type": "error", "error":
        {"type", "message"}}``) for the Messages API."""
        if not anthropic:
            return self.body
        error = self.body["error"]
        kind = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error",
                503: "overloaded_error"}.get(self.status, "api_error" if self.status >= 500 else error["type"])
        return {"type": "error", "error": {"type": kind, "message": error["message"]}}


_MAX_JSON_DEPTH = 128
"""The deepest nesting of arrays and objects a request body may have."""

_MAX_INT_DIGITS = 100
"""The most digits an integer of a request body may have."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _word_count(text: str) -> int:
    return len(text.split())


def _usage(req: SimRequest, choices: Sequence[SimChoice]) -> dict[str, int]:
    """Tokens as the simulator counts them: words of the prompt and of the choices."""
    completion_tokens = sum(
        _word_count(c.content) + sum(_word_count(t["function"]["arguments"]) for t in c.tool_calls or ())
        for c in choices
    )
    prompt_tokens = _word_count(req.text)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _completion_body(req: SimRequest, choices: Sequence[SimChoice]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-" + request_digest(req)[:24],
        "object": "chat.completion",
        "created": 0,
        "model": req.model,
        "system_fingerprint": "quiver-sim",
        "choices": [_choice_body(i, c) for i, c in enumerate(choices)],
        "usage": _usage(req, choices),
    }


def _choice_body(index: int, choice: SimChoice) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.content, "refusal": None}
    if choice.tool_calls is not None:
        message.update(content=None, tool_calls=list(choice.tool_calls))
    return {
        "index": index,
        "message": message,
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
    body = _decode_body(raw)
    if not isinstance(body, dict):
        raise _HTTPError(400, f"the request body must be a JSON object; got {type(body).__name__}")
    return _sim_request(body, sample_key)


def _sim_request(body: dict[str, Any], sample_key: str) -> SimRequest:
    """The request of a chat completion body (``stream`` allowed); raises :class:`_HTTPError` 400/404."""
    try:
        req = SimRequest.from_openai(body, sample_key)
    except SimRequestError as exc:
        raise _HTTPError(400, str(exc), param=exc.param) from None
    if req.model not in sim_model_names():
        raise _unknown_model(req.model)
    return req


class _NotStrictJSON(ValueError):
    """A body that Python's ``json`` reads but strict JSON does not allow."""


def _decode_body(raw: bytes) -> Any:
    """The JSON value of a request body, checked by :func:`_check_strict`."""
    try:
        body = json.loads(
            raw, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_short_int
        )
    except _NotStrictJSON as exc:
        raise _HTTPError(400, str(exc)) from None
    except RecursionError:  # the decoder recurses once per level: far past the limit
        raise _HTTPError(400, _too_deep("")) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError among them
        raise _HTTPError(400, f"the request body is not valid JSON: {exc}") from None
    _check_strict(body)
    return body


def _no_constant(name: str) -> Any:
    raise _NotStrictJSON(
        f"the request body has {name}, which is not JSON; numbers must be finite"
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrictJSON(
            f"the request body has the number {text[:40]}, beyond the range of a double; "
            "numbers must be finite"
        )
    return value


def _short_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        raise _NotStrictJSON(
            f"the request body has an integer of {digits} digits; the simulator accepts "
            f"at most {_MAX_INT_DIGITS}"
        )
    return int(text)


def _check_strict(body: Any) -> None:
    """Refuse lone surrogates and nesting deeper than :data:`_MAX_JSON_DEPTH`; iterative,
    so that no body can exhaust the stack. A path is kept as ``(parent, key)`` links and
    spelled out only for the error message."""
    stack: list[tuple[Any, int, Any]] = [(body, 1, None)]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            _check_text(value, path)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > _MAX_JSON_DEPTH:
            raise _HTTPError(400, _too_deep(_spell(path)))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str):
                _check_text(key, (path, key))
            stack.append((item, depth + 1, (path, key)))


def _check_text(text: str, path: Any) -> None:
    found = _SURROGATE.search(text)
    if found is not None:
        where = _spell(path) or "the top level"
        raise _HTTPError(
            400,
            f"the request body has a lone surrogate {found.group()!a} at {where} "
            f"(character {found.start()}); JSON strings must be valid Unicode",
        )


def _too_deep(where: str) -> str:
    at = f" at {where}" if where else ""
    return (
        f"the request body nests arrays and objects more than {_MAX_JSON_DEPTH} levels "
        f"deep{at}; the simulator accepts at most {_MAX_JSON_DEPTH} levels"
    )


def _spell(path: Any, max_parts: int = 8) -> str:
    """``messages[0].content`` for the linked path ``(((None, 'messages'), 0), 'content')``;
    a long path keeps its first ``max_parts`` parts."""
    parts: list[Any] = []
    while path is not None:
        path, key = path
        parts.append(key)
    parts.reverse()
    text = ""
    for key in parts[:max_parts]:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text + ("..." if len(parts) > max_parts else "")


def _retry_headers(retry_after_s: float) -> dict[str, str]:
    return {
        "retry-after-ms": f"{retry_after_s * 1000:g}",
        "Retry-After": str(math.ceil(retry_after_s)),
    }
