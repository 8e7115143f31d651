"""``quiver record``: a spec resolved into a recording run.

Loads the spec, the pipeline and the inputs; starts the bundled simulator as a
subprocess when the spec names it (and stops it afterwards, whatever happens); builds
the LLM client and the redactor (which also removes the value of the API-key variable);
and records the corpus with :func:`quiver.replay.record_corpus`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from quiver._trace import Redactor
from quiver.replay import (
    LLMClient,
    RecordResult,
    SimulatorConfig,
    SimulatorProcess,
    load_pipeline,
    record_corpus,
)

from .record import LLMSpec, RecordSpec, SimulatorSpec, load_inputs
from quiver._yamlspec import load_spec

__all__ = ["RecordOverrides", "run_record", "open_llm", "spec_redactor"]


@dataclass(frozen=True)
class RecordOverrides:
    """Command-line values that take precedence over the spec."""

    output: str | None = None
    repeats: int | None = None
    concurrency: int | None = None
    resume: bool = False


def _simulator_config(sim: SimulatorSpec, base_dir: Path) -> tuple[SimulatorConfig, list[str]]:
    modules, paths = [], []
    for entry in sim.models:
        if entry.endswith(".py"):
            path = (base_dir / entry).resolve()
            modules.append(path.stem)
            paths.append(str(path.parent))
        else:
            modules.append(entry)
    paths.append(str(base_dir.resolve()))
    config = SimulatorConfig(models=modules, nondeterminism=sim.nondeterminism, faults=sim.faults)
    return config, paths


@contextlib.contextmanager
def open_llm(llm: LLMSpec, base_dir: Path) -> Iterator[LLMClient]:
    """An LLM client for the spec's ``llm:`` block; starts and stops the simulator."""
    process = None
    try:
        if llm.simulator is not None:
            config, paths = _simulator_config(llm.simulator, base_dir)
            process = SimulatorProcess.start(config, pythonpath=paths)
            base_url, key = process.url, "sk-simulator"
        else:
            assert llm.base_url is not None  # guaranteed by LLMSpec's validator
            base_url, key = llm.base_url, None
        client = LLMClient(
            base_url=base_url, model=llm.model, api_key=key, api_key_env=llm.api_key_env,
            timeout_s=llm.timeout_s, retry=llm.retry, params=llm.params,
        )
        try:
            yield client
        finally:
            client.close()
    finally:
        if process is not None:
            process.stop()


def spec_redactor(spec: RecordSpec) -> Redactor:
    """The spec's redaction, plus the value of the API-key variable it names."""
    secret = os.environ.get(spec.llm.api_key_env) if spec.llm.api_key_env else None
    return Redactor(spec.redact, literals=[secret] if secret else [])


def run_record(
    spec_path: str | Path,
    overrides: RecordOverrides | None = None,
    *,
    progress_stream: TextIO | None = sys.stderr,
) -> tuple[RecordSpec, RecordResult]:
    """Run ``quiver record SPEC``: returns the spec and what was recorded."""
    overrides = overrides or RecordOverrides()
    path = Path(spec_path)
    spec = load_spec(RecordSpec, path)
    base_dir = path.parent
    changes: dict[str, Any] = {
        k: v for k, v in (("output", overrides.output), ("repeats", overrides.repeats),
                          ("concurrency", overrides.concurrency)) if v is not None
    }
    spec = spec.model_copy(update=changes) if changes else spec
    inputs = load_inputs(spec, base_dir, spec_file=str(path))
    fn = load_pipeline(spec.pipeline, base_dir)
    name = spec.name or getattr(fn, "__name__", "pipeline")
    output_dir = Path(spec.output)
    output_dir.mkdir(parents=True, exist_ok=True)
    redactor = spec_redactor(spec)
    resolved = json.dumps(redactor.data(spec.model_dump(mode="json")), indent=2)
    (output_dir / "spec.resolved.json").write_text(resolved + "\n", encoding="utf-8")
    with open_llm(spec.llm, base_dir) as client:
        result = record_corpus(
            fn, pipeline_name=name, inputs=inputs, repeats=spec.repeats, output_dir=output_dir,
            llm=client, concurrency=spec.concurrency, redactor=redactor, seed=spec.seed,
            resume=overrides.resume, progress_stream=progress_stream,
        )
    return spec, result
