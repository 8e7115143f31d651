"""Shared fixtures: one in-process simulator for the whole session, on a free port."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections import Counter
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


# --------------------------------------------------------------------------- two workers

SHARED_GROUPS: dict[str, set[str]] = {
    "ray": {"test_campaign.py", "test_secrets.py", "test_adaptive_ladder.py", "test_agents_example.py",
            "test_localize.py"},
    "resume": {"test_campaign_resume.py", "test_interrupt.py", "test_record_resume.py", "test_endpoint_down.py",
               "test_output_safety.py"},
}
"""Files that run on one worker together: those that start Ray (one instance, and a test
that kills Ray workers by name must not hit another file's), and those that share the
resume tests' session fixtures. (The README campaign and gate are shared over the
workers through :envvar:`QUIVER_TEST_SHARED` instead: tests/experiments/conftest.py.)"""


FIRST = (
    "tests/experiments/test_embedding_order.py",  # runs the README campaign, then ~100 s of its own
    "ray",                                    # ~25% of the suite's test time
    "resume",                                 # ~23%
    "tests/experiments/test_report_html.py",  # the README gate, and the quickstart analysis
    "tests/experiments/test_gate.py",
    "tests/experiments/test_cli.py",
    "tests/experiments/test_support_bot_adaptive.py",
    "tests/experiments/test_plan.py",
    "tests/experiments/test_analyze_cli.py",
    "tests/experiments/test_support_bot.py",
    "tests/experiments/test_diff_support_bot.py",
    "tests/replay/test_replay_support_bot.py",
)
"""The groups handed out first, longest first (as measured), so that no long group starts
last and runs alone at the end. The first runs the README campaign while the other worker
starts on Ray, so that no worker waits for it; the rest follow, the groups with the most
tests first."""


def _group(item: Any) -> str:
    name = item.path.name
    for group, files in SHARED_GROUPS.items():
        if name in files:
            return group
    return item.nodeid.split("::")[0]  # a file's tests stay together: its module fixtures run once


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the test ids
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Give every test its worker group (``--dist loadgroup``): its file, or a group of
    files that share an expensive session fixture; on a worker, order the groups as they
    should be handed out (pytest-xdist keeps this order: ``--no-loadscope-reorder``)."""
    groups = {id(item): _group(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    if hasattr(config, "workerinput"):  # one process (-n 0) keeps the files' order
        sizes = Counter(groups.values())
        rank = {group: i for i, group in enumerate(FIRST)}
        items.sort(key=lambda item: (rank.get(groups[id(item)], len(rank)), -sizes[groups[id(item)]],
                                     groups[id(item)]))


def _fuzz_folder() -> Path:
    return Path(os.environ["QUIVER_FUZZ_COUNTS"])


_SHARED_MADE = pytest.StashKey[Path]()
"""The shared folder this process made (and removes at the end)."""


def pytest_configure(config: Any) -> None:
    """The folders every worker shares (the workers inherit them): where each leaves its
    fuzz counts, and where the README campaign and gate run once for all of them."""
    if hasattr(config, "workerinput"):
        return
    if "QUIVER_FUZZ_COUNTS" not in os.environ:
        os.environ["QUIVER_FUZZ_COUNTS"] = tempfile.mkdtemp(prefix="quiver-fuzz-counts-")
    if "QUIVER_TEST_SHARED" not in os.environ:
        os.environ["QUIVER_TEST_SHARED"] = tempfile.mkdtemp(prefix="quiver-test-shared-")
        config.stash[_SHARED_MADE] = Path(os.environ["QUIVER_TEST_SHARED"])


def pytest_unconfigure(config: Any) -> None:
    """The session's shared folder goes when the session that made it ends."""
    made = config.stash.get(_SHARED_MADE, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop("QUIVER_TEST_SHARED", None)


def pytest_runtest_teardown(item: Any) -> None:
    """A worker leaves the cases its fuzz suites tried so far (after each test, so the
    counts are there before the worker reports its last test)."""
    worker = getattr(item.config, "workerinput", {}).get("workerid")
    cases = getattr(sys.modules.get("fuzzing"), "CASES", None)
    if worker and cases:
        (_fuzz_folder() / f"{worker}.json").write_text(json.dumps(dict(cases)), encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print how many cases each fuzz suite tried (tests/fuzzing.py), over every worker."""
    if hasattr(terminalreporter.config, "workerinput"):
        return  # the controller prints the sum
    cases: Counter[str] = Counter(getattr(sys.modules.get("fuzzing"), "CASES", None) or {})
    folder = Path(os.environ.get("QUIVER_FUZZ_COUNTS", ""))
    if os.environ.get("QUIVER_FUZZ_COUNTS") and folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            cases.update(json.loads(path.read_text(encoding="utf-8")))
            path.unlink()
    if cases:
        total = sum(cases.values())
        terminalreporter.write_sep("-", f"fuzz: {total} cases tried")
        for suite, n in sorted(cases.items()):
            terminalreporter.write_line(f"  {suite}: {n}")
