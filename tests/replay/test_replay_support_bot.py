"""Frozen replay and every operator on the support bot, against what truth.yaml states.

The corpus (75 messages x 2 repeats) is recorded once per module on an in-process
simulator with the demo's models and its backend nondeterminism (0.15), so that the
simulator's own request counter can be read: replays must make LLM calls only at and
downstream of the target. Effects checked against experiments/support_bot/truth.yaml:
sufficient=True skips the initial discovery, is_small_talk=True collapses the path to
the first wave and smalltalk, web_search_hint=True inserts web_search, and a no-op
override leaves the downstream nodes on their noise floor.
"""

from __future__ import annotations

import json
import statistics
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import quiver
import quiver.experiments.support_bot.sim_models  # noqa: F401  (registers the demo's models)
from quiver import FunctionEmbedder
from quiver._graph import PipelineGraph, load_graph
from quiver._stats import build_pairs
from quiver._trace import Trace, iter_traces
from quiver.perturbations import expand_ladder, make_operator
from quiver.replay import (
    InputItem,
    LLMClient,
    PairResult,
    ReplayMode,
    ReplayResult,
    Simulator,
    SimulatorConfig,
    Target,
    load_pipeline,
    pair_results,
    record_corpus,
    replay_trace,
)

DEMO = Path(__file__).parents[2] / "experiments" / "support_bot"
FIRST_WAVE = {"rewriter", "signal_analysis", "context_sufficiency"}
SMALLTALK_PATH = {"input", *FIRST_WAVE, "route", "smalltalk"}


def _bag_embedder(texts: list[str]) -> Any:
    """A deterministic bag-of-words embedder: keeps these tests independent of the
    sentence-transformers model (the distances only need to be consistent)."""
    import numpy as np

    out = np.zeros((len(texts), 256))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, zlib.crc32(word.encode()) % 255] += 1.0
        out[i, 255] += 1e-6
    return out


EMBEDDER = FunctionEmbedder(_bag_embedder, name="bag-of-words")


@dataclass
class Bot:
    fn: Any
    client: LLMClient
    sim: Simulator
    traces: list[Trace]
    graph: PipelineGraph
    cache: Path

    def replay(self, trace: Trace, node: str | None = None, op: str | None = None, params: Any = None,
               **kwargs: Any) -> ReplayResult:
        operator = make_operator(op, params or {}) if op else None
        return replay_trace(
            trace, self.fn, target=Target(node) if node else None, operator=operator, client=self.client,
            graph=self.graph, base_dir=DEMO, **kwargs,
        )

    def campaign(self, node: str, op: str, params: Any, *, repeat: int = 0, seed: int = 1) -> list[PairResult]:
        eligible = [t for t in self.traces if t.repeat == 0 and any(c.node == node for c in t.calls)]
        results = [self.replay(t, node, op, params, repeat=repeat, seed=seed) for t in eligible]
        return pair_results(results, self.graph, embedder=EMBEDDER, cache_dir=self.cache)

    def requests(self) -> int:
        return self.sim.stats()["requests"]


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bot]:
    out = tmp_path_factory.mktemp("support_bot")
    lines = (DEMO / "inputs.jsonl").read_text().splitlines()
    inputs = [InputItem.from_record(json.loads(line)) for line in lines if line.strip()]
    fn = load_pipeline("pipeline.py:run", DEMO)
    with Simulator(SimulatorConfig(nondeterminism=0.15)) as sim:
        client = LLMClient(base_url=sim.url, model="support-bot-planner", api_key="sk-test",
                           params={"temperature": 0, "seed": 42})
        result = record_corpus(fn, pipeline_name="support_bot", inputs=inputs, repeats=2, output_dir=out,
                               llm=client, concurrency=8, progress_stream=None, run_id="replay-tests")
        assert result.failed == 0
        traces = list(iter_traces(result.traces_path))
        yield Bot(fn, client, sim, traces, load_graph(DEMO / "graph.yaml"), out / "embeddings")
        client.close()


def _nodes(trace: Trace) -> set[str]:
    return {c.node for c in trace.calls}


def _initial_discovery(trace: Trace) -> list[Any]:
    return [c for c in trace.calls if c.node == "discovery" and c.iteration is None]


# --------------------------------------------------------------------------- frozen replay


