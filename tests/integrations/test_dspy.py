"""quiver.integrations.dspy on the real DSPy 3.4 against the bundled simulator.

The bundled example (``experiments/dspy_multihop``: a plain DSPy program plus one
``instrument(...)`` line) is recorded with ``quiver record``, checked with ``quiver replay
--check`` and perturbed by a small campaign of its spec's five perturbations (the commands
run in this process, so DSPy and LiteLLM load once). Predict,
ChainOfThought and ReAct are recorded and replayed in process, with DSPy's cache on and off.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from findings_claims import check_claims
from spec_paths import absolute_checks

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list fetched when LiteLLM loads

import dspy  # noqa: E402

import quiver  # noqa: E402
from quiver.experiments._cli.main import main  # noqa: E402
from quiver.integrations.dspy import instrument, node_names  # noqa: E402
from quiver.replay import InputItem, SimRequest, Simulator, Text, record_corpus, replay_trace, sim_model  # noqa: E402

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "experiments" / "dspy_multihop"
SPEC = ROOT / "experiments" / "specs" / "dspy_multihop.yaml"
LLM_NODES = {"router", "hops.gen_query", "answer"}


def _traces(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- the example


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``quiver record experiments/dspy_multihop/record.yaml``: 14 questions x 3 repeats."""
    out = tmp_path_factory.mktemp("dspy") / "rec"
    assert main(["record", str(EXAMPLE / "record.yaml"), "--output", str(out), "--quiet"]) == 0
    return out / "traces.jsonl"


def test_every_llm_call_of_the_example_is_recorded_with_the_full_contract(recorded: Path) -> None:
    traces = _traces(recorded)
    assert len(traces) == 42 and all(t["status"] == "ok" for t in traces)
    llm_calls = [c for t in traces for c in t["calls"] if c["kind"] == "llm"]
    assert {c["node"] for c in llm_calls} == LLM_NODES
    for call in llm_calls:
        assert call["model"]["name"] == "dspy-multihop" and call["model"]["params"]["temperature"] == 0.7
        prompt = call["prompt"]
        assert prompt["template_id"] == call["node"] and prompt["template_hash"].startswith("sha256:")
        assert prompt["assembled"][0]["role"] == "system" and "[[ ## " in prompt["assembled"][-1]["content"]
        assert call["response"]["content"].rstrip().endswith("[[ ## completed ## ]]")
        assert call["response"]["usage"]["total_tokens"] > 0
        assert isinstance(call["output"], dict)  # a Prediction recorded as its fields
    router = [c for c in llm_calls if c["node"] == "router"]
    assert all(c["decision"] == {"route": c["output"]["route"]} for c in router)
    hops = [c for t in traces for c in t["calls"] if c["node"].startswith("hops.")]
    assert {(c["loop"], c["iteration"]) for c in hops} >= {("hops", 0), ("hops", 1)}
    retrievals = [c for t in traces for c in t["calls"] if c["node"] == "hops.retrieve"]
    assert all(c["kind"] == "retrieval" and len(c["retrieval"]) == 3 for c in retrievals)


def test_repeats_of_an_input_differ_where_the_simulator_samples(recorded: Path) -> None:
    by_input: dict[str, list[str]] = {}
    for t in _traces(recorded):
        outputs = [json.dumps(c["output"], sort_keys=True) for c in t["calls"] if c["kind"] == "llm"]
        by_input.setdefault(t["input_id"], []).append(json.dumps(outputs))
    assert len(by_input) == 14
    differing = sum(len(set(runs)) > 1 for runs in by_input.values())
    assert differing >= 7, f"only {differing} of 14 inputs vary across their 3 repeats"


