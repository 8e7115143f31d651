"""Shared by the campaign, gate and report tests: the README campaign and its README gate
(the ``planner_strict.txt`` candidate), each run once per test session, over every
worker: the first worker that needs one runs it into the session's shared folder
(``tests/conftest.py``) while holding a lock on it, the other waits on the lock and reads
what it left. The folders they give are read-only to the tests: a test that would change
one copies it first."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "experiments" / "specs" / "support_bot.yaml"


def quiver_command() -> list[str]:
    """The installed ``quiver`` script, else the module."""
    found = shutil.which("quiver")
    return [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]


@pytest.fixture(scope="session")
def quiver_cli() -> list[str]:
    """The command that runs ``quiver``."""
    return quiver_command()


def _once(name: str, make: Callable[[Path], subprocess.CompletedProcess[str]]) -> subprocess.CompletedProcess[str]:
    """``make(folder)`` run once per test session over every worker, under a lock: its
    process as the run that made it returned it (``folder`` is ``SHARED/name``)."""
    shared = Path(os.environ["QUIVER_TEST_SHARED"])
    folder, done = shared / name, shared / f"{name}.json"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the worker dies
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that died in make() left it half written
            proc = make(folder)
            done.write_text(json.dumps({"args": [str(a) for a in proc.args], "returncode": proc.returncode,
                                        "stdout": proc.stdout, "stderr": proc.stderr}), encoding="utf-8")
        held = json.loads(done.read_text(encoding="utf-8"))
    return subprocess.CompletedProcess(held["args"], held["returncode"], held["stdout"], held["stderr"])


@pytest.fixture(scope="session")
def support_bot_run() -> Path:
    """``quiver run experiments/specs/support_bot.yaml`` (the README's first command) into
    the session's shared folder (read-only: copy it to change it)."""
    def make(out: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*quiver_command(), "run", str(SPEC), "--output", str(out), "--quiet"],
                              capture_output=True, text=True, timeout=900, cwd=ROOT)

    proc = _once("support_bot_campaign", make)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return Path(os.environ["QUIVER_TEST_SHARED"]) / "support_bot_campaign"


@pytest.fixture(scope="session")
def strict_gate(support_bot_run: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, Path]:
    """The README's gate: ``quiver gate SPEC --candidate support_bot.planner=.../planner_strict.txt
    --profile RUN`` against :func:`support_bot_run`: the process, its gate.json and its
    folder (read-only, shared as the run is)."""
    strict = ROOT / "experiments" / "support_bot" / "prompts" / "candidates" / "planner_strict.txt"

    def make(out: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*quiver_command(), "gate", str(SPEC), "--output", str(out), "--quiet", "--candidate",
                               f"support_bot.planner={strict}", "--profile", str(support_bot_run)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)

    proc = _once("strict", make)
    out = Path(os.environ["QUIVER_TEST_SHARED"]) / "strict"
    data = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else None
    return proc, data, out