def test_everything_frozen_reproduces_every_trace_without_an_llm_call(bot: Bot) -> None:
    before = bot.requests()
    results = [bot.replay(t) for t in bot.traces]
    assert bot.requests() == before
    assert all(r.reproduced for r in results), [r.first_divergence.message() for r in results if not r.reproduced][:3]
    assert all(r.total_llm_calls == 0 for r in results)
    for r in results[:20]:
        assert [c.model_dump(exclude={"started_at", "ended_at"}) for c in r.trace.calls] == [
            c.model_dump(exclude={"started_at", "ended_at"}) for c in r.baseline.calls
        ]
        assert r.trace.output == r.baseline.output


def test_code_that_changes_a_frozen_call_s_inputs_is_a_divergence_with_a_diff(bot: Bot, tmp_path: Path) -> None:
    changed = tmp_path / "changed_bot.py"
    changed.write_text(
        "from quiver.experiments.support_bot import pipeline\n\n"
        "def run(message, account_id, history=None):\n"
        "    # the change under test: only the last turn of the history is passed on\n"
        "    return pipeline.run(message, account_id, list(history or [])[-1:])\n",
        encoding="utf-8",
    )
    fn = load_pipeline(f"{changed}:run")
    long_history = [t for t in bot.traces if len(t.inputs["history"]) >= 2 and "planner" in _nodes(t)][:4]
    short_history = [t for t in bot.traces if len(t.inputs["history"]) < 2 and "planner" in _nodes(t)][:4]
    assert long_history and short_history
    for trace in long_history:
        result = replay_trace(trace, fn, target=Target("planner"),
                              operator=make_operator("override", {"set": {"action": "COMPOSE"}}),
                              client=bot.client, graph=bot.graph)
        first = result.first_divergence
        assert first is not None and first.reason == "inputs"
        assert first.node in FIRST_WAVE and first.call_path.startswith("[")
        paths = {d.path for d in first.diff}
        assert "input_hash" in paths
        assert any(p.startswith("prompt.assembled") for p in paths), paths  # the prompt it was sent
        assert pair_results([result], bot.graph, embedder=EMBEDDER, cache_dir=bot.cache)[0].status == "diverged"
        # the divergent call ran live and its replayed result is kept
        assert result.llm_calls.get(first.node, 0) == 1
    for trace in short_history:
        assert replay_trace(trace, fn, client=bot.client).reproduced


def test_unfreezing_one_dimension_at_a_time(bot: Bot) -> None:
    traces = [t for t in bot.traces if "account_api" in _nodes(t)][:5]
    assert traces
    for trace in traces:
        frozen = bot.replay(trace)
        tools_live = bot.replay(trace, mode=ReplayMode().unfreeze("tools"))
        # the account API is deterministic: run live, it gives what was recorded
        assert tools_live.reproduced and tools_live.total_llm_calls == 0
        assert tools_live.served_calls == frozen.served_calls - sum(c.node == "account_api" for c in trace.calls)
        model_live = bot.replay(trace, mode=ReplayMode().unfreeze("model"))
        n_llm = sum(c.kind == "llm" for c in trace.calls)
        assert model_live.total_llm_calls == n_llm
        assert not [d for d in model_live.divergences if d.reason in ("missing", "unexpected")] or True
        prompt_live = bot.replay(trace, mode=ReplayMode().unfreeze("prompt"))
        # same templates: every rendered prompt equals the recorded one, so nothing is asked
        assert prompt_live.reproduced and prompt_live.total_llm_calls == 0
    variant = make_operator("prompt_swap", {"variant": "prompts/rewriter_verbose.txt"})
    from quiver.replay import get_template, template

    original = get_template("support_bot.rewriter")
    template("support_bot.rewriter", path=DEMO / "prompts" / "rewriter_verbose.txt")
    try:
        edited = bot.replay(traces[0], mode=ReplayMode().unfreeze("prompt"))
        held = bot.replay(traces[0])
    finally:
        template("support_bot.rewriter", messages=list(original.messages))
    assert variant.describe()["op"] == "prompt_swap"
    assert edited.llm_calls.get("rewriter") == 1  # the edited template is sent to the model
    assert held.reproduced and held.total_llm_calls == 0  # the prompt frozen: the recording stands


