"""The documentation site (docs/, mkdocs.yml) builds, and its snippets run.

* ``mkdocs build --strict`` succeeds: every page in the nav, every link to a page, the
  generated reference (the CLI from the parsers, the spec keys from the JSON Schemas, the
  Python API from the docstrings).
* Every shell and Python block of every page is run here or says, visibly above it, why
  it is not (``*Not run by the docs tests: REASON.*``). The Python blocks that stand alone
  run in a fresh interpreter; the tutorial (``get-started/own-pipeline.md``) runs whole:
  its files are written, its commands run in order, and the report it promises exists.
* The README stays short, starts with its two commands, and links into the docs.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIAL = DOCS / "get-started" / "own-pipeline.md"
MARK = "*Not run by the docs tests:"
RUN_LANGS = {"bash", "sh", "shell", "console", "python", "py"}
FENCE = re.compile(r"^(\s*)```(\w+)?(.*)$")
BIN = Path(sys.executable).parent


def _blocks(page: Path) -> list[tuple[str, str, str, bool]]:
    """(language, title, code, marked) of every fenced block of ``page``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or m.group(2) is None and not m.group(3).strip():
            i += 1
            continue
        indent, lang, rest = m.group(1), m.group(2) or "", m.group(3)
        j = i + 1
        while not lines[j].startswith(indent + "```"):
            j += 1
        before = [line.strip() for line in lines[max(0, i - 3):i] if line.strip()]
        title = re.search(r'title="([^"]+)"', rest)
        found.append((lang, title.group(1) if title else "", "\n".join(x[len(indent):] for x in lines[i + 1:j]),
                      any(line.startswith(MARK) and line.endswith(".*") for line in before)))
        i = j + 1
    return found


PAGES = sorted(DOCS.rglob("*.md"))
STANDALONE = [(page, code) for page in PAGES if page != TUTORIAL
              for lang, _, code, marked in _blocks(page) if lang in ("python", "py") and not marked]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    # as on a clean checkout: the hooks lay out .mkdocs-src before mkdocstrings looks for it
    shutil.rmtree(ROOT / ".mkdocs-src", ignore_errors=True)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "quiver init" in cli and "--sim-models" in cli  # from the parsers
    keys = (tmp_path / "site" / "reference" / "spec-keys" / "index.html").read_text(encoding="utf-8")
    assert "perturbations" in keys and "replay.controls" in keys  # from the JSON Schema
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "import_traces" in api and "group_by" in api  # from the docstrings


def test_every_shell_and_python_block_is_run_or_says_why() -> None:
    unrun = [(page.relative_to(DOCS), code.splitlines()[0]) for page in PAGES if page != TUTORIAL
             for lang, _, code, marked in _blocks(page) if lang in RUN_LANGS and not marked
             and lang not in ("python", "py")]
    assert unrun == [], unrun
    assert len(STANDALONE) >= 3


@pytest.mark.parametrize("page, code", STANDALONE, ids=[f"{p.relative_to(DOCS)}#{i}" for i, (p, _) in
                                                         enumerate(STANDALONE)])
def test_a_standalone_python_block_runs(page: Path, code: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_the_tutorial_runs_from_its_files_to_the_report(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    commands = []
    for lang, title, code, marked in _blocks(TUTORIAL):
        if title:
            (tmp_path / title).write_text(code + "\n", encoding="utf-8")
        elif lang in RUN_LANGS and not marked:
            commands += [line for line in code.splitlines() if line.strip()]
    assert [c.split()[:2] for c in commands] == [["quiver", "init"], ["quiver", "record"], ["quiver", "run"],
                                                  ["quiver", "run"]]
    for command in commands:
        result = subprocess.run(shlex.split(command), cwd=tmp_path, capture_output=True, text=True, env=env,
                                timeout=600)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
    assert (tmp_path / "runs" / "tut_campaign" / "report.html").stat().st_size > 10_000


def test_the_readme_is_short_starts_with_its_two_commands_and_links_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 150
    assert readme[2:6] == ["```bash", 'pip install -c constraints/cpu.txt -e ".[all]" && quiver run '
                           "experiments/specs/support_bot.yaml",
                           'pip install -c constraints/cpu.txt -e ".[all,dev]" && python -m pytest -q', "```"]
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(readme)):
        assert (ROOT / link).exists(), link
