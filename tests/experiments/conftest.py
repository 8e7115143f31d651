"""Shared by the campaign and gate tests: the README campaign, run once per session."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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
