"""Importing OTel GenAI spans (``gen_ai.*``) and Vercel AI SDK spans (``ai.*``): each file against itself.

Fixtures: tests/data/traces/openinference (from the OpenInference repository; see
NOTICE.md). Expected values are read from the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import quiver
from quiver import NodeCall, Trace, content_hash
from quiver._importers import summary_key

DATA = Path(__file__).resolve().parents[1] / "data" / "traces" / "openinference"
CLIENT_SPAN = DATA / "otel_genai_client_span_tool_calls.json"
TOOL_SPAN = DATA / "otel_genai_tool_execution_span.json"
VERCEL = DATA / "vercel-v6-all-spans.json"


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _only_call(result: quiver.ImportResult) -> NodeCall:
    [trace] = result.traces
    assert [c.call_id for c in trace.calls] == ["c0", "c1"]
    return trace.calls[1]


def _assert_nothing_dropped(attributes: dict[str, Any], call: NodeCall, result: quiver.ImportResult) -> None:
    kept = call.tags.get("otel", {})
    mapped = result.summary()["attributes"]["mapped"]
    for key, value in attributes.items():
        if value not in (None, "", [], {}):
            assert key in kept or summary_key(key) in mapped, key


# --------------------------------------------------------------------------- gen_ai.*


def test_a_genai_client_span_maps_model_params_messages_and_response() -> None:
    attrs = _load(CLIENT_SPAN)
    result = quiver.import_traces("otel-genai", CLIENT_SPAN)
    call = _only_call(result)
    assert call.kind == "llm"
    assert call.node == attrs["gen_ai.operation.name"]  # the model is the call's model, not part of its name
    assert call.model is not None
    assert (call.model.name, call.model.version) == (attrs["gen_ai.request.model"], attrs["gen_ai.response.model"])
    assert call.model.params == {k[len("gen_ai.request."):]: v for k, v in attrs.items()
                                 if k.startswith("gen_ai.request.") and k != "gen_ai.request.model"}
    messages = json.loads(attrs["gen_ai.input.messages"])
    assert call.prompt is not None and [m.role for m in call.prompt.assembled] == [m["role"] for m in messages]
    assert call.prompt.assembled[0].content == messages[0]["parts"][0]["content"]
    tool_call = next(p for p in messages[1]["parts"] if p["type"] == "tool_call")
    assert tool_call in json.loads(call.prompt.assembled[1].content)
    out = json.loads(attrs["gen_ai.output.messages"])
    assert call.response is not None and call.response.content == out[0]["parts"][0]["content"]
    assert call.response.finish_reason == attrs["gen_ai.response.finish_reasons"][0]
    assert call.response.usage == {"prompt_tokens": attrs["gen_ai.usage.input_tokens"],
                                   "completion_tokens": attrs["gen_ai.usage.output_tokens"]}
    # the compared output is the reply's text; what the span wrote as its output stays in tags
    assert call.output == call.response.content
    assert call.tags["otel"] == {k: attrs[k] for k in ("gen_ai.provider.name", "gen_ai.response.id", "output")}
    _assert_nothing_dropped(attrs, call, result)


def test_a_genai_tool_execution_span_is_a_tool_step() -> None:
    attrs = _load(TOOL_SPAN)
    result = quiver.import_traces("otel-genai", TOOL_SPAN)
    call = _only_call(result)
    assert call.kind == "tool" and call.tool is not None
    assert call.tool.name == attrs["gen_ai.tool.name"]
    assert call.tool.args == json.loads(attrs["input"])
    assert call.tool.response == json.loads(attrs["output"]) == call.output
    assert call.tool.response_hash == content_hash(json.loads(attrs["output"]))
    assert set(call.tags["otel"]) == {"gen_ai.tool.call.id", "gen_ai.tool.description", "gen_ai.tool.type"}
    _assert_nothing_dropped(attrs, call, result)


# --------------------------------------------------------------------------- Vercel ai.*


def _vercel_kind(op: str) -> str:
    if op.endswith((".doGenerate", ".doStream")):
        return "llm"
    return "tool" if op == "ai.toolCall" else "transform"


def _ns(pair: list[int]) -> int:
    return pair[0] * 1_000_000_000 + pair[1]


@pytest.fixture(scope="module")
def vercel() -> tuple[list[dict[str, Any]], dict[str, Trace], quiver.ImportResult]:
    spans = _load(VERCEL)
    result = quiver.import_traces("otel-genai", VERCEL)
    return spans, {t.trace_id: t for t in result.traces}, result


def test_every_vercel_span_imports_as_a_call_of_its_trace(vercel: Any) -> None:
    spans, traces, result = vercel
    assert result.ok and len(result.traces) == len({s["spanContext"]["traceId"] for s in spans})
    for span in spans:
        trace = traces[span["spanContext"]["traceId"]]
        [call] = [c for c in trace.calls[1:] if c.node == span["name"]]
        assert call.kind == _vercel_kind(span["attributes"]["ai.operationId"])
        assert call.parents == ["c0"] and call.call_path == f"{span['name']}#0"
        assert call.ended_at - call.started_at == pytest.approx((_ns(span["endTime"]) - _ns(span["startTime"])) / 1e9)
        _assert_nothing_dropped(span["attributes"], call, result)


def test_vercel_models_prompts_and_outputs_come_from_the_span(vercel: Any) -> None:
    spans, traces, _ = vercel
    for span in spans:
        attrs = span["attributes"]
        call = next(c for c in traces[span["spanContext"]["traceId"]].calls if c.node == span["name"])
        assert call.model is not None and call.model.name == attrs["ai.model.id"]
        assert call.model.version == attrs.get("ai.response.model")
        if "ai.prompt.messages" in attrs:
            messages = json.loads(attrs["ai.prompt.messages"])
            assert call.prompt is not None and [m.role for m in call.prompt.assembled] == [m["role"] for m in messages]
            last = messages[-1]["content"]
            assert call.prompt.assembled[-1].content == "".join(p["text"] for p in last)
        elif "ai.prompt" in attrs:
            prompt = json.loads(attrs["ai.prompt"])
            assert call.prompt is not None
            if "prompt" in prompt:
                assert [(m.role, m.content) for m in call.prompt.assembled] == [("user", prompt["prompt"])]
            else:
                assert [m.content for m in call.prompt.assembled] == [m["content"] for m in prompt["messages"]]
        if "ai.response.object" in attrs:
            assert call.output == json.loads(attrs["ai.response.object"])
        elif "ai.response.text" in attrs:
            assert call.output == attrs["ai.response.text"]
        if call.kind == "llm":
            assert call.response is not None
            assert call.response.finish_reason == attrs["ai.response.finishReason"]


def test_vercel_telemetry_metadata_groups_traces(vercel: Any) -> None:
    spans, _, _ = vercel
    result = quiver.import_traces("otel-genai", VERCEL, group_by="metadata.testCategory")
    categories = {s["attributes"]["ai.telemetry.metadata.testCategory"] for s in spans}
    assert {t.input_id for t in result.traces} == categories
    start = {s["spanContext"]["traceId"]: _ns(s["startTime"]) for s in spans}
    for category in categories:  # repeats count a group's traces by start time, ties by trace id
        group = sorted((t for t in result.traces if t.input_id == category), key=lambda t: t.repeat)
        assert [t.repeat for t in group] == list(range(len(group)))
        assert [t.trace_id for t in group] == sorted((t.trace_id for t in group), key=lambda i: (start[i], i))
    missing = quiver.import_traces("otel-genai", VERCEL, group_by="metadata.customField")
    assert len(missing.problems) == sum("ai.telemetry.metadata.customField" not in s["attributes"] for s in spans)
    assert all("has no metadata.customField" in p.what for p in missing.problems)


# --------------------------------------------------------------------------- envelopes


def _otlp_doc() -> dict[str, Any]:
    def kv(key: str, value: Any) -> dict[str, Any]:
        typed = {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}
        return {"key": key, "value": typed}

    return {"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", "weather-agent")]},
        "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai", "version": "0.1"}, "spans": [
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
             "name": "invoke_agent weather", "kind": 1,
             "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000002000000000",
             "attributes": [kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.conversation.id", "conv-1")],
             "status": {"code": 2, "message": "tool failed"},
             "events": [{"name": "exception", "timeUnixNano": "1700000001900000000", "attributes": [
                 kv("exception.type", "TimeoutError"), kv("exception.message", "weather API timed out"),
                 kv("exception.stacktrace", "Traceback ...")]}]},
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b175",
             "parentSpanId": "eee19b7ec3c1b174", "name": "chat gpt-4o", "kind": 3,
             "startTimeUnixNano": "1700000000500000000", "endTimeUnixNano": "1700000001000000000",
             "attributes": [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "gpt-4o"),
                            kv("gen_ai.request.temperature", 0), kv("gen_ai.prompt.0.role", "user"),
                            kv("gen_ai.prompt.0.content", "Weather in Oslo?"),
                            kv("gen_ai.completion.0.content", "Let me check.")]},
        ]}]}]}


def test_otlp_json_with_legacy_prompt_attributes_and_an_exception() -> None:
    result = quiver.import_traces("otel-genai", _otlp_doc(), group_by="session")
    [trace] = result.traces
    agent, chat = trace.calls[1:]
    assert trace.input_id == "conv-1"
    assert trace.status == "failed" and trace.error == agent.error
    assert agent.error is not None
    assert (agent.error.type, agent.error.message) == ("TimeoutError", "weather API timed out")
    assert agent.tags["otel.span"]["events"][0]["attributes"] == {"exception.stacktrace": "Traceback ..."}
    assert chat.parents == [agent.call_id] and chat.call_path == "invoke_agent weather#0/chat#0"
    assert chat.kind == "llm" and chat.tags["otel.span"] == {"kind": "CLIENT"}
    assert chat.prompt is not None
    assert [(m.role, m.content) for m in chat.prompt.assembled] == [("user", "Weather in Oslo?")]
    assert chat.response is not None and chat.response.content == "Let me check." and chat.output == "Let me check."
    assert (chat.started_at, chat.ended_at) == (0.5, 1.0)
    assert trace.tags["import"]["resource"] == {"service.name": "weather-agent"}
    assert trace.tags["import"]["scopes"] == ["opentelemetry.instrumentation.openai 0.1"]
