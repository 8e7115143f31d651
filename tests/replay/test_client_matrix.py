"""Every way a pipeline calls a model records, replays and perturbs, counted on the wire.

One row per way of calling, each a small real pipeline (a node that calls the model the
row's way) against the simulator behind a front the test owns (:mod:`wire_front`), each
row on a model name of its own (a simulator alias), so that the front tells the rows
apart. Per row, two inputs are recorded in this process; then:

* the LLM calls the traces recorded are the requests the front received for the row;
* a frozen replay (``replay --check``) reproduces every trace with no request on the wire;
* a ``param_change`` (temperature) and an inline ``prompt_swap`` (a message selected by
  role or by a text it contains) each reached the wire: the front saw a request of the
  row carrying the new temperature, and one carrying the replacement text; the engine
  says both landed;
* a streamed row's client got its answer in several chunks on replay too.

Embeddings rows count ``/embeddings`` requests (a frozen replay serves the vectors);
HTTP-tool rows count requests to the service the setting names (served on replay).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import requests

import quiver
from quiver.perturbations import make_operator
from quiver.replay import Replayer, Simulator, SimulatorConfig, Target, TraceBuilder, trace_sample_key
from quiver.replay._capture import http_tools
from quiver.replay._pipeline import run_traced

sys.path.insert(0, str(Path(__file__).parent))
from wire_front import WireFront  # noqa: E402

CHUNKS: dict[str, list[int]] = {}
"""Chunks each streamed row's client received, per run."""


def _seen(row: str, n: int) -> None:
    CHUNKS.setdefault(row, []).append(n)


@dataclass
class Row:
    name: str
    body: Callable[..., Any]
    selector: dict[str, Any]
    streamed: bool = False
    target: str = "sim-echo"
    llm: bool = True
    temperature: bool = True
    sends: list[str] = field(default_factory=lambda: [])


FRONT: dict[str, str] = {}


def _system(q: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}]


# --------------------------------------------------------------------------- rows

def chat_sync(q: str) -> str:
    r = openai.OpenAI().chat.completions.create(model="row-chat_sync", messages=_system(q), temperature=1.0)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


async def chat_async(q: str) -> str:
    r = await openai.AsyncOpenAI().chat.completions.create(model="row-chat_async", messages=_system(q))  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


def chat_stream(q: str) -> str:
    chunks = list(openai.OpenAI().chat.completions.create(model="row-chat_stream", messages=_system(q),  # type: ignore[arg-type]
                                                          stream=True))
    _seen("chat_stream", len(chunks))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def chat_stream_async(q: str) -> str:
    stream = await openai.AsyncOpenAI().chat.completions.create(
        model="row-chat_stream_async", messages=_system(q), stream=True, stream_options={"include_usage": True})  # type: ignore[arg-type]
    chunks = [c async for c in stream]
    _seen("chat_stream_async", len(chunks))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def langchain_invoke(q: str) -> str:
    from langchain_openai import ChatOpenAI

    return str(ChatOpenAI(model="row-langchain_invoke", temperature=1.0).invoke(q).content)


def langchain_stream(q: str) -> str:
    from langchain_openai import ChatOpenAI

    chunks = list(ChatOpenAI(model="row-langchain_stream", temperature=1.0).stream(q))
    _seen("langchain_stream", len(chunks))
    return "".join(str(c.content) for c in chunks)


def langgraph_messages(q: str) -> str:
    from typing import TypedDict

    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        q: str
        a: str

    def answer(state: State) -> dict[str, str]:
        llm = ChatOpenAI(model="row-langgraph_messages", temperature=1.0, streaming=True)
        return {"a": str(llm.invoke([("system", "Answer briefly."), ("user", state["q"])]).content)}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    pieces = [m.content for m, _ in builder.compile().stream({"q": q, "a": ""}, stream_mode="messages")]
    _seen("langgraph_messages", len(pieces))
    return "".join(str(p) for p in pieces)


def responses(q: str) -> str:
    return openai.OpenAI().responses.create(model="row-responses", instructions="Answer briefly.", input=q,
                                            temperature=1.0).output_text


def responses_stream(q: str) -> str:
    events = list(openai.OpenAI().responses.create(model="row-responses_stream", instructions="Answer briefly.",
                                                   input=q, stream=True))
    _seen("responses_stream", len(events))
    return "".join(getattr(e, "delta", "") for e in events if e.type == "response.output_text.delta")


