"""Small LangGraph and DSPy programs traced by the real OpenInference instrumentors.

Used by the importer tests, and to write the span fixtures in
``tests/data/traces/openinference_frameworks/`` (``python tests/oi_frameworks.py``).
The programs run against the bundled simulator; each repeat sends its own sample key,
so repeats differ where the simulated models sample.

* LangGraph: ``router`` (LLM) -> ``retrieve`` or ``compose``; ``retrieve`` -> ``grade``
  (LLM) -> ``compose`` or ``rewrite`` (LLM) -> ``retrieve`` (a cycle, at most two
  rewrites); ``compose`` (a ``ChatPromptTemplate`` piped into the LLM).
* DSPy: ``router`` (``Literal`` route) -> ``hops.gen_query`` twice (a ``Hop`` module) ->
  ``answer`` (``ChainOfThought``).
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from quiver.replay import SimRequest, Text, sim_model

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list

FIXTURES = Path(__file__).parent / "data" / "traces" / "openinference_frameworks"
KEY_HEADER = "X-Quiver-Sample-Key"


# --------------------------------------------------------------------------- simulated models


@sim_model("oi-router")
def _router(req: SimRequest) -> Text:
    question = str(req.messages[-1]["content"])
    return Text({"retrieve": 1.5 if "?" in question else -1.5, "compose": 0.0})


@sim_model("oi-grade")
def _grade(req: SimRequest) -> Text:
    return Text({"yes": 0.0, "no": 0.4})


@sim_model("oi-rewrite")
def _rewrite(req: SimRequest) -> Text:
    return Text({"a sharper question?": 0.0, "a narrower question?": 0.0})


@sim_model("oi-compose")
def _compose(req: SimRequest) -> Text:
    return Text({"The answer is 42.": 0.0, "It is 42.": 0.5})


_FIELDS = re.compile(r"`\[\[ ## (\w+) ## \]\]`")
_CHOICES: dict[str, dict[str, float]] = {
    "route": {"hop": 0.6, "direct": 0.0},
    "reasoning": {"Think it through.": 0.0, "Read the passages.": 0.0},
    "query": {"first author": 0.0, "publication year": 0.3},
    "answer": {"Ada Lovelace": 0.8, "Charles Babbage": 0.0},
}


@sim_model("oi-dspy")
def _dspy(req: SimRequest) -> Text:
    """Answers in DSPy's ChatAdapter format: each requested field, then the completed marker."""
    names = [n for n in _FIELDS.findall(str(req.messages[-1]["content"])) if n != "completed"]
    groups = [list(_CHOICES.get(n, {f"{n} value": 0.0}).items()) for n in names]
    texts = {}
    for combo in itertools.product(*groups):
        body = "".join(f"[[ ## {n} ## ]]\n{v}\n\n" for n, (v, _) in zip(names, combo, strict=True))
        texts[body + "[[ ## completed ## ]]"] = sum(logit for _, logit in combo)
    return Text(texts)


# --------------------------------------------------------------------------- tracing


