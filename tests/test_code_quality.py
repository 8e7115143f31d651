"""The code is ruff- and mypy-clean, and stays so.

* **ruff** checks the repository with the rules of ``[tool.ruff]`` in ``pyproject.toml``.
* **mypy** checks the ``quiver`` package with ``[tool.mypy]``. The four folders are one
  import package only once installed (setuptools' ``package-dir``), and mypy cannot follow
  an editable install's mapping; so the test lays out the installed shape as a tree of
  symlinks in a temporary folder (``quiver/`` = the files of ``engine/``, plus
  ``quiver/replay`` -> ``replay/`` and so on, read from ``package-dir``) and runs
  ``mypy -p quiver`` there.

Both run as subprocesses of this interpreter (``python -m ruff``, ``python -m mypy``: mypy
then sees the same installed packages as the tests), and the test fails with what they
printed. Both are run so that a clean result prints nothing (``--quiet``,
``--no-error-summary``): anything printed, or a non-zero exit, fails the test. It is
skipped only when one of them is not installed (the ``dev`` extra pins both).

mypy keeps its cache in ``.mypy_cache/`` at the repository root (gitignored), so only the
first run pays for analysing the dependencies mypy follows (numpy, pydantic, openai, ...;
not transformers, sentence-transformers or ray, whose ~7,000 files and torch's behind
them pyproject.toml tells it to skip). Measured on a 2-core machine: mypy 21 to 23 s with
no cache (76 s while it still followed those), 1.1 to 1.7 s with the cache of an earlier
run; ruff 0.12 s without its cache, 0.05 s with it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PYPROJECT = ROOT / "pyproject.toml"
MYPY_CACHE = ROOT / ".mypy_cache"


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]' installs it)")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True)


def _pass_or_report(proc: subprocess.CompletedProcess[str]) -> None:
    if proc.returncode != 0 or proc.stdout.strip() or proc.stderr.strip():
        pytest.fail(f"`{' '.join(proc.args[2:])}` exited {proc.returncode}:\n{proc.stdout}{proc.stderr}", pytrace=False)


def installed_tree(root: Path) -> Path:
    """The ``quiver`` package as installed, as symlinks under ``root``, from ``package-dir``."""
    package_dir: dict[str, str] = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-dir"]
    top = root / "quiver"
    top.mkdir()
    for entry in sorted((ROOT / package_dir["quiver"]).iterdir()):
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for package, folder in sorted(package_dir.items()):
        if package != "quiver":
            (root / package.replace(".", "/")).symlink_to(ROOT / folder, target_is_directory=True)
    return root


def test_ruff_finds_nothing() -> None:
    _require("ruff")
    proc = _run("ruff", "check", "--no-fix", "--quiet", "--output-format", "concise", ".", cwd=ROOT)
    _pass_or_report(proc)


def test_mypy_finds_nothing_in_the_installed_package(tmp_path: Path) -> None:
    _require("mypy")
    tree = installed_tree(tmp_path)
    proc = _run("mypy", "-p", "quiver", "--config-file", str(PYPROJECT), "--cache-dir", str(MYPY_CACHE),
                "--no-error-summary", cwd=tree)
    _pass_or_report(proc)
