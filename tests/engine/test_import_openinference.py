"""Importing OpenInference spans: each fixture against its own attributes, and broken input.

The fixtures are real spans from the OpenInference repository (tests/data/traces/
openinference, see NOTICE.md) and a retriever trace this project wrote
(tests/data/traces/retrieval). Every assertion reads the expected value from the
file itself.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

import quiver
from quiver import NodeCall, Trace, content_hash
from quiver._importers import summary_key

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
CLIENT_SPAN = DATA / "openinference" / "openinference_client_span_tool_calls.json"
GENAI_SPAN = DATA / "openinference" / "otel_genai_client_span_tool_calls.json"
RETRIEVER = DATA / "retrieval" / "retriever_span.json"


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _only_call(result: quiver.ImportResult) -> NodeCall:
    [trace] = result.traces
    assert [c.call_id for c in trace.calls] == ["c0", "c1"]
    return trace.calls[1]


def assert_nothing_dropped(attributes: dict[str, Any], call: NodeCall, result: quiver.ImportResult) -> None:
    """Every non-empty attribute is either mapped (counted in the summary) or kept in the call's tags."""
    kept = call.tags.get("otel", {})
    mapped = result.summary()["attributes"]["mapped"]
    for key, value in attributes.items():
        if value in (None, "", [], {}):
            continue
        assert key in kept or summary_key(key) in mapped, key
        if key in kept:
            assert kept[key] == value


# --------------------------------------------------------------------------- the client span fixture


def test_an_llm_span_maps_model_params_and_output_from_its_attributes() -> None:
    attrs = _load(CLIENT_SPAN)
    result = quiver.import_traces("openinference", CLIENT_SPAN)
    call = _only_call(result)
    assert call.kind == "llm" and call.parents == ["c0"]
    assert call.model is not None and call.model.name == attrs["llm.model_name"]
    assert call.model.params == json.loads(attrs["llm.invocation_parameters"])
    assert call.output == attrs["llm.output_messages.0.message.contents.0.message_content.text"]  # the reply
    assert call.tags["otel"]["output.value"] == attrs["output.value"]  # as written, in tags
    assert call.input_hash == content_hash(json.loads(attrs["input.value"]))
    assert call.response is not None
    assert call.response.content == attrs["llm.output_messages.0.message.contents.0.message_content.text"]
    assert call.response.usage == {"prompt_tokens": attrs["llm.token_count.prompt"],
                                   "completion_tokens": attrs["llm.token_count.completion"],
                                   "total_tokens": attrs["llm.token_count.total"]}
    assert_nothing_dropped(attrs, call, result)
    assert result.ok


def test_input_messages_keep_their_roles_texts_and_tool_calls() -> None:
    attrs = _load(CLIENT_SPAN)
    call = _only_call(quiver.import_traces("openinference", CLIENT_SPAN))
    assert call.prompt is not None
    msgs = call.prompt.assembled
    assert [m.role for m in msgs] == [attrs[f"llm.input_messages.{i}.message.role"] for i in range(3)]
    assert msgs[0].content == attrs["llm.input_messages.0.message.contents.0.message_content.text"]
    parts = json.loads(msgs[1].content)  # text and a tool call: the parts as JSON
    assert parts[0] == {"type": "text",
                        "content": attrs["llm.input_messages.1.message.contents.0.message_content.text"]}
    prefix = "llm.input_messages.1.message.tool_calls.0.tool_call"
    assert parts[1] == {"type": "tool_call", "id": attrs[f"{prefix}.id"], "name": attrs[f"{prefix}.function.name"],
                        "arguments": json.loads(attrs[f"{prefix}.function.arguments"])}
    assert json.loads(msgs[2].content) == [{"type": "tool_call_response",
                                            "id": attrs["llm.input_messages.2.message.tool_call_id"],
                                            "response": attrs["llm.input_messages.2.message.content"]}]


def test_the_same_call_in_both_conventions_assembles_the_same_messages() -> None:
    oi = _only_call(quiver.import_traces("openinference", CLIENT_SPAN))
    genai = _only_call(quiver.import_traces("otel-genai", GENAI_SPAN))
    assert oi.prompt is not None and genai.prompt is not None
    assert oi.prompt.assembled == genai.prompt.assembled
    assert oi.output == genai.output and oi.input_hash == genai.input_hash


def test_a_span_without_ids_is_a_single_call_trace_named_after_its_kind() -> None:
    attrs = _load(CLIENT_SPAN)
    [trace] = quiver.import_traces("openinference", CLIENT_SPAN).traces
    assert trace.calls[1].node == attrs["openinference.span.kind"].lower()
    assert trace.inputs == json.loads(attrs["input.value"])
    assert trace.input_id == "in-" + content_hash(trace.inputs)[7:23]
    assert trace.calls[0].output == trace.inputs and trace.calls[0].kind == "source"