# --------------------------------------------------------------------------- overrides


def test_sufficient_true_removes_the_initial_discovery(bot: Bot) -> None:
    pairs = bot.campaign("context_sufficiency", "override", {"set": {"sufficient": True}})
    effective = [p for p in pairs if p.stratum == "effective"]
    noop = [p for p in pairs if p.stratum == "noop"]
    assert effective and noop
    for p in noop:
        assert p.baseline.calls[3].output == {"sufficient": True} or any(
            c.node == "context_sufficiency" and c.output == {"sufficient": True} for c in p.baseline.calls
        )
        assert p.magnitude == 0.0
    answering = [p for p in effective if "smalltalk" not in _nodes(p.baseline)]
    assert answering
    for p in answering:
        assert _initial_discovery(p.baseline) and not _initial_discovery(p.perturbed), p.trace_id
        assert p.decisions["perturbed"]["route#0"]["discovery"] == "skip"
        assert p.magnitude == 1.0 and p.d_shape


def test_small_talk_true_collapses_the_path(bot: Bot) -> None:
    pairs = bot.campaign("signal_analysis", "override", {"set": {"is_small_talk": True}})
    effective = [p for p in pairs if p.stratum == "effective"]
    assert len(effective) >= 40
    for p in effective:
        assert _nodes(p.perturbed) == SMALLTALK_PATH
        assert p.d_struct and p.d_shape and p.d_iter > 0
        assert p.counts["planner"][1] == 0 and p.counts["composer"] == [1, 0]
        assert p.first_divergent_call is not None and p.first_divergent_call["node"] == "signal_analysis"


def test_web_search_hint_inserts_web_search(bot: Bot) -> None:
    pairs = bot.campaign("signal_analysis", "override", {"set": {"web_search_hint": True}})
    inserted = [p for p in pairs if p.stratum == "effective" and "smalltalk" not in _nodes(p.baseline)]
    assert len(inserted) >= 40
    for p in inserted:
        assert "web_search" not in _nodes(p.baseline) and "web_search" in _nodes(p.perturbed)
        assert p.counts["web_search"] == [0, 1] and p.d_struct
        assert p.decisions["perturbed"]["route#0"]["web_search"] == "insert"


def _observational(bot: Bot) -> dict[str, list[float]]:
    by_input: dict[str, list[Trace]] = {}
    for t in bot.traces:
        by_input.setdefault(t.input_id, []).append(t)
    groups = {k: v for k, v in by_input.items() if len(v) == 2}
    from quiver._distance import EmbeddingStore
    from quiver._graph import infer_graph

    full = infer_graph(bot.traces, bot.graph)[0]
    with EmbeddingStore(EMBEDDER, bot.cache) as store:
        def text(texts: Any) -> Any:
            store.ensure(list(texts))
            return store.distance

        table = build_pairs(groups, full, text)
    return {n: [float(v) for v in table.col(n) if v == v] for n in table.nodes}


def test_a_noop_override_leaves_the_pipeline_on_its_noise_floor(bot: Bot) -> None:
    pairs = bot.campaign("signal_analysis", "override", {"set": {"is_small_talk": False}})
    noop = [p for p in pairs if p.stratum == "noop"]
    assert len(noop) >= 45 and all(p.magnitude == 0.0 for p in noop)
    # downstream ran live with the replay's own sample keys, not from the recording
    assert all(sum(p.llm_calls.values()) >= 1 for p in noop)
    observational = _observational(bot)
    for node in ("planner", "composer"):
        replayed = [p.d[node] for p in noop if p.d.get(node) is not None]
        floor = observational[node]
        # the no-op mean may not exceed the observational noise floor by more than three
        # standard errors of the difference (both are means of ~50 noisy distances)
        se = (statistics.variance(replayed) / len(replayed) + statistics.variance(floor) / len(floor)) ** 0.5
        excess = statistics.mean(replayed) - statistics.mean(floor)
        assert excess <= 3 * se, (node, statistics.mean(replayed), statistics.mean(floor), se)
        # and the override moved the node far less than a real one does
        assert statistics.mean(replayed) < 0.5
    rate_noop = sum(p.d_shape for p in noop) / len(noop)
    obs_pairs = len(observational["planner"])
    assert rate_noop <= 0.25, rate_noop
    assert obs_pairs >= 45


