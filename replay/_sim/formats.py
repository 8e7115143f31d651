"""The simulator's endpoints beyond chat completions: the Responses API, Anthropic's
Messages API and embeddings, and streaming for the first three.

A request of the Responses API or the Messages API is read as the chat completion it
amounts to (:func:`chat_body`: instructions or ``system`` as a system message, input
items and content blocks as messages and tool messages, tools and tool choice in the chat
shape, ``max_output_tokens`` as ``max_tokens``), so the same simulated models answer it
with the same seeded sampling and the same sample key; the answer is written back in the
request's own format by its adapter (:mod:`quiver._wire`), as a body or as its stream of
server-sent events. The Responses API keeps the conversation of every response it gave
(bounded), so ``previous_response_id`` continues it; an id it never gave is a 404.
Embeddings are deterministic vectors: the words of the text hashed into ``dimensions``
buckets (64 by default), normalised, so that texts sharing words are close.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quiver._wire import CHAT, EMBEDDINGS, MESSAGES, RESPONSES, Answer, EmbeddingAnswer, WireFormat, packed, text_of

from .models import SimChoice, SimRequest
from .wire import _HTTPError

__all__ = ["GET_PATHS", "ROUTES", "Route", "endpoints", "chat_body", "answer_of", "ResponseStore", "embeddings_body"]


@dataclass(frozen=True)
class Route:
    """A POST endpoint of the simulator and the format it speaks."""

    path: str
    format: WireFormat | None  # None: embeddings


ROUTES = {r.path: r for r in (Route("/v1/chat/completions", CHAT), Route("/v1/responses", RESPONSES),
                              Route("/v1/messages", MESSAGES), Route("/v1/embeddings", None))}
"""The POST endpoints, by path."""
GET_PATHS = ("/v1/models", "/v1/models/{id}", "/health")
"""The GET endpoints (the model list, one model, the health check)."""


def endpoints() -> str:
    """Every endpoint the simulator serves, for people: ``GET ...; POST ...``."""
    return f"GET {', '.join(GET_PATHS)}; POST {', '.join(ROUTES)}"

_STORE_SIZE = 10_000
"""The most Responses API conversations the simulator keeps for ``previous_response_id``."""


class ResponseStore:
    """The conversations of the responses given (chat messages, the answer included), newest kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def get(self, rid: str) -> list[dict[str, Any]]:
        with self._lock:
            held = self._held.get(rid)
        if held is None:
            raise _HTTPError(404, f"Previous response with id {rid!r} not found.", param="previous_response_id",
                             code="previous_response_not_found")
        return list(held)

    def put(self, rid: str, messages: list[dict[str, Any]]) -> None:
        with self._lock:
            self._held[rid] = messages
            self._held.move_to_end(rid)
            while len(self._held) > _STORE_SIZE:
                self._held.popitem(last=False)


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses or Messages API tool in the chat shape."""
    if isinstance(tool.get("function"), Mapping):
        return dict(tool)
    schema = tool.get("parameters", tool.get("input_schema"))
    return {"type": "function", "function": {"name": tool.get("name"), "description": tool.get("description"),
                                             "parameters": schema}}


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, Mapping):
        return choice
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_items(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Responses API input items as chat messages."""
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise _HTTPError(400, "each 'input' item must be an object", param="input")
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str) else text_of(output)})
        elif "role" in item:
            out.append({"role": str(item["role"]), "content": text_of(item.get("content"))})
    return out


def _anthropic_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Messages API messages as chat messages (tool_use and tool_result blocks included)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise _HTTPError(400, "each of 'messages' must be an object", param="messages")
        content = message.get("content")
        if isinstance(content, str) or content is None:
            out.append({"role": str(message.get("role")), "content": content or ""})
            continue
        texts, calls = [], []
        for block in content:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind == "tool_use":
                calls.append({"id": block.get("id"), "type": "function",
                              "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input"))}})
            elif kind == "tool_result":
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": text_of(block.get("content"))})
            elif kind == "text":
                texts.append(str(block.get("text") or ""))
        if texts or calls:
            out.append({"role": str(message.get("role")), "content": "".join(texts) or None,
                        **({"tool_calls": calls} if calls else {})})
    return out


