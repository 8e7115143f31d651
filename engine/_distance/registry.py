"""The field types a graph may declare, each with the kernel that compares its values.

A field type is a name (``categorical``, ``numeric``, ...) and a :class:`Kernel`: the
function that gives the distance of two values of a field of that type, and whether it
calls the text distance. The built-in types are registered by
:mod:`quiver._distance.kernels`; a new type is one call::

    def ordinal(spec, a, b, text, path):
        ranks = {c: i for i, c in enumerate(spec.categories or [])}
        for v in (a, b):
            if v not in ranks:
                raise FieldTypeError("ordinal", v, path)
        return abs(ranks[a] - ranks[b]) / max(len(ranks) - 1, 1)

    quiver.register_kernel("ordinal", ordinal, uses_text=False)

after which ``{type: ordinal, categories: [low, mid, high]}`` is a valid field in a
graph file, :func:`~quiver.value_distance` and :func:`~quiver.output_distance` compare
it, and ``quiver schema graph`` lists it among the allowed types.

**The kernel contract.** ``fn(spec, a, b, text, path) -> float`` with ``spec`` the
field's :class:`~quiver.FieldSpec`, ``a`` and ``b`` the two values (never ``None``:
a missing value is 1 against a value and 0 against another missing one before any
kernel runs), ``text`` the text distance and ``path`` where the field sits in the
output (``plan.steps``), for errors. It returns a distance in [0, 1], 0 for equal
values, and raises :class:`~quiver.FieldTypeError` for a value of the wrong kind. A
kernel registered with ``uses_text=False`` is handed a text distance that refuses to
run, so a kernel that does call it is reported instead of silently embedding texts one
at a time; ``uses_text=True`` makes the analysis run the kernel once with a recording
text distance first, to embed every text it needs in one batch.

**Third-party types** come in through the entry-point group ``quiver.kernels``: each
entry point names a :class:`Kernel` (registered under the entry point's name) or a
module whose import registers its kernels with :func:`register_kernel`. They are loaded
once, the first time a name is not found::

    [project.entry-points."quiver.kernels"]
    ordinal = "my_package.kernels:ORDINAL"

This module imports nothing heavy, so that a graph can be validated (when a pipeline
declares its fields) without loading the numerical libraries.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from quiver._errors import QuiverError
from quiver._registry import Registry

if TYPE_CHECKING:
    from quiver._graph import FieldSpec

__all__ = [
    "TextDistance",
    "KernelFunction",
    "Kernel",
    "KernelError",
    "register_kernel",
    "registered_kernels",
    "get_kernel",
    "unregister_kernel",
    "ENTRY_POINT_GROUP",
    "KERNELS",
]

ENTRY_POINT_GROUP = "quiver.kernels"
"""The entry-point group third-party field types are published under."""

_BUILTINS = "quiver._distance.kernels"
"""The module that registers the built-in types when it is imported."""


class TextDistance(Protocol):
    """A distance between two strings, in [0, 1], 0 for identical strings."""

    def __call__(self, a: str, b: str, /) -> float: ...


class KernelFunction(Protocol):
    """The distance of two values of one field: ``fn(spec, a, b, text, path) -> float``.

    See the module docstring for the contract (values never ``None``, result in [0, 1],
    :class:`~quiver.FieldTypeError` for a value of the wrong kind).
    """

    def __call__(self, spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None, /) -> float: ...


class KernelError(QuiverError):
    """A field type that cannot be registered, found or used as registered.

    Raised for an unknown type name (the message lists the registered ones), for a
    name registered twice with different kernels, and for a kernel that breaks its
    contract (a distance outside [0, 1], a text distance called by a kernel registered
    with ``uses_text=False``).
    """


@dataclass(frozen=True)
class Kernel:
    """A registered field type: its name and the kernel that compares its values.

    Attributes:
        name: The type name a graph declares (``type: ordinal``).
        fn: The kernel, ``fn(spec, a, b, text, path) -> float`` (see
            :class:`KernelFunction`).
        uses_text: Whether ``fn`` may call the text distance. The analysis embeds the
            texts of such fields in one batch before comparing; a kernel registered
            with ``False`` that calls it raises :class:`KernelError`.
        description: One line for listings, usually the formula.
    """

    name: str
    fn: KernelFunction
    uses_text: bool
    description: str = ""


def _load_builtins() -> None:
    """Import the built-in kernels, which register themselves (a no-op once imported,
    and while they are being imported)."""
    if _BUILTINS not in sys.modules:
        importlib.import_module(_BUILTINS)


def _adopt(name: str, loaded: Any) -> None:
    """Register the :class:`Kernel` an entry point named, or say why it is not one."""
    if not isinstance(loaded, Kernel):
        raise KernelError(
            f"it loaded {type(loaded).__name__} {getattr(loaded, '__name__', loaded)!r}, which registered "
            f"no field type named '{name}'; it must name a quiver Kernel or a module that calls register_kernel"
        )
    register_kernel(name, loaded.fn, uses_text=loaded.uses_text, description=loaded.description)


KERNELS: Registry[Kernel] = Registry(
    "field type", "types", ENTRY_POINT_GROUP, error=KernelError, how="with quiver.register_kernel", adopt=_adopt,
    builtins=_load_builtins, same=lambda a, b: (a.fn, a.uses_text) == (b.fn, b.uses_text), sort=False,
)
"""Every field type by name, the built-in ones first (see :class:`quiver._registry.Registry`)."""


def register_kernel(
    type_name: str, fn: KernelFunction, *, uses_text: bool, description: str = ""
) -> Kernel:
    """Register ``fn`` as the kernel of the field type ``type_name``.

    Registering the same function with the same ``uses_text`` again under the same
    name is a no-op; registering another one under a taken name is refused (:func:`unregister_kernel` the old one
    first).

    Args:
        type_name: The type name graphs declare (``type: ordinal``).
        fn: The kernel, ``fn(spec, a, b, text, path) -> float`` (see the module
            docstring for its contract).
        uses_text: Whether ``fn`` may call the text distance ``text``; required, as
            the analysis embeds the texts of such fields in one batch first.
        description: One line for listings, usually the formula.

    Returns:
        The registered :class:`Kernel`.

    Raises:
        KernelError: The name is empty or taken by another kernel, ``fn`` is not
            callable, or ``uses_text`` is not a bool.
    """
    kernel = _checked(type_name, fn, uses_text, description)
    _load_builtins()
    if not KERNELS.add(type_name, kernel, describe=_describe):
        return KERNELS.get(type_name)
    return kernel


def _checked(type_name: Any, fn: Any, uses_text: Any, description: Any) -> Kernel:
    KERNELS.check_name(type_name)
    if not callable(fn):
        raise KernelError(
            f"the kernel of field type '{type_name}' must be a function fn(spec, a, b, text, path) -> float; "
            f"got {type(fn).__name__} {fn!r}"
        )
    if not isinstance(uses_text, bool):
        raise KernelError(
            f"register_kernel('{type_name}', ...): uses_text must be True (the kernel calls the text distance) "
            f"or False (it never does); got {uses_text!r}"
        )
    if not isinstance(description, str):
        raise KernelError(f"the description of field type '{type_name}' must be a string; got {description!r}")
    return Kernel(type_name, fn, uses_text, description)


def _describe(kernel: Kernel) -> str:
    fn = kernel.fn
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return f"the kernel {name} (uses_text={kernel.uses_text})"


def unregister_kernel(type_name: str) -> Kernel:
    """Remove a field type registered with :func:`register_kernel` and return it.

    Graphs already validated keep the type name; comparing their values then raises
    :class:`KernelError`. The built-in types cannot be removed.

    Raises:
        KernelError: No such type, or it is a built-in one.
    """
    kernel = get_kernel(type_name)
    if getattr(kernel.fn, "__module__", None) == _BUILTINS:
        raise KernelError(f"field type '{type_name}' is built in and cannot be unregistered")
    return KERNELS.remove(type_name)


def registered_kernels() -> dict[str, Kernel]:
    """Every registered field type by name, in registration order: the built-in ones
    (categorical, bool, numeric, set, list, text, mapping, json), then the others,
    including those from entry points."""
    return KERNELS.items()


def get_kernel(type_name: str) -> Kernel:
    """The :class:`Kernel` registered for the field type ``type_name``.

    Raises:
        KernelError: No type has that name (the message lists the registered ones), or
            the entry point that should provide it failed to load.
    """
    found = KERNELS.find(type_name)  # the dispatch asks once per value
    return found if found is not None else KERNELS.get(type_name)
