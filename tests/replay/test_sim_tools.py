"""The simulator's tool calls: a simulated model reads the request's ``tools`` and answers
with OpenAI-format ``tool_calls``, through the real ``openai`` SDK over loopback HTTP.

Pinned: the wire shape (``content: null``, ``finish_reason: "tool_calls"``, ``{id, type,
function: {name, arguments}}``), sampled arguments, ids that depend on the call and not
on the sample key, parallel calls, the tool results of the next turn, logprobs, usage,
``tool_choice``, and the refusals (a bad ``tools`` or ``tool_choice`` is a 400 naming the
parameter; a model calling a tool it was not offered is a 500 naming the callable ones).
Fuzzed: ``tools`` and ``tool_choice`` values of every shape never make the simulator
fail (200 or 400, never 500, for a model that respects ``tool_names``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from fuzzing import FUZZ, time_limit, tried
from hypothesis import given, settings, strategies as st

from quiver.replay import Fields, SimRequest, Simulator, Text, ToolCall, complete, sim_model

TOOLS = [
    {"type": "function", "function": {"name": "lookup", "description": "Find an order.",
                                      "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "refund", "parameters": {"type": "object", "properties": {}}}},
]


@sim_model("test-tool-agent")
def _agent(req: SimRequest) -> Text | ToolCall | list[ToolCall]:
    if req.tool_results:
        return Text({f"done: {req.tool_results[-1]}": 1.0, "all done": 0.0})
    if "both" in req.last_user and {"lookup", "refund"} <= set(req.tool_names):
        return [ToolCall("lookup", {"order": "A-1"}), ToolCall("refund", Fields(amount={10: 1.0, 20: 0.5}))]
    if "lookup" in req.tool_names:
        return ToolCall("lookup", Fields(order={"A-1": 1.0, "A-2": 0.8, "A-3": 0.2}, urgent=False))
    return Text("no tool to call")


@sim_model("test-tool-rogue")
def _rogue(req: SimRequest) -> ToolCall:
    return ToolCall("refund", {})


def _client(simulator: Simulator, key: str = "") -> openai.OpenAI:
    return openai.OpenAI(base_url=simulator.url, api_key="sk-test", max_retries=0,
                         default_headers={"X-Quiver-Sample-Key": key} if key else None)


def _post(simulator: Simulator, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{simulator.url}/chat/completions", json=body, timeout=10)


USER = [{"role": "user", "content": "where is my order?"}]


def test_a_model_answers_with_openai_tool_calls(simulator: Simulator) -> None:
    reply = _client(simulator, "k1").chat.completions.create(model="test-tool-agent", messages=USER, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "lookup" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert args["order"] in ("A-1", "A-2", "A-3") and args["urgent"] is False
    assert reply.usage is not None and reply.usage.completion_tokens == len(call.function.arguments.split())
    raw = _post(simulator, {"model": "test-tool-agent", "messages": USER, "tools": TOOLS}).json()
    assert raw["choices"][0]["message"]["content"] is None  # null on the wire, as OpenAI sends it


def test_arguments_are_sampled_and_ids_follow_the_call_not_the_sample_key(simulator: Simulator) -> None:
    client = _client(simulator)
    ids: dict[str, set[str]] = {}
    for k in range(40):
        reply = client.chat.completions.create(
            model="test-tool-agent", messages=USER, tools=TOOLS, extra_headers={"X-Quiver-Sample-Key": f"s{k}"},
        )
        (call,) = reply.choices[0].message.tool_calls or []
        ids.setdefault(call.function.arguments, set()).add(call.id)
    assert len(ids) >= 2  # repeats differ where the model samples
    assert all(len(v) == 1 for v in ids.values())  # the same call has the same id under every sample key
    assert len(set.union(*ids.values())) == len(ids)
    again = client.chat.completions.create(
        model="test-tool-agent", messages=[*USER, {"role": "assistant", "content": "?"}, *USER], tools=TOOLS,
        extra_headers={"X-Quiver-Sample-Key": "s0"},
    ).choices[0].message.tool_calls
    assert again and again[0].id not in set.union(*ids.values())  # a later turn: another id


def test_parallel_calls_and_the_next_turn_with_tool_results(simulator: Simulator) -> None:
    client = _client(simulator, "k2")
    messages: list[Any] = [{"role": "user", "content": "both please"}]
    reply = client.chat.completions.create(model="test-tool-agent", messages=messages, tools=TOOLS)
    calls = reply.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["lookup", "refund"] and len({c.id for c in calls}) == 2
    assert json.loads(calls[0].function.arguments) == {"order": "A-1"}
    assert json.loads(calls[1].function.arguments)["amount"] in (10, 20)
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": f"{c.function.name} ok"} for c in calls]
    final = client.chat.completions.create(model="test-tool-agent", messages=messages, tools=TOOLS)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content in ("done: refund ok", "all done")


def test_tool_choice_decides_what_the_model_may_call(simulator: Simulator) -> None:
    client = _client(simulator, "k3")
    none = client.chat.completions.create(model="test-tool-agent", messages=USER, tools=TOOLS, tool_choice="none")
    assert none.choices[0].message.content == "no tool to call" and not none.choices[0].message.tool_calls
    forced = client.chat.completions.create(
        model="test-tool-agent", messages=[{"role": "user", "content": "both"}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    assert [c.function.name for c in forced.choices[0].message.tool_calls or []] == ["lookup"]
    assert SimRequest(model="m", messages=USER, tools=tuple(TOOLS), tool_choice="required").tool_names == (
        "lookup", "refund")
    assert SimRequest(model="m", messages=USER).tool_names == ()


def test_logprobs_have_one_entry_per_sampled_argument() -> None:
    req = SimRequest(model="test-tool-agent", messages=tuple(USER), tools=tuple(TOOLS), logprobs=True,
                     top_logprobs=3, sample_key="k")
    (choice,) = complete(req)
    assert choice.tool_calls is not None and choice.content == ""
    order, urgent = choice.logprobs or []
    assert json.loads(choice.tool_calls[0]["function"]["arguments"])["order"] == order["token"]
    assert [t["token"] for t in order["top_logprobs"]] == ["A-1", "A-2", "A-3"]
    assert urgent["logprob"] == 0.0  # a fixed argument
    assert complete(req) == complete(req)


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": "lookup"}, "tools"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0]"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function"),
    ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "cancel"}}}, "tool_choice"),
])
def test_a_bad_tools_parameter_is_a_400_naming_it(simulator: Simulator, body: dict[str, Any], param: str) -> None:
    answer = _post(simulator, {"model": "test-tool-agent", "messages": USER, **body})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and f"'{param}'" in error["message"]


def test_a_model_calling_a_tool_it_was_not_offered_is_a_500_naming_the_callable_ones(simulator: Simulator) -> None:
    answer = _post(simulator, {"model": "test-tool-rogue", "messages": USER, "tools": TOOLS[:1]})
    assert answer.status_code == 500
    assert "called the tool 'refund'" in answer.json()["error"]["message"]
    assert "callable tools: 'lookup'" in answer.json()["error"]["message"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_tool = st.one_of(
    _json,
    st.fixed_dictionaries({"type": st.sampled_from(["function", "other"]),
                           "function": st.one_of(_json, st.fixed_dictionaries({"name": st.sampled_from(
                               ["lookup", "refund", "", "other"])}))}),
)


@settings(parent=FUZZ, max_examples=200)
@given(tools=st.one_of(st.none(), _json, st.lists(_tool, max_size=3)),
       choice=st.one_of(st.none(), st.sampled_from(["auto", "none", "required", "x"]), _json,
                        st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
                            {"name": st.sampled_from(["lookup", "refund", "other"])})})))
def test_any_tools_and_tool_choice_get_a_200_or_a_400(simulator: Simulator, tools: Any, choice: Any) -> None:
    tried("simulator tool requests")
    body: dict[str, Any] = {"model": "test-tool-agent", "messages": USER}
    if tools is not None:
        body["tools"] = tools
    if choice is not None:
        body["tool_choice"] = choice
    with time_limit():
        answer = _post(simulator, body)
    assert answer.status_code in (200, 400), answer.text
    if answer.status_code == 400:
        assert answer.json()["error"]["param"].startswith(("tools", "tool_choice"))
        return
    message = answer.json()["choices"][0]["message"]
    offered = [t["function"]["name"] for t in tools or ()] if isinstance(tools, list) else []
    for call in message.get("tool_calls") or []:
        assert call["function"]["name"] in offered
