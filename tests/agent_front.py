"""An agent app against the bundled simulator behind a counting front, run with the CLI.

The tests of the agent integrations (pydantic-ai, LangGraph's prebuilt ReAct agent) share
this: :func:`serving` registers an app's simulated models and yields a
:class:`~counting_front.CountingFront` (with request bodies) in front of a simulator;
:func:`record` and :func:`campaign` run ``quiver record`` / ``quiver run`` through it and
return what the front received meanwhile; the readers pick the LLM requests, the
customer's message a request carries and the LLM-call count the engine printed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from counting_front import CountingFront
from fuzzing import CliResult, run_cli

from quiver.replay import Simulator, SimulatorConfig

__all__ = ["campaign", "check", "llm_requests", "message_of", "printed_llm_calls", "record", "serving"]

SECONDS = 300.0
KEY_ENV = "QUIVER_AGENT_APP_KEY"

RECORD = """\
pipeline: {app}/pipeline.py:{function}
llm: {{base_url: {url}, model: {model}, api_key_env: {key}}}
inputs: {app}/inputs.jsonl
repeats: {repeats}
concurrency: 4
seed: 0
output: {out}
"""

CAMPAIGN = """\
pipeline: {app}/pipeline.py:{function}
llm: {{base_url: {url}, model: {model}, api_key_env: {key}}}
baseline: {baseline}
perturbations:
{perturbations}
replay: {{repeats: 1, controls: {controls}, downstream: live}}
executor: {{kind: local, concurrency: 4}}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {out}
"""


@contextlib.contextmanager
def serving(app: Path) -> Iterator[CountingFront]:
    """A front (with bodies) before a simulator that knows ``app/sim_models.py``."""
    spec = importlib.util.spec_from_file_location(f"{app.name}_sim_models", app / "sim_models.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers the app's simulated models
    with Simulator(SimulatorConfig()) as sim, CountingFront(sim.url, bodies=True) as front, \
            pytest.MonkeyPatch.context() as env:
        env.setenv(KEY_ENV, "sk-agent-app-test")
        yield front


def llm_requests(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if r["path"].endswith(("/responses", "/chat/completions"))]


def message_of(request: dict[str, Any]) -> str:
    """The customer's message a request carries (its first user message)."""
    body = request["body"] or {}
    items = body.get("input") if "input" in body else body.get("messages")
    if isinstance(items, str):
        return items
    for item in items or []:
        if item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return ""


def printed_llm_calls(text: str) -> int:
    """The last LLM-call count the engine printed."""
    found = re.findall(r"([\d,]+) LLM calls", text)
    assert found, text
    return int(found[-1].replace(",", ""))


def record(front: CountingFront, app: Path, root: Path, *, function: str, model: str, repeats: int
           ) -> tuple[Path, list[dict[str, Any]], CliResult]:
    """``quiver record`` of the app into ``root/rec``: the spec, the LLM requests the front
    received and the CLI's result."""
    spec = root / "record.yaml"
    spec.write_text(RECORD.format(app=app, function=function, url=front.url, model=model, key=KEY_ENV,
                                  repeats=repeats, out=root / "rec"))
    mark = front.mark()
    done = run_cli(["record", str(spec), "--quiet"], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return spec, llm_requests(front.requests()[mark:]), done


def check(front: CountingFront, spec: Path, traces: Path) -> tuple[list[dict[str, Any]], CliResult]:
    """``quiver replay --check``: what the front received meanwhile, and the CLI's result."""
    mark = front.mark()
    done = run_cli(["replay", "--spec", str(spec), "--check", str(traces)], seconds=SECONDS)
    assert done.code == 0, done.stderr
    return front.requests()[mark:], done


def campaign(front: CountingFront, app: Path, root: Path, name: str, perturbations: str, *, function: str,
             model: str, controls: int) -> tuple[Path, list[dict[str, Any]], CliResult]:
    """``quiver run`` of a campaign on ``root/rec``: its output folder, the LLM requests the
    front received and the CLI's result."""
    spec = root / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(app=app, function=function, url=front.url, model=model, key=KEY_ENV,
                                    baseline=root / "rec" / "traces.jsonl", perturbations=perturbations,
                                    controls=controls, cache=root / "embeddings", out=root / name))
    mark = front.mark()
    done = run_cli(["run", str(spec)], seconds=SECONDS)
    assert done.code in (0, 1), done.stderr
    return root / name, llm_requests(front.requests()[mark:]), done