def responses_chain(q: str) -> str:
    client = openai.OpenAI()
    first = client.responses.create(model="row-responses_chain", instructions="Answer briefly.", input=q)
    return client.responses.create(model="row-responses_chain", input="And then?",
                                   previous_response_id=first.id).output_text


def _anthropic() -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=FRONT["root"], api_key="sk-ant-test", max_retries=0)


def anthropic_messages(q: str) -> str:
    m = _anthropic().messages.create(model="row-anthropic_messages", max_tokens=64, system="Answer briefly.",
                                     messages=[{"role": "user", "content": q}])
    return "".join(b.text for b in m.content if b.type == "text")


def anthropic_stream(q: str) -> str:
    with _anthropic().messages.stream(model="row-anthropic_stream", max_tokens=64, system="Answer briefly.",
                                      messages=[{"role": "user", "content": q}]) as stream:
        pieces = list(stream.text_stream)
    _seen("anthropic_stream", len(pieces))
    return "".join(pieces)


def litellm_row(q: str) -> str:
    import litellm

    r = litellm.completion(model="openai/row-litellm", messages=_system(q), api_base=FRONT["url"],
                           api_key="sk-test", temperature=1.0)
    return str(r.choices[0].message.content)


async def openai_agents(q: str) -> str:
    from agents import Agent, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return json.dumps({"status": "delayed", "eta_days": 2})

    agent = Agent(name="desk", instructions="You are the order desk. Answer briefly.", tools=[lookup_order],
                  model="row-openai_agents")
    return str((await Runner.run(agent, q)).final_output)


