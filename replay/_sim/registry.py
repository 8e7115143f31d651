"""The registry of simulated models, and the loading of the modules that register them.

A simulated model is registered by name (:func:`sim_model`, :func:`register_sim_model`);
:func:`load_model_modules` imports the modules a simulator is configured with (module
names, or ``.py`` files as a spec and ``quiver sim --models`` give them) so that their
registrations run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from quiver._errors import SimulatorError

if TYPE_CHECKING:
    from .models import SimModelFn

__all__ = ["sim_model", "register_sim_model", "get_sim_model", "sim_model_names", "load_model_modules"]

_REGISTRY: dict[str, SimModelFn] = {}


def register_sim_model(name: str, fn: SimModelFn) -> None:
    """Register ``fn`` as the simulated model ``name``, replacing any earlier one.

    Raises:
        SimulatorError: ``name`` is not a non-empty string or ``fn`` is not callable.
    """
    if not isinstance(name, str) or not name.strip():
        raise SimulatorError(f"a simulated model name must be a non-empty string; got {name!r}")
    if not callable(fn):
        raise SimulatorError(
            f"simulated model '{name}' must be a function of a SimRequest; "
            f"got {type(fn).__name__}"
        )
    _REGISTRY[name] = fn


def sim_model(name: str) -> Callable[[SimModelFn], SimModelFn]:
    """Decorator registering a function as the simulated model ``name``."""

    def decorate(fn: SimModelFn) -> SimModelFn:
        register_sim_model(name, fn)
        return fn

    return decorate


def get_sim_model(name: str) -> SimModelFn:
    """Return the function registered as ``name``.

    Raises:
        SimulatorError: No model has that name; the message lists the known ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SimulatorError(
            f"unknown simulated model {name!r}; known models: {', '.join(sim_model_names())}"
        ) from None


def sim_model_names() -> list[str]:
    """The registered model names, sorted."""
    return sorted(_REGISTRY)


def load_model_modules(modules: Sequence[str], base_dir: str | os.PathLike[str] | None = None) -> None:
    """Import each module, so that its ``@sim_model`` registrations run.

    An entry is a module name (on ``sys.path``), or a ``.py`` file, relative to
    ``base_dir`` (default: the working directory), as a spec's ``llm.simulator.models``
    and ``quiver sim --models`` give it: the file is imported under a name of its own
    (once per process), its folder first on ``sys.path`` while it loads.

    Raises:
        SimulatorError: A module could not be imported, or a file does not exist; names
            it and the import error.
    """
    for entry in modules:
        if entry.endswith(".py"):
            _load_file(entry, Path(base_dir) if base_dir is not None else Path.cwd())
            continue
        try:
            importlib.import_module(entry)
        except BaseException as exc:  # a module may even call sys.exit()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise SimulatorError(
                f"cannot import simulator model module {entry!r}: "
                f"{type(exc).__name__}: {exc}; it must be an importable module name "
                "(on sys.path / PYTHONPATH) or a .py file, that registers models with @sim_model"
            ) from exc


def _load_file(entry: str, base_dir: Path) -> None:
    path = (base_dir / entry).resolve()
    if not path.is_file():
        raise SimulatorError(
            f"simulator model file {entry!r} does not exist (looked for {path}); give a .py file that "
            "registers models with @sim_model (relative to the spec, or to the working directory for "
            "quiver sim), or an importable module name"
        )
    name = "quiver_sim_models_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file that exists
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # a module may even call sys.exit()
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise SimulatorError(
            f"cannot import simulator model file {entry!r} ({path}): {type(exc).__name__}: {exc}; it must "
            "register models with @sim_model"
        ) from exc
    finally:
        sys.path.remove(str(path.parent))
