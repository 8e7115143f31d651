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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from quiver._errors import SpecError
from quiver._outcome import CheckSpec, input_refs
from quiver._trace import RedactionConfig, printable
from quiver.replay import FaultConfig, InputItem, RetryPolicy
from quiver.replay._llm import RateLimits
from quiver.replay._sim import LimitsConfig

__all__ = ["SimulatorSpec", "RetrySpec", "LimitsSpec", "SamplingParams", "LLMSpec", "FidelitySpec", "ToolsSpec",
           "RecordSpec",
           "load_inputs", "check_outcome_inputs", "SEED_MAX"]

SEED_MAX = 2**63 - 1
"""The largest seed a spec may give (seeds are in [0, SEED_MAX])."""


class _Spec(BaseModel):
    """The base of every spec block: unknown keys refused, values never coerced from
    another type (``"3"`` or ``true`` is not a count), numbers finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, strict=True,
                              allow_inf_nan=False)


class SimulatorSpec(_Spec):
    """The bundled simulator, started as a subprocess for the duration of the run."""

    models: list[str] = Field(default_factory=list, max_length=1000)
    """Modules that register simulated models with ``@sim_model``: module names, or
    ``.py`` files relative to the spec. The built-in ``sim-json`` and ``sim-echo`` are
    always there."""
    nondeterminism: float = Field(default=0.0, ge=0.0, le=1.0)
    """Rate at which a temperature-0 request takes its runner-up answer (backend noise)."""
    faults: FaultConfig = Field(default_factory=FaultConfig)
    """Injected latency, 429s, 500s, timeouts and malformed bodies."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    """Rate limits per key and model, as a hosted model has them: ``requests_per_minute``,
    ``tokens_per_minute``, the sliding ``window_s`` they are counted over (60), and
    ``models`` with limits of their own; ``x-ratelimit-*`` headers on every answer, 429
    with ``retry-after`` past them."""


class RetrySpec(RetryPolicy):
    """How LLM calls are retried: :class:`~quiver.replay.RetryPolicy` with the bounds a
    spec may give (at most 100 attempts, waits of at most an hour)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, strict=True,
                              allow_inf_nan=False)

    attempts: int = Field(default=8, ge=1, le=100)
    """Attempts in all, the first included."""
    initial_s: float = Field(default=0.5, gt=0, le=3600)
    """First backoff wait in seconds; it doubles each attempt, with jitter."""
    max_s: float = Field(default=30.0, gt=0, le=3600)
    """Longest backoff wait in seconds."""
    max_retry_after_s: float = Field(default=120.0, gt=0, le=3600)
    """Longest wait in seconds a server's Retry-After may impose."""


class LimitsSpec(RateLimits):
    """The endpoint's rate limits for the run's key, per model: every LLM request of the
    run (the engine's and those captured from the pipeline's own clients, in every worker,
    local threads and Ray actors alike) is paced to them, and to the ``x-ratelimit-*``
    headers the endpoint sends (the lower wins); a 429 slows the whole run."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, strict=True,
                              allow_inf_nan=False)

    requests_per_minute: int | None = Field(default=None, ge=1, le=100_000_000)
    """Requests a minute the key may send to one model (None: learnt from the endpoint's
    ``x-ratelimit-limit-requests``, when it sends it)."""
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10_000_000_000)
    """Tokens a minute, prompt and completion, the key may use with one model (None: as above)."""
    pace: bool = True
    """Pace the run to the limits; false: each call backs off on its own after a 429."""
    utilization: float = Field(default=RateLimits.model_fields["utilization"].default, gt=0, le=1)
    """The share of each limit the run aims at, in (0, 1] (the run's schedule: :class:`RateLimits`)."""


@with_config(ConfigDict(extra="allow", strict=True, allow_inf_nan=False, use_attribute_docstrings=True))
class SamplingParams(TypedDict, total=False):
    """Default sampling parameters of every call; other keys go to the endpoint as they are."""

    temperature: Annotated[float, Field(ge=0, le=2)]
    """Sampling temperature, in [0, 2]."""
    top_p: Annotated[float, Field(gt=0, le=1)]
    """Nucleus sampling mass, in (0, 1]."""
    seed: Annotated[int, Field(ge=-SEED_MAX - 1, le=SEED_MAX)]
    """The endpoint's sampling seed, a 64-bit integer (the simulator and some servers honour it)."""
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)]
    """The most tokens a completion may have, in [1, 1000000]."""
    logprobs: bool
    """Ask for token log probabilities."""
    top_logprobs: Annotated[int, Field(ge=0, le=20)]
    """Alternatives per token with their log probabilities, in [0, 20]."""
    response_format: dict[str, Any]
    """The response format (``{type: json_object}``, ``{type: json_schema, json_schema: {...}}``)."""


