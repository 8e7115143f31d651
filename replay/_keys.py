"""Every sample key and seed the engine derives, and the header that carries them.

A *sample key* names one draw of a stochastic call. The simulator's answer is a pure
function of (model, messages, params, sample key), and the response cache is keyed by
(request, sample key), so the same key gives the same answer in any process and any
order, and different keys give independent draws (DESIGN.md "Pairs, samples and
caches"). Keys are derived up front, before anything is dispatched (CONVENTIONS.md
"Seeds are explicit and derived before dispatch"):

==============================  =====================================================
key                             derived from
==============================  =====================================================
:func:`trace_sample_key`        a recording: (seed, input id, repeat)
:func:`replay_sample_key`       a replay: (seed, :func:`replay_identity` of the
                                baseline, perturbation id, repeat)
:func:`derive_sample_key`       one LLM call: (its trace's or replay's key, call path)
:func:`operator_seed`           an operator's random generator: (replay key)
:func:`operator_call_key`       an LLM call an operator makes (a paraphrase):
                                (replay key, target call path)
==============================  =====================================================

Every key is the first 32 hex digits of a SHA-256 (128 bits); the formulas are part of
the reproducibility contract: changing one changes every recorded and replayed sample.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quiver._trace import Trace

__all__ = [
    "SAMPLE_KEY_HEADER",
    "trace_sample_key",
    "replay_sample_key",
    "derive_sample_key",
    "operator_seed",
    "operator_call_key",
    "replay_identity",
    "sample_ids",
]

SAMPLE_KEY_HEADER = "X-Quiver-Sample-Key"
"""The HTTP header an LLM request carries its sample key in (endpoints other than the
simulator ignore it)."""


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def trace_sample_key(seed: int, input_id: str, repeat: int) -> str:
    """The base sample key of one recorded trace (calls derive theirs from it and their path)."""
    return _key(f"{seed}|{input_id}|{repeat}")


def replay_sample_key(seed: int, sample_id: str, perturbation_id: str, repeat: int) -> str:
    """The base sample key of one replay: (campaign seed, the baseline's
    :func:`replay_identity`, perturbation, repeat).

    Live calls derive theirs from it and their call path, so a repeated or resumed
    replay asks for the same samples and different repeats get different ones.
    """
    return _key(f"{seed}|{sample_id}|{perturbation_id}|{repeat}")


def derive_sample_key(base: str, call_path: str) -> str:
    """The sample key of one call: a hash of the trace's (or replay's) key and the call's path."""
    return _key(f"{base}|{call_path}")


def operator_seed(replay_key: str) -> int:
    """The seed of an operator's random generator in one replay (64 bits)."""
    return int(hashlib.sha256(f"{replay_key}|operator".encode()).hexdigest()[:16], 16)


def operator_call_key(replay_key: str, call_path: str) -> str:
    """The base sample key of the LLM calls an operator makes at ``call_path`` (a
    paraphrase): a repeated replay gets the same paraphrase, another repeat a new one."""
    return _key(f"{replay_key}|{call_path}|operator")


def replay_identity(trace: Trace) -> str:
    """What a replay of ``trace`` derives its sample key from.

    A trace the engine recorded has the id ``run_id/input_id/repeat``, and its own
    samples came from (seed, input id, repeat) alone: two recordings of the same inputs
    with the same seed hold the same traces under other run ids. Its identity is
    ``input_id/repeat``, so that a campaign on either recording replays with the same
    draws and gives the same numbers. Any other trace (an imported one) is identified
    by its trace id. Where a corpus joins two recordings of the same inputs, identities
    repeat; a campaign then keys those traces by their trace ids (see
    :func:`sample_ids`).
    """
    if trace.trace_id == f"{trace.run_id}/{trace.input_id}/{trace.repeat}":
        return f"{trace.input_id}/{trace.repeat}"
    return trace.trace_id


def sample_ids(traces: Sequence[Trace]) -> dict[str, str]:
    """Trace id -> the id its replays are keyed by: :func:`replay_identity`, or the
    trace id for traces whose identity another trace of the corpus shares."""
    counts = Counter(replay_identity(t) for t in traces)
    return {t.trace_id: ident if counts[ident] == 1 else t.trace_id
            for t, ident in ((t, replay_identity(t)) for t in traces)}
