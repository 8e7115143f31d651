"""Replay reproduces traces whatever the scheduling, and says so when it cannot.

tests/pipelines/structured.py (parallel threads, gathered async tools, a router, a
top-level gate, a loop) is recorded under one scheduling and replayed under others:
every trace reproduces exactly. tests/pipelines/unordered.py calls a node in completion
order, so only input-hash matching can pair its calls; its typed tool results come back
as pydantic models through ``restore=``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from quiver import iter_traces
from quiver.replay import InputItem, LLMClient, ReplayMode, load_pipeline, record_corpus, replay_trace

PIPELINES = Path(__file__).parent.parent / "pipelines"
INPUTS = [
    InputItem("u1", {"text": "URGENT: the export server is down", "rounds": 1}),
    InputItem("a2", {"text": "Export button crashes the editor", "rounds": 2}),
    InputItem("a4", {"text": "Cannot change billing address anywhere", "rounds": 9}),
]


def _load(name: str, fn: str) -> tuple[Any, Any]:
    pipeline = load_pipeline(f"{PIPELINES / name}:{fn}")
    return pipeline, sys.modules[pipeline.__module__]


def test_structured_traces_replay_exactly_under_other_scheduling(llm_client: LLMClient, tmp_path: Path) -> None:
    fn, module = _load("structured.py", "pipeline")
    module.JITTER.seed(0)
    module.WORKERS = 4
    result = record_corpus(fn, pipeline_name="structured", inputs=INPUTS, repeats=2, output_dir=tmp_path,
                           llm=llm_client, concurrency=3, progress_stream=None)
    traces = list(iter_traces(result.traces_path))
    before = llm_client.stats["calls"]
    for run in range(6):
        module.JITTER.seed(100 + run)
        module.WORKERS = 1 + run % 3
        for trace in traces:
            replayed = replay_trace(trace, fn, client=llm_client)
            assert replayed.reproduced, [d.message() for d in replayed.divergences]
            assert replayed.served_calls > 0
    assert llm_client.stats["calls"] == before  # nothing asked of the model


def test_structured_tools_and_retrieval_live_still_reproduce(llm_client: LLMClient, tmp_path: Path) -> None:
    fn, module = _load("structured.py", "pipeline")
    result = record_corpus(fn, pipeline_name="structured", inputs=INPUTS[1:2], repeats=1, output_dir=tmp_path,
                           llm=llm_client, progress_stream=None)
    trace = next(iter(iter_traces(result.traces_path)))
    frozen = replay_trace(trace, fn, client=llm_client)
    live = replay_trace(trace, fn, client=llm_client, mode=ReplayMode().unfreeze("tools", "retrieval"))
    n_tools = sum(c.kind in ("tool", "retrieval") for c in trace.calls)
    assert n_tools >= 4
    assert frozen.reproduced and live.reproduced  # deterministic tools give what was recorded
    assert live.served_calls == frozen.served_calls - n_tools


def test_changed_transform_code_is_a_divergence_at_that_call(llm_client: LLMClient, tmp_path: Path) -> None:
    fn, module = _load("structured.py", "pipeline")
    result = record_corpus(fn, pipeline_name="structured", inputs=INPUTS[1:2], repeats=1, output_dir=tmp_path,
                           llm=llm_client, progress_stream=None)
    trace = next(iter(iter_traces(result.traces_path)))
    original = module.keywords
    module.keywords = module.quiver.node("keywords")(
        lambda text: sorted({w.upper() for w in text.split() if len(w) >= 4})
    )
    try:
        changed = replay_trace(trace, fn, client=llm_client)
        held = replay_trace(trace, fn, client=llm_client, mode=ReplayMode(frozen_nodes=("keywords",)))
    finally:
        module.keywords = original
    # frozen by node: the recorded output stands and the changed code never runs
    assert held.reproduced and held.total_llm_calls == 0 and not changed.reproduced
    # keywords is a transform: its code always runs, and a different output is a divergence
    first = changed.first_divergence
    assert first is not None and first.node == "keywords" and first.reason == "fields"
    assert any(d.path.startswith("output") for d in first.diff)


def test_unordered_calls_are_matched_by_input_hash(tmp_path: Path) -> None:
    fn, module = _load("unordered.py", "pipeline")
    items = ["alpha", "be", "gamma-ray", "delta", "epsilon-x", "z"]
    module.JITTER.seed(0)
    result = record_corpus(fn, pipeline_name="unordered", inputs=[InputItem("i", {"items": items})], repeats=1,
                           output_dir=tmp_path, progress_stream=None)
    trace = next(iter(iter_traces(result.traces_path)))
    recorded_order = [c.output["item"] for c in trace.calls if c.node == "fetch"]
    orders = set()
    for seed in range(1, 8):
        module.JITTER.seed(seed)
        replayed = replay_trace(trace, fn)
        assert replayed.reproduced, [d.message() for d in replayed.divergences]
        assert replayed.served_calls == len(items)
        # served results came back as the node's type: the pipeline reads r.size and r.item
        assert replayed.trace.output == trace.output
        orders.add(tuple(c.output["item"] for c in replayed.trace.calls if c.node == "fetch"))
    assert len(orders | {tuple(recorded_order)}) > 1  # the scheduling did change the order


@pytest.mark.parametrize("dims", [("model",), ("prompt",), ("model", "prompt", "retrieval", "tools")])
def test_replay_mode_unfreezes_dimensions(dims: tuple[str, ...]) -> None:
    mode = ReplayMode().unfreeze(*dims)  # type: ignore[arg-type]
    assert not set(dims) & set(mode.frozen)
    assert not mode.all_frozen and ReplayMode().all_frozen


BLOCKS = '''
import quiver


def pipeline(text: str) -> str:
    with quiver.node("shout", kind="llm", inputs={"text": text}) as call:
        call.output = quiver.llm().chat(messages=[{"role": "user", "content": text.upper()}], model="sim-echo").content
    with quiver.node("count", inputs={"said": call.output}) as counted:
        counted.output = len(call.output.split())
    return f"{call.output} ({counted.output} words)"
'''


def test_block_nodes_replay_with_their_llm_calls_served(llm_client: LLMClient, tmp_path: Path) -> None:
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS, encoding="utf-8")
    fn = load_pipeline(f"{path}:pipeline")
    result = record_corpus(fn, pipeline_name="blocks", inputs=[InputItem("b", {"text": "two words"})], repeats=1,
                           output_dir=tmp_path / "rec", llm=llm_client, progress_stream=None)
    trace = next(iter(iter_traces(result.traces_path)))
    replayed = replay_trace(trace, fn, client=llm_client)
    assert replayed.reproduced, [d.message() for d in replayed.divergences]
    assert replayed.total_llm_calls == 0 and replayed.trace.output == "TWO WORDS (2 words)"
    live = replay_trace(trace, fn, client=llm_client, mode=ReplayMode().unfreeze("model"))
    assert live.total_llm_calls == 1 and live.trace.output == trace.output
    from quiver.perturbations import make_operator
    from quiver.replay import Target

    edit = make_operator("text_edit", {"action": "add_keyword", "keywords": ["hey"]})
    failed = replay_trace(trace, fn, client=llm_client, target=Target("shout"), operator=edit)
    assert failed.trace.status == "failed" and failed.trace.error is not None
    assert "decorate the step with @quiver.node" in failed.trace.error.message
