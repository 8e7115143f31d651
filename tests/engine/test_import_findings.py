"""``quiver import`` as a new user meets it on span files written by other tools.

One test per thing that went wrong before: a file is imported whole and right, or
refused in one line (exit 2) that says what was found and which format reads it.
The span files come from ``tests/data/spans`` (real instrumentors and exporters) and
``tests/data/traces`` (others' fixtures); where a case needs a shape no producer here
writes, it is built from those spans.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from fuzzing import run_cli

import quiver
from quiver import load_traces
from quiver._importers import to_ns

TESTS = Path(__file__).resolve().parents[1]
SPANS = TESTS / "data" / "spans"
TRACES = TESTS / "data" / "traces"
CONSOLE = SPANS / "openinference-openai" / "chat_tools.console.json"
JSONL = SPANS / "openinference-openai" / "chat_tools.jsonl"
GENAI = SPANS / "otel-sdk" / "genai_openai_v2.console.json"
LANGFUSE_OTEL = SPANS / "langfuse" / "observe.otlp.json"
LANGFUSE_EXPORT = TRACES / "langfuse" / "pydantic-ai-2025-06-06.trace.json"


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path: Path, spans: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in spans), encoding="utf-8")
    return path


def _import(fmt: str, path: Path, tmp_path: Path, *extra: str) -> tuple[Any, list[quiver.Trace]]:
    out = tmp_path / f"{path.stem}.{fmt}.jsonl"
    result = run_cli(["import", fmt, str(path), "--out", str(out), *extra])
    return result, (load_traces(out).traces if result.code in (0, 1) else [])


# --------------------------------------------------------------------------- reading what exporters write


def test_console_exporter_output_is_read_whole(tmp_path: Path) -> None:
    """ConsoleSpanExporter writes pretty span.to_json() objects one after another (not an array)."""
    result, traces = _import("openinference", CONSOLE, tmp_path)
    assert result.code == 0, result.stderr
    assert [c.kind for t in traces for c in t.calls[1:]] == ["llm", "llm", "llm"]
    assert "reconciliation: 3 LLM -> 3 llm call(s); 0 dropped" in result.stdout


def test_an_otlp_protobuf_export_reads_as_its_json_form(tmp_path: Path) -> None:
    pb, _ = _import("otel-genai", SPANS / "langfuse" / "observe.otlp.pb", tmp_path)
    js, _ = _import("otel-genai", LANGFUSE_OTEL, tmp_path)
    assert pb.code == js.code == 0, pb.stderr
    a = quiver.import_traces("otel-genai", SPANS / "langfuse" / "observe.otlp.pb").traces
    b = quiver.import_traces("otel-genai", LANGFUSE_OTEL).traces
    assert [c.model_dump() for t in a for c in t.calls] == [c.model_dump() for t in b for c in t.calls]


def test_a_span_written_at_start_and_at_end_is_one_span(tmp_path: Path) -> None:
    path = SPANS / "otel-sdk" / "openinference_start_end.jsonl"
    records = _spans(path)
    assert len(records) == 6 and sum(r["end_time"] is None for r in records) == 3
    result, traces = _import("openinference", path, tmp_path)
    assert result.code == 0, result.stderr
    calls = [c for t in traces for c in t.calls[1:]]
    assert len(calls) == 3 and all(c.ended_at > c.started_at for c in calls)
    assert [c.occurrence for c in calls] == [0, 0, 0] and all(c.response and c.response.content for c in calls)
    assert "3 LLM -> 3 llm call(s); 3 record(s) merged into the same span" in result.stdout


def test_a_langgraph_trace_written_at_start_and_at_end_imports_as_written_once(tmp_path: Path) -> None:
    both = quiver.import_traces("openinference", SPANS / "otel-sdk" / "langchain_start_end.jsonl")
    ends = [r for r in _spans(SPANS / "otel-sdk" / "langchain_start_end.jsonl") if r["end_time"] is not None]
    once = quiver.import_traces("openinference", ends)
    assert both.problems == [] and both.reconciliation.merged == len(ends)
    assert [[(c.node, c.kind, c.output) for c in t.calls] for t in both.traces] == \
        [[(c.node, c.kind, c.output) for c in t.calls] for t in once.traces]


def _phoenix_records(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans as Phoenix's ``get_spans_dataframe()`` holds them, written with ``to_json(orient="records")``:
    a column per attribute (``attributes.llm.input_messages`` a list of ``message.*`` records), times in ms."""
    out = []
    for span in spans:
        nested: dict[str, Any] = {}
        for key, value in span["attributes"].items():
            head, _, rest = key.partition("_messages.")
            if rest:  # llm.input_messages.0.message.role -> attributes.llm.input_messages[0]["message.role"]
                index, _, field = rest.partition(".")
                rows = nested.setdefault(f"attributes.{head}_messages", [])
                rows += [{} for _ in range(int(index) + 1 - len(rows))]
                rows[int(index)][field] = value
            elif key != "openinference.span.kind":
                nested[f"attributes.{key}"] = value
        out.append({"name": span["name"], "span_kind": span["attributes"]["openinference.span.kind"],
                    "parent_id": span["parent_id"], "context.span_id": span["context"]["span_id"][2:],
                    "context.trace_id": span["context"]["trace_id"][2:], "status_code": "OK",
                    "start_time": to_ns(span["start_time"]) // 1_000_000,
                    "end_time": to_ns(span["end_time"]) // 1_000_000, **nested})
    return out


def test_a_phoenix_span_dataframe_export_imports_as_the_spans_do(tmp_path: Path) -> None:
    spans = _spans(JSONL)
    path = tmp_path / "phoenix.json"
    path.write_text(json.dumps(_phoenix_records(spans)), encoding="utf-8")
    result, traces = _import("openinference", path, tmp_path)
    assert result.code == 0, result.stderr
    direct = quiver.import_traces("openinference", JSONL).traces
    assert [(c.node, c.kind, c.output, c.prompt, c.response) for t in traces for c in t.calls] == \
        [(c.node, c.kind, c.output, c.prompt, c.response) for t in direct for c in t.calls]


# --------------------------------------------------------------------------- refusals


def _named_lists(tmp_path: Path) -> Path:
    """An object of named lists whose items are not spans (a test harness's results by name)."""
    path = tmp_path / "named.json"
    results = [{"scopeName": s["attributes"]["openinference.span.kind"], "spanName": s["name"], "success": True}
               for s in _spans(JSONL)]
    path.write_text(json.dumps({"run-a": results[:2], "run-b": results[2:]}), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["openinference", "auto"])
def test_an_object_of_named_span_lists_imports_as_its_spans(fmt: str, tmp_path: Path) -> None:
    path = tmp_path / "named.json"
    path.write_text(json.dumps({"run-a": _spans(JSONL)[:2], "run-b": _spans(JSONL)[2:]}), encoding="utf-8")
    result, traces = _import(fmt, path, tmp_path)
    assert result.code == 0, result.stderr
    direct = quiver.import_traces("openinference", JSONL).traces
    assert [(c.node, c.kind, c.output, c.prompt, c.response) for t in traces for c in t.calls] == \
        [(c.node, c.kind, c.output, c.prompt, c.response) for t in direct for c in t.calls]


def _scope_records(tmp_path: Path) -> Path:
    records = [{"scopeName": "openinference.instrumentation.openai", "spanName": s["name"],
                "attributes": s["attributes"]} for s in _spans(JSONL)]
    return _write(tmp_path / "records.jsonl", records)


@pytest.mark.parametrize("make", [_named_lists, _scope_records], ids=["named span lists", "scope records"])
@pytest.mark.parametrize("fmt", ["openinference", "otel-genai", "auto"])
def test_a_file_of_no_known_shape_is_refused_in_one_line(make: Any, fmt: str, tmp_path: Path) -> None:
    path = make(tmp_path)
    result = run_cli(["import", fmt, str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.code == 2 and not (tmp_path / "out.jsonl").exists()
    (line,) = result.error_lines()
    assert str(path) in line and ("not a span file" in line or "no span of a format" in line)
    assert "resourceSpans" in line  # what would be read
    if make is _named_lists:  # what was found
        assert "an object of 2 named list(s) ('run-a', 'run-b') whose items are not spans" in line, line


@pytest.mark.parametrize("path, asked, reads", [
    (CONSOLE, "otel-genai", "openinference"),
    (GENAI, "openinference", "otel-genai"),
    (LANGFUSE_OTEL, "openinference", "otel-genai"),
    (LANGFUSE_EXPORT, "otel-genai", "langfuse"),
    (CONSOLE, "langfuse", "openinference"),
])
def test_a_file_in_another_format_is_refused_naming_the_format_that_reads_it(path: Path, asked: str, reads: str,
                                                                            tmp_path: Path) -> None:
    result = run_cli(["import", asked, str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.code == 2, result.stdout
    (line,) = result.error_lines()
    assert f"`quiver import {reads}`" in line and f"not {asked} spans" in line
    detected, _ = _import("auto", path, tmp_path)
    assert detected.code == 0 and f"file(s) as {reads} into" in detected.stdout


def test_an_llm_call_stays_an_llm_call_whatever_the_format_asked() -> None:
    with pytest.raises(quiver.QuiverError, match="import it with `quiver import openinference`"):
        quiver.import_traces("otel-genai", CONSOLE)


# --------------------------------------------------------------------------- content outside the expected shapes


def _genai_span(**attributes: Any) -> dict[str, Any]:
    span = copy.deepcopy(_spans(SPANS / "openllmetry" / "openai_tools.jsonl")[0])
    span["attributes"] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "fixture-chat", **attributes}
    return span


def test_the_deprecated_prompt_and_completion_attributes_and_events_are_read() -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = [{"role": "assistant", "content": "Paris, on the Seine."}]
    flat = _genai_span(**{"gen_ai.prompt": json.dumps(messages), "gen_ai.completion": json.dumps(reply)})
    events = _genai_span()
    events["events"] = [{"name": "gen_ai.content.prompt", "timestamp": events["start_time"],
                         "attributes": {"gen_ai.prompt": json.dumps(messages)}},
                        {"name": "gen_ai.content.completion", "timestamp": events["end_time"],
                         "attributes": {"gen_ai.completion": json.dumps(reply)}}]
    for span in (flat, events):
        [trace] = quiver.import_traces("otel-genai", [span]).traces
        call = trace.calls[1]
        assert call.prompt is not None and call.prompt.assembled[0].content == "What is the capital of France?"
        assert call.response is not None and call.output == call.response.content == "Paris, on the Seine."
        assert "events" not in call.tags.get("otel.span", {})  # read, not kept


def test_usage_and_finish_reason_are_mapped_without_output_messages() -> None:
    span = _genai_span(**{"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3,
                          "gen_ai.response.finish_reasons": ["length"]})
    [trace] = quiver.import_traces("otel-genai", [span]).traces
    call = trace.calls[1]
    assert call.response is not None and call.response.usage == {"prompt_tokens": 12, "completion_tokens": 3}
    assert call.response.finish_reason == "length" and "otel" not in call.tags


def test_an_llm_call_operation_is_an_llm_call() -> None:
    [trace] = quiver.import_traces("otel-genai", [_genai_span(**{"gen_ai.operation.name": "llm_call"})]).traces
    assert trace.calls[1].kind == "llm"


def test_a_gemini_parts_output_is_the_reply() -> None:
    span = _spans(JSONL)[0]
    for key in [k for k in span["attributes"] if k.startswith("llm.output_messages")]:
        del span["attributes"][key]
    span["attributes"]["output.value"] = json.dumps({"role": "model", "parts": [{"text": "Paris, on the Seine."}]})
    [trace] = quiver.import_traces("openinference", [span]).traces
    call = trace.calls[1]
    assert call.output == "Paris, on the Seine." and call.response is not None
    assert call.response.content == "Paris, on the Seine."


# --------------------------------------------------------------------------- the compared output


@pytest.mark.parametrize("written", [{"parts": [{"text": "see the messages"}]}, {}], ids=["parts", "empty"])
def test_a_changed_reply_diverges_whatever_output_value_holds(written: Any, tmp_path: Path) -> None:
    span = _spans(JSONL)[0]
    span["attributes"]["output.value"] = json.dumps(written)
    other = copy.deepcopy(span)
    other["attributes"]["llm.output_messages.0.message.content"] = "Lyon is the capital of France."
    corpus = {}
    for name, s in (("a", span), ("b", other)):
        corpus[name] = tmp_path / f"{name}.jsonl"
        assert run_cli(["import", "openinference", str(_write(tmp_path / f"{name}.spans.jsonl", [s])),
                        "--out", str(corpus[name])]).code == 0
    trace_id = load_traces(corpus["a"]).traces[0].trace_id
    diff = run_cli(["diff", f"{corpus['a']}:{trace_id}", f"{corpus['b']}:{trace_id}", "--json"])
    first = json.loads(diff.stdout)["first_divergence"]
    assert first is not None and first["node"] == "ChatCompletion" and first["cause"] == "sampling"


def _langfuse_generation(run: int) -> dict[str, Any]:
    data = json.loads(LANGFUSE_EXPORT.read_text(encoding="utf-8"))
    gen = copy.deepcopy(next(o for o in data["observations"] if o["type"] == "GENERATION"))
    gen["parentObservationId"] = gen["usageDetails"] = None  # the usage is the reply's
    gen["output"] = {
        "content": "Paris, on the Seine.", "type": "ai", "id": f"run-{run:08x}-aaaa-bbbb-cccc-000000000000",
        "additional_kwargs": {}, "tool_calls": [],
        "response_metadata": {"finish_reason": "stop", "model_name": "gpt-4o", "system_fingerprint": f"fp_{run}",
                              "id": f"chatcmpl-{run}", "token_usage": {"prompt_tokens": 10 + run}},
        "usage_metadata": {"input_tokens": 10 + run, "output_tokens": 5, "total_tokens": 15 + run}}
    chain = {**copy.deepcopy(gen), "id": f"chain-{gen['id']}", "type": "SPAN", "model": None, "name": "agent",
             "output": {"thread_id": f"thread_{run}abc", "assistant_id": f"asst_{run}xyz", "run_id": f"run_{run}q",
                        "created_at": 1749650243 + run, "answer": "Paris"}}
    return {"trace": {**data["trace"], "observations": []}, "observations": [gen, chain]}


def test_langfuse_outputs_leave_ids_times_and_usage_out_of_the_comparison(tmp_path: Path) -> None:
    corpus = {}
    for run in (1, 2):
        path = tmp_path / f"run{run}.json"
        path.write_text(json.dumps(_langfuse_generation(run)), encoding="utf-8")
        corpus[run] = tmp_path / f"run{run}.jsonl"
        assert run_cli(["import", "langfuse", str(path), "--out", str(corpus[run])]).code == 0
    [a], [b] = load_traces(corpus[1]).traces, load_traces(corpus[2]).traces
    llm = a.calls[1]
    assert llm.output == "Paris, on the Seine." and llm.response is not None
    assert llm.response.usage == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    assert llm.response.finish_reason == "stop"
    assert a.calls[2].output == {"answer": "Paris"}
    diff = run_cli(["diff", f"{corpus[1]}:{a.trace_id}", f"{corpus[2]}:{b.trace_id}", "--json"])
    assert json.loads(diff.stdout)["first_divergence"] is None, diff.stdout


# --------------------------------------------------------------------------- names, grouping, parents


def test_a_model_swap_is_a_model_change_not_another_node(tmp_path: Path) -> None:
    text = GENAI.read_text(encoding="utf-8")
    swapped = tmp_path / "swapped.json"
    swapped.write_text(text.replace("fixture-chat", "fixture-chat-mini"), encoding="utf-8")
    corpus = {}
    for name, path in (("a", GENAI), ("b", swapped)):
        result, traces = _import("otel-genai", path, tmp_path)
        assert result.code == 0 and {c.node for t in traces for c in t.calls[1:]} == {"chat"}
        corpus[name] = tmp_path / f"{path.stem}.otel-genai.jsonl"
    trace_id = load_traces(corpus["a"]).traces[0].trace_id
    diff = json.loads(run_cli(["diff", f"{corpus['a']}:{trace_id}", f"{corpus['b']}:{trace_id}",
                               "--json"]).stdout)
    assert diff["only_a"] == diff["only_b"] == [] and diff["changed_nodes"] == []
    assert {(c["dimension"], c["call"]) for c in diff["changes"]} == {("model", "chat#0")}


@pytest.mark.parametrize("key", ["resource.service.name", "attribute.service.name"])
def test_group_by_takes_resource_attributes(key: str, tmp_path: Path) -> None:
    result, traces = _import("openinference", CONSOLE, tmp_path, "--group-by", key)
    assert result.code == 0, result.stderr
    assert {t.input_id for t in traces} == {"span-fixtures"} and [t.repeat for t in traces] == [0, 1, 2]


def test_children_of_an_all_zero_root_id_are_repaired_to_the_root_with_a_warning(tmp_path: Path) -> None:
    spans = _spans(SPANS / "openinference-langchain" / "chain.jsonl")
    root = next(s for s in spans if s["parent_id"] is None)
    old, zero = root["context"]["span_id"], "0x0000000000000000"
    for span in spans:
        if span["context"]["span_id"] == old:
            span["context"]["span_id"] = zero
        if span["parent_id"] == old:
            span["parent_id"] = zero
    result, traces = _import("openinference", _write(tmp_path / "zero.jsonl", spans), tmp_path)
    assert result.code == 1
    children = sum(s["parent_id"] == zero for s in spans)
    assert f"{children} span(s) name the invalid span id 0000000000000000 as their parent; attached to the " \
           f"trace's root span '{root['name']}'" in result.stderr
    [trace] = traces
    top = [c for c in trace.calls[1:] if c.parents == ["c0"]]
    assert [c.node for c in top] == [root["name"]] and len(trace.calls) == 1 + len(spans)


def test_a_missing_parent_in_a_file_without_trace_ids_names_no_none(tmp_path: Path) -> None:
    spans = _spans(SPANS / "openinference-langchain" / "chain.jsonl")
    for span in spans:
        span["context"].pop("trace_id")
    spans = [s for s in spans if s["parent_id"] is not None]
    result, _ = _import("openinference", _write(tmp_path / "no_trace_ids.jsonl", spans), tmp_path)
    assert result.code == 1 and "not in the spans read; imported as a root-level call" in result.stderr
    assert "None" not in result.stderr
