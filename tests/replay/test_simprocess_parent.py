"""A simulator subprocess does not outlive the run that started it, even a killed one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = (
    "from quiver.replay import SimulatorConfig, SimulatorProcess\n"
    "import time\n"
    "p = SimulatorProcess.start(SimulatorConfig())\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_simulator_stops_when_its_parent_is_killed() -> None:
    run = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    sim_pid = int(run.stdout.readline())
    assert _alive(sim_pid)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10
    while _alive(sim_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sim_pid)
