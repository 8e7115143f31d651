"""Shared fixtures: one in-process simulator for the whole session, on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver.replay import LLMClient, RetryPolicy, Simulator, SimulatorConfig

TESTS = Path(__file__).parent


@pytest.fixture(scope="session")
def simulator() -> Iterator[Simulator]:
    """The bundled simulator, no faults, no nondeterminism."""
    with Simulator(SimulatorConfig()) as sim:
        yield sim


@pytest.fixture
def llm_client(simulator: Simulator) -> Iterator[LLMClient]:
    """The engine's client pointed at the session simulator."""
    client = LLMClient(
        base_url=simulator.url, model="sim-json", api_key="sk-test",
        retry=RetryPolicy(attempts=3, initial_s=0.01, max_s=0.05),
    )
    yield client
    client.close()


@pytest.fixture
def pipelines_dir() -> Path:
    """Where the test pipelines live (loaded by file path, as a spec names them)."""
    return TESTS / "pipelines"