# --------------------------------------------------------------------------- retrieval documents


def test_retrieval_documents_are_content_hashed_and_ranked() -> None:
    spans = _load(RETRIEVER)
    result = quiver.import_traces("openinference", RETRIEVER)
    [trace] = result.traces
    span = next(s for s in spans if s["attributes"]["openinference.span.kind"] == "RETRIEVER")
    call = next(c for c in trace.calls if c.node == span["name"])
    assert call.kind == "retrieval" and call.retrieval is not None
    attrs = span["attributes"]
    n = len({k.split(".")[2] for k in attrs if k.startswith("retrieval.documents.")})
    assert len(call.retrieval) == n
    for i, doc in enumerate(call.retrieval):
        p = f"retrieval.documents.{i}.document"
        assert (doc.doc_id, doc.content_hash, doc.score, doc.rank) == (
            attrs[f"{p}.id"], content_hash(attrs[f"{p}.content"]), attrs[f"{p}.score"], i)
    # without an output.value of its own, the documents (with their texts) are the output
    assert [d["content"] for d in call.output] == [attrs[f"retrieval.documents.{i}.document.content"] for i in range(n)]
    assert result.ok


def test_a_trace_of_spans_has_parents_paths_and_times_from_the_span_tree() -> None:
    spans = _load(RETRIEVER)
    [trace] = quiver.import_traces("openinference", RETRIEVER).traces
    by_span = {s["context"]["span_id"]: s for s in spans}
    root = next(s for s in spans if s["parent_id"] is None)
    ids = {c.node: c.call_id for c in trace.calls}
    assert [c.node for c in trace.calls[1:]] == [s["name"] for s in sorted(spans, key=lambda s: s["start_time"])]
    for call in trace.calls[1:]:
        span = next(s for s in spans if s["name"] == call.node)
        parent = by_span.get(span["parent_id"])
        assert call.parents == ([ids[parent["name"]]] if parent else ["c0"])
        assert call.call_path == (f"{root['name']}#0/{call.node}#0" if parent else f"{call.node}#0")
    assert trace.inputs == json.loads(root["attributes"]["input.value"])
    assert trace.output == root["attributes"]["output.value"]  # text/plain stays text
    llm = next(c for c in trace.calls if c.kind == "llm")
    assert (llm.started_at, llm.ended_at) == (0.2, 1.24)
    assert llm.tags == {"otel.span": {"kind": "CLIENT"}}


def test_a_retriever_with_its_own_output_keeps_the_document_texts_in_tags() -> None:
    spans = _load(RETRIEVER)
    span = next(s for s in spans if s["attributes"]["openinference.span.kind"] == "RETRIEVER")
    span["attributes"]["output.value"] = json.dumps(["HC-101", "HC-077", "KI-12"])
    [trace] = quiver.import_traces("openinference", spans).traces
    call = next(c for c in trace.calls if c.kind == "retrieval")
    assert call.output == ["HC-101", "HC-077", "KI-12"]
    kept = call.tags["otel"]
    for key in ("retrieval.documents.0.document.content", "retrieval.documents.0.document.metadata"):
        assert kept[key] == span["attributes"][key]


def test_group_by_session_and_node_names_by_kind() -> None:
    spans = _load(RETRIEVER)
    root = next(s for s in spans if s["parent_id"] is None)
    result = quiver.import_traces("openinference", RETRIEVER, group_by="session", node_name="kind+name")
    [trace] = result.traces
    assert trace.input_id == root["attributes"]["session.id"]
    assert [c.node for c in trace.calls[1:]] == [
        f"{s['attributes']['openinference.span.kind'].lower()}:{s['name']}"
        for s in sorted(spans, key=lambda s: s["start_time"])]
    with pytest.raises(quiver.QuiverError, match="group_by must be"):
        quiver.import_traces("openinference", RETRIEVER, group_by="color")


# --------------------------------------------------------------------------- export details


