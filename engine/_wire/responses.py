"""OpenAI's Responses API: ``POST /responses``.

The prompt is ``instructions`` (a system message) followed by ``input`` (a string: one
user message; or items: messages, ``function_call`` and ``function_call_output``);
``max_output_tokens`` holds ``max_tokens``; the answer is the ``output`` items (message
text, ``function_call`` items); a stream is the ``response.*`` events, ended by
``response.completed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Answer, StreamAssembler, WireFormat, int_usage, pieces, text_of

__all__ = ["ResponsesFormat", "RESPONSES"]


def _item_text(item: Mapping[str, Any]) -> tuple[str, str]:
    """One input item as ``(role, text)``."""
    kind = item.get("type")
    if kind == "function_call":
        return "assistant", f"{item.get('name')}({item.get('arguments') or ''})"
    if kind == "function_call_output":
        output = item.get("output")
        return "tool", output if isinstance(output, str) else text_of(output)
    if "role" in item:
        return str(item.get("role")), text_of(item.get("content"))
    return str(kind or ""), ""


class ResponsesFormat(WireFormat):
    """The Responses API (see the module docstring)."""

    name = "responses"
    api = "responses"
    suffix = "/responses"
    prompt_keys = ("instructions", "input")
    stream_keys = ("stream",)
    param_fields = {"max_tokens": "max_output_tokens", "seed": None, "response_format": None, "logprobs": None}

    def prompt(self, body: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[Any]] | None:
        messages: list[tuple[str, str]] = []
        parts: list[Any] = []
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            messages.append(("system", instructions))
            parts.append({"instructions": instructions})
        given = body.get("input")
        if isinstance(given, str):
            messages.append(("user", given))
            parts.append(given)
        elif isinstance(given, list) and all(isinstance(i, dict) for i in given):
            messages += [_item_text(i) for i in given]
            parts += given
        elif not messages:
            return None
        return messages, parts

    def with_message(self, body: Mapping[str, Any], index: int, text: str) -> dict[str, Any]:
        out = self.copied(body)
        if isinstance(out.get("instructions"), str) and out["instructions"]:
            if index == 0:
                out["instructions"] = text
                return out
            index -= 1
        if isinstance(out.get("input"), str):
            out["input"] = text
            return out
        item = out["input"][index]
        if item.get("type") == "function_call_output":
            item["output"] = text
        else:
            item["content"] = text
        return out

    def read_answer(self, body: Any) -> Answer | None:
        if not isinstance(body, dict) or not isinstance(body.get("output"), list):
            return None
        answer = Answer(model=body.get("model"), id=body.get("id"), usage=int_usage(body.get("usage")),
                        finish_reason=body.get("status"))
        texts: list[str] = []
        for item in body["output"]:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        texts.append(str(part.get("text") or ""))
                        if part.get("logprobs"):
                            answer.logprobs = (answer.logprobs or []) + list(part["logprobs"])
            elif item.get("type") == "function_call":
                answer.tool_calls.append({"id": item.get("call_id"), "type": "function",
                                          "function": {"name": item.get("name"), "arguments": item.get("arguments")}})
        answer.text = "".join(texts)
        ids = _item_ids(body["output"])
        if ids:
            answer.extra["item_ids"] = ids
        return answer

    def _output(self, answer: Answer, rid: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        ids = answer.extra.get("item_ids") or {}
        calls = list(ids.get("calls") or [])
        if answer.text or not answer.tool_calls:
            items.append({"type": "message", "id": ids.get("message") or f"msg_{rid}", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": answer.text, "annotations": [],
                                       "logprobs": answer.logprobs or []}]})
        for k, call in enumerate(answer.tool_calls):
            function = call.get("function") or {}
            item_id = calls[k] if k < len(calls) and calls[k] else f"fc_{k}_{rid}"
            items.append({"type": "function_call", "id": item_id, "call_id": call.get("id"),
                          "name": function.get("name"), "arguments": function.get("arguments") or "{}",
                          "status": "completed"})
        return items

    def render(self, answer: Answer, model: str) -> dict[str, Any]:
        rid = answer.id or "resp_quiver"
        usage = dict(answer.usage)
        usage.setdefault("input_tokens", 0)
        usage.setdefault("output_tokens", 0)
        usage.setdefault("total_tokens", usage["input_tokens"] + usage["output_tokens"])
        return {
            "id": rid, "object": "response", "created_at": 0, "status": answer.finish_reason or "completed",
            "model": answer.model or model, "output": self._output(answer, rid.removeprefix("resp_")),
            "usage": {**usage, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
            "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
            "parallel_tool_calls": True, "temperature": None, "tool_choice": "auto", "tools": [], "top_p": None,
            "text": {"format": {"type": "text"}},
        }

    def render_events(self, answer: Answer, model: str, request: Mapping[str, Any] | None = None
                      ) -> list[tuple[str | None, Any]]:
        done = self.render(answer, model)
        started = {**done, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": started}),
                                                    ("response.in_progress", {"response": started})]
        for i, item in enumerate(done["output"]):
            events += _item_events(i, item)
        events.append(("response.completed", {"response": done}))
        return [(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events)]

    def assembler(self) -> StreamAssembler:
        return _ResponsesAssembler(self)


def _item_ids(output: list[Any]) -> dict[str, Any]:
    """The ids of an answer's output items as the endpoint gave them (the first message's,
    each function call's): an SDK sends them back in its next request, so a served answer
    carries them again."""
    message = next((i.get("id") for i in output if isinstance(i, dict) and i.get("type") == "message"), None)
    calls = [i.get("id") for i in output if isinstance(i, dict) and i.get("type") == "function_call"]
    out: dict[str, Any] = {}
    if message:
        out["message"] = message
    if any(calls):
        out["calls"] = calls
    return out


def _item_events(i: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The events of one output item, from its ``added`` to its ``done``."""
    where = {"output_index": i, "item_id": item["id"]}
    if item["type"] == "function_call":
        arguments = item["arguments"]
        return [
            ("response.output_item.added", {"output_index": i, "item": {**item, "arguments": "",
                                                                          "status": "in_progress"}}),
            ("response.function_call_arguments.delta", {**where, "delta": arguments}),
            ("response.function_call_arguments.done", {**where, "arguments": arguments, "name": item["name"]}),
            ("response.output_item.done", {"output_index": i, "item": item}),
        ]
    part = item["content"][0]
    empty = {**part, "text": "", "logprobs": []}
    where = {**where, "content_index": 0}
    deltas = [("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
              for piece in pieces(part["text"])]
    return [
        ("response.output_item.added", {"output_index": i, "item": {**item, "status": "in_progress",
                                                                      "content": []}}),
        ("response.content_part.added", {**where, "part": empty}),
        *deltas,
        ("response.output_text.done", {**where, "text": part["text"], "logprobs": part["logprobs"]}),
        ("response.content_part.done", {**where, "part": part}),
        ("response.output_item.done", {"output_index": i, "item": item}),
    ]



class _ResponsesAssembler(StreamAssembler):
    def __init__(self, fmt: ResponsesFormat) -> None:
        super().__init__()
        self._format = fmt
        self._final: Answer | None = None
        self._text: list[str] = []
        self._id: str | None = None

    def take(self, event: str, payload: dict[str, Any]) -> None:
        response = payload.get("response")
        if isinstance(response, dict):
            self._id = response.get("id") or self._id
        if event in ("response.completed", "response.incomplete", "response.failed"):
            self._final = self._format.read_answer(response)
        elif event == "response.output_text.delta":
            self._text.append(str(payload.get("delta") or ""))

    def answer(self) -> Answer | None:
        if self._final is not None:
            return self._final
        if self._id is None:
            return None
        return Answer(text="".join(self._text), id=self._id, finish_reason="incomplete")


RESPONSES = ResponsesFormat()

