"""Every command's help reads as it should, and ``quiver sim`` takes its models as a spec does.

* no ``--help`` of any command or subcommand prints ``%%`` (argparse %-formats help
  strings, not descriptions: a description writes ``95%``);
* ``quiver sim --help`` lists every endpoint the simulator serves, read from the code
  that serves them, and the simulator answers each (nothing listed is a 404);
* ``quiver sim --models FILE.py`` serves the models of a file, as a spec's
  ``llm.simulator.models`` does, and a file that is missing or fails to import is
  refused with the spec's own error, in one line, exit 2.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fuzzing import run_cli

from quiver.experiments._cli.main import build_parser
from quiver.replay._sim import endpoints

ROOT = Path(__file__).parents[2]
AGENTS = ROOT / "experiments" / "agents_example"


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                          argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_help_prints_a_doubled_percent() -> None:
    helps = {path: run_cli([*path, "--help"]) for path, _ in _parsers(build_parser())}
    assert len(helps) > 15  # every command and the subcommands of import and export
    for path, shown in helps.items():
        assert shown.code == 0 and "%%" not in shown.stdout, (path, shown.stdout)
    for command in ("analyze", "attribute", "compare", "diff", "gate"):
        assert "95% " in " ".join(helps[(command,)].stdout.split()), command


def _text(shown: str) -> str:
    return " ".join(shown.split())


def test_sim_help_lists_every_endpoint_the_simulator_serves() -> None:
    shown = _text(run_cli(["sim", "--help"]).stdout)
    listed = endpoints()
    assert listed in shown
    paths = re.findall(r"/[\w/{}.-]+", listed)
    assert {"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings", "/v1/models",
            "/health"} <= set(paths)
    proc = subprocess.Popen([sys.executable, "-m", "quiver.experiments._cli", "sim", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(" listening on ", 1)[1].split()[0].removesuffix("/v1")
        get, post = listed.split("; POST ")
        for path in re.findall(r"/[\w/{}.-]+", get):
            assert httpx.get(url + path.replace("{id}", "sim-echo"), timeout=10).status_code == 200, path
        for path in post.split(", "):
            status = httpx.post(url + path, json={}, timeout=10).status_code
            assert status == 400, (path, status)  # served: the empty body is refused, not the URL
        assert httpx.post(url + "/v1/nothing", json={}, timeout=10).status_code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sim_serves_the_models_of_a_py_file() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "quiver.experiments._cli", "sim", "--port", "0", "--models",
                             "sim_models.py"], stdout=subprocess.PIPE, text=True, cwd=AGENTS)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "desk-agent" in line and "desk-intake" in line, line
        url = line.split(" listening on ", 1)[1].split()[0]
        answer = httpx.post(f"{url}/chat/completions", timeout=10, json={
            "model": "desk-intake", "messages": [{"role": "user", "content": "Where is my order?"}]})
        assert answer.status_code == 200 and "topic" in answer.json()["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("source", [None, "import no_such_module_here\n"], ids=["missing", "failing"])
def test_a_bad_models_file_is_refused_with_the_specs_error(tmp_path: Path, source: str | None) -> None:
    if source is not None:
        (tmp_path / "models.py").write_text(source)
    (tmp_path / "p.py").write_text("def run(q):\n    return q\n")
    (tmp_path / "spec.yaml").write_text("pipeline: p.py:run\nllm:\n  simulator:\n    models: [models.py]\n"
                                        "  model: sim-echo\ninputs: [{\"q\": \"x\"}]\noutput: out\n")
    said = {}
    for command, argv in (("sim", ["sim", "--port", "0", "--models", "models.py"]),
                          ("record", ["record", "spec.yaml"])):
        proc = subprocess.run([sys.executable, "-m", "quiver.experiments._cli", *argv], capture_output=True,
                              text=True, cwd=tmp_path, timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        said[command] = proc.stderr.strip().removeprefix(f"quiver {command}: error: ")
    assert said["sim"] == said["record"] and str(tmp_path / "models.py") in said["sim"], said
    assert ("does not exist" if source is None else "ModuleNotFoundError") in said["sim"]
