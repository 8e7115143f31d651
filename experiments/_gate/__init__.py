"""``quiver gate``: is a prompt change safe to deploy?

* ``run``: probes, the two arms of replays, and the verdict (``run_gate``);
* ``report``: the verdict as Markdown for a pull request and as JUnit XML for CI.
"""

from __future__ import annotations

from .report import gate_junit, gate_markdown
from .run import GateResult, parse_candidates, run_gate

__all__ = ["GateResult", "parse_candidates", "run_gate", "gate_markdown", "gate_junit"]
