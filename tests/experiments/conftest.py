"""Shared by the campaign, gate and report tests: the README campaign and its README gate
(the ``planner_strict.txt`` candidate), each run once per session."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def support_bot_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``quiver run experiments/specs/support_bot.yaml`` (the README's first command) into a temporary folder."""
    out = tmp_path_factory.mktemp("campaign") / "support_bot_campaign"
    proc = subprocess.run([*quiver_command(), "run", str(SPEC), "--output", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def strict_gate(support_bot_run: Path, tmp_path_factory: pytest.TempPathFactory,
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, Path]:
    """The README's gate: ``quiver gate SPEC --candidate support_bot.planner=.../planner_strict.txt
    --profile RUN`` against :func:`support_bot_run`: the process, its gate.json and its folder."""
    out = tmp_path_factory.mktemp("gate") / "strict"
    strict = ROOT / "experiments" / "support_bot" / "prompts" / "candidates" / "planner_strict.txt"
    proc = subprocess.run([*quiver_command(), "gate", str(SPEC), "--output", str(out), "--quiet", "--candidate",
                           f"support_bot.planner={strict}", "--profile", str(support_bot_run)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    data = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else None
    return proc, data, out
