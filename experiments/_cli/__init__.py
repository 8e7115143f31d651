"""The ``quiver`` command: one module per command (``add_parser`` and its handler).

* ``main``: the parser and ``main()``; ``common``: exit codes and shared helpers;
* ``record``, ``analyze``, ``replay``, ``run``, ``gate``, ``sim``, ``schema``,
  ``imports`` (import and export), ``validate``: one command each.
"""

from __future__ import annotations

from .common import EXIT_CANNOT_RUN, EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEMS
from .main import COMMANDS, build_parser, main
from .record import RecordOverrides, run_record

__all__ = [
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_CANNOT_RUN",
    "EXIT_INTERRUPTED",
    "COMMANDS",
    "build_parser",
    "main",
    "RecordOverrides",
    "run_record",
]
