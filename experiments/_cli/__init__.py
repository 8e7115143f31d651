"""The ``quiver`` command.
"""

from __future__ import annotations

from .analyze import run_analyze, write_profile
from .replay import add_replay_parser, run_replay
from .run import add_run_parser, run_command, add_gate_parser, gate_command
from .main import main, build_parser

__all__ = [
    "run_analyze",
    "write_profile",
    "add_replay_parser",
    "run_replay",
    "add_run_parser",
    "run_command",
    "add_gate_parser",
    "gate_command",
    "main",
    "build_parser",
]
