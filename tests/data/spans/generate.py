"""Write the span fixtures of ``tests/data/spans/``: real instrumentors and exporters against the simulator.

Run with a Python that has the instrumentors installed (they are not dependencies of the
tests, which read the committed files)::

    python -m venv --system-site-packages /tmp/spangen
    /tmp/spangen/bin/pip install openinference-instrumentation-{openai,langchain,dspy,llama-index,anthropic} \
        llama-index-core llama-index-llms-openai anthropic opentelemetry-instrumentation-openai \
        opentelemetry-instrumentation-anthropic opentelemetry-instrumentation-openai-v2 \
        opentelemetry-exporter-otlp-proto-http langfuse
    /tmp/spangen/bin/python tests/data/spans/generate.py [PRODUCER ...]

Every program talks to the bundled simulator over loopback (Anthropic's client through a
small loopback adapter that turns ``/v1/messages`` into a simulator chat completion; the
Langfuse SDK's OTLP export to a loopback receiver that keeps the protobuf body). The
files are written the way each exporter writes them:

* ``*.jsonl``: one ``span.to_json(indent=None)`` a line (a file exporter);
* ``*.console.json``: ``ConsoleSpanExporter``'s pretty ``span.to_json()`` objects, one
  after the other (not a JSON array);
* ``*.otlp.json``: one OTLP/JSON export request (``resourceSpans``), as the collector's
  file exporter writes it;
* ``*.otlp.pb``: the OTLP protobuf body an OTLP/HTTP exporter sends;
* ``*.start_end.jsonl``: a span processor that writes each span when it starts (no end
  time) and again when it ends.

``openllmetry/openai_legacy.jsonl`` is written by an older OpenLLMetry (the deprecated
``gen_ai.prompt.N`` / ``gen_ai.completion.N`` attributes), from a second environment::

    python -m venv --system-site-packages /tmp/spangen-old
    /tmp/spangen-old/bin/pip install "opentelemetry-instrumentation-openai==0.40.14" "openai<2"
    /tmp/spangen-old/bin/python tests/data/spans/generate.py openllmetry/openai_legacy

The Vercel AI SDK fixtures are written by ``vercel/generate.mjs`` and ``vercel/more.mts``
(Node; the second through ``tsx``), run by ``generate.py vercel`` (``vercel/more``: the second
alone) when ``VERCEL_NODE_MODULES`` names the folder their packages are in.

``strands/agent_tools.otlp.json`` is written by Strands Agents (it traces through the global
tracer provider, so it runs alone)::

    python -m venv --system-site-packages /tmp/spangen-strands
    /tmp/spangen-strands/bin/pip install "strands-agents[openai]" opentelemetry-exporter-otlp-proto-common
    /tmp/spangen-strands/bin/pip install --no-deps -e .
    /tmp/spangen-strands/bin/python tests/data/spans/generate.py strands
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: oi_frameworks

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")

from quiver.replay import SimRequest, Simulator, SimulatorConfig, Text, ToolCall, sim_model  # noqa: E402
from quiver.replay._sim.models import register_sim_model  # noqa: E402

RESOURCE = {"service.name": "span-fixtures"}
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}


# --------------------------------------------------------------------------- the simulated models


@sim_model("fixture-chat")
def _chat(req: SimRequest) -> Text | ToolCall:
    """Calls the weather tool once when it is offered, then answers in words the prompt does not hold."""
    if req.tool_names and not req.tool_results:
        return ToolCall(req.tool_names[0], {"city": "Lyon"})
    if req.tool_results:
        return Text("Lyon is sunny and mild today, with a light westerly breeze.")
    return Text({"Paris is the capital of France, famous for its museums.": 0.0,
                 "The capital of France is Paris, on the Seine.": 0.0})


register_sim_model("gpt-4o-mini", _chat)  # LlamaIndex's OpenAI client knows only OpenAI's model names

_DSPY_FIELDS = re.compile(r"`\[\[ ## (\w+) ## \]\]`")


@sim_model("fixture-dspy")
def _dspy(req: SimRequest) -> Text:
    """Answers in DSPy's ChatAdapter format."""
    names = [n for n in _DSPY_FIELDS.findall(req.text) if n != "completed"]
    system = req.system_text
    outputs = system.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
    wanted = [n for n in dict.fromkeys(names) if f"`{n}`" in outputs] or ["answer"]
    values = {"reasoning": "Recall the geography lesson.", "answer": "Paris, beside the Seine river."}
    body = "".join(f"[[ ## {n} ## ]]\n{values.get(n, n + ' value')}\n\n" for n in wanted)
    return Text(body + "[[ ## completed ## ]]")


