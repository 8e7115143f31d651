"""A real multi-node Ray cluster on this machine, for the tests and the benchmarks.

``ray start --head`` and then ``ray start --address`` once per worker node: each node a
raylet of its own with its own CPUs, on loopback, every port chosen free (other Ray
instances may run on this machine). A worker node can be started with folders hidden
from it (``hide=``): it runs in a mount namespace of its own where each of them is an
empty tmpfs, so its workers see none of what is there (root only: ``unshare``), which is
how a test shows that code and data reach the workers through Ray's runtime environment
and not through a shared disk.

Every process a ``ray start`` left behind is known by PID (those new after it, and
their descendants when it is killed): :meth:`Cluster.kill_node` kills one node's raylet,
workers and agents; :meth:`Cluster.kill_head` the head's; :meth:`Cluster.shutdown`
everything it started. Nothing here runs ``ray stop``, which would stop every Ray on
the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cluster", "Node", "free_port", "ray_command"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_command() -> list[str]:
    """``ray`` as this interpreter runs it (its packages, the dashboard's included)."""
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _descendants(pids: list[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.append(pid)
            todo += children.get(pid, [])
    return out


def _alive() -> set[int]:
    return {int(e) for e in os.listdir("/proc") if e.isdigit()}


@dataclass
class Node:
    """One ``ray start``: its processes (those it left running) and their descendants."""

    name: str
    pids: list[int] = field(default_factory=list)

    def kill(self) -> list[int]:
        """SIGKILL every process of the node (raylet, workers, agents); the PIDs killed."""
        found = _descendants(self.pids)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in found:  # reap those that are our children
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return found


class Cluster:
    """A head and worker nodes started with ``ray start`` (see the module docstring).

    Args:
        head_cpus: CPUs of the head node.
    """

    def __init__(self, head_cpus: int = 1) -> None:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="qr-"))  # short: Ray's socket paths must fit
        self.port = free_port()
        self.dashboard_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.nodes: list[Node] = []
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        """The environment of this cluster's nodes, and of a driver that connects to it:
        token authentication when this machine has Ray's token (``~/.ray/auth_token``)."""
        if (Path.home() / ".ray" / "auth_token").is_file() or os.environ.get("RAY_AUTH_TOKEN"):
            self.env["RAY_AUTH_MODE"] = "token"
        self.head = self._start("head", ["--head", "--port", str(self.port), "--temp-dir", str(self.temp_dir),
                                         "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                                         "--dashboard-port", str(self.dashboard_port),
                                         "--ray-client-server-port", str(free_port())], head_cpus)

    def _start(self, name: str, args: list[str], cpus: int, hide: list[Path] = ()) -> Node:  # type: ignore[assignment]
        before = _alive()
        ports = ["--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                 "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                 "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port())]
        low = 20000 + (free_port() % 10) * 1000  # below the ports the system hands out
        command = [*ray_command(), "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
                   *ports, "--min-worker-port", str(low), "--max-worker-port", str(low + 999),
                   "--disable-usage-stats"]
        if hide:
            mounts = " && ".join(f"mount -t tmpfs none {shlex_quote(str(p))}" for p in hide)
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f"{mounts} && exec {' '.join(shlex_quote(c) for c in command)}"]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=self.env)
        node = Node(name, [pid for pid in sorted(_alive() - before) if self._ours(pid)])
        self.nodes.append(node)
        if proc.returncode != 0:
            self.shutdown()
            raise RuntimeError(f"ray start ({name}) failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return node

    def _ours(self, pid: int) -> bool:
        """Whether process ``pid`` belongs to this cluster (its command line names the
        cluster's folder or its head's port): another process that started meanwhile
        is never taken for one of its own."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                command = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            return False
        return str(self.temp_dir) in command or f":{self.port}" in command

    def add_node(self, name: str, cpus: int = 1, hide: list[Path] = ()) -> Node:  # type: ignore[assignment]
        """A worker node of ``cpus`` CPUs (``hide``: folders its processes see empty)."""
        own = self.temp_dir / name  # a node's own folder, as on a machine of its own (its runtime
        own.mkdir()                 # environments unpacked there, not under the driver's feet)
        return self._start(name, ["--address", self.address, "--temp-dir", str(own)], cpus, hide)

    def kill_node(self, node: Node) -> list[int]:
        """Kill one worker node's processes by PID (it leaves the cluster)."""
        self.nodes.remove(node)
        return node.kill()

    def kill_head(self) -> list[int]:
        """Kill the head node's processes by PID (the cluster is lost)."""
        return self.kill_node(self.head)

    def shutdown(self) -> None:
        """Kill every process this cluster started (by PID) and remove its folder."""
        for node in reversed(self.nodes):
            node.kill()
        self.nodes = []
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def committed(ledger: Path) -> int:
    """The replays a running campaign has committed to ``ledger`` (read-only; 0 before
    the ledger exists): what a test or benchmark waits on before it kills something."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=2) as db:
            return int(db.execute("SELECT COUNT(*) FROM replays").fetchone()[0])
    except sqlite3.Error:
        return 0
