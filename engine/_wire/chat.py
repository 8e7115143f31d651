"""OpenAI's chat completions: ``POST /chat/completions``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Answer, StreamAssembler, WireFormat, int_usage, pieces, text_of

__all__ = ["ChatFormat", "CHAT", "logprob_entry"]


def logprob_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One ``logprobs.content`` entry with every field of the SDK's type present."""
    top = [{"token": t.get("token"), "bytes": t.get("bytes"), "logprob": t.get("logprob"),
            **{k: v for k, v in t.items() if k not in ("token", "bytes", "logprob")}}
           for t in entry.get("top_logprobs") or []]
    return {"token": entry.get("token"), "bytes": entry.get("bytes"), "logprob": entry.get("logprob"),
            "top_logprobs": top,
            **{k: v for k, v in entry.items() if k not in ("token", "bytes", "logprob", "top_logprobs")}}


class ChatFormat(WireFormat):
    """Chat completions: ``messages`` in, ``choices[0].message`` out; streamed as
    ``chat.completion.chunk`` deltas ended by ``[DONE]``."""

    name = "chat"
    api = "chat completions"
    suffix = "/chat/completions"
    prompt_keys = ("messages",)

    def prompt(self, body: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[Any]] | None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return None
        return [(str(m.get("role", "")), text_of(m.get("content"))) for m in messages], list(messages)

    def with_params(self, body: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
        out = super().with_params(body, overrides)
        if "max_tokens" in overrides and "max_completion_tokens" in body and "max_tokens" not in body:
            out.pop("max_tokens")
            out["max_completion_tokens"] = overrides["max_tokens"]  # the newer spelling the SDK may send
        return out

    def with_message(self, body: Mapping[str, Any], index: int, text: str) -> dict[str, Any]:
        out = self.copied(body)
        out["messages"][index]["content"] = text
        return out

    def read_answer(self, body: Any) -> Answer | None:
        try:
            choice = body["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                return None
        except (TypeError, KeyError, IndexError):
            return None
        logprobs = choice.get("logprobs")
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        extra = {"system_fingerprint": body["system_fingerprint"]} if body.get("system_fingerprint") else {}
        return Answer(
            text=message.get("content") or "", tool_calls=list(message.get("tool_calls") or []),
            finish_reason=choice.get("finish_reason"), usage=int_usage(body.get("usage")),
            logprobs=[logprob_entry(t) for t in entries] if entries is not None else None,
            model=body.get("model"), id=body.get("id"), extra=extra,
        )

    def _head(self, answer: Answer, model: str) -> dict[str, Any]:
        head: dict[str, Any] = {"id": answer.id or "chatcmpl-quiver", "created": 0, "model": answer.model or model}
        if answer.extra.get("system_fingerprint"):
            head["system_fingerprint"] = answer.extra["system_fingerprint"]
        return head

    def render(self, answer: Answer, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
        if answer.tool_calls:
            message["tool_calls"] = answer.tool_calls
            message["content"] = answer.text or None
        return {
            **self._head(answer, model), "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason or "stop",
                         "logprobs": {"content": answer.logprobs, "refusal": None}
                         if answer.logprobs is not None else None}],
            "usage": answer.usage,
        }

    def render_events(self, answer: Answer, model: str, request: Mapping[str, Any] | None = None
                      ) -> list[tuple[str | None, Any]]:
        head = {**self._head(answer, model), "object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> tuple[str | None, Any]:
            return None, {**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                "finish_reason": finish}]}

        events = [chunk({"role": "assistant", "content": ""})]
        if answer.logprobs is not None:  # one entry a chunk, as the tokens come
            events += [chunk({"content": e.get("token") or ""}, logprobs={"content": [e], "refusal": None})
                       for e in answer.logprobs]
            rest = answer.text[len("".join(str(e.get("token") or "") for e in answer.logprobs)):]
            if rest:
                events.append(chunk({"content": rest}))
        else:
            events += [chunk({"content": piece}) for piece in pieces(answer.text)]
        for i, call in enumerate(answer.tool_calls):
            function = call.get("function") or {}
            events.append(chunk({"tool_calls": [{"index": i, "id": call.get("id"), "type": "function",
                                                 "function": {"name": function.get("name"), "arguments": ""}}]}))
            events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                       for piece in pieces(str(function.get("arguments") or ""))]
        events.append(chunk({}, answer.finish_reason or "stop"))
        options = (request or {}).get("stream_options")
        if isinstance(options, Mapping) and options.get("include_usage"):
            events.append((None, {**head, "choices": [], "usage": answer.usage}))
        events.append((None, "[DONE]"))
        return events

    def assembler(self) -> StreamAssembler:
        return _ChatAssembler()



class _ChatAssembler(StreamAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._answer: Answer | None = None
        self._calls: dict[int, dict[str, Any]] = {}

    def take(self, event: str, payload: dict[str, Any]) -> None:
        if self._answer is None:
            self._answer = Answer(model=payload.get("model"), id=payload.get("id"))
            if payload.get("system_fingerprint"):
                self._answer.extra["system_fingerprint"] = payload["system_fingerprint"]
        answer = self._answer
        if payload.get("usage"):
            answer.usage = int_usage(payload["usage"])
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            answer.text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                empty = {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                held = self._calls.setdefault(int(call.get("index", 0)), empty)
                held["id"] = call.get("id") or held["id"]
                function = call.get("function") or {}
                held["function"]["name"] += function.get("name") or ""
                held["function"]["arguments"] += function.get("arguments") or ""
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and logprobs.get("content") is not None:
                answer.logprobs = (answer.logprobs or []) + [logprob_entry(t) for t in logprobs["content"]]
            if choice.get("finish_reason"):
                answer.finish_reason = choice["finish_reason"]

    def answer(self) -> Answer | None:
        if self._answer is not None:
            self._answer.tool_calls = [self._calls[i] for i in sorted(self._calls)]
        return self._answer


CHAT = ChatFormat()
