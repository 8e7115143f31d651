"""What the Ray executor needs of a cluster beyond its actors: connecting, shipping the
pipeline's folder to the workers, and noticing a head that is gone.

* :func:`connect`: a cluster at ``address`` (its runtime environment: the folder that
  reaches every worker, ``working_dir`` / ``py_modules``), the cluster of the Ray job
  this process is the driver of (``RAY_ADDRESS``, set by ``ray job submit``), or a new
  local instance.
* :func:`shipped_context`: the replay context as a worker on another machine reads it:
  its paths relative to the shipped folder (a worker's current folder is its copy of
  it), the response cache on the worker's own disk (only the driver writes the output
  folder).
* :class:`HeadWatch`: the head's address tried over TCP while the driver waits on its
  workers; once it refuses connections for :data:`HEAD_LOST_S`, the run stops with
  :class:`ClusterLost` instead of waiting for Ray to give up on it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError

from .base import NODE_CACHE, ReplayContext

__all__ = ["ClusterLost", "HeadWatch", "connect", "shipped_context", "shipped_folder", "HEAD_LOST_S"]

HEAD_LOST_S = 3.0
"""How long the head may refuse connections before the run stops."""

class ClusterLost(QuiverError):
    """The Ray cluster cannot go on: its head stopped answering, or every replay actor is
    gone. Nothing is counted as failed because of it; the message ends with what was kept
    and how to continue (``--resume``, on the same cluster or a new one)."""

    def with_note(self, note: str) -> ClusterLost:
        """The same error, its message ending with ``note``."""
        return ClusterLost(f"{self.args[0]}; {note}")


def connect(address: str | None, num_cpus: int | None, runtime_env: Mapping[str, Any] | None) -> Any:
    """Ray, connected: to ``address`` with ``runtime_env``; without an address, to the
    cluster of the Ray job this process drives (``RAY_ADDRESS``), else to a new local
    instance (``address="local"``: never a cluster another process left behind)."""
    try:
        import ray
    except ImportError:
        raise QuiverError("executor ray needs Ray: pip install 'quiver-engine[ray]' (or use executor: local)") from None
    if ray.is_initialized():
        return ray
    env = dict(runtime_env) if runtime_env else None
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if address:
            ray.init(address=address, runtime_env=env, **quiet)
        elif os.environ.get("RAY_ADDRESS"):  # a Ray job's driver: its runtime environment is the job's
            ray.init(**quiet)
        else:
            ray.init(address="local", num_cpus=num_cpus, runtime_env=env, **quiet)
    except (ConnectionError, TimeoutError) as exc:
        raise QuiverError(f"cannot connect to the Ray cluster at {address or os.environ.get('RAY_ADDRESS')}: "
                          f"{exc}; check that its head is up (ray status --address ...)") from None
    return ray


def shipped_folder(ray: Any, runtime_env: Mapping[str, Any] | None) -> Path | None:
    """The local folder whose copy is every worker's current folder: the runtime
    environment's ``working_dir`` (given here, or the Ray job's, which is then this
    process's current folder); None when workers share this process's folders."""
    if runtime_env and runtime_env.get("working_dir"):
        return Path(str(runtime_env["working_dir"])).resolve()
    try:
        job_env = ray.get_runtime_context().runtime_env
    except Exception:  # an older Ray, or not connected
        return None
    return Path.cwd().resolve() if job_env and job_env.get("working_dir") else None


def shipped_context(context: ReplayContext, folder: Path | None, remote: bool) -> ReplayContext:
    """``context`` as workers of a cluster read it (see the module docstring).

    Raises:
        QuiverError: The pipeline or the spec's folder is outside the shipped folder.
    """
    changes: dict[str, Any] = {}
    if folder is not None:
        base = Path(context.base_dir).resolve()
        where = _inside(base, folder, "the spec's folder")
        changes["base_dir"] = where
        path, _, function = context.pipeline.rpartition(":")
        if path and Path(path).is_absolute():
            module = _inside(Path(path).resolve(), folder, f"the pipeline {path}")
            changes["pipeline"] = f"{os.path.relpath(Path(folder) / module, Path(folder) / where)}:{function}"
    if remote and context.cache_dir is not None:
        changes["cache_dir"] = f"{NODE_CACHE}{context.run_id}"
    return dataclasses.replace(context, **changes) if changes else context


def _inside(path: Path, folder: Path, what: str) -> str:
    try:
        return path.relative_to(folder).as_posix() or "."
    except ValueError:
        raise QuiverError(f"{what} is outside {folder}, the folder shipped to the Ray workers (runtime_env "
                          "working_dir): move it in, or ship a folder that holds both (executor.runtime_env)") from None


class HeadWatch:
    """Whether the cluster's head still accepts connections (its GCS address), tried at
    most once a second; :meth:`check` raises :class:`ClusterLost` once it has refused
    them for :data:`HEAD_LOST_S`. A local instance has no head to lose: never raises."""

    def __init__(self, ray: Any, address: str | None) -> None:
        self.where: tuple[str, int] | None = None
        self.address = address or os.environ.get("RAY_ADDRESS") or ""
        if self.address:
            found = self.address if ":" in self.address and "://" not in self.address else ""
            if not found:
                try:
                    found = str(ray.get_runtime_context().gcs_address)
                except AttributeError:
                    found = ""
            host, _, port = found.rpartition(":")
            self.where = (host, int(port)) if host and port.isdigit() else None
        self._tried = 0.0
        self._failing_since: float | None = None
        self.lost = False

    def check(self) -> None:
        """Raise :class:`ClusterLost` once the head is gone."""
        now = time.monotonic()
        if self.where is None or now - self._tried < 1.0:
            return
        self._tried = now
        if self._reachable():
            self._failing_since = None
            return
        if self._failing_since is None:
            self._failing_since = now
        if now - self._failing_since >= HEAD_LOST_S:
            self.lost = True
            raise ClusterLost(f"the Ray head at {self.address} stopped answering: every connection was refused "
                              f"for {now - self._failing_since:.1f} s")

    def head_up(self) -> bool:
        """Whether the head accepts a connection now (True when there is no head to lose)."""
        return self.where is None or self._reachable()

    def _reachable(self) -> bool:
        assert self.where is not None
        try:
            with socket.create_connection(self.where, timeout=1.0):
                return True
        except OSError:
            return False
