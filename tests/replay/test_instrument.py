"""The instrumentation API: nodes, decisions, loops, branches, templates, the LLM client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any

import pytest

import quiver
from quiver import InstrumentationError
from quiver.replay import LLMClient, TraceBuilder, use_llm
from quiver.replay._instrument import current_builder


def record(fn: Any, *args: Any, client: LLMClient | None = None, **kwargs: Any) -> quiver.Trace:
    """Run ``fn`` inside a fresh trace, as the recorder does, and return the trace."""
    import contextvars

    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0,
                           inputs=kwargs, sample_key="k")

    def body() -> quiver.Trace:
        current_builder.set(builder)
        if client is not None:
            use_llm(client)
        try:
            out = fn(*args, **kwargs)
            if asyncio.iscoroutine(out):
                out = asyncio.run(out)
        except Exception as exc:
            return builder.finish(None, exc)
        return builder.finish(out)

    return contextvars.Context().run(body)


@quiver.node("double")
def double(x: int) -> int:
    return 2 * x


def test_nodes_are_plain_functions_outside_a_recording() -> None:
    assert double(4) == 8
    assert quiver.decide("gate", "arm") == "arm"
    assert list(quiver.loop("l", k_max=2)) == [0, 1]


def test_decide_in_a_node_and_outside_one() -> None:
    @quiver.node("router", kind="router")
    def router(x: str) -> str:
        return quiver.decide("route", "a" if x == "yes" else "b")

    def pipeline(x: str) -> str:
        arm = router(x)
        quiver.decide("mode", "fast")
        return arm

    trace = record(pipeline, x="yes")
    rows = [(c.node, c.kind, c.decision, c.output) for c in trace.calls[1:]]
    assert rows == [("router", "router", {"route": "a"}, "a"), ("mode", "router", {"mode": "fast"}, "fast")]


def test_deciding_a_gate_twice_in_one_call_is_an_error() -> None:
    @quiver.node("planner")
    def planner() -> None:
        quiver.decide("action", "EXECUTE")
        quiver.decide("action", "COMPOSE")

    trace = record(planner)
    assert trace.status == "failed" and trace.error is not None
    assert "gate 'action' was decided twice in call planner#0 ('EXECUTE', then 'COMPOSE')" in trace.error.message


def test_loop_numbers_iterations_and_break_restores_the_outer_loop() -> None:
    @quiver.node("step")
    def step(i: int) -> int:
        return i

    def pipeline() -> None:
        for outer in quiver.loop("outer", k_max=2):
            for inner in quiver.loop("inner", k_max=5):
                step(outer * 10 + inner)
                if inner == 1:
                    break
            step(100 + outer)
        step(999)

    trace = record(pipeline)
    rows = [(c.output, c.loop, c.iteration) for c in trace.calls[1:]]
    assert rows == [
        (0, "inner", 0), (1, "inner", 1), (100, "outer", 0),
        (10, "inner", 0), (11, "inner", 1), (101, "outer", 1), (999, None, None),
    ]
    assert trace.tags["loops"] == {"inner": {"k_max": 5, "iterations": [2, 2]},
                                   "outer": {"k_max": 2, "iterations": [2]}}


def test_manual_iteration_for_while_loops() -> None:
    def pipeline() -> None:
        i = 0
        while i < 3:
            with quiver.iteration("poll", i):
                double(i)
            i += 1

    trace = record(pipeline)
    assert [(c.loop, c.iteration) for c in trace.calls[1:]] == [("poll", 0), ("poll", 1), ("poll", 2)]


def test_block_form_records_inputs_output_and_parents() -> None:
    def pipeline(query: str) -> str:
        with quiver.node("rewrite", inputs={"query": query}) as call:
            call.output = query.upper() + " PLEASE"
        return call.output

    trace = record(pipeline, query="reset my password")
    rewrite = trace.calls[1]
    assert (rewrite.node, rewrite.output, rewrite.parents) == ("rewrite", "RESET MY PASSWORD PLEASE", ["c0"])
    assert rewrite.input_hash == quiver.content_hash({"query": "reset my password"})


def test_async_pipeline_with_gather_of_undecorated_helpers_is_deterministic() -> None:
    @quiver.node("fetch", kind="tool")
    async def fetch(url: str) -> str:
        return "page:" + url

    async def slow_then_fetch(url: str, delay: float) -> str:
        await asyncio.sleep(delay)  # the later-created branch reaches fetch first
        return await fetch(url)

    async def pipeline() -> list[Any]:
        return await quiver.gather(slow_then_fetch("a", 0.02), slow_then_fetch("b", 0.0))

    trace = record(pipeline)
    assert [(c.call_path, c.occurrence, c.output) for c in trace.calls[1:]] == [
        ("[0]/fetch#0", 0, "page:a"), ("[1]/fetch#0", 1, "page:b")
    ]
    assert trace.output == ["page:a", "page:b"]


def test_a_plain_thread_pool_loses_its_calls_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from quiver.replay._instrument import active_recordings

    @quiver.node("lost")
    def lost(x: int) -> int:
        return x

    def pipeline() -> int:
        with active_recordings, concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lost, 3).result()

    with caplog.at_level(logging.WARNING, logger="quiver"):
        trace = record(pipeline)
    assert [c.node for c in trace.calls] == ["input"]
    assert "quiver.bind(fn) or quiver.ThreadPoolExecutor" in caplog.text


def test_node_errors_are_recorded_on_the_call_and_reraised() -> None:
    @quiver.node("boom")
    def boom() -> None:
        raise ValueError("bad value")

    trace = record(boom)
    assert trace.calls[1].error is not None
    assert (trace.calls[1].error.type, trace.calls[1].error.message) == ("ValueError", "bad value")
    assert trace.status == "failed"


def test_ignored_arguments_stay_out_of_the_input_hash() -> None:
    @quiver.node("search", ignore=["client"])
    def search(query: str, client: object) -> str:
        return query

    a = record(search, "q", object()).calls[1].input_hash
    b = record(search, "q", object()).calls[1].input_hash
    assert a == b == quiver.content_hash({"query": "q"})


def test_templates_render_and_report_missing_variables() -> None:
    tpl = quiver.template("greet-test", system="You are {persona}.", user="Hi {name}, {{literal}}")
    info = tpl.render({"persona": "kind", "name": "Ann"})
    assert [m.content for m in info.assembled] == ["You are kind.", "Hi Ann, {literal}"]
    assert info.fragments == [tpl.hash, quiver.content_hash("Ann"), quiver.content_hash("kind")]
    with pytest.raises(InstrumentationError, match=r"needs variable\(s\) persona"):
        tpl.render({"name": "Ann"})
    with pytest.raises(InstrumentationError, match="no template is registered as 'nope'"):
        quiver.get_template("nope")


def test_template_files_and_overrides(tmp_path: Any) -> None:
    from quiver.replay import template_overrides

    path = tmp_path / "terse.txt"
    path.write_text("[system]\nBe terse.\n[user]\n{question}\n")
    quiver.template("qa-test", user="Answer at length: {question}")
    variant = quiver.Template("qa-test", quiver.replay.load_template_file(path))
    with template_overrides({"qa-test": variant}):
        assert quiver.get_template("qa-test").messages == (("system", "Be terse."), ("user", "{question}"))
    assert quiver.get_template("qa-test").messages == (("user", "Answer at length: {question}"),)


def test_llm_without_configuration_says_how_to_configure() -> None:
    with pytest.raises(InstrumentationError, match="quiver.configure_llm"):
        quiver.llm()


def test_llm_calls_record_the_contract_and_reuse_the_sample_key(llm_client: LLMClient) -> None:
    quiver.template("pick-test", user="Pick one for: {q}")

    @quiver.node("pick", kind="llm")
    def pick(q: str) -> str:
        return quiver.llm().chat("pick-test", q=q, model="sim-echo", temperature=1.0, logprobs=True,
                                 top_logprobs=2).content

    def pipeline(q: str) -> str:
        first = pick(q)
        quiver.llm().chat(messages=[{"role": "user", "content": "second call"}], model="sim-echo")
        return first

    a = record(pipeline, client=llm_client, q="x")
    b = record(pipeline, client=llm_client, q="x")
    assert [c.output for c in a.calls] == [c.output for c in b.calls]
    call = a.calls[1]
    assert call.model is not None and call.model.params == {"temperature": 1.0, "logprobs": True, "top_logprobs": 2}
    assert call.response is not None and call.response.logprobs and call.response.attempts == 1
    extra = a.calls[2]
    assert (extra.node, extra.kind, extra.call_path) == ("llm", "llm", "llm#0")
    assert extra.prompt is not None and extra.prompt.template_id is None


def test_a_misspelt_chat_keyword_is_an_error_not_an_empty_request(llm_client: LLMClient) -> None:
    """With raw messages every keyword is a request parameter: one that is not (a typo)
    must not be dropped from the request without a word."""
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(InstrumentationError, match=r"'temprature'.*did you mean 'temperature'"):
        llm_client.chat(messages=messages, model="sim-echo", temprature=0)
    with pytest.raises(InstrumentationError, match=r"'colour'"):
        llm_client.chat(messages=messages, model="sim-echo", colour="red")
    assert llm_client.chat(messages=messages, model="sim-echo", temperature=0).content


def test_with_a_template_a_keyword_like_a_misspelt_parameter_is_an_error(llm_client: LLMClient) -> None:
    """Template variables come as keywords; one the template does not use that reads like
    a request parameter is a typo. Other unused variables are allowed: a prompt variant
    swapped in by a replay may use fewer variables than the template it replaces."""
    quiver.template("typo-test", user="Say {word}")
    with pytest.raises(InstrumentationError, match=r"'max_token'.*did you mean 'max_tokens'"):
        llm_client.chat("typo-test", word="hi", model="sim-echo", max_token=5)
    assert llm_client.chat("typo-test", word="hi", model="sim-echo", context="unused by this template").content


def test_decorators_declare_field_types_and_edges_for_the_analysis() -> None:
    from quiver.replay import declared_graph

    @quiver.node("signal-decl", kind="llm", fields={"turn_type": {"type": "categorical", "role": "routing"},
                                                     "note": {"type": "text", "role": "observability"}})
    def signal(q: str) -> dict:
        return {"turn_type": "question", "note": q}

    @quiver.node("planner-decl", parents=["signal-decl"], output={"type": "set"})
    def planner(s: dict) -> list[str]:
        return ["a"]

    graph = declared_graph()
    fields = graph.nodes["signal-decl"].fields or {}
    assert (fields["turn_type"].type, fields["turn_type"].effective_weight) == ("categorical", 2.0)
    assert fields["note"].effective_weight == 0.0
    assert graph.nodes["planner-decl"].output is not None and graph.nodes["planner-decl"].output.type == "set"
    assert ("signal-decl", "planner-decl") in graph.edges


def test_a_bad_field_declaration_is_refused_where_it_is_written() -> None:
    with pytest.raises(InstrumentationError, match=r"quiver.node field declaration fields.x.type: "
                                                   r"unknown field type .vector.; "
                                                   r"the registered types are categorical"):
        quiver.node("bad-decl", fields={"x": {"type": "vector"}})
