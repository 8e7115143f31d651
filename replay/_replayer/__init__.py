"""Frozen replay: re-running a pipeline on a recorded trace, one node perturbed.

* ``results``: the replay mode, the target, what a replay gives back;
* ``builder``: matching calls to the recording and deciding what each does.
"""

from __future__ import annotations

from .results import DIMENSIONS, ReplayMode, Target, TargetReport, ReplayResult, ReplayError, replay_sample_key, replay_identity, sample_ids, Dimension
from .builder import ReplayBuilder, replay_trace, replay_many

__all__ = [
    "DIMENSIONS",
    "ReplayMode",
    "Target",
    "TargetReport",
    "ReplayResult",
    "ReplayError",
    "replay_sample_key",
    "replay_identity",
    "sample_ids",
    "Dimension",
    "ReplayBuilder",
    "replay_trace",
    "replay_many",
]
