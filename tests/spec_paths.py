"""Specs copied out of their folder: the files they name, made absolute.

A test that writes a bundled spec into a folder of its own keeps its pipeline and its
models by absolute paths; its outcome's Python checks (``python: FILE.py:function``, at
any depth of ``outcome``) are relative to the spec's folder as well, and are made
absolute here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["absolute_checks", "absolute_checks_text"]


def _absolute(value: str, folder: Path) -> str:
    file, sep, fn = value.rpartition(":")
    if not sep or Path(file).is_absolute():
        return value
    return f"{(folder / file).resolve()}:{fn}"


def absolute_checks(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``spec`` with every ``python:`` check of its ``outcome`` resolved against ``folder``
    (the bundled spec's own folder); changed in place and returned."""
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "python" and isinstance(value, str):
                    node[key] = _absolute(value, folder)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(spec.get("outcome"))
    return spec


def absolute_checks_text(text: str, folder: Path) -> str:
    """The same on a spec's YAML text, for tests that edit the text (``python: X.py:f``)."""
    return re.sub(r"(python:\s*)([^\s,}\]]+\.py:\w+)",
                  lambda m: m.group(1) + _absolute(m.group(2), folder), text)
