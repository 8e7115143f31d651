"""Frozen replay: re-running a pipeline on a recorded trace, one node perturbed.

* ``results``: the replay mode, the target, what a replay gives back;
* ``builder``: matching calls to the recording and deciding what each does;
* ``run``: :class:`Replayer` (what every replay of a run shares) and ``replay_trace``.
"""

from __future__ import annotations

from .builder import Region, ReplayBuilder, recorded_regions, template_from_ref
from .results import DIMENSIONS, Dimension, ReplayError, ReplayMode, ReplayResult, Target
from .run import Replayer, ReplayerSettings, replay_many, replay_trace

__all__ = [
    "DIMENSIONS",
    "Dimension",
    "ReplayMode",
    "Target",
    "ReplayResult",
    "ReplayError",
    "ReplayBuilder",
    "Region",
    "recorded_regions",
    "template_from_ref",
    "Replayer",
    "ReplayerSettings",
    "replay_trace",
    "replay_many",
]