@contextmanager
def traced(instrumentor: Any) -> Iterator[Any]:
    """An in-memory span exporter with ``instrumentor`` on, for the block."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def _spans(exporter: Any) -> list[dict[str, Any]]:
    return [json.loads(s.to_json()) for s in exporter.get_finished_spans()]


# --------------------------------------------------------------------------- LangGraph


class State(TypedDict, total=False):
    question: str
    route: str
    docs: Annotated[list[str], operator.add]
    grade: str
    rewrites: int
    answer: str


def langgraph_app(base_url: str, sample_key: str | None) -> Any:
    """The agent, its ChatOpenAI clients sending ``sample_key`` (none: the recording's own)."""
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    def chat(model: str) -> ChatOpenAI:
        return ChatOpenAI(model=model, base_url=base_url, api_key="sk-test", temperature=1.0,  # type: ignore[arg-type]
                          default_headers={KEY_HEADER: sample_key} if sample_key else None, max_retries=0)

    compose_prompt = ChatPromptTemplate.from_messages([("system", "Answer in one line."),
                                                       ("user", "{question}\n{docs}")])

    def router(s: State) -> dict[str, Any]:
        return {"route": str(chat("oi-router").invoke([("user", s["question"])]).content).strip()}

    def retrieve(s: State) -> dict[str, Any]:
        return {"docs": [f"passage on {s['question']}"]}

    def grade(s: State) -> dict[str, Any]:
        text = f"Passages: {s.get('docs', [])}\nQuestion: {s['question']}"
        return {"grade": str(chat("oi-grade").invoke([("user", text)]).content).strip()}

    def rewrite(s: State) -> dict[str, Any]:
        out = chat("oi-rewrite").invoke([("user", s["question"])])
        return {"question": str(out.content), "rewrites": s.get("rewrites", 0) + 1}

    def compose(s: State) -> dict[str, Any]:
        out = (compose_prompt | chat("oi-compose")).invoke({"question": s["question"], "docs": s.get("docs", [])})
        return {"answer": str(out.content)}

    def after_router(s: State) -> str:
        return s["route"] if s["route"] in ("retrieve", "compose") else "compose"

    def after_grade(s: State) -> str:
        return "compose" if s["grade"] == "yes" or s.get("rewrites", 0) >= 2 else "rewrite"

    graph = StateGraph(State)
    for fn in (router, retrieve, grade, rewrite, compose):
        graph.add_node(fn.__name__, fn)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", after_router, ["retrieve", "compose"])
    graph.add_edge("retrieve", "grade")
    graph.add_conditional_edges("grade", after_grade, ["compose", "rewrite"])
    graph.add_edge("rewrite", "retrieve")
    graph.add_edge("compose", END)
    return graph.compile()


def langgraph_spans(base_url: str, questions: list[str], repeats: int) -> list[dict[str, Any]]:
    """OpenInference spans of the agent run ``repeats`` times over ``questions``."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    with traced(LangChainInstrumentor()) as exporter:
        for r in range(repeats):
            for i, question in enumerate(questions):
                langgraph_app(base_url, f"lg/{i}/{r}").invoke({"question": question})
        return _spans(exporter)


# --------------------------------------------------------------------------- DSPy


def dspy_program() -> Any:
    """The multi-hop program (a fresh instance)."""
    import dspy

    class Route(dspy.Signature):
        """Decide whether the question needs a search."""

        question: str = dspy.InputField()
        route: Literal["hop", "direct"] = dspy.OutputField()

    class Hop(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gen_query = dspy.Predict("question, context -> query")

        def forward(self, question: str, context: list[str]) -> Any:
            return self.gen_query(question=question, context=context)

    class MultiHop(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = dspy.Predict(Route)
            self.hops = Hop()
            self.answer = dspy.ChainOfThought("question, context -> answer")

        def forward(self, question: str) -> Any:
            context: list[str] = []
            if self.router(question=question).route == "hop":
                for _ in range(2):
                    context.append(f"passage on {self.hops(question=question, context=context).query}")
            return self.answer(question=question, context=context)

    return MultiHop()


def dspy_spans(base_url: str, questions: list[str], repeats: int) -> list[dict[str, Any]]:
    """OpenInference spans of the program run ``repeats`` times over ``questions``."""
    import dspy
    from openinference.instrumentation.dspy import DSPyInstrumentor

    program = dspy_program()
    with traced(DSPyInstrumentor()) as exporter:
        for r in range(repeats):
            for i, question in enumerate(questions):
                # the sample varies with the seed (a header would send DSPy through LiteLLM, slow to load)
                lm = dspy.LM("openai/oi-dspy", api_base=base_url, api_key="sk-test", cache=False,
                             temperature=1.0, num_retries=0, seed=1000 * r + i)
                with dspy.context(lm=lm):
                    program(question=question)
        return _spans(exporter)


QUESTIONS = ["who wrote the first program?", "say hello"]


def write_fixtures() -> None:
    """Record the span fixtures (two questions, two repeats each) and the DSPy program's state."""
    from quiver.replay import Simulator, SimulatorConfig

    FIXTURES.mkdir(parents=True, exist_ok=True)
    with Simulator(SimulatorConfig()) as sim:
        for name, spans in (("langgraph", langgraph_spans(sim.url, QUESTIONS, 2)),
                            ("dspy", dspy_spans(sim.url, QUESTIONS, 2))):
            (FIXTURES / f"{name}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans), encoding="utf-8")
    dspy_program().save(str(FIXTURES / "dspy_program.json"))


if __name__ == "__main__":
    write_fixtures()
    sys.exit(0)
