"""Packages whose public names are imported on first use (PEP 562).

``quiver``, ``quiver.replay``, ``quiver.experiments`` and ``quiver._distance`` list their
public names by the module that defines them; a name is imported when it is first read,
then kept in the package like any other. So ``import quiver`` loads one module, and a
pipeline that only decorates its steps never pays for numpy, pydantic or the OpenAI SDK::

    _FAMILIES = {"quiver._trace": ("Trace", "NodeCall"), ...}
    __getattr__, __dir__, __all__ = lazy_exports(__name__, _FAMILIES)

Type checkers do not run ``__getattr__``: each such package also imports its names under
``if TYPE_CHECKING:`` (as ``X as X``), and ``tests/test_public_api.py`` keeps the two
lists equal.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, families: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose names live in ``families``.

    Args:
        package: The package's ``__name__``.
        families: Module (absolute, or relative to ``package``) -> the public names it
            defines, in the order ``__all__`` lists them.
    """
    where = {name: module for module, names in families.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, list(where)
