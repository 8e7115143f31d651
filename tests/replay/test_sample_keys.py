"""What replays derive their sample keys from (:func:`replay_identity`, :func:`sample_ids`)."""

from __future__ import annotations

from quiver._trace import Trace
from quiver.replay import replay_identity, replay_sample_key, sample_ids


def _trace(trace_id: str, run_id: str, input_id: str, repeat: int) -> Trace:
    return Trace(trace_id=trace_id, run_id=run_id, pipeline="p", input_id=input_id, repeat=repeat)


def test_recorded_traces_are_keyed_by_input_and_repeat_imported_ones_by_id() -> None:
    a = _trace("R1/q1/0", "R1", "q1", 0)
    b = _trace("R2/q1/0", "R2", "q1", 0)  # the same trace from another recording
    imported = _trace("3f9c2a", "langfuse", "q1", 0)
    assert replay_identity(a) == replay_identity(b) == "q1/0"
    assert replay_identity(imported) == "3f9c2a"
    assert replay_sample_key(0, replay_identity(a), "p", 0) == replay_sample_key(0, replay_identity(b), "p", 0)
    assert replay_sample_key(0, "q1/0", "p", 0) != replay_sample_key(0, "q1/0", "p", 1)


def test_a_corpus_joining_two_recordings_keys_the_shared_inputs_by_trace_id() -> None:
    a, b = _trace("R1/q1/0", "R1", "q1", 0), _trace("R2/q1/0", "R2", "q1", 0)
    c = _trace("R1/q2/0", "R1", "q2", 0)
    keyed = sample_ids([a, b, c])
    assert keyed == {"R1/q1/0": "R1/q1/0", "R2/q1/0": "R2/q1/0", "R1/q2/0": "q2/0"}
    assert len(set(keyed.values())) == 3
