"""The import formats by name: ``quiver.import_traces(name, ...)`` and ``quiver import NAME``.

A format is a :class:`~quiver._importers.SpanFormat` subclass registered by class
decorator; the registry holds the one instance :func:`~quiver.import_traces` uses::

    @import_format("toy-jsonl")
    class ToyFormat(SpanFormat):
        def record(self, value, where, problems): ...
        def map_call(self, span, attrs, note): ...

The built-in formats (``openinference``, ``otel-genai``, ``langfuse``) register
themselves where they are defined, when :mod:`quiver._importers` is imported.

**Third-party formats** come in through the entry-point group ``quiver.importers``:
each entry point names a :class:`~quiver._importers.SpanFormat` subclass (registered
under the entry point's name) or a module whose import registers its formats with
:func:`import_format`. They are loaded once, the first time a name is not found or
the formats are listed::

    [project.entry-points."quiver.importers"]
    toy-jsonl = "my_package.toy:ToyFormat"
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from quiver._errors import QuiverError

from .common import SpanFormat

__all__ = [
    "ENTRY_POINT_GROUP",
    "ImportFormatError",
    "import_format",
    "get_format",
    "registered_formats",
    "unregister_format",
]

ENTRY_POINT_GROUP = "quiver.importers"
"""The entry-point group third-party import formats are published under."""

_BUILTIN_PACKAGE = "quiver._importers."
"""Formats defined in this package's modules are built in and stay registered."""

F = TypeVar("F", bound=SpanFormat)

_REGISTRY: dict[str, SpanFormat] = {}
_FROM_ENTRY_POINTS: set[str] = set()
_FAILED_ENTRY_POINTS: dict[str, str] = {}
_entry_points_loaded = False


class ImportFormatError(QuiverError):
    """An import format that cannot be registered or found.

    Raised for an unknown format name (the message lists the registered ones), for a
    name taken by another class, and for a class that is not a complete
    :class:`~quiver._importers.SpanFormat`.
    """


def _check_format_class(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, SpanFormat)):
        raise ImportFormatError(
            f"import format '{name}' must be a subclass of quiver._importers.SpanFormat; got {cls!r}"
        )
    missing = [
        f"{method}()" for method in ("record", "map_call") if getattr(cls, method) is getattr(SpanFormat, method)
    ]
    if missing:
        raise ImportFormatError(
            f"import format class {cls.__qualname__} ('{name}') must implement {' and '.join(missing)} "
            "(see the SpanFormat docstring)"
        )


def _register(name: str, cls: type[SpanFormat], *, rename: bool = False) -> None:
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ImportFormatError(
            f"an import format name must be a non-empty string without surrounding spaces; got {name!r}"
        )
    _check_format_class(name, cls)
    known = _REGISTRY.get(name)
    if known is not None:
        if type(known) is cls:
            return
        raise ImportFormatError(
            f"import format name '{name}' is already registered by {type(known).__module__}."
            f"{type(known).__qualname__}; {cls.__module__}.{cls.__qualname__} needs another name"
        )
    if rename or not cls.__dict__.get("name"):
        cls.name = name
    try:
        instance = cls()
    except Exception as exc:
        raise ImportFormatError(
            f"import format class {cls.__qualname__} ('{name}') must be built without arguments; "
            f"{cls.__qualname__}() raised {type(exc).__name__}: {exc}"
        ) from exc
    _REGISTRY[name] = instance


def import_format(name: str) -> Callable[[type[F]], type[F]]:
    """Class decorator registering a :class:`~quiver._importers.SpanFormat` subclass as ``name``.

    The class gets ``name`` as its :attr:`~quiver._importers.SpanFormat.name` and is
    built once, without arguments; that instance reads every import in this format.

    Raises:
        ImportFormatError: ``name`` is taken by another class, or the class does not
            implement ``record`` and ``map_call``, or cannot be built without
            arguments.
    """

    def decorate(cls: type[F]) -> type[F]:
        _register(name, cls, rename=True)
        return cls

    return decorate


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        before = set(_REGISTRY)
        try:
            loaded = ep.load()
            if isinstance(loaded, type):
                _register(ep.name, loaded)
            elif ep.name not in _REGISTRY:
                raise ImportFormatError(
                    f"it loaded {type(loaded).__name__} {getattr(loaded, '__name__', loaded)!r}, which "
                    f"registered no import format named '{ep.name}'; it must name a SpanFormat subclass "
                    "or a module that registers one with @import_format"
                )
        except Exception as exc:  # a broken plugin must not hide the other formats
            _FAILED_ENTRY_POINTS[ep.name] = f"entry point '{ep.name} = {ep.value}': {type(exc).__name__}: {exc}"
        _FROM_ENTRY_POINTS.update(set(_REGISTRY) - before)



def _reload_entry_points() -> None:
    """Forget the formats loaded from entry points and load them again (for tests)."""
    global _entry_points_loaded
    for name in _FROM_ENTRY_POINTS:
        _REGISTRY.pop(name, None)
    _FROM_ENTRY_POINTS.clear()
    _FAILED_ENTRY_POINTS.clear()
    _entry_points_loaded = False
    _load_entry_points()


def registered_formats() -> dict[str, SpanFormat]:
    """Every registered import format by name (sorted), including those from entry points."""
    _load_entry_points()
    return dict(sorted(_REGISTRY.items()))


def get_format(name: str) -> SpanFormat:
    """The format registered as ``name``.

    Raises:
        ImportFormatError: No format has that name (the message lists the registered
            ones), or the entry point that should provide it failed to load.
    """
    if name not in _REGISTRY:
        _load_entry_points()
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _FAILED_ENTRY_POINTS:
        raise ImportFormatError(f"import format '{name}' could not be loaded from {_FAILED_ENTRY_POINTS[name]}")
    raise ImportFormatError(
        f"unknown import format {name!r}; the registered formats are {', '.join(sorted(_REGISTRY))} "
        f"(third-party formats register with @quiver.import_format or in the entry-point group "
        f"'{ENTRY_POINT_GROUP}')"
    )


def unregister_format(name: str) -> SpanFormat:
    """Remove a format registered with :func:`import_format` and return its instance.

    Raises:
        ImportFormatError: No such format, or it is a built-in one.
    """
    fmt = get_format(name)
    if type(fmt).__module__.startswith(_BUILTIN_PACKAGE):
        raise ImportFormatError(f"import format '{name}' is built in and cannot be unregistered")
    del _REGISTRY[name]
    _FROM_ENTRY_POINTS.discard(name)
    return fmt
