"""The simulator in a process of its own, writing what it counted when stopped.

``python benchmarks/_limited_sim.py CONFIG.json READY STATS``: serves the
:class:`~quiver.replay.SimulatorConfig` in ``CONFIG.json``, writes its URL to ``READY``
once listening, and on SIGTERM writes ``{"stats": ..., "limits": ...}`` (the attempts by
outcome, and the rate limits' counts by model with the seconds between their first and
last admitted request) to ``STATS`` and exits. The rate-limit benchmark runs one per
campaign, so each starts with empty windows.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from quiver.replay import Simulator, SimulatorConfig


def main() -> int:
    config_file, ready, stats_file = (Path(a) for a in sys.argv[1:4])
    config = SimulatorConfig.model_validate_json(config_file.read_text(encoding="utf-8"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Simulator(config) as sim:
        ready.write_text(sim.url, encoding="utf-8")
        stop.wait()
        limits = sim.limit_stats()
        for counts in limits.values():
            counts["span_s"] = counts.pop("last") - counts.pop("first")
        stats_file.write_text(json.dumps({"stats": sim.stats(), "limits": limits}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