def _as_given(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Check the parameters, and keep them as they were written (``0`` stays ``0``)."""
    handler(value)
    return value


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
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """Per-attempt HTTP timeout in seconds, in (0, 3600]."""
    retry: RetrySpec = Field(default_factory=RetrySpec)
    """Retries on 429, 5xx, timeouts and malformed bodies."""
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    """The endpoint's rate limits: the run is paced to them (and to its ``x-ratelimit-*`` headers)."""
    params: Annotated[SamplingParams, WrapValidator(_as_given)] = Field(default_factory=lambda: SamplingParams())
    """Default sampling parameters (temperature, top_p, seed, max_tokens, ...)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if data == "simulator":
            return {"simulator": {}}
        if isinstance(data, dict) and data.get("simulator") is True:
            return {**data, "simulator": {}}
        return data

    @field_validator("retry", mode="before")
    @classmethod
    def _retry_block(cls, value: Any) -> Any:
        if isinstance(value, RetryPolicy) and not isinstance(value, RetrySpec):
            return value.model_dump()  # a policy built in Python: checked against the spec's bounds
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        shown = repr(printable(value, 80))
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
        except ValueError as exc:
            raise ValueError(f"{shown} is not a URL ({exc}); give http(s)://HOST[:PORT]/PATH") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
            raise ValueError(
                f"{shown} is not an http(s) URL; give the endpoint's base URL, such as "
                "http://localhost:8000/v1 or https://api.openai.com/v1"
            )
        return value

    @model_validator(mode="after")
    def _one_target(self) -> LLMSpec:
        if (self.simulator is None) == (self.base_url is None):
            raise ValueError(
                "give exactly one of 'simulator' (the bundled simulator) and 'base_url' "
                "(an OpenAI-compatible endpoint); `llm: simulator` is the short form"
            )
        return self


class FidelitySpec(_Spec):
    """The check before ``quiver run``, ``gate`` and ``attribute`` spend anything: a seeded
    sample of the baseline replayed with every dimension frozen must reproduce."""

    per_group: int = Field(default=1, ge=0, le=10_000)
    """Traces replayed from each input group sampled, in [0, 10000]; 0 skips the check."""
    groups: int | None = Field(default=20, ge=1, le=100_000_000)
    """Input groups sampled at most (None: every group)."""
    threshold: float = Field(default=1.0, ge=0, le=1)
    """The share of the sampled traces that must reproduce, in [0, 1] (1: every one)."""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    """Seeds the sample."""


class ToolsSpec(_Spec):
    """Tools a pipeline reaches over HTTP."""

    http: list[Annotated[str, Field(min_length=1)]] | Literal["all"] = Field(default_factory=list)
    """Hosts (``api.example.com``, ``host:port``) or URL prefixes (``https://api.example.com/v2/``)
    whose requests, sent from any node with ``requests``, ``httpx`` or ``httpx2``, are recorded as
    tool calls of that node and served while the tools dimension is frozen; ``all``: every host
    that is not an LLM API's. Requests to other hosts go out on every replay, counted and named."""


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
    repeats: int = Field(default=3, ge=1, le=100_000)
    """How many times each input runs (the same-input groups of the analysis), in [1, 100000]."""
    concurrency: int = Field(default=4, ge=1, le=1024)
    """How many traces run at once, in [1, 1024]."""
    seed: int = Field(default=0, ge=0, le=SEED_MAX)
    """Seeds every sample key: the same spec and seed give the same samples."""
    redact: RedactionConfig = Field(default_factory=RedactionConfig)
    """What is removed before anything is written (on by default for keys, tokens, e-mails)."""
    tools: ToolsSpec = Field(default_factory=ToolsSpec)
    """Tools reached over HTTP, recorded and served like ``tool`` nodes (``tools: {http: [...]}``)."""
    fidelity: FidelitySpec = Field(default_factory=FidelitySpec)
    """The frozen replay of a sample of the baseline that ``quiver run``, ``gate`` and
    ``attribute`` check before anything else (``{per_group: 0}`` skips it)."""
    outcome: CheckSpec | list[CheckSpec] | None = None
    """What a right answer is: checks on each trace's final output (``equals``,
    ``contains``, ``regex``, ``one_of``, ``number``, ``similar``, a ``python`` check, an
    LLM ``judge``, ``all``/``any`` groups; a list is ``all``), each against a literal or
    a field of the trace's inputs (``{input: NAME}``). Every trace then carries its
    outcome (pass, fail or error, a score, the checks that failed); see
    :mod:`quiver._outcome.spec`."""
    output: str = "runs/record"
    """The output folder (relative to the working directory)."""

    def outcome_check(self) -> CheckSpec | None:
        """The spec's outcome checks as one check (a list is an ``all`` group)."""
        if self.outcome is None:
            return None
        return CheckSpec.model_validate({"all": list(self.outcome)}) if isinstance(self.outcome, list) \
            else self.outcome

    @field_validator("inputs")
    @classmethod
    def _inputs_nonempty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("the list of inputs is empty; give at least one input")
        return value


def load_inputs(spec: RecordSpec, base_dir: Path, *, spec_file: str | None = None) -> list[InputItem]:
    """Read the spec's inputs (a list, or a JSONL file relative to ``base_dir``).

    Raises:
        SpecError: An input is not an object of keyword arguments (or is nested too
            deeply to hash); the file does not exist, is not UTF-8 or not JSON Lines, or
            holds no input; two inputs share an id. The message names the file and line.
    """
    if isinstance(spec.inputs, list):
        items = []
        for i, record in enumerate(spec.inputs):
            try:
                items.append(_input(record))
            except ValueError as exc:
                raise SpecError(spec_file, spec_line(spec_file, ("inputs", i)), f"inputs[{i}]", str(exc)) from None
        return _unique(items, spec_file or "inputs")
    path = base_dir / spec.inputs
    if not path.is_file():
        raise SpecError(spec_file, spec_line(spec_file, ("inputs",)), "inputs", f"inputs file {path} does not exist")
    items = []
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(str(path), lineno, None, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column "
                            f"{exc.start + 1}; save the file as UTF-8") from None
        if not line.strip():
            continue
        try:
            items.append(_input(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise SpecError(str(path), lineno, None, f"not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise SpecError(str(path), lineno, None, "not valid JSON: nested too deeply") from None
        except ValueError as exc:
            raise SpecError(str(path), lineno, None, str(exc)) from None
    if not items:
        raise SpecError(str(path), None, None, "the inputs file holds no inputs")
    return _unique(items, str(path))


def _input(record: Any) -> InputItem:
    """One input; ``ValueError`` for one that is not an object, or that cannot be hashed
    (not finite numbers, nesting deeper than Python's stack)."""
    try:
        return InputItem.from_record(record)
    except RecursionError:
        raise ValueError("the input is nested too deeply") from None
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"the input cannot be read: {exc}") from None


def check_outcome_inputs(spec: RecordSpec, inputs: Sequence[Mapping[str, Any]], *, spec_file: str | None = None,
                         what: str = "inputs") -> None:
    """Refuse outcome checks that refer to an input field some inputs lack (before
    anything runs): one line naming the check, the field, how many inputs lack it and
    the fields they have.

    Raises:
        SpecError: A ``{input: NAME}`` that is missing from one of ``inputs``.
    """
    if spec.outcome is None or not inputs:
        return
    checks = spec.outcome if isinstance(spec.outcome, list) else [spec.outcome]
    for i, check in enumerate(checks):
        root: tuple[str | int, ...] = ("outcome", i) if isinstance(spec.outcome, list) else ("outcome",)
        for where, name in input_refs(check, root):
            lacking = [k for k, given in enumerate(inputs) if not _has_field(given, name)]
            if lacking:
                first = inputs[lacking[0]]
                fields = ", ".join(sorted(first)) or "none"
                path = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in where).replace(".[", "[")
                raise SpecError(spec_file, spec_line(spec_file, where), path,
                                f"input field {name!r} is missing from {len(lacking)} of {len(inputs)} {what}; "
                                f"those {what} have the fields {fields}")


def _has_field(inputs: Mapping[str, Any], name: str) -> bool:
    value: Any = inputs
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False
        value = value[part]
    return True


def spec_line(spec_file: str | None, loc: tuple[str | int, ...]) -> int | None:
    """The line of a field in the spec file, for an error found after the spec was loaded."""
    if spec_file is None:
        return None
    from quiver._yamlspec import load_yaml_with_lines

    try:
        lines = load_yaml_with_lines(Path(spec_file))[1]
    except SpecError:
        return None
    return lines.get(loc, lines.get(loc[:1]))


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
