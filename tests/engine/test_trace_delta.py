"""A replay stored as its difference from its baseline trace, and read back whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings, strategies as st

from quiver._errors import TraceFormatError
from quiver._trace import load_traces
from quiver._trace.delta import (
    DELTA_KEY,
    apply_delta,
    apply_dict_delta,
    baseline_digest,
    baseline_text,
    dict_delta,
    pack_delta,
    trace_delta,
    unpack_delta,
)

_long = st.text("ab\u00e9", min_size=60, max_size=90)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([1.0, 0.5]),
                     st.text("ab", max_size=2), _long)
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from("abcd"), inner, max_size=4)),
                     max_leaves=12)
_calls = st.lists(st.fixed_dictionaries({"node": st.sampled_from("pqr"), "occurrence": st.integers(0, 1),
                                         "output": _json}), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), _json), st.dictionaries(st.sampled_from("abcde"), _json))
def test_an_object_delta_rebuilds_the_new_object_to_the_byte(base: dict[str, Any], new: dict[str, Any]) -> None:
    assert json.dumps(apply_dict_delta(base, dict_delta(base, new))) == json.dumps(new)


@settings(max_examples=300, deadline=None)
@given(_calls, _calls, st.booleans())
def test_a_trace_delta_rebuilds_the_replay_to_the_byte(base_calls: list[Any], new_calls: list[Any],
                                                       reorder: bool) -> None:
    base = {"trace_id": "b", "status": "ok", "calls": base_calls, "output": 1}
    new = {"trace_id": "r", "status": "ok", "calls": base_calls[:2] + new_calls, "output": True, "extra": [1]}
    if reorder:
        new = dict(reversed(new.items()))
    assert json.dumps(apply_delta(base, trace_delta(base, new))) == json.dumps(new)


@settings(max_examples=200, deadline=None)
@given(_long, _long, st.integers(0, 40))
def test_long_texts_are_stored_as_what_differs_and_compressed_against_the_baseline(
    a: str, b: str, cut: int
) -> None:
    base = {"trace_id": "b", "calls": [{"node": "p", "occurrence": 0, "prompt": a + b}]}
    new = {"trace_id": "r", "calls": [{"node": "p", "occurrence": 0, "prompt": a[:cut] + b + a[cut:]}]}
    delta = trace_delta(base, new)
    packed = pack_delta(delta, baseline_text(base))
    got = delta if packed is None else unpack_delta(packed, baseline_text(base))
    assert json.dumps(apply_delta(base, got)) == json.dumps(new)


def test_served_calls_are_references_and_changed_calls_their_differences() -> None:
    served = {"node": "a", "occurrence": 0, "output": {"x": 1, "long": "text " * 50}}
    target = {"node": "b", "occurrence": 0, "output": {"x": 1, "long": "text " * 50, "y": 2}}
    base = {"trace_id": "b", "calls": [served, {**target, "output": {"x": 1, "long": "text " * 50}}]}
    delta = trace_delta(base, {"trace_id": "r", "calls": [served, target]})
    assert delta["calls"] == [0, {"base": 1, "sub": {"output": {"set": {"y": 2}}}}]
    assert delta["set"] == {"trace_id": "r"}


def _line(replay_id: str, delta: dict[str, Any], ref: dict[str, Any]) -> str:
    return json.dumps({"trace_id": replay_id, "schema_version": 1, DELTA_KEY: ref, "delta": delta}) + "\n"


def test_a_delta_line_reads_as_the_whole_replay_and_says_when_its_baseline_is_gone_or_changed(
    tmp_path: Path,
) -> None:
    baseline = tmp_path / "baseline.jsonl"
    trace = {"schema_version": 1, "trace_id": "t1", "run_id": "r", "pipeline": "p", "input_id": "i", "calls": [],
             "output": {"answer": "yes"}}
    baseline.write_text(json.dumps(trace) + "\n")
    base = load_traces(baseline).traces[0].model_dump(mode="json")
    replay = {**base, "trace_id": "t1~p/0", "output": {"answer": "no"}}
    ref = {"file": "baseline.jsonl", "trace_id": "t1", "digest": baseline_digest(base)}
    replays = tmp_path / "replays.jsonl"
    replays.write_text(_line("t1~p/0", trace_delta(base, replay), ref))
    loaded = load_traces(replays)
    assert loaded.ok and loaded.traces[0].model_dump(mode="json") == replay
    baseline.write_text(json.dumps({**trace, "output": {"answer": "maybe"}}) + "\n")
    [error] = load_traces(replays).errors
    assert isinstance(error, TraceFormatError) and "changed since" in str(error) and "delta_of.digest" in str(error)
    baseline.unlink()
    [error] = load_traces(replays).errors
    assert "baseline file" in str(error) and "cannot be read" in str(error)
