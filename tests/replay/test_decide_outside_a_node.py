"""``quiver.decide`` outside a node, as the README's example takes it.

The README's pipeline classifies a ticket (an ``llm`` node through the engine's client)
and searches in parallel, then decides the route in its own code, outside any node. The
router call it records must have the classifier as its parent, so that ``quiver
analyze`` reads the classifier as the noise origin (the router only passes its sampling
on) and the classifier's ``urgent`` field as a routing field.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel

import quiver
from quiver import Trace, iter_traces
from quiver._observational import analyze
from quiver.replay import Fields, InputItem, LLMClient, Replayer, Simulator, record_corpus, sim_model

TICKETS = ("My invoice is wrong", "The app crashes on start", "Please close my account")


@sim_model("decide-triage")
def triage_model(req: Any) -> Fields:
    """Urgency and category both sampled evenly: repeats of one ticket route differently."""
    return Fields(urgent={True: 0.0, False: 0.0}, category={"billing": 0.0, "bug": 0.0})


class Ticket(BaseModel):
    urgent: bool
    category: str


quiver.template("decide.classify", system="Classify the ticket.", user="Ticket: {text}")


@quiver.node("classify", kind="llm")
def classify(text: str) -> dict[str, Any]:
    return dict(quiver.llm().chat("decide.classify", text=text, response_format=Ticket, temperature=1.0).data)


@quiver.node("search", kind="retrieval")
def search(text: str) -> list[dict[str, Any]]:
    docs = [{"doc_id": f"kb-{i}", "content": f"article {i} on {text}", "score": 1.0 / (i + 1)} for i in range(2)]
    quiver.retrieved(docs)
    return docs


@quiver.node("ticket", kind="tool")
def open_ticket(text: str, category: str) -> dict[str, str]:
    return {"queue": category, "summary": text[:20]}


@quiver.node("draft")
def write_draft(text: str, docs: list[dict[str, Any]], it: int) -> str:
    return f"Reply {it} to {text!r} citing {docs[0]['doc_id']}"


def run(ticket: str) -> Any:
    """The README's example, with the value the route is decided on named by ``on=``."""
    with quiver.ThreadPoolExecutor(max_workers=2) as pool:
        cls, docs = pool.submit(classify, ticket), pool.submit(search, ticket)
    label = cls.result()
    arm = quiver.decide("route", "escalate" if label["urgent"] else "answer", on=label)
    if arm == "escalate":
        return open_ticket(ticket, label["category"])
    draft = None
    for it in quiver.loop("refine", k_max=2):
        draft = write_draft(ticket, docs.result(), it)
    return draft


def run_on_the_arm(ticket: str) -> Any:
    """A gate whose arm is a field of an earlier output: that call is its parent."""
    return quiver.decide("queue", classify(ticket)["category"])


@pytest.fixture(scope="module")
def client(simulator: Simulator) -> Iterator[LLMClient]:
    llm = LLMClient(base_url=simulator.url, model="decide-triage", api_key="sk-decide")
    yield llm
    llm.close()


def _record(fn: Any, client: LLMClient, out: Path, repeats: int) -> list[Trace]:
    result = record_corpus(
        fn, pipeline_name=fn.__name__, inputs=[InputItem(f"t{i}", {"ticket": t}) for i, t in enumerate(TICKETS)],
        repeats=repeats, output_dir=out, llm=client, seed=5, progress_stream=None,
    )
    assert result.failed == 0
    return list(iter_traces(result.traces_path))


@pytest.fixture(scope="module")
def recorded(client: LLMClient, tmp_path_factory: pytest.TempPathFactory) -> list[Trace]:
    t0 = time.monotonic()
    traces = _record(run, client, tmp_path_factory.mktemp("decide"), repeats=8)
    print(f"recorded {len(traces)} traces in {time.monotonic() - t0:.2f} s")
    return traces


def _parents(trace: Trace, node: str) -> list[str]:
    by_id = {c.call_id: c.node for c in trace.calls}
    call = next(c for c in trace.calls if c.node == node)
    return [by_id[p] for p in call.parents]


def test_a_decision_outside_a_node_has_the_call_it_decides_on_as_parent(recorded: list[Trace]) -> None:
    for trace in recorded:
        route = next(c for c in trace.calls if c.node == "route")
        assert route.kind == "router" and route.decision == {"route": route.output}
        assert _parents(trace, "route") == ["classify"]
    assert {next(c.output for c in t.calls if c.node == "route") for t in recorded} == {"escalate", "answer"}


def test_a_decision_on_a_field_of_an_output_has_its_producer_as_parent(
    client: LLMClient, tmp_path: Path
) -> None:
    for trace in _record(run_on_the_arm, client, tmp_path, repeats=1):
        assert _parents(trace, "queue") == ["classify"]


def test_analyze_reads_the_classifier_as_the_origin_and_urgent_as_routing(recorded: list[Trace]) -> None:
    t0 = time.monotonic()
    profile = analyze(recorded, embedder=lambda texts: np.ones((len(texts), 2)),
                      cache_dir=Path(tempfile.mkdtemp(prefix="quiver-decide-")), resamples=200)
    print(f"analysed in {time.monotonic() - t0:.2f} s")
    assert profile.node("classify")["origin"] == "origin"
    assert profile.node("route")["origin"] != "origin"
    fields = profile.to_json()["graph"]["nodes"]["classify"]["fields"]
    assert fields["urgent"]["role"] == "routing"


def test_a_frozen_replay_reproduces_the_router_and_its_parent(client: LLMClient, recorded: list[Trace]) -> None:
    results = [Replayer(run, client=client).replay(t) for t in recorded[:4]]
    assert [r.divergences for r in results if not r.reproduced] == []
