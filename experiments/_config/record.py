"""The experiment spec: what ``quiver record`` (and later ``quiver run``) reads.

A spec is a YAML file resolved into the frozen, validated :class:`RecordSpec`. Every
field is documented here; ``quiver schema record`` prints the JSON Schema built from these
docstrings, for editors. Paths in a spec (the pipeline file, the inputs file, simulator
model modules) are relative to the spec's folder; ``output`` is relative to the
working directory.

Example::

    pipeline: pipeline.py:run          # or package.module:function
    llm:
      simulator:                       # start the bundled simulator (no API key)
        models: [sim_models.py]
      model: quickstart-classifier
    inputs: inputs.jsonl               # or a list of objects
    repeats: 3
    concurrency: 4
    redact: {patterns: ["ACME-[0-9]{6}"]}
    output: runs/quickstart
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quiver._errors import SpecError
from quiver._trace import RedactionConfig
from quiver.replay import FaultConfig, InputItem, RetryPolicy

__all__ = ["SimulatorSpec", "LLMSpec", "RecordSpec", "load_inputs"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SimulatorSpec(_Spec):
    """The bundled simulator, started as a subprocess for the duration of the run."""

    models: list[str] = Field(default_factory=list)
    """Modules that register simulated models with ``@sim_model``: module names, or
    ``.py`` files relative to the spec. The built-in ``sim-json`` and ``sim-echo`` are
    always there."""
    nondeterminism: float = Field(default=0.0, ge=0.0, le=1.0)
    """Rate at which a temperature-0 request takes its runner-up answer (backend noise)."""
    faults: FaultConfig = Field(default_factory=FaultConfig)
    """Injected latency, 429s, 500s, timeouts and malformed bodies."""


class LLMSpec(_Spec):
    """Where LLM calls go: the bundled simulator, or an OpenAI-compatible endpoint."""

    simulator: SimulatorSpec | None = None
    """Start the bundled simulator and send every call to it."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint (``https://api.openai.com/v1``, a vLLM or Ollama
    server, ...). Exactly one of ``simulator`` and ``base_url``."""
    model: str = "sim-json"
    """The default model name for calls that do not name one."""
    api_key_env: str | None = None
    """The environment variable holding the API key (its value is also redacted)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Per-attempt HTTP timeout in seconds."""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries on 429, 5xx, timeouts and malformed bodies."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Default sampling parameters (temperature, top_p, seed, max_tokens)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if data == "simulator":
            return {"simulator": {}}
        if isinstance(data, dict) and data.get("simulator") is True:
            return {**data, "simulator": {}}
        return data

    @model_validator(mode="after")
    def _one_target(self) -> LLMSpec:
        if (self.simulator is None) == (self.base_url is None):
            raise ValueError(
                "give exactly one of 'simulator' (the bundled simulator) and 'base_url' "
                "(an OpenAI-compatible endpoint); `llm: simulator` is the short form"
            )
        return self


class RecordSpec(_Spec):
    """A recording run: a pipeline over inputs x repeats, written as a trace corpus."""

    pipeline: str
    """The pipeline function: ``package.module:function`` or ``file.py:function``
    (relative to the spec). It is called with each input's fields as keyword arguments."""
    name: str | None = None
    """The pipeline's name in the traces (default: the function's name)."""
    llm: LLMSpec
    """Where LLM calls go (``llm: simulator`` for the bundled simulator)."""
    inputs: str | list[dict[str, Any]]
    """A JSONL file (relative to the spec), or a list. Each input is ``{"input_id": ...,
    "inputs": {...}}`` or a flat object of keyword arguments with an optional
    ``input_id``/``id`` key."""
    repeats: int = Field(default=3, ge=1)
    """How many times each input runs (the same-input groups of the analysis)."""
    concurrency: int = Field(default=4, ge=1, le=1024)
    """How many traces run at once."""
    seed: int = 0
    """Seeds every sample key: the same spec and seed give the same samples."""
    redact: RedactionConfig = Field(default_factory=RedactionConfig)
    """What is removed before anything is written (on by default for keys, tokens, e-mails)."""
    output: str = "runs/record"
    """The output folder (relative to the working directory)."""

    @field_validator("inputs")
    @classmethod
    def _inputs_nonempty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("the list of inputs is empty; give at least one input")
        return value


def load_inputs(spec: RecordSpec, base_dir: Path, *, spec_file: str | None = None) -> list[InputItem]:
    """Read the spec's inputs (a list, or a JSONL file relative to ``base_dir``)."""
    if isinstance(spec.inputs, list):
        items = []
        for i, record in enumerate(spec.inputs):
            try:
                items.append(InputItem.from_record(record))
            except ValueError as exc:
                raise SpecError(spec_file, None, f"inputs[{i}]", str(exc)) from None
        return _unique(items, spec_file or "inputs")
    path = base_dir / spec.inputs
    if not path.is_file():
        raise SpecError(spec_file, None, "inputs", f"inputs file {path} does not exist")
    items = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                items.append(InputItem.from_record(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise SpecError(str(path), lineno, None, f"not valid JSON: {exc.msg}") from None
            except ValueError as exc:
                raise SpecError(str(path), lineno, None, str(exc)) from None
    if not items:
        raise SpecError(str(path), None, None, "the inputs file holds no inputs")
    return _unique(items, str(path))


def _unique(items: list[InputItem], where: str) -> list[InputItem]:
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.input_id in seen:
            raise SpecError(
                where, None, None,
                f"input_id {item.input_id!r} appears twice (inputs {seen[item.input_id]} and {i}); "
                "input ids key the same-input groups and must be unique",
            )
        seen[item.input_id] = i
    return items
