"""``quiver record``: a spec resolved into a recording run.

Loads the spec, the pipeline and the inputs; starts the bundled simulator as a
subprocess when the spec names it (and stops it afterwards, whatever happens); builds
the LLM client and the redactor (which also removes the value of the API-key variable);
and records the corpus with :func:`quiver.replay.record_corpus`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from quiver._trace import Redactor
from quiver.replay import (
    LLMClient,
    SimulatorConfig,
    SimulatorProcess,
)

from .record import LLMSpec, RecordSpec, SimulatorSpec

__all__ = ["open_llm", "spec_redactor"]


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