def test_replay_check_reproduces_every_trace_with_no_llm_call(
        recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--spec", str(EXAMPLE / "record.yaml"), "--check", str(recorded)]) == 0
    said = capsys.readouterr()
    assert "42 of 42 traces reproduce exactly" in said.out + said.err
    assert "0 LLM calls made" in said.out + said.err


@pytest.fixture(scope="module")
def campaign(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spec's five perturbations on 6 of the recorded traces, no controls."""
    spec = yaml.safe_load(SPEC.read_text())
    folder = tmp_path_factory.mktemp("dspy_campaign")
    spec.update({
        "pipeline": str(EXAMPLE / "pipeline.py") + ":run", "baseline": str(recorded),
        "select": {"mode": "sample", "n": 6, "seed": 1}, "output": str(folder / "out"),
        "replay": {"downstream": "live", "controls": 0},
    })
    spec["llm"]["simulator"]["models"] = [str(EXAMPLE / "sim_models.py")]
    absolute_checks(spec, SPEC.parent)
    for key in ("inputs", "repeats"):
        spec.pop(key, None)
    for p in spec["perturbations"]:
        if p["op"] == "prompt_swap":
            p["params"]["variant"] = str(EXAMPLE / "prompts" / "router_one_hop.txt")
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["run", str(path), "--quiet"]) == 0
    return folder / "out"


def _expected_live_calls(pair: dict[str, Any]) -> int:
    """LLM calls a pair's replay makes: every llm call from its target on, in program order
    (router, the hops' queries, answer), less the target's own when its output is served."""
    counts = {node: pair["counts"].get(node, [0, 0])[1] for node in LLM_NODES}
    node, occurrence, op = pair["node"], pair["occurrence"], pair["op"]
    execution = op in ("prompt_swap", "param_change")
    if node == "router":
        return counts["hops.gen_query"] + counts["answer"] + int(execution)
    if node == "hops.gen_query":
        return counts["hops.gen_query"] - occurrence - (0 if execution else 1) + counts["answer"]
    assert node == "hops.retrieve"
    return counts["hops.gen_query"] - occurrence - 1 + counts["answer"]


def test_each_perturbation_of_the_spec_gives_effective_pairs_with_their_llm_calls(campaign: Path) -> None:
    summary = json.loads((campaign / "campaign.json").read_text())
    check_claims(summary)  # no finding claims an absence beyond its margin
    by_id = {p["id"]: p for p in summary["perturbations"]}
    assert set(by_id) == {"router-single-hop", "route-flip", "passages-drop", "query-greedy",
                          "router-prefers-one-hop"}
    for pid, p in by_id.items():
        assert p["failed"] == 0 and p["diverged"] == 0, pid
        assert p["effective"] > 0, f"{pid}: no effective pair of {p['pairs']}"
    pairs = _traces(campaign / "pairs.jsonl")
    assert len(pairs) == 30
    for pair in pairs:
        assert sum(pair["llm_calls"].values()) == _expected_live_calls(pair), pair["job_id"]
        assert set(pair["llm_calls"]) <= LLM_NODES
    flips = [p for p in pairs if p["perturbation_id"] == "route-flip"]
    assert all(p["decisions"]["perturbed"]["router#0"]["route"] != p["decisions"]["baseline"]["router#0"]["route"]
               for p in flips)


# --------------------------------------------------------------------------- predictors in process


def _respond(values: dict[str, str]) -> str:
    return "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in values.items()) + "\n\n[[ ## completed ## ]]\n"


@sim_model("dspy-unit")
def _unit_model(req: SimRequest) -> Text:
    """Answers DSPy's ChatAdapter: a sampled answer, a ReAct step (one lookup, then finish)."""
    asked = req.last_user.split("Respond with the corresponding output fields", 1)[-1]
    system = req.system_text
    if "`[[ ## next_thought ## ]]`" in asked:
        if "observation_0" in req.last_user:
            return Text(_respond({"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": "{}"}))
        return Text(_respond({"next_thought": "Look it up.", "next_tool_name": "lookup",
                              "next_tool_args": json.dumps({"topic": "capital"})}))
    if "`[[ ## size ## ]]`" in asked:
        return Text({_respond({"size": "big"}): 1.0, _respond({"size": "small"}): 0.5})
    shout = "SHOUT" in system
    answers = {"PARIS": 1.0, "LYON": 0.9} if shout else {"Paris": 1.0, "Lyon": 0.9, "Nice": 0.8}
    reasoning = "`[[ ## reasoning ## ]]`" in asked
    return Text({
        _respond({**({"reasoning": f"It is {a}."} if reasoning else {}), "answer": a}): logit
        for a, logit in answers.items()
    })


class Capital(dspy.Signature):
    """Name the capital of the country."""

    country: str = dspy.InputField()
    answer: str = dspy.OutputField()


class Kind(dspy.Signature):
    """Say whether the place is big."""

    place: str = dspy.InputField()
    size: Literal["big", "small"] = dspy.OutputField()


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"The {topic} of France is Paris."


@pytest.fixture
def endpoint(simulator: Simulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OPENAI_BASE_URL", simulator.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield simulator.url


def _record(program: dspy.Module, tmp: Path, *, cache: bool, repeats: int = 3) -> list[quiver.Trace]:
    lm = dspy.LM("openai/dspy-unit", temperature=1.0, cache=cache)

    def run(country: str) -> dict[str, Any]:
        with dspy.context(lm=lm):
            return dict(program(country=country).items())

    result = record_corpus(run, pipeline_name="unit", inputs=[InputItem("fr", {"country": "France"})],
                           repeats=repeats, output_dir=tmp, progress_stream=None)
    assert result.failed == 0
    traces = quiver.load_traces(result.traces_path).traces
    for trace in traces:
        replayed = replay_trace(trace, run)
        assert replayed.divergences == [] and sum(replayed.llm_calls.values()) == 0
    return traces


def _llm(trace: quiver.Trace) -> list[quiver.NodeCall]:
    return [c for c in trace.calls if c.kind == "llm"]


@pytest.mark.parametrize("cache", [False, True], ids=["cache-off", "cache-on"])
def test_a_predict_is_one_llm_node_whose_repeats_sample_apart(endpoint: str, tmp_path: Path, cache: bool) -> None:
    program = instrument(dspy.Predict(Capital), name="capital")
    traces = _record(program, tmp_path, cache=cache, repeats=4)
    assert node_names(program) == ["capital"]
    for trace in traces:
        (call,) = _llm(trace)
        assert call.node == "capital" and call.response is not None and call.model is not None
        assert call.prompt is not None and call.prompt.template_id == "capital"
        assert set(call.output) == {"answer"}
    # each repeat reached the endpoint with its own sample key, DSPy's cache on or off
    assert len({_llm(t)[0].output["answer"] for t in traces}) > 1


def test_a_chain_of_thought_records_its_reasoning_and_serves_a_prediction(endpoint: str, tmp_path: Path) -> None:
    program = instrument(dspy.ChainOfThought(Capital), name="capital")
    traces = _record(program, tmp_path, cache=False, repeats=1)
    (call,) = _llm(traces[0])
    assert call.node == "capital" and set(call.output) == {"reasoning", "answer"}
    served = replay_trace(traces[0], lambda country: program(country=country))
    assert sum(served.llm_calls.values()) == 0
    assert served.trace.calls[-1].output == call.output


def test_a_routing_field_is_a_decision_and_a_prompt_swap_replaces_the_instructions(
        endpoint: str, tmp_path: Path) -> None:
    class Program(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.size = dspy.Predict(Kind)
            self.capital = dspy.Predict(Capital)

        def forward(self, country: str) -> dspy.Prediction:
            size = self.size(place=country).size
            return dspy.Prediction(size=size, **self.capital(country=country))

    program = instrument(Program())
    assert node_names(program) == ["size", "capital"]
    assert quiver.get_template("capital").messages == (("system", "Name the capital of the country."),)
    traces = _record(program, tmp_path, cache=False, repeats=1)
    size, capital = _llm(traces[0])
    assert size.decision == {"size": size.output["size"]}
    variant = tmp_path / "shout.txt"
    variant.write_text("Name the capital of the country. SHOUT it.\n")
    op = quiver.perturbations.make_operator("prompt_swap", {"variant": str(variant)})

    def run(country: str) -> dict[str, Any]:
        with dspy.context(lm=dspy.LM("openai/dspy-unit", temperature=1.0)):
            return dict(program(country=country).items())

    swapped = replay_trace(traces[0], run, target=quiver.replay.Target("capital"), operator=op)
    call = _llm(swapped.trace)[1]
    assert call.output["answer"] in ("PARIS", "LYON") and swapped.llm_calls == {"capital": 1}
    assert call.prompt is not None and "SHOUT it." in call.prompt.assembled[0].content


def test_react_steps_are_loop_iterations_and_tool_calls_are_tool_steps(endpoint: str, tmp_path: Path) -> None:
    program = instrument(dspy.ReAct(Capital, tools=[lookup], max_iters=3), name="agent")
    assert node_names(program) == ["agent.react", "agent.extract", "agent.lookup", "agent.finish"]
    traces = _record(program, tmp_path, cache=False, repeats=1)
    calls = [c for c in traces[0].calls if c.kind != "source"]
    assert [(c.node, c.loop, c.iteration) for c in calls] == [
        ("agent.react", "agent", 0), ("agent.lookup", "agent", 0), ("agent.react", "agent", 1),
        ("agent.finish", "agent", 1), ("agent.extract", None, None),
    ]
    tool = calls[1]
    assert tool.kind == "tool" and tool.tool is not None
    assert (tool.tool.name, tool.tool.args, tool.tool.response) == (
        "lookup", {"topic": "capital"}, "The capital of France is Paris.")
    assert calls[0].decision == {"next_tool_name": "lookup"}
    assert len(_llm(traces[0])) == 3 and all(c.response is not None for c in _llm(traces[0]))