def _hand_made() -> Trace:
    """A trace with what support_bot does not record: nesting, errors, a failed status, a tool response."""
    calls = [
        NodeCall(call_id="c0", node="input", occurrence=0, call_path="input#0", kind="source", output={"q": "x"}),
        NodeCall(call_id="c1", node="agent", occurrence=0, call_path="agent#0", kind="transform", parents=["c0"],
                 input_hash="sha256:aa", output=None, started_at=0.0, ended_at=0.9,
                 error={"type": "ValueError", "message": "no answer"}),
        NodeCall(call_id="c2", node="search", occurrence=0, call_path="agent#0/[0]/search#0", kind="tool",
                 parents=["c0"], input_hash="sha256:bb", output="3 hits", started_at=0.1, ended_at=0.2,
                 tool={"name": "search", "args": {"q": "x"}, "response": {"hits": 3},
                       "response_hash": content_hash({"hits": 3})}, tags={"note": "é"}),
        NodeCall(call_id="c3", node="search", occurrence=1, call_path="agent#0/[1]/search#0", kind="retrieval",
                 parents=["c2"], input_hash="sha256:cc", output=[], retrieval=[], started_at=0.1, ended_at=0.25),
        NodeCall(call_id="c4", node="answer", occurrence=0, call_path="agent#0/answer#0", kind="llm",
                 parents=["c2", "c3"], input_hash="sha256:dd", output="42", iteration=1, loop="refine",
                 model={"name": "m", "version": "m-1", "params": {"temperature": 0.5}},
                 prompt={"template_id": "t", "template_hash": "sha256:ee", "assembled": [
                     {"role": "user", "content": "what?"}], "fragments": ["sha256:ff"]},
                 response={"content": "42", "finish_reason": "stop", "usage": {"total_tokens": 3, "cached": 1},
                           "attempts": 2}, decision={"route": "a"}, started_at=0.3, ended_at=0.8),
    ]
    return Trace(trace_id="run-1/q/0", run_id="run-1", pipeline="p", input_id="q", repeat=0, inputs={"q": "x"},
                 calls=calls, output=None, status="failed", error={"type": "ValueError", "message": "no answer"},
                 tags={"loops": {"refine": {"k_max": 2, "iterations": [2]}}})


def test_export_nests_spans_as_the_call_paths_nest_and_imports_back() -> None:
    trace = _hand_made()
    spans = quiver.export_openinference([trace])
    by_call = {s["attributes"].get("quiver.call_id"): s for s in spans}
    agent = by_call["c1"]
    assert by_call[None]["parent_id"] is None and agent["parent_id"] == by_call[None]["context"]["span_id"]
    for cid in ("c2", "c3", "c4"):  # branch segments [i] do not make spans
        assert by_call[cid]["parent_id"] == agent["context"]["span_id"]
    assert agent["status"] == {"status_code": "ERROR", "description": "no answer"}
    assert agent["events"][0]["attributes"]["exception.type"] == "ValueError"
    result = quiver.import_traces("openinference", spans)
    assert result.ok, [str(p) for p in result.problems]
    [back] = result.traces
    data = back.model_dump(mode="json")
    data["tags"].pop("import")
    assert data == trace.model_dump(mode="json")


# --------------------------------------------------------------------------- broken input


@pytest.fixture
def spans() -> list[dict[str, Any]]:
    """Three traces of OpenInference spans with nesting, from the exporter."""
    traces = []
    for i in range(3):
        t = _hand_made()
        traces.append(t.model_copy(update={"trace_id": f"run-1/q{i}/0", "input_id": f"q{i}"}))
    return quiver.export_openinference(traces)


def _by_id(result: quiver.ImportResult) -> dict[str, dict[str, Any]]:
    out = {}
    for t in result.traces:
        data = t.model_dump(mode="json")
        data["tags"]["import"].pop("sources")
        out[t.trace_id] = data
    return out


def test_spans_in_random_order_give_the_same_traces(spans: list[dict[str, Any]]) -> None:
    expected = _by_id(quiver.import_traces("openinference", spans))
    for seed in range(5):
        shuffled = spans[:]
        random.Random(seed).shuffle(shuffled)
        assert _by_id(quiver.import_traces("openinference", shuffled)) == expected


def test_spans_in_random_order_give_the_same_calls_without_quiver_attributes(spans: list[dict[str, Any]]) -> None:
    plain = copy.deepcopy(spans)
    for span in plain:
        span["attributes"] = {k: v for k, v in span["attributes"].items() if not k.startswith("quiver.")}
    expected = _by_id(quiver.import_traces("openinference", plain))
    shuffled = plain[:]
    random.Random(7).shuffle(shuffled)
    assert _by_id(quiver.import_traces("openinference", shuffled)) == expected
    some = next(iter(expected.values()))
    assert [c["node"] for c in some["calls"]] == ["input", "p", "agent", "search", "search", "answer"]


