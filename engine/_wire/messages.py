"""Anthropic's Messages API: ``POST /v1/messages``.

The prompt is ``system`` (a string or text blocks) followed by ``messages`` (content a
string or blocks: ``text``, ``tool_use``, ``tool_result``); the answer is ``content``
blocks (``text``, ``tool_use`` with an ``input`` object) and a ``stop_reason``; a stream
is ``message_start``, ``content_block_start``/``delta``/``stop`` per block,
``message_delta`` and ``message_stop``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .base import Answer, StreamAssembler, WireFormat, int_usage, pieces, text_of

__all__ = ["MessagesFormat", "MESSAGES"]


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "tool_use":
        return f"{block.get('name')}({json.dumps(block.get('input'), sort_keys=True)})"
    if kind == "tool_result":
        return text_of(block.get("content"))
    return str(block.get("text") or "")


def _content_text(content: Any) -> str:
    return content if isinstance(content, str) else "".join(_block_text(b) for b in content or [])


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return {}


class MessagesFormat(WireFormat):
    """Anthropic's Messages API (see the module docstring)."""

    name = "messages"
    api = "messages"
    suffix = "/messages"
    prompt_keys = ("system", "messages")
    stream_keys = ("stream",)
    param_fields = {"seed": None, "response_format": None, "logprobs": None, "top_logprobs": None}

    def prompt(self, body: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[Any]] | None:
        given = body.get("messages")
        if not isinstance(given, list) or not all(isinstance(m, dict) for m in given):
            return None
        messages: list[tuple[str, str]] = []
        parts: list[Any] = []
        system = body.get("system")
        if system:
            messages.append(("system", _content_text(system)))
            parts.append({"system": system})
        messages += [(str(m.get("role", "")), _content_text(m.get("content"))) for m in given]
        return messages, parts + given

    def with_message(self, body: Mapping[str, Any], index: int, text: str) -> dict[str, Any]:
        out = self.copied(body)
        if out.get("system"):
            if index == 0:
                out["system"] = text if isinstance(out["system"], str) else [{"type": "text", "text": text}]
                return out
            index -= 1
        out["messages"][index]["content"] = text
        return out

    def read_answer(self, body: Any) -> Answer | None:
        if not isinstance(body, dict) or body.get("type") != "message" or not isinstance(body.get("content"), list):
            return None
        answer = Answer(model=body.get("model"), id=body.get("id"), usage=int_usage(body.get("usage")),
                        finish_reason=body.get("stop_reason"))
        for block in body["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                answer.tool_calls.append({"id": block.get("id"), "type": "function",
                                          "function": {"name": block.get("name"),
                                                       "arguments": json.dumps(block.get("input") or {})}})
            elif isinstance(block, dict) and block.get("type") == "text":
                answer.text += str(block.get("text") or "")
        return answer

    def _content(self, answer: Answer) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if answer.text or not answer.tool_calls:
            blocks.append({"type": "text", "text": answer.text})
        for call in answer.tool_calls:
            function = call.get("function") or {}
            blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                           "input": _arguments(str(function.get("arguments") or ""))})
        return blocks

    def render(self, answer: Answer, model: str) -> dict[str, Any]:
        usage = {"input_tokens": 0, "output_tokens": 0, **answer.usage}
        return {"id": answer.id or "msg_quiver", "type": "message", "role": "assistant",
                "model": answer.model or model, "content": self._content(answer),
                "stop_reason": answer.finish_reason or ("tool_use" if answer.tool_calls else "end_turn"),
                "stop_sequence": None, "usage": usage}

    def render_events(self, answer: Answer, model: str, request: Mapping[str, Any] | None = None
                      ) -> list[tuple[str | None, Any]]:
        done = self.render(answer, model)
        start = {**done, "content": [], "stop_reason": None,
                 "usage": {**done["usage"], "output_tokens": min(1, done["usage"]["output_tokens"])}}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
        for i, block in enumerate(done["content"]):
            if block["type"] == "tool_use":
                opened = {**block, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
            else:
                opened = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": piece} for piece in pieces(block["text"])]
            events.append(("content_block_start", {"index": i, "content_block": opened}))
            events += [("content_block_delta", {"index": i, "delta": d}) for d in deltas]
            events.append(("content_block_stop", {"index": i}))
        events.append(("message_delta", {"delta": {"stop_reason": done["stop_reason"], "stop_sequence": None},
                                         "usage": {"output_tokens": done["usage"]["output_tokens"]}}))
        events.append(("message_stop", {}))
        return [(name, {"type": name, **data}) for name, data in events]

    def assembler(self) -> StreamAssembler:
        return _MessagesAssembler()


class _MessagesAssembler(StreamAssembler):
    def __init__(self) -> None:
        super().__init__()
        self._answer: Answer | None = None
        self._blocks: dict[int, dict[str, Any]] = {}

    def take(self, event: str, payload: dict[str, Any]) -> None:
        if event == "message_start" and isinstance(payload.get("message"), dict):
            message = payload["message"]
            self._answer = Answer(model=message.get("model"), id=message.get("id"),
                                  usage=int_usage(message.get("usage")))
        elif event == "content_block_start" and isinstance(payload.get("content_block"), dict):
            block = dict(payload["content_block"])
            block["_json"] = ""
            self._blocks[int(payload.get("index", 0))] = block
        elif event == "content_block_delta":
            held = self._blocks.get(int(payload.get("index", 0)))
            delta: dict[str, Any] = payload.get("delta") or {}
            if held is not None and delta.get("type") == "text_delta":
                held["text"] = str(held.get("text") or "") + str(delta.get("text") or "")
            elif held is not None and delta.get("type") == "input_json_delta":
                held["_json"] += str(delta.get("partial_json") or "")
        elif event == "message_delta" and self._answer is not None:
            self._answer.finish_reason = (payload.get("delta") or {}).get("stop_reason")
            self._answer.usage.update(int_usage(payload.get("usage")))

    def answer(self) -> Answer | None:
        answer = self._answer
        if answer is None:
            return None
        answer.text, answer.tool_calls = "", []
        for i in sorted(self._blocks):
            block = self._blocks[i]
            if block.get("type") == "tool_use":
                answer.tool_calls.append({"id": block.get("id"), "type": "function",
                                          "function": {"name": block.get("name"),
                                                       "arguments": block["_json"] or json.dumps(block.get("input"))}})
            elif block.get("type") == "text":
                answer.text += str(block.get("text") or "")
        return answer


MESSAGES = MessagesFormat()