def test_upstream_parallel_nodes_are_never_re_executed(bot: Bot) -> None:
    before = bot.requests()
    pairs = bot.campaign("context_sufficiency", "override", {"set": {"sufficient": True}})
    made = Counter[str]()
    for p in pairs:
        made.update(p.llm_calls)
        assert not set(p.llm_calls) & FIRST_WAVE, p.llm_calls
        for node in ("rewriter", "signal_analysis"):
            a = next(c for c in p.baseline.calls if c.node == node)
            b = next(c for c in p.perturbed.calls if c.node == node)
            assert a.output == b.output and a.response == b.response
    assert bot.requests() - before == sum(made.values())
    swapped = bot.campaign("rewriter", "prompt_swap", {"variant": "prompts/rewriter_terse.txt"})
    for p in swapped:
        assert p.llm_calls["rewriter"] == 1
        assert not set(p.llm_calls) & {"signal_analysis", "context_sufficiency"}


# --------------------------------------------------------------------------- other operators


def test_prompt_swap_re_executes_the_rewriter_with_the_variant(bot: Bot) -> None:
    pairs = bot.campaign("rewriter", "prompt_swap", {"variant": "prompts/rewriter_terse.txt"})
    assert all(p.status == "ok" for p in pairs)
    effective = [p for p in pairs if p.stratum == "effective"]
    assert len(effective) >= len(pairs) // 2
    terse = (DEMO / "prompts" / "rewriter_terse.txt").read_text()
    for p in effective[:5]:
        call = next(c for c in p.perturbed.calls if c.node == "rewriter")
        assert call.prompt is not None and call.prompt.template_id == "support_bot.rewriter"
        assert call.prompt.assembled[0].content.strip()[:40] in terse
        assert p.magnitude is not None and p.magnitude > 0.01
    assert {p.operator["params"]["variant"] for p in pairs} == {"prompts/rewriter_terse.txt"}


def test_prompt_swap_to_a_registered_template_id_with_dots(bot: Bot) -> None:
    """A registered template id is an id even when it holds dots, as the demo's
    ``support_bot.*`` ids do: it is not taken for a file name."""
    quiver.template("support_bot.rewriter.terse", path=DEMO / "prompts" / "rewriter_terse.txt")
    pairs = bot.campaign("rewriter", "prompt_swap", {"variant": "support_bot.rewriter.terse"})
    assert pairs and all(p.status == "ok" for p in pairs), {p.status for p in pairs}
    terse = (DEMO / "prompts" / "rewriter_terse.txt").read_text()
    effective = [p for p in pairs if p.stratum == "effective"]
    assert len(effective) >= len(pairs) // 2
    for p in effective[:5]:
        call = next(c for c in p.perturbed.calls if c.node == "rewriter")
        assert call.prompt is not None and call.prompt.template_id == "support_bot.rewriter"
        assert call.prompt.assembled[0].content.strip()[:40] in terse


def test_bool_flip_of_the_web_search_hint_inserts_or_removes_web_search(bot: Bot) -> None:
    pairs = [p for p in bot.campaign("signal_analysis", "bool_flip", {"field": "web_search_hint"})
             if "smalltalk" not in _nodes(p.baseline)]
    assert all(p.stratum == "effective" for p in pairs)
    for p in pairs:
        assert ("web_search" in _nodes(p.baseline)) != ("web_search" in _nodes(p.perturbed))


def test_categorical_flip_moves_turn_type_to_the_next_declared_class(bot: Bot) -> None:
    categories = ["how_to", "problem", "billing", "follow_up", "small_talk"]
    pairs = bot.campaign("signal_analysis", "categorical_flip", {"field": "turn_type", "strategy": "next"})
    assert pairs and all(p.stratum == "effective" for p in pairs)
    for p in pairs:
        before = next(c for c in p.baseline.calls if c.node == "signal_analysis").output["turn_type"]
        after = next(c for c in p.perturbed.calls if c.node == "signal_analysis").output["turn_type"]
        assert after == categories[(categories.index(before) + 1) % len(categories)]
        assert p.magnitude == pytest.approx(2 / 7)  # turn_type: routing weight 2 of 7
    # into or out of "problem" changes discovery's tools, hence its hits, in some traces
    moved = [p for p in pairs if "discovery" in p.d and p.d["discovery"] and p.d["discovery"] > 0]
    assert moved


