"""Test modules that share another test module's fixtures import it through :func:`sibling`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["sibling"]


def sibling(name: str, folder: Path) -> ModuleType:
    """The test module ``folder/name.py``, the instance pytest already imported when it
    collected it (under another module name): importing it again would run its
    module-level registrations (an executor, templates) a second time."""
    path = (folder / f"{name}.py").resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(name)
