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
from typing import Any, TypeVar

from quiver._errors import QuiverError
from quiver._registry import Registry, adopt_class

from .common import SpanFormat

__all__ = [
    "ENTRY_POINT_GROUP",
    "FORMATS",
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
    FORMATS.check_name(name)
    _check_format_class(name, cls)
    known = FORMATS.find(name)
    if known is not None and type(known) is cls:
        return
    if rename or not cls.__dict__.get("name"):
        cls.name = name
    try:
        instance = cls()
    except Exception as exc:
        raise ImportFormatError(
            f"import format class {cls.__qualname__} ('{name}') must be built without arguments; "
            f"{cls.__qualname__}() raised {type(exc).__name__}: {exc}"
        ) from exc
    FORMATS.add(name, instance)


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


FORMATS: Registry[SpanFormat] = Registry(
    "import format", "formats", ENTRY_POINT_GROUP, error=ImportFormatError, how="with @quiver.import_format",
    adopt=adopt_class(lambda name, cls: _register(name, cls), ImportFormatError, "import format",
                      "a SpanFormat subclass", "@import_format"),
    same=lambda a, b: type(a) is type(b),
)
"""Every import format by name (see :class:`quiver._registry.Registry`)."""


def registered_formats() -> dict[str, SpanFormat]:
    """Every registered import format by name (sorted), including those from entry points."""
    return FORMATS.items()


def get_format(name: str) -> SpanFormat:
    """The format registered as ``name``.

    Raises:
        ImportFormatError: No format has that name (the message lists the registered
            ones), or the entry point that should provide it failed to load.
    """
    return FORMATS.get(name)


def unregister_format(name: str) -> SpanFormat:
    """Remove a format registered with :func:`import_format` and return its instance.

    Raises:
        ImportFormatError: No such format, or it is a built-in one.
    """
    fmt = get_format(name)
    if type(fmt).__module__.startswith(_BUILTIN_PACKAGE):
        raise ImportFormatError(f"import format '{name}' is built in and cannot be unregistered")
    return FORMATS.remove(name)
