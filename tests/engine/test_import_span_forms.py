"""``quiver import`` on three span-file forms it misread: one test (or a few) per form.

* **GenAI parts messages** (``[{"role", "parts": [{"type": "text" | "tool_call" |
  "tool_call_response", ...}]}]``) wherever GenAI or OpenInference attributes hold
  them: OpenInference's ``input.value`` / ``output.value``, the deprecated
  ``gen_ai.prompt`` / ``gen_ai.completion`` (with a ``{"text", "finish_reason"}``
  reply, as OpenInference's GenAI conversion fixtures write it), and the
  ``gen_ai.client.inference.operation.details`` span events Strands Agents writes
  (``strands/agent_tools.otlp.json``). No exporter writes the first two shapes on its
  own spans; those records take the parts messages the OTel openai-v2 instrumentation
  wrote (``otel-sdk/genai_openai_v2.console.json``) and put them there.
* **An object of named span lists** (``{"ai.generateText": [spans...], ...}``,
  ``vercel/by_operation.json``, the Vercel AI SDK's spans grouped by name): its spans;
  an object of named lists of anything else is refused in one line
  (``test_import_findings.py``).
* **OTel JS spans without ids** (``vercel/tools.json_spans.json``, the AI SDK's own
  test tracer): one trace, every call at the top level, and a note saying so.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from fuzzing import run_cli

import quiver
from quiver import NodeCall, Trace

SPANS = Path(__file__).resolve().parents[1] / "data" / "spans"
GENAI = SPANS / "otel-sdk" / "genai_openai_v2.console.json"
STRANDS = SPANS / "strands" / "agent_tools.otlp.json"
BY_OPERATION = SPANS / "vercel" / "by_operation.json"
NO_IDS = SPANS / "vercel" / "tools.json_spans.json"


def _llm_calls(traces: list[Trace]) -> list[NodeCall]:
    return [c for t in traces for c in t.calls if c.kind == "llm"]


def _tool_turn() -> dict[str, Any]:
    """The openai-v2 span of the tool-calling conversation's last turn: user, tool call, tool result."""
    decoder, text, pos = json.JSONDecoder(), GENAI.read_text(encoding="utf-8"), 0
    while text[pos:].strip():
        span, end = decoder.raw_decode(text, pos + len(text[pos:]) - len(text[pos:].lstrip()))
        pos = end
        if "tool_call_response" in span["attributes"]["gen_ai.input.messages"]:
            return dict(span["attributes"])
    raise AssertionError("the fixture has no tool turn")


def _the_tool_conversation(call: NodeCall) -> None:
    """The assembled prompt and the reply of the tool turn, as the parts messages say."""
    assert call.prompt is not None
    roles = [m.role for m in call.prompt.assembled]
    assert roles == ["user", "assistant", "tool"], roles
    assert call.prompt.assembled[0].content == "How is the weather in Lyon?"
    call_part = json.loads(call.prompt.assembled[1].content)[0]
    assert (call_part["type"], call_part["name"], call_part["arguments"]) == ("tool_call", "get_weather",
                                                                               {"city": "Lyon"})
    result_part = json.loads(call.prompt.assembled[2].content)[0]
    assert result_part["type"] == "tool_call_response" and json.loads(result_part["response"])["sky"] == "sunny"
    assert call.response is not None and call.response.finish_reason == "stop"
    assert call.response.content == call.output == "Lyon is sunny and mild today, with a light westerly breeze."


def test_parts_messages_in_openinference_input_and_output_value_are_the_prompt_and_reply() -> None:
    genai = _tool_turn()
    reply = json.loads(genai["gen_ai.output.messages"])[0]
    for output in ({"text": reply["parts"][0]["content"], "finish_reason": reply["finish_reason"]}, [reply]):
        span = {"openinference.span.kind": "LLM", "llm.model_name": genai["gen_ai.request.model"],
                "input.value": genai["gen_ai.input.messages"], "input.mime_type": "application/json",
                "output.value": json.dumps(output), "output.mime_type": "application/json",
                "llm.token_count.prompt": genai["gen_ai.usage.input_tokens"]}
        result = quiver.import_traces("openinference", [span])
        assert result.problems == []
        (call,) = _llm_calls(result.traces)
        _the_tool_conversation(call)
        assert call.response is not None and call.response.usage == {"prompt_tokens": 10}