def chat_body(route: Route, body: dict[str, Any], store: ResponseStore) -> dict[str, Any]:
    """The chat completion body a Responses API or Messages API body amounts to."""
    if route.format is CHAT:
        return body
    out: dict[str, Any] = {k: body[k] for k in ("model", "temperature", "top_p", "seed") if k in body}
    messages: list[dict[str, Any]] = []
    if route.format is RESPONSES:
        if body.get("previous_response_id"):
            messages += store.get(str(body["previous_response_id"]))
        if body.get("instructions"):
            messages.insert(0, {"role": "system", "content": str(body["instructions"])})
        given = body.get("input")
        messages += [{"role": "user", "content": given}] if isinstance(given, str) else _response_items(given or [])
        out["max_tokens"] = body.get("max_output_tokens")
        fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": fmt.get("name"), "schema": fmt.get("schema"), "strict": fmt.get("strict")}}
        if body.get("top_logprobs") is not None:
            out.update(logprobs=True, top_logprobs=body["top_logprobs"])
    else:
        if "max_tokens" not in body:
            raise _HTTPError(400, "max_tokens: Field required", param="max_tokens")
        if body.get("system"):
            messages.append({"role": "system", "content": text_of(body["system"])})
        messages += _anthropic_messages(body.get("messages") or [])
        out["max_tokens"] = body["max_tokens"]
    out["messages"] = messages
    if body.get("tools"):
        out["tools"] = [_tool(t) for t in body["tools"] if isinstance(t, Mapping)]
        if body.get("tool_choice") is not None:
            out["tool_choice"] = _tool_choice(body["tool_choice"])
    return out


_FINISH = {
    "responses": {"stop": "completed", "tool_calls": "completed", "length": "incomplete"},
    "messages": {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"},
}


def answer_of(route: Route, req: SimRequest, choice: SimChoice, rid: str, shown: str,
              usage: Mapping[str, int]) -> Answer:
    """The first choice of a simulated completion as an answer in ``route``'s format."""
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    assert route.format is not None
    name = route.format.name
    if name == "chat":
        counts = dict(usage)
    elif name == "responses":
        counts = {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}
    else:
        counts = {"input_tokens": prompt, "output_tokens": completion}
    return Answer(text=choice.content, tool_calls=list(choice.tool_calls or ()),
                  finish_reason=_FINISH.get(name, {}).get(choice.finish_reason, choice.finish_reason),
                  usage=counts, logprobs=choice.logprobs, model=shown, id=rid,
                  extra={"system_fingerprint": "quiver-sim"} if name == "chat" else {})


def remember(store: ResponseStore, rid: str, chat: Mapping[str, Any], choice: SimChoice) -> None:
    """Keep a response's conversation, its answer included, for ``previous_response_id``."""
    answer: dict[str, Any] = {"role": "assistant", "content": choice.content or None}
    if choice.tool_calls:
        answer["tool_calls"] = list(choice.tool_calls)
    store.put(rid, [*chat["messages"], answer])


_DIMENSIONS = 64
"""The length of a simulated embedding when the request does not say (``dimensions``)."""


def _vector(model: str, text: str, dims: int) -> list[float]:
    values = [0.0] * dims
    for word in text.lower().split() or [""]:
        digest = hashlib.sha256(f"{model}\x00{word}".encode()).digest()
        bucket = int.from_bytes(digest[:4], "big") % dims
        values[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_body(body: dict[str, Any], shown: str) -> dict[str, Any]:
    """The answer to an embeddings request: one deterministic vector per input."""
    request = EMBEDDINGS.read_request(body)
    if request is None:
        raise _HTTPError(400, "'input' and 'model' are required", param="input")
    dims = body.get("dimensions") or _DIMENSIONS
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= 4096:
        raise _HTTPError(400, f"'dimensions' must be an integer in [1, 4096]; got {dims!r:.40}", param="dimensions")
    texts = [i if isinstance(i, str) else " ".join(map(str, i)) for i in request.inputs]
    vectors = [packed(_vector(request.model, t, dims)) for t in texts]
    tokens = sum(len(t.split()) for t in texts)
    answer = EmbeddingAnswer(vectors, shown, {"prompt_tokens": tokens, "total_tokens": tokens})
    return EMBEDDINGS.render(answer, request)
