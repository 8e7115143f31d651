"""The spec's ``llm:`` block made into a client, and the spec's redactor.

:func:`open_llm` starts the bundled simulator as a subprocess when the spec names it
(and stops it afterwards, whatever happens), or checks once that an endpoint given by
``base_url`` is up (:func:`probe_endpoint`) before anything runs; then builds the LLM
client. :func:`spec_redactor` adds the value of the API-key variable to the spec's
redaction. ``quiver record``, ``run``, ``gate`` and ``replay --spec`` open their
endpoint here.

While the endpoint is open, ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` name it
(:func:`endpoint_environment`), so that a pipeline building its client from the
environment (``openai.OpenAI()``, ``ChatOpenAI()``, ``dspy.LM("openai/...")``) talks to
the endpoint the engine records and replays against; they are restored afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from quiver._errors import LLMUnavailable
from quiver._trace import Redactor
from quiver.replay import (
    LLMClient,
    SimulatorConfig,
    SimulatorProcess,
)

from .record import LLMSpec, RecordSpec, SimulatorSpec

__all__ = ["open_llm", "spec_redactor", "key_literals", "MIN_KEY_LITERAL", "probe_endpoint", "simulator_models",
           "endpoint_environment",
           "PROBE_ATTEMPTS", "PROBE_TIMEOUT_S", "ENDPOINT_VARIABLES"]

ENDPOINT_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_KEY")
"""The variables :func:`endpoint_environment` sets: the URL and key of the spec's endpoint."""

PROBE_ATTEMPTS = 2
"""Connection attempts of :func:`probe_endpoint` before the endpoint counts as down."""

PROBE_TIMEOUT_S = 2.0
"""The connect timeout of one probe attempt, in seconds (reading the answer gets twice that)."""


def _simulator_config(sim: SimulatorSpec, base_dir: Path) -> tuple[SimulatorConfig, list[str]]:
    """The simulator's configuration (a ``.py`` entry as its absolute path: the simulator
    runs in a folder of its own) and the folder to put on its ``PYTHONPATH`` (the spec's)."""
    modules = [str((base_dir / entry).resolve()) if entry.endswith(".py") else entry for entry in sim.models]
    config = SimulatorConfig(models=modules, nondeterminism=sim.nondeterminism, faults=sim.faults, limits=sim.limits)
    return config, [str(base_dir.resolve())]


def simulator_models(sim: SimulatorSpec, base_dir: Path) -> list[str]:
    """The models the simulator of ``sim`` serves (the built-in ones and those its
    ``models`` modules register), found without starting it: each module is imported in
    this process as the simulator imports it (:func:`quiver.replay.load_model_modules`:
    a ``.py`` file relative to the spec, under a name of its own).

    Raises:
        SimulatorError: A module cannot be imported (the simulator could not start either).
    """
    return list(_served(tuple(sim.models), str(base_dir.resolve())))


@functools.lru_cache(maxsize=16)
def _served(models: tuple[str, ...], base_dir: str) -> tuple[str, ...]:
    from quiver.replay import sim_model_names
    from quiver.replay._sim import load_model_modules

    sys.path.insert(0, base_dir)  # a module named next to the spec
    try:
        load_model_modules(models, base_dir)
    finally:
        sys.path.remove(base_dir)
    return tuple(sim_model_names())


@contextlib.contextmanager
def open_llm(llm: LLMSpec, base_dir: Path, *, probe: bool = True) -> Iterator[LLMClient]:
    """An LLM client for the spec's ``llm:`` block; starts and stops the simulator. A
    ``base_url`` is probed first (:func:`probe_endpoint`) unless ``probe`` is false (a
    command that expects to send nothing sends nothing)."""
    process = None
    try:
        if llm.simulator is not None:
            simulator_models(llm.simulator, base_dir)  # a module that cannot load is named as the spec gives it
            config, paths = _simulator_config(llm.simulator, base_dir)
            process = SimulatorProcess.start(config, pythonpath=paths)
            base_url, key = process.url, "sk-simulator"
        else:
            assert llm.base_url is not None  # guaranteed by LLMSpec's validator
            base_url, key = llm.base_url, None
            if probe:
                probe_endpoint(base_url)
        client = LLMClient(
            base_url=base_url, model=llm.model, api_key=key, api_key_env=llm.api_key_env,
            timeout_s=llm.timeout_s, retry=llm.retry, params=llm.params, limits=llm.limits,
        )
        try:
            with endpoint_environment(base_url, client.api_key if key or llm.api_key_env else None):
                yield client
        finally:
            client.close()
    finally:
        if process is not None:
            process.stop()


@contextlib.contextmanager
def endpoint_environment(base_url: str, api_key: str | None) -> Iterator[None]:
    """``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``, when a key is given) set to the
    endpoint within the block; their earlier values (or their absence) restored after.
    The key lives only in this process's environment: nothing here writes it anywhere."""
    saved = {name: os.environ.get(name) for name in ENDPOINT_VARIABLES}
    os.environ["OPENAI_BASE_URL"] = base_url
    if api_key is not None:
        os.environ["OPENAI_API_KEY"] = api_key
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


MIN_KEY_LITERAL = 8
"""The shortest value of the API-key variable that is removed wherever it occurs: a
shorter one is a placeholder (``x``, ``EMPTY``, ``none``, as local servers take), and
removing every occurrence of it would wreck the text it occurs in."""


def key_literals(value: str | None) -> list[str]:
    """The API-key variable's value as a literal to redact, when it is long enough to be
    a secret (:data:`MIN_KEY_LITERAL`); the built-in kinds still find a key of a known shape."""
    return [value] if value and len(value.strip()) >= MIN_KEY_LITERAL else []


def spec_redactor(spec: RecordSpec) -> Redactor:
    """The spec's redaction, plus the value of the API-key variable it names (when it is
    long enough to be a secret: :func:`key_literals`)."""
    secret = os.environ.get(spec.llm.api_key_env) if spec.llm.api_key_env else None
    return Redactor(spec.redact, literals=key_literals(secret))


def probe_endpoint(base_url: str, *, attempts: int = PROBE_ATTEMPTS, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Check once, before a run, that an OpenAI-compatible endpoint is reachable:
    ``GET {base_url}/models`` with a short timeout, ``attempts`` times at most.

    Any HTTP answer counts as up, whatever its status (a 401 without a key, a 404 from a
    server with no model list): only a connection that cannot be made (refused, no such
    host, no answer to connect, a TLS failure) or a URL that cannot be requested counts
    as down. A slow answer counts as up too; the calls' own timeouts and retries apply.

    Raises:
        LLMUnavailable: The endpoint is down; the message names the URL and the error.
    """
    import httpx  # the openai client's transport; loaded when a run begins

    url = base_url.rstrip("/") + "/models"
    timeout = httpx.Timeout(2 * timeout_s, connect=timeout_s)
    error: Exception | None = None
    for _ in range(attempts):
        try:
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                client.get(url, headers={"Accept": "application/json"})
            return
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            error = exc  # refused, no such host, TLS failed, no answer to connect: try once more
        except (httpx.TimeoutException, httpx.RemoteProtocolError):
            return  # connected: the server is there, if slow or odd
        except (httpx.UnsupportedProtocol, httpx.InvalidURL, ValueError) as exc:
            error = exc
            break  # a URL that cannot be requested: trying again changes nothing
        except httpx.TransportError as exc:
            error = exc  # reset, proxy refused, ...
    reason = str(error).strip() or type(error).__name__
    raise LLMUnavailable(
        f"the LLM endpoint {base_url} is not reachable (GET {url}: {reason}); start it, or fix llm.base_url"
    )