def test_a_missing_parent_makes_a_root_level_call_and_a_problem(spans: list[dict[str, Any]]) -> None:
    agent = next(s for s in spans if s["attributes"].get("quiver.call_id") == "c1")
    kept = [s for s in spans if s is not agent]
    for span in kept:
        span["attributes"] = {k: v for k, v in span["attributes"].items() if not k.startswith("quiver.")}
    result = quiver.import_traces("openinference", kept)
    orphans = [s for s in kept if s["parent_id"] == agent["context"]["span_id"]]
    assert sorted(p.span_id for p in result.problems) == sorted(s["context"]["span_id"][2:] for s in orphans)
    assert all("is not in trace" in p.what and "root-level" in p.what for p in result.problems)
    trace = next(t for t in result.traces if t.tags["import"]["trace_id"] == agent["context"]["trace_id"][2:])
    assert len(trace.calls) == 1 + len([s for s in kept if s["context"]["trace_id"] == agent["context"]["trace_id"]])
    for call in trace.calls[1:]:
        if call.node in {s["name"] for s in orphans}:
            assert call.parents == ["c0"] and "/" not in call.call_path


def test_duplicated_span_ids_drop_identical_copies_and_rename_different_ones(spans: list[dict[str, Any]]) -> None:
    first = next(s for s in spans if s["attributes"].get("quiver.call_id") == "c4")
    same = copy.deepcopy(first)
    other = copy.deepcopy(first)
    other["attributes"]["output.value"] = "43"
    other["attributes"]["llm.output_messages.0.message.content"] = "43"
    other["attributes"].pop("quiver.call_id")
    result = quiver.import_traces("openinference", [*spans, same, other])
    sid = first["context"]["span_id"][2:]
    assert [p.span_id for p in result.problems][:2] == [sid, sid]
    assert "identical" in result.problems[0].what and "dropped" in result.problems[0].what
    assert f"kept as span {sid}~3" in result.problems[1].what
    trace = next(t for t in result.traces if t.tags["import"]["trace_id"] == first["context"]["trace_id"][2:])
    assert sorted(c.output for c in trace.calls if c.node == "answer") == ["42", "43"]


def test_a_parent_cycle_is_broken_and_reported(spans: list[dict[str, Any]]) -> None:
    plain = [s for s in copy.deepcopy(spans) if s["context"]["trace_id"] == spans[0]["context"]["trace_id"]]
    for span in plain:
        span["attributes"] = {k: v for k, v in span["attributes"].items() if not k.startswith("quiver.")}
    agent = next(s for s in plain if s["name"] == "agent")
    answer = next(s for s in plain if s["name"] == "answer")
    agent["parent_id"] = answer["context"]["span_id"]
    result = quiver.import_traces("openinference", plain)
    assert [p.span_id for p in result.problems] == [agent["context"]["span_id"][2:]]
    assert "cycle" in result.problems[0].what
    assert len(result.traces[0].calls) == 1 + len(plain)


def test_a_truncated_jsonl_file_imports_every_complete_line(spans: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    lines = [json.dumps(s) for s in spans]
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    result = quiver.import_traces("openinference", path)
    [problem] = result.problems
    assert problem.where == f"{path}:{len(lines)}" and problem.span_id == spans[-1]["context"]["span_id"][2:]
    assert "not valid JSON" in problem.what
    assert result.spans_read == len(spans) - 1 == len(result.traces) + result.calls


def test_a_truncated_json_array_imports_the_records_before_the_cut(spans: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "spans.json"
    text = json.dumps(spans, indent=1)
    cut = text.index(spans[5]["context"]["span_id"]) + 40
    path.write_text(text[:cut], encoding="utf-8")
    result = quiver.import_traces("openinference", path)
    assert result.spans_read == 5
    truncation = result.problems[0]
    assert truncation.span_id == spans[5]["context"]["span_id"][2:]
    assert truncation.where.startswith(f"{path}:") and "truncated" in truncation.what
    assert truncation.where.startswith(f"{path}:{1 + text[:cut].count(chr(10))}:")  # file:line:column


def test_gzipped_json_lines_import_like_plain_ones(spans: list[dict[str, Any]], tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(s) + "\n" for s in spans).encode("utf-8")))
    assert _by_id(quiver.import_traces("openinference", path)) == _by_id(quiver.import_traces("openinference", spans))


def test_records_that_are_not_spans_are_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(_load(CLIENT_SPAN)) + "\n42\n", encoding="utf-8")
    result = quiver.import_traces("openinference", path)
    assert len(result.traces) == 1
    assert [str(p) for p in result.problems] == [f"{path}:2: not a span: a JSON int; skipped"]
    with pytest.raises(quiver.QuiverError, match="no such file"):
        quiver.import_traces("openinference", tmp_path / "absent.json")
    with pytest.raises(quiver.QuiverError, match="unknown import format 'phoenix'"):
        quiver.import_traces("phoenix", path)
