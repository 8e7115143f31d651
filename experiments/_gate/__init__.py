"""``quiver gate``: is a prompt change safe to deploy?
"""

from __future__ import annotations

from .run import GateResult, run_gate, parse_candidates, gate_markdown, gate_junit

__all__ = [
    "GateResult",
    "run_gate",
    "parse_candidates",
    "gate_markdown",
    "gate_junit",
]
