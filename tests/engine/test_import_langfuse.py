"""Importing Langfuse trace exports: every framework's file against its own observations.

Fixtures: tests/data/traces/langfuse (from the Langfuse repository; see NOTICE.md),
one exported trace per agent framework. Every expectation is read from the file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import quiver
from quiver import NodeCall, Trace, content_hash
from quiver._importers import to_ns
from quiver._importers.reply import reply_of, reply_output, without_volatile

DATA = Path(__file__).resolve().parents[1] / "data" / "traces" / "langfuse"
FILES = sorted(DATA.glob("*.trace.json"))
TYPE_KINDS = {"GENERATION": "llm", "TOOL": "tool", "RETRIEVER": "retrieval"}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _parse(value: Any) -> Any:
    """A Langfuse value as the importer reads it: JSON where it is JSON (twice for JSON in a JSON string)."""
    for attempt in range(2):
        if not isinstance(value, str) or (attempt and value.lstrip()[:1] not in "{["):
            return value
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return value


def _otel_attributes(obs: dict[str, Any]) -> dict[str, Any]:
    meta = _parse(obs.get("metadata"))
    return meta.get("attributes", {}) if isinstance(meta, dict) else {}


def _expected_kind(obs: dict[str, Any]) -> str:
    """The documented rule: the type, and for a SPAN the OTel attributes Langfuse kept."""
    if obs["type"] != "SPAN":
        return TYPE_KINDS.get(obs["type"], "transform")
    attrs = _otel_attributes(obs)
    if attrs.get("openinference.span.kind"):
        return TYPE_KINDS.get({"LLM": "GENERATION"}.get(attrs["openinference.span.kind"],
                                                        attrs["openinference.span.kind"]), "transform")
    if attrs.get("gen_ai.operation.name") == "execute_tool" or "gen_ai.tool.name" in attrs or "tool.name" in attrs:
        return "tool"
    return "transform"


@pytest.fixture(scope="module", params=FILES, ids=[f.name.split("-20")[0] for f in FILES])
def export(request: pytest.FixtureRequest) -> tuple[dict[str, Any], Trace, quiver.ImportResult]:
    result = quiver.import_traces("langfuse", request.param)
    [trace] = result.traces
    return _load(request.param), trace, result


def _call_of(trace: Trace, ids: dict[str, str], obs: dict[str, Any]) -> NodeCall:
    return next(c for c in trace.calls if c.call_id == ids[obs["id"]])


def _ids(data: dict[str, Any], trace: Trace) -> dict[str, str]:
    """Observation id -> call id, matched by the start order the importer documents."""
    by_start = sorted(data["observations"], key=lambda o: (o["startTime"], o["id"]))
    calls = {(c.node, c.started_at): c.call_id for c in trace.calls[1:]}
    t0 = min(to_ns(o["startTime"]) for o in data["observations"])
    return {o["id"]: calls[(o["name"], (to_ns(o["startTime"]) - t0) / 1e9)] for o in by_start}


def test_every_observation_is_one_call_with_its_name_and_parent(export: Any) -> None:
    data, trace, result = export
    assert result.ok, [str(p) for p in result.problems]
    observations = data["observations"]
    assert len(trace.calls) == 1 + len(observations) and result.spans_read == len(observations)
    ids = _ids(data, trace)
    for obs in observations:
        call = _call_of(trace, ids, obs)
        assert call.node == obs["name"]
        parent = obs["parentObservationId"]
        assert call.parents == ([ids[parent]] if parent else ["c0"])
        parent_path = ""
        if parent:
            parent_path = _call_of(trace, ids, next(o for o in observations if o["id"] == parent)).call_path
        assert call.call_path.startswith(f"{parent_path}/{obs['name']}#" if parent else f"{obs['name']}#")


def test_call_ids_follow_the_span_tree_depth_first_by_start_time(export: Any) -> None:
    data, trace, _ = export
    ids = _ids(data, trace)
    children: dict[Any, list[dict[str, Any]]] = {}
    for obs in data["observations"]:
        children.setdefault(obs["parentObservationId"], []).append(obs)
    order: list[str] = []

    def walk(parent: Any) -> None:
        for obs in sorted(children.get(parent, []), key=lambda o: (o["startTime"], o["id"])):
            order.append(obs["id"])
            walk(obs["id"])

    walk(None)
    assert [ids[i] for i in order] == [f"c{i}" for i in range(1, len(order) + 1)]
    occurrences: dict[str, int] = {}
    for call in trace.calls[1:]:
        assert call.occurrence == occurrences.get(call.node, 0)
        occurrences[call.node] = call.occurrence + 1


def test_kinds_follow_the_observation_types(export: Any) -> None:
    data, trace, _ = export
    ids = _ids(data, trace)
    for obs in data["observations"]:
        assert _call_of(trace, ids, obs).kind == _expected_kind(obs), obs["name"]


def test_generations_carry_their_model_params_prompt_and_output(export: Any) -> None:
    data, trace, _ = export
    ids = _ids(data, trace)
    for obs in data["observations"]:
        call = _call_of(trace, ids, obs)
        written = _parse(obs["output"])
        reply = reply_of(written) if call.kind == "llm" and written is not None else None
        if reply is not None:  # a generation's compared output is its reply
            assert call.response is not None and call.response.content == reply.text
            assert call.output == (written if written == reply.text else reply_output(reply))
        else:  # anything else: what was written, less the ids, times and usage made afresh for every call
            assert call.output == without_volatile(written)
        if call.output != written:
            assert call.tags["langfuse"]["output"] == obs["output"]
        if obs["input"] is not None:
            assert call.input_hash == content_hash(_parse(obs["input"]))
        if obs["model"]:
            params = {k: _parse(v) for k, v in (obs["modelParameters"] or {}).items()}
            assert call.model is not None and call.model.name == obs["model"]
            assert call.model.params == {k: v for k, v in params.items() if v is not None}
        else:
            assert call.model is None
        if obs["type"] == "GENERATION" and isinstance(_parse(obs["input"]), list):
            messages = _parse(obs["input"])
            if all(isinstance(m, dict) and "role" in m for m in messages):
                assert call.prompt is not None
                assert [m.role for m in call.prompt.assembled] == [
                    {"model": "assistant"}.get(m["role"], m["role"]) for m in messages]
        if obs["type"] == "GENERATION" and obs["output"] is not None:
            assert call.response is not None
            usage = obs["usageDetails"] or {}
            names = {"input": "prompt_tokens", "output": "completion_tokens", "total": "total_tokens"}
            assert call.response.usage == {names.get(k, k): v for k, v in usage.items()}


def test_tool_observations_carry_their_name_arguments_and_response(export: Any) -> None:
    data, trace, _ = export
    ids = _ids(data, trace)
    for obs in data["observations"]:
        call = _call_of(trace, ids, obs)
        if call.kind != "tool":
            assert call.tool is None
            continue
        attrs = _otel_attributes(obs)
        name = attrs.get("gen_ai.tool.name") or attrs.get("tool.name") or obs["name"]
        given = _parse(obs["input"])
        args = given if isinstance(given, dict) else _parse(attrs.get("tool.parameters"))
        assert call.tool is not None and call.tool.name == name
        assert call.tool.args == (args if isinstance(args, dict) else {})
        assert call.tool.response == _parse(obs["output"])
        assert call.tool.response_hash == content_hash(call.tool.response)


def test_the_trace_gives_id_pipeline_inputs_and_output(export: Any) -> None:
    data, trace, _ = export
    meta = data["trace"]
    root = next(o for o in data["observations"] if o["parentObservationId"] is None)
    assert trace.trace_id == meta["id"] and trace.pipeline == meta["name"]
    given = _parse(meta["input"]) if meta["input"] is not None else _parse(root["input"])
    expected = {} if given is None else given if isinstance(given, dict) else {"input": given}
    assert trace.inputs == expected == trace.calls[0].output
    output = meta["output"] if meta["output"] is not None else root["output"]
    assert trace.output == _parse(output)
    assert trace.input_id == ("in-" + content_hash(expected)[7:23] if expected else trace.trace_id)


def test_fields_that_are_not_mapped_are_kept_in_tags(export: Any) -> None:
    data, trace, result = export
    ids = _ids(data, trace)
    mapped = set(result.summary()["attributes"]["mapped"])
    for obs in data["observations"]:
        kept = _call_of(trace, ids, obs).tags.get("langfuse", {})
        for key, value in obs.items():
            if value not in (None, "", [], {}):
                assert key in mapped or kept.get(key) == value, (obs["name"], key)
    for key, value in data["trace"].items():
        if value not in (None, "", [], {}) and f"trace.{key}" not in mapped:
            assert trace.tags["langfuse"][key] == value


def test_microsoft_agent_messages_in_genai_parts_are_assembled() -> None:
    data = _load(DATA / "microsoft-agent-2025-12-17.trace.json")
    [trace] = quiver.import_traces("langfuse", DATA / "microsoft-agent-2025-12-17.trace.json").traces
    first = min((o for o in data["observations"] if o["type"] == "GENERATION"), key=lambda o: o["startTime"])
    call = next(c for c in trace.calls if c.node == first["name"])
    messages = json.loads(first["input"])
    assert call.prompt is not None and call.prompt.assembled[0].content == messages[0]["parts"][0]["content"]
    out = json.loads(first["output"])
    assert call.response is not None and json.loads(call.response.content) == [
        {**p, "arguments": json.loads(p["arguments"])} for p in out[0]["parts"]]


# --------------------------------------------------------------------------- grouping and problems


def test_group_by_session_uses_the_trace_session() -> None:
    result = quiver.import_traces("langfuse", FILES, group_by="session")
    sessions = {_load(f)["trace"]["id"]: _load(f)["trace"]["sessionId"] for f in FILES}
    for trace in result.traces:  # without a session: the hash of the inputs, as by default
        by_input = "in-" + content_hash(trace.inputs)[7:23] if trace.inputs else trace.trace_id
        assert trace.input_id == (sessions[trace.trace_id] or by_input)
    assert sorted(p.span_id for p in result.problems) == sorted(
        next(o["id"] for o in _load(f)["observations"] if o["parentObservationId"] is None)
        for f in FILES if not _load(f)["trace"]["sessionId"])


def test_observations_in_random_order_give_the_same_trace(tmp_path: Path) -> None:
    path = DATA / "beeai-2025-08-01.trace.json"
    expected = quiver.import_traces("langfuse", path).traces[0].model_dump(mode="json")
    data = _load(path)
    for seed in range(3):
        random.Random(seed).shuffle(data["observations"])
        shuffled = tmp_path / f"shuffled-{seed}.json"
        shuffled.write_text(json.dumps(data), encoding="utf-8")
        got = quiver.import_traces("langfuse", shuffled).traces[0].model_dump(mode="json")
        got["tags"]["import"]["sources"] = expected["tags"]["import"]["sources"]
        assert got == expected


def test_a_truncated_export_imports_the_observations_before_the_cut(tmp_path: Path) -> None:
    path = DATA / "koog-2025-08-26.trace.json"
    text = path.read_text(encoding="utf-8")
    data = _load(path)
    cut_obs = data["observations"][4]
    cut = text.index(f'"id": "{cut_obs["id"]}"') + 200
    truncated = tmp_path / "koog.json"
    truncated.write_text(text[:cut], encoding="utf-8")
    result = quiver.import_traces("langfuse", truncated)
    [trace] = result.traces
    assert result.spans_read == 4 and [c.node for c in trace.calls[1:]] != []
    assert {c.node for c in trace.calls[1:]} <= {o["name"] for o in data["observations"][:4]}
    truncation = result.problems[0]
    assert truncation.span_id == cut_obs["id"] and "truncated" in truncation.what
    assert truncation.where.startswith(f"{truncated}:{1 + text[:cut].count(chr(10))}:")
    first_four = data["observations"][:4]
    orphans = {o["id"] for o in first_four
               if o["parentObservationId"] and o["parentObservationId"] not in {x["id"] for x in first_four}}
    assert {p.span_id for p in result.problems[1:]} == orphans