async def pydantic_ai_row(q: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel("row-pydantic_ai", provider=OpenAIProvider(base_url=FRONT["url"], api_key="sk-x"))
    return str((await Agent(model, instructions="Answer briefly.").run(q)).output)


def embeddings(q: str) -> int:
    vectors = openai.OpenAI().embeddings.create(model="row-embeddings", input=[q, q + " again"]).data
    return sum(len(v.embedding) for v in vectors)


def http_requests(q: str) -> int:
    return requests.get(FRONT["root"] + "/health", params={"row": "requests", "q": q}, timeout=10).status_code


def http_httpx(q: str) -> int:
    return httpx.get(FRONT["root"] + "/health", params={"row": "httpx", "q": q}, timeout=10).status_code


ROWS = [
    Row("chat_sync", chat_sync, {"role": "system"}),
    Row("chat_async", chat_async, {"role": "system"}, temperature=True),
    Row("chat_stream", chat_stream, {"role": "system"}, streamed=True),
    Row("chat_stream_async", chat_stream_async, {"role": "system"}, streamed=True),
    Row("langchain_invoke", langchain_invoke, {"role": "user"}),
    Row("langchain_stream", langchain_stream, {"role": "user"}, streamed=True),
    Row("langgraph_messages", langgraph_messages, {"role": "system"}, streamed=True),
    Row("responses", responses, {"role": "system"}),
    Row("responses_stream", responses_stream, {"role": "system"}, streamed=True),
    Row("responses_chain", responses_chain, {"contains": "Answer briefly"}),
    Row("anthropic_messages", anthropic_messages, {"role": "system"}),
    Row("anthropic_stream", anthropic_stream, {"role": "system"}, streamed=True),
    Row("litellm", litellm_row, {"role": "system"}),
    Row("openai_agents", openai_agents, {"role": "system"}, target="desk-agent"),
    Row("pydantic_ai", pydantic_ai_row, {"role": "system"}),
    Row("embeddings", embeddings, {}, llm=False),
    Row("http_requests", http_requests, {}, llm=False),
    Row("http_httpx", http_httpx, {}, llm=False),
]
INPUTS = ("Where is order 1042?", "Has order 2077 shipped?")


def _node(row: Row) -> Callable[..., Any]:
    # a transform: its body runs on a frozen replay too, its requests answered from the recording
    node = quiver.node(row.name, kind="transform")(row.body)

    def pipeline(q: str) -> Any:
        return node(q)

    return pipeline


PIPELINES = {row.name: _node(row) for row in ROWS}


@pytest.fixture(scope="module")
def front() -> Iterator[WireFront]:
    import quiver.experiments.agents_example.sim_models  # noqa: F401  (registers desk-agent)

    aliases = {f"row-{r.name}": r.target for r in ROWS}
    with Simulator(SimulatorConfig(aliases=aliases)) as sim, pytest.MonkeyPatch.context() as mp:
        wire = WireFront(sim.url)
        FRONT.update(url=wire.url, root=wire.root)
        mp.setenv("OPENAI_BASE_URL", wire.url)
        mp.setenv("OPENAI_API_KEY", "sk-matrix")
        mp.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        mp.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM would fetch its price list from the web
        try:
            yield wire
        finally:
            wire.close()


def _record(row: Row, q: str, repeat: int) -> Any:
    builder = TraceBuilder(trace_id=f"{row.name}-{repeat}", run_id="matrix", pipeline=row.name, input_id=q,
                           repeat=repeat, inputs={"q": q}, sample_key=trace_sample_key(0, q, repeat))
    return run_traced(builder, PIPELINES[row.name], {"q": q}, None, log=logging.getLogger("quiver.test"))


@pytest.fixture(scope="module")
def recorded(front: WireFront) -> dict[str, list[Any]]:
    host = FRONT["root"].removeprefix("http://")
    with http_tools([f"{FRONT['root']}/health", host + "/none"]):
        out = {row.name: [_record(row, q, i) for i, q in enumerate(INPUTS)] for row in ROWS}
    for name, traces in out.items():
        assert all(t.status == "ok" for t in traces), (name, [t.error for t in traces])
    return out


def _mine(front: WireFront, row: Row, start: int = 0) -> list[dict[str, Any]]:
    got = front.requests()[start:]
    if row.name == "embeddings":
        return [r for r in got if r["path"].endswith("/embeddings")]
    if row.name.startswith("http_"):
        return [r for r in got if r["path"] == "/health" and f"row={row.name.removeprefix('http_')}" in r["query"]]
    return [r for r in got if r["model"] in (f"row-{row.name}", f"openai/row-{row.name}")]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_recorded_calls_are_the_requests_the_endpoint_received(recorded: dict[str, list[Any]], front: WireFront,
                                                               row: Row) -> None:
    traces = recorded[row.name]
    if row.name.startswith("http_"):
        calls = [c for t in traces for c in t.calls if c.kind == "tool" and c.tool is not None]
    else:
        calls = [c for t in traces for c in t.calls if c.model is not None and c.response is not None
                 or (c.kind == "retrieval" and c.model is not None)]
    assert calls and len(calls) == len(_mine(front, row))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_frozen_replay_reproduces_with_nothing_on_the_wire(recorded: dict[str, list[Any]], front: WireFront,
                                                             row: Row) -> None:
    start = len(front.requests())
    CHUNKS.pop(row.name, None)
    results = [Replayer(PIPELINES[row.name]).replay(t) for t in recorded[row.name]]
    assert all(r.reproduced for r in results), [r.divergences for r in results]
    assert front.requests()[start:] == [] and all(r.total_llm_calls == 0 for r in results)
    if row.streamed:
        assert len(CHUNKS[row.name]) == len(INPUTS) and min(CHUNKS[row.name]) > 1


LLM_ROWS = [r for r in ROWS if r.llm]


@pytest.mark.parametrize("row", LLM_ROWS, ids=[r.name for r in LLM_ROWS])
def test_param_change_and_an_inline_prompt_swap_land_on_the_wire(recorded: dict[str, list[Any]],
                                                                 front: WireFront, row: Row) -> None:
    baseline = recorded[row.name][0]
    text = f"SWAPPED for {row.name}: answer in one word."
    for op, params, check in (
        ("param_change", {"temperature": 0.25}, lambda body: body.get("temperature") == 0.25),
        ("prompt_swap", {"message": row.selector, "text": text}, lambda body: text in json.dumps(body)),
    ):
        start = len(front.requests())
        result = Replayer(PIPELINES[row.name]).replay(baseline, target=Target(row.name),
                                                      operator=make_operator(op, params))
        assert result.target is not None and result.target.landed, (op, result.target)
        sent = _mine(front, row, start)
        assert any(check(r["body"] or {}) for r in sent), (op, [r["body"] for r in sent])


def test_the_rows_cover_every_way_of_calling() -> None:
    assert len(ROWS) == 18 and os.environ.get("OPENAI_AGENTS_DISABLE_TRACING") != "0"