def test_list_edit_ladder_on_discovery_grows_the_magnitude(bot: Bot) -> None:
    means = []
    for params in expand_ladder({"action": "remove"}, {"count": [1, 2, 4]}):
        pairs = [p for p in bot.campaign("discovery", "list_edit", params) if p.status == "ok"]
        for p in pairs:
            before = p.target.original
            assert len(p.target.perturbed) == max(len(before) - params["count"], 0)
            assert set(p.target.perturbed) <= set(before)
        means.append(statistics.mean(p.magnitude for p in pairs))
    assert means[0] < means[1] < means[2], means


def test_text_edit_paraphrase_through_the_llm_grows_with_temperature(bot: Bot) -> None:
    means = []
    for t in (0.0, 1.0, 2.0):
        pairs = bot.campaign("composer", "text_edit", {
            "field": "response", "action": "paraphrase", "temperature": t, "model": "support-bot-paraphraser",
        })
        assert all(p.llm_calls.get("composer (operator)") == 1 for p in pairs)
        means.append(statistics.mean(p.magnitude or 0.0 for p in pairs))
    assert means[0] < means[1] < means[2], means


def test_text_edit_of_an_observability_field_is_a_noop(bot: Bot) -> None:
    pairs = bot.campaign("planner", "text_edit", {"field": "thought", "action": "add_keyword", "keywords": ["hmm"]})
    assert pairs and all(p.magnitude == 0.0 and p.stratum == "noop" for p in pairs)


def test_param_change_temperature_makes_the_rewriter_vary(bot: Bot) -> None:
    cold = bot.campaign("rewriter", "param_change", {"temperature": 0.0})
    hot = bot.campaign("rewriter", "param_change", {"temperature": 2.0})
    n_cold = sum(p.stratum == "effective" for p in cold)
    n_hot = sum(p.stratum == "effective" for p in hot)
    assert n_hot > n_cold, (n_cold, n_hot)
    call = next(c for c in hot[0].perturbed.calls if c.node == "rewriter")
    assert call.model is not None and call.model.params["temperature"] == 2.0


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_pairs_other_repeat_other_samples(bot: Bot) -> None:
    a = bot.campaign("rewriter", "param_change", {"temperature": 2.0}, seed=7)
    b = bot.campaign("rewriter", "param_change", {"temperature": 2.0}, seed=7)
    c = bot.campaign("rewriter", "param_change", {"temperature": 2.0}, seed=7, repeat=1)
    strip = lambda p: json.dumps({k: v for k, v in p.to_json(traces=False).items() if k != "llm_calls"}, sort_keys=True)  # noqa: E731
    assert [strip(p) for p in a] == [strip(p) for p in b]
    assert [p.magnitude for p in a] != [p.magnitude for p in c]


def test_a_missing_target_is_a_clear_error(bot: Bot) -> None:
    from quiver.replay import ReplayError

    trace = next(t for t in bot.traces if "smalltalk" in _nodes(t))
    with pytest.raises(ReplayError, match="no call planner#0 to perturb"):
        bot.replay(trace, "planner", "override", {"set": {"action": "COMPOSE"}})


def test_a_later_loop_iteration_is_perturbed_with_the_earlier_ones_served(bot: Bot) -> None:
    traces = [t for t in bot.traces if sum(c.node == "planner" for c in t.calls) >= 2][:8]
    assert traces
    flip = make_operator("categorical_flip", {"field": "action", "to": "COMPOSE"})
    for trace in traces:
        result = replay_trace(trace, bot.fn, target=Target("planner", 1), operator=flip, client=bot.client,
                              graph=bot.graph)
        assert result.trace.status == "ok" and result.reproduced
        planners = [c for c in result.trace.calls if c.node == "planner"]
        recorded = [c for c in trace.calls if c.node == "planner"]
        assert planners[0].output == recorded[0].output and planners[0].response == recorded[0].response
        assert planners[1].output["action"] == "COMPOSE" and planners[1].iteration == 1
        # LLM calls only after the target: the later planner iterations and the composer
        assert set(result.llm_calls) <= {"planner", "composer"}
        assert result.llm_calls.get("planner", 0) == len(planners) - 2
