"""Shared fixtures: one in-process simulator for the whole session, on a free port."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quiver.replay import LLMClient, RetryPolicy, Simulator, SimulatorConfig

TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:  # shared test helpers (fuzzing.py) import by name
    sys.path.insert(0, str(TESTS))


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


def _registries() -> list[Any]:
    from quiver._distance.registry import KERNELS
    from quiver._importers.registry import FORMATS
    from quiver.perturbations._registry import OPERATORS
    from quiver.replay._executors import EXECUTORS

    return [KERNELS, FORMATS, OPERATORS, EXECUTORS]


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str, str], None]]:
    """Install third-party distributions for the test: ``install(module, source,
    entry_points_txt)`` writes a module and its dist-info into a folder on ``sys.path``.
    Every registry reads its entry points again the next time a name is not found, and
    forgets them when the test ends."""
    site = tmp_path / "site-packages"
    site.mkdir()
    modules: list[str] = []

    def install(module: str, source: str, entry_points: str) -> None:
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        dist = site / f"{module}-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text(entry_points)
        modules.append(module)
        for registry in _registries():
            registry.forget_entry_points()

    monkeypatch.syspath_prepend(str(site))
    yield install
    monkeypatch.undo()
    for module in modules:
        sys.modules.pop(module, None)
    for registry in _registries():
        registry.forget_entry_points()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print how many cases each fuzz suite tried (tests/fuzzing.py)."""
    fuzzing = sys.modules.get("fuzzing")
    cases = getattr(fuzzing, "CASES", None)
    if cases:
        total = sum(cases.values())
        terminalreporter.write_sep("-", f"fuzz: {total} cases tried")
        for suite, n in sorted(cases.items()):
            terminalreporter.write_line(f"  {suite}: {n}")
