"""The simulator serving the models of ``tests/pipelines/agent_desk.py``, behind a counting front."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from counting_front import CountingFront

from quiver.replay import Simulator, SimulatorConfig, load_pipeline

APP = Path(__file__).parent / "pipelines" / "agent_desk.py"
"""The apps' file (``APP:support_desk``, ``APP:chat_router``... as a spec names them)."""


@contextlib.contextmanager
def desk_front(*, bodies: bool = False, aliases: Mapping[str, str] | None = None) -> Iterator[CountingFront]:
    """The simulator (the apps' aliases and ``aliases``) behind a counting front that keeps
    the bodies when asked; the agents SDK's tracing off meanwhile."""
    fn = load_pipeline(f"{APP}:support_desk")  # registers the apps' simulated models in this process
    config = SimulatorConfig(aliases={**sys.modules[fn.__module__].ALIASES, **(aliases or {})})
    with Simulator(config) as sim, CountingFront(sim.url, bodies=bodies) as front, \
            pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        yield front