# --------------------------------------------------------------------------- span writers


def _provider() -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider(resource=Resource.create(RESOURCE))


class _Recorder:
    """Keeps finished spans (and, when asked, the spans as they start)."""

    def __init__(self) -> None:
        self.finished: list[Any] = []
        self.events: list[tuple[str, Any]] = []

    # SpanProcessor
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.events.append(("start", json.loads(span.to_json())))

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        self.finished.append(span)
        self.events.append(("end", json.loads(span.to_json())))

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@contextmanager
def recorded(*instrumentors: Any) -> Iterator[_Recorder]:
    """A tracer provider recording every span, with ``instrumentors`` on for the block."""
    provider = _provider()
    rec = _Recorder()
    provider.add_span_processor(rec)
    for inst in instrumentors:
        inst.instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        yield rec
    finally:
        for inst in instrumentors:
            inst.uninstrument()


def write(path: Path, rec: _Recorder, how: str) -> None:
    """Write the recorded spans as ``how`` (jsonl, console, otlp, start_end)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "jsonl":
        text = "".join(s.to_json(indent=None) + "\n" for s in rec.finished)
    elif how == "console":  # ConsoleSpanExporter's default formatter: to_json() and a line break
        text = "".join(s.to_json() + os.linesep for s in rec.finished)
    elif how == "otlp":
        text = json.dumps(_otlp_json(rec.finished), indent=2) + "\n"
    elif how == "start_end":
        text = "".join(json.dumps(span) + "\n" for _, span in rec.events)
    else:
        raise ValueError(how)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path.relative_to(HERE)} ({len(rec.finished)} spans)")


def _otlp_json(spans: Sequence[Any]) -> Any:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return MessageToDict(encode_spans(spans))


# --------------------------------------------------------------------------- programs


def openai_client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)


def openai_program(url: str) -> None:
    """One plain chat call, then a tool-calling turn: call, tool result, answer."""
    client = openai_client(url)
    client.chat.completions.create(model="fixture-chat", temperature=0,
                                   messages=[{"role": "system", "content": "Answer in one sentence."},
                                             {"role": "user", "content": "What is the capital of France?"}])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "How is the weather in Lyon?"}]
    first = client.chat.completions.create(model="fixture-chat", messages=messages, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "temp_c": 19})}]
    client.chat.completions.create(model="fixture-chat", messages=messages, tools=[WEATHER_TOOL])


def langchain_program(url: str) -> None:
    """A prompt piped into ChatOpenAI and a string parser."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="fixture-chat", base_url=url, api_key="sk-test", temperature=0, max_retries=0)
    chain = ChatPromptTemplate.from_messages([("system", "Answer in one sentence."), ("user", "{question}")]) | llm
    (chain | StrOutputParser()).invoke({"question": "What is the capital of France?"})


def langgraph_tools_program(url: str) -> None:
    """A LangGraph agent: the model calls the weather tool, a ToolNode runs it, the model answers."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return json.dumps({"city": city, "sky": "sunny", "temp_c": 19})

    llm = ChatOpenAI(model="fixture-chat", base_url=url, api_key="sk-test", temperature=0, max_retries=0)
    create_react_agent(llm, [get_weather]).invoke({"messages": [("user", "How is the weather in Lyon?")]})


def langgraph_router_program(url: str) -> None:
    from oi_frameworks import langgraph_app

    langgraph_app(url, "fixture/0").invoke({"question": "who wrote the first program?"})


def llamaindex_chat_program(url: str) -> None:
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai import OpenAI as LIOpenAI

    llm = LIOpenAI(model="gpt-4o-mini", api_base=url, api_key="sk-test", temperature=0, max_retries=0)
    llm.chat([ChatMessage(role="system", content="Answer in one sentence."),
              ChatMessage(role="user", content="What is the capital of France?")])
    llm.complete("Name the capital of France.")


def llamaindex_query_program(url: str) -> None:
    """A query engine over a fixed retriever: retrieve, synthesize with one LLM call."""
    from llama_index.core import QueryBundle
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers import get_response_synthesizer
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.llms.openai import OpenAI as LIOpenAI

    class Fixed(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [NodeWithScore(node=TextNode(id_="doc-paris", text="Paris is the capital of France."), score=0.9),
                    NodeWithScore(node=TextNode(id_="doc-lyon", text="Lyon lies on the Rhone."), score=0.4)]

    llm = LIOpenAI(model="gpt-4o-mini", api_base=url, api_key="sk-test", temperature=0, max_retries=0)
    engine = RetrieverQueryEngine(retriever=Fixed(), response_synthesizer=get_response_synthesizer(llm=llm))
    engine.query("What is the capital of France?")


def dspy_predict_program(url: str) -> None:
    import dspy

    lm = dspy.LM("openai/fixture-dspy", api_base=url, api_key="sk-test", cache=False, temperature=0,
                 num_retries=0)
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="What is the capital of France?")
        dspy.ChainOfThought("question -> answer")(question="Where is the capital of France?")


def dspy_multihop_program(url: str) -> None:
    import dspy
    from oi_frameworks import dspy_program

    lm = dspy.LM("openai/oi-dspy", api_base=url, api_key="sk-test", cache=False, temperature=1.0, num_retries=0,
                 seed=7)
    with dspy.context(lm=lm):
        dspy_program()(question="who wrote the first program?")


def strands_program(url: str) -> None:
    """A Strands agent with the weather tool (OpenAI model provider): the model calls the tool, then answers."""
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city.

        Args:
            city: The city.
        """
        return {"city": city, "sky": "sunny", "temp_c": 19}

    model = OpenAIModel(client_args={"base_url": url, "api_key": "sk-test", "max_retries": 0}, model_id="fixture-chat")
    Agent(model=model, tools=[get_weather], system_prompt="Answer in one sentence.", callback_handler=None)(
        "How is the weather in Lyon?")