def test_parts_messages_in_gen_ai_prompt_and_completion_are_the_prompt_and_reply() -> None:
    genai = _tool_turn()
    reply = json.loads(genai.pop("gen_ai.output.messages"))[0]
    genai["gen_ai.prompt"] = genai.pop("gen_ai.input.messages")
    del genai["gen_ai.response.finish_reasons"]  # the reason comes from the completion
    for completion in ({"text": reply["parts"][0]["content"], "finish_reason": reply["finish_reason"]}, [reply]):
        result = quiver.import_traces("otel-genai", [{**genai, "gen_ai.completion": json.dumps(completion)}])
        assert result.problems == []
        (call,) = _llm_calls(result.traces)
        _the_tool_conversation(call)
        assert "gen_ai.completion" not in call.tags.get("otel", {})  # read, not kept aside


def test_parts_messages_in_strands_span_events_are_the_prompt_and_reply() -> None:
    result = quiver.import_traces("auto", STRANDS)
    assert result.format == "otel-genai" and result.problems == []
    (trace,) = result.traces
    first, second = _llm_calls(result.traces)
    assert first.prompt is not None and [(m.role, m.content) for m in first.prompt.assembled] == [
        ("system", "Answer in one sentence."), ("user", "How is the weather in Lyon?")]
    assert first.response is not None and first.response.finish_reason == "tool_use"
    (part,) = first.output[0]["parts"]
    assert (part["type"], part["name"], part["arguments"]) == ("tool_call", "get_weather", {"city": "Lyon"})
    assert second.prompt is not None and [m.role for m in second.prompt.assembled] == [
        "system", "user", "assistant", "user"]
    assert "tool_call_response" in second.prompt.assembled[-1].content
    assert second.response is not None and second.output == second.response.content == \
        "Lyon is sunny and mild today, with a light westerly breeze."
    (tool,) = [c for c in trace.calls if c.kind == "tool"]
    assert tool.tool is not None and tool.tool.name == "get_weather"
    for call in (first, second):  # the message events were read, not kept in tags
        events = call.tags.get("otel.span", {}).get("events", [])
        assert not any("gen_ai.input.messages" in e["attributes"] or "gen_ai.output.messages" in e["attributes"]
                       for e in events), events


def test_an_object_of_named_span_lists_imports_as_its_spans() -> None:
    lists = json.loads(BY_OPERATION.read_text(encoding="utf-8"))
    assert set(lists) == {"ai.generateText", "ai.generateText.doGenerate", "ai.toolCall"}
    result = quiver.import_traces("auto", BY_OPERATION)
    assert result.problems == [] and result.notes == []
    assert result.spans_read == sum(len(v) for v in lists.values()) == 6
    capital, weather = result.traces
    assert [(c.node, c.kind, c.parents) for c in capital.calls[1:]] == [
        ("ai.generateText", "transform", ["c0"]), ("ai.generateText.doGenerate", "llm", ["c1"])]
    assert [(c.node, c.kind) for c in weather.calls[1:]] == [
        ("ai.generateText", "transform"), ("ai.generateText.doGenerate", "llm"), ("ai.toolCall", "tool"),
        ("ai.generateText.doGenerate", "llm")]
    assert all(c.parents == ["c1"] for c in weather.calls[2:])  # the structure the span ids give
    assert weather.output == "Lyon is sunny and mild today, with a light westerly breeze."


def test_js_spans_without_ids_import_as_one_flat_trace_with_a_note(tmp_path: Path) -> None:
    result = quiver.import_traces("auto", NO_IDS)
    assert result.problems == []
    (trace,) = result.traces
    calls = trace.calls[1:]
    assert [c.node for c in calls] == [s["name"] for s in json.loads(NO_IDS.read_text(encoding="utf-8"))]
    assert all(c.parents == ["c0"] and "/" not in c.call_path for c in calls)
    (note,) = result.notes
    assert note.startswith(f"{NO_IDS}: 4 spans carry no span, parent or trace id: imported as one trace with every "
                           "call at the top level, in the order of the file")
    # the same calls as the same program's spans written with their ids
    with_ids = quiver.import_traces("auto", BY_OPERATION).traces[1]
    assert Counter((c.node, c.kind, json.dumps(c.output, sort_keys=True)) for c in calls) == \
        Counter((c.node, c.kind, json.dumps(c.output, sort_keys=True)) for c in with_ids.calls[1:])
    cli = run_cli(["import", "auto", str(NO_IDS), "--out", str(tmp_path / "out.jsonl")])
    assert cli.code == 0 and cli.stderr == ""
    assert f"note: {note}" in cli.stdout.splitlines()
    assert "into 1 trace(s)" in cli.stdout