@contextmanager
def strands_recorded() -> Iterator[_Recorder]:
    """Strands traces through the global tracer provider (it has no instrumentor): set it once."""
    from opentelemetry import trace

    provider = _provider()
    rec = _Recorder()
    provider.add_span_processor(rec)
    trace.set_tracer_provider(provider)
    yield rec


# --------------------------------------------------------------------------- Anthropic through an adapter


def _anthropic_reply(sim_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages API answer made from the simulator's chat completion."""
    import httpx

    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": body["system"]})
    for msg in body["messages"]:
        content = msg["content"]
        if isinstance(content, str):
            messages.append({"role": msg["role"], "content": content})
            continue
        texts = [b["text"] for b in content if b.get("type") == "text"]
        uses = [b for b in content if b.get("type") == "tool_use"]
        results = [b for b in content if b.get("type") == "tool_result"]
        for r in results:
            messages.append({"role": "tool", "tool_call_id": r["tool_use_id"], "content": json.dumps(r["content"])})
        if texts or uses:
            entry: dict[str, Any] = {"role": msg["role"], "content": "".join(texts) or None}
            if uses:
                entry["tool_calls"] = [{"id": u["id"], "type": "function", "function": {
                    "name": u["name"], "arguments": json.dumps(u["input"])}} for u in uses]
            messages.append(entry)
    req: dict[str, Any] = {"model": "fixture-chat", "messages": messages}
    if body.get("tools"):
        req["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                          "parameters": t["input_schema"]}} for t in body["tools"]]
    answer = httpx.post(f"{sim_url}/chat/completions", json=req, timeout=10).json()
    choice = answer["choices"][0]
    blocks: list[dict[str, Any]] = []
    if choice["message"].get("content"):
        blocks.append({"type": "text", "text": choice["message"]["content"]})
    for call in choice["message"].get("tool_calls") or []:
        blocks.append({"type": "tool_use", "id": "toolu_" + call["id"][-20:], "name": call["function"]["name"],
                       "input": json.loads(call["function"]["arguments"])})
    return {"id": "msg_" + answer["id"][-20:], "type": "message", "role": "assistant", "model": body["model"],
            "content": blocks, "stop_reason": "tool_use" if choice["finish_reason"] == "tool_calls" else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": answer["usage"]["prompt_tokens"],
                                             "output_tokens": answer["usage"]["completion_tokens"]}}


@contextmanager
def loopback(answer: Callable[[str, bytes, Any], bytes]) -> Iterator[str]:
    """A loopback HTTP server whose every request is answered by ``answer(path, body, headers)`` (JSON)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            out = answer(self.path, self.rfile.read(int(self.headers.get("Content-Length") or 0)), self.headers)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def anthropic_adapter(sim_url: str) -> Any:
    """A loopback server answering ``POST /v1/messages`` from the simulator."""
    return loopback(lambda path, body, headers: json.dumps(_anthropic_reply(sim_url, json.loads(body))).encode())


def anthropic_program(url: str) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=200, system="Answer in one sentence.",
                           messages=[{"role": "user", "content": "What is the capital of France?"}])
    tools = [{"name": "get_weather", "description": "The weather in a city.",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "How is the weather in Lyon?"}]
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=messages, tools=tools)
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "sunny, 19 C"}]}]
    client.messages.create(model="claude-sonnet-4-5", max_tokens=200, messages=messages, tools=tools)


# --------------------------------------------------------------------------- Langfuse's SDK


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback OTLP/HTTP receiver keeping every ``/v1/traces`` request body."""
    bodies: list[bytes] = []

    def keep(path: str, body: bytes, headers: Any) -> bytes:
        if path.endswith("/v1/traces"):
            bodies.append(gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body)
        return b"{}"

    with loopback(keep) as url:
        yield url, bodies


def langfuse_fixtures(sim_url: str, out: Path) -> None:
    """The Langfuse SDK's OTLP export of an @observe'd program and an OpenAI generation."""
    with otlp_receiver() as (host, bodies):
        os.environ.update({"LANGFUSE_PUBLIC_KEY": "pk-lf-fixture", "LANGFUSE_SECRET_KEY": "sk-lf-fixture",
                           "LANGFUSE_HOST": host, "LANGFUSE_BASE_URL": host, "LANGFUSE_TRACING_ENABLED": "true"})
        from langfuse import Langfuse, observe

        lf = Langfuse(public_key="pk-lf-fixture", secret_key="sk-lf-fixture", host=host, flush_at=1000)
        client = openai_client(sim_url)

        @observe(name="lookup-weather", as_type="tool")
        def lookup(city: str) -> dict[str, Any]:
            return {"city": city, "sky": "sunny", "temp_c": 19}

        @observe(name="ask")
        def ask(question: str) -> str:
            with lf.start_as_current_observation(name="chat", as_type="generation", model="fixture-chat",
                                                 input=[{"role": "user", "content": question}]) as gen:
                answer = client.chat.completions.create(model="fixture-chat",
                                                        messages=[{"role": "user", "content": question}])
                text = answer.choices[0].message.content or ""
                gen.update(output={"role": "assistant", "content": text},
                           usage_details={"input": answer.usage.prompt_tokens,
                                          "output": answer.usage.completion_tokens},
                           metadata={"finish_reason": answer.choices[0].finish_reason})
            lookup("Lyon")
            return text

        ask("What is the capital of France?")
        lf.flush()
        lf.shutdown()
    spans = [b for b in bodies if b]
    if not spans:
        raise RuntimeError("the Langfuse SDK sent no OTLP request")
    (out / "observe.otlp.pb").write_bytes(spans[0] if len(spans) == 1 else _merge_otlp(spans))
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString((out / "observe.otlp.pb").read_bytes())
    (out / "observe.otlp.json").write_text(json.dumps(MessageToDict(request), indent=2) + "\n", encoding="utf-8")
    count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    print(f"wrote langfuse/observe.otlp.pb and .otlp.json ({count} spans)")


def _merge_otlp(bodies: list[bytes]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    merged = ExportTraceServiceRequest()
    for body in bodies:
        part = ExportTraceServiceRequest()
        part.ParseFromString(body)
        merged.resource_spans.extend(part.resource_spans)
    return merged.SerializeToString()


# --------------------------------------------------------------------------- the fixtures


def _oi(name: str) -> Callable[[], Any]:
    def make() -> Any:
        if name == "openai":
            from openinference.instrumentation.openai import OpenAIInstrumentor
            return OpenAIInstrumentor()
        if name == "langchain":
            from openinference.instrumentation.langchain import LangChainInstrumentor
            return LangChainInstrumentor()
        if name == "llama_index":
            from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
            return LlamaIndexInstrumentor()
        if name == "dspy":
            from openinference.instrumentation.dspy import DSPyInstrumentor
            return DSPyInstrumentor()
        if name == "anthropic":
            from openinference.instrumentation.anthropic import AnthropicInstrumentor
            return AnthropicInstrumentor()
        raise ValueError(name)
    return make


def _openllmetry(name: str) -> Callable[[], Any]:
    def make() -> Any:
        if name == "openai":
            from opentelemetry.instrumentation.openai import OpenAIInstrumentor
            return OpenAIInstrumentor()
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
        return AnthropicInstrumentor()
    return make


def _openllmetry_legacy() -> Any:
    """OpenLLMetry without the GenAI semantic-conventions opt-in: gen_ai.prompt.N / gen_ai.completion.N."""
    os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    return OpenAIInstrumentor()


def _otel_genai() -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return OpenAIInstrumentor()


# (folder/file, instrumentor factories, program, writer, needs the Anthropic adapter)
FIXTURES: list[tuple[str, list[Callable[[], Any]], Callable[[str], None], str, bool]] = [
    ("openinference-openai/chat_tools.jsonl", [_oi("openai")], openai_program, "jsonl", False),
    ("openinference-openai/chat_tools.console.json", [_oi("openai")], openai_program, "console", False),
    ("openinference-openai/chat_tools.otlp.json", [_oi("openai")], openai_program, "otlp", False),
    ("openinference-langchain/chain.jsonl", [_oi("langchain")], langchain_program, "jsonl", False),
    ("openinference-langchain/react_agent.console.json", [_oi("langchain")], langgraph_tools_program, "console",
     False),
    ("openinference-langchain/router_graph.otlp.json", [_oi("langchain")], langgraph_router_program, "otlp", False),
    ("openinference-llama-index/chat.jsonl", [_oi("llama_index")], llamaindex_chat_program, "jsonl", False),
    ("openinference-llama-index/query.console.json", [_oi("llama_index")], llamaindex_query_program, "console",
     False),
    ("openinference-llama-index/query.otlp.json", [_oi("llama_index")], llamaindex_query_program, "otlp", False),
    ("openinference-dspy/predict.jsonl", [_oi("dspy")], dspy_predict_program, "jsonl", False),
    ("openinference-dspy/predict.console.json", [_oi("dspy")], dspy_predict_program, "console", False),
    ("openinference-dspy/multihop.otlp.json", [_oi("dspy")], dspy_multihop_program, "otlp", False),
    ("openinference-anthropic/messages_tools.jsonl", [_oi("anthropic")], anthropic_program, "jsonl", True),
    ("openinference-anthropic/messages_tools.otlp.json", [_oi("anthropic")], anthropic_program, "otlp", True),
    ("otel-sdk/openinference_start_end.jsonl", [_oi("openai")], openai_program, "start_end", False),
    ("otel-sdk/genai_openai_v2.console.json", [_otel_genai], openai_program, "console", False),
    ("otel-sdk/genai_openai_v2.otlp.json", [_otel_genai], openai_program, "otlp", False),
    ("otel-sdk/langchain_start_end.jsonl", [_oi("langchain")], langgraph_tools_program, "start_end", False),
    ("openllmetry/openai_tools.jsonl", [_openllmetry("openai")], openai_program, "jsonl", False),
    ("openllmetry/openai_tools.otlp.json", [_openllmetry("openai")], openai_program, "otlp", False),
    ("openllmetry/openai_legacy.jsonl", [_openllmetry_legacy], openai_program, "jsonl", False),
    ("openllmetry/anthropic_tools.console.json", [_openllmetry("anthropic")], anthropic_program, "console", True),
]


STRANDS = "strands/agent_tools.otlp.json"
"""Strands Agents 1.62 with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: its messages are
``gen_ai.client.inference.operation.details`` span events in the GenAI parts form. Written alone
(``generate.py strands``): Strands traces through the process's global tracer provider."""


def main(only: Sequence[str]) -> None:
    with Simulator(SimulatorConfig()) as sim:
        if only and all(o.startswith("strands") for o in only):
            with strands_recorded() as rec:
                strands_program(sim.url)
            write(HERE / STRANDS, rec, "otlp")
            return
        for rel, makers, program, how, adapter in FIXTURES:
            if only and not any(rel.startswith(o) for o in only):
                continue
            with recorded(*(m() for m in makers)) as rec:
                if adapter:
                    with anthropic_adapter(sim.url) as url:
                        program(url)
                else:
                    program(sim.url)
            write(HERE / rel, rec, how)
        if not only or any("langfuse".startswith(o) or o.startswith("langfuse") for o in only):
            (HERE / "langfuse").mkdir(exist_ok=True)
            langfuse_fixtures(sim.url, HERE / "langfuse")
        if os.environ.get("VERCEL_NODE_MODULES") and (not only or any(o.startswith("vercel") for o in only)):
            modules = os.environ["VERCEL_NODE_MODULES"]
            env = {"NODE_PATH": modules, "PATH": os.environ.get("PATH", "")}
            link = HERE / "vercel" / "node_modules"  # ES modules resolve packages from the script's folder
            link.symlink_to(modules)
            scripts = [["node", str(HERE / "vercel" / "generate.mjs")],  # `vercel/more`: more.mts alone
                       [str(Path(modules) / ".bin" / "tsx"), str(HERE / "vercel" / "more.mts")]]
            try:
                for script in scripts if "vercel/more" not in only else scripts[1:]:
                    subprocess.run([*script, sim.url], env=env, check=True)
            finally:
                link.unlink()


if __name__ == "__main__":
    main(sys.argv[1:])
