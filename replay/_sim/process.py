"""Running the bundled LLM simulator as a process: :func:`serve`, :class:`SimulatorProcess`.

:func:`serve` runs a :class:`~quiver.replay._sim.Simulator` in the main thread until
SIGTERM or SIGINT (``quiver sim`` and ``python -m`` use it); :class:`SimulatorProcess`
starts it as a subprocess and waits until it listens. From a shell::

    python -m quiver.replay._sim.process --config sim.json --ready-file /tmp/sim.url
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from quiver._errors import SimulatorError

from .models import sim_model_names
from .server import Simulator, SimulatorConfig

__all__ = [
    "serve",
    "SimulatorProcess",
    "main",
]


# --------------------------------------------------------------------------- serve


def serve(config: SimulatorConfig, ready_file: Path | None = None) -> None:
    """Run the simulator until SIGTERM or SIGINT; call from the main thread.

    Prints ``quiver sim listening on URL (models: ...)`` to stdout once listening, and
    writes the URL atomically to ``ready_file`` when one is given.

    Raises:
        SimulatorError: The simulator cannot start, or this is not the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        raise SimulatorError("serve() waits for SIGTERM/SIGINT and must run in the main thread")
    with _stop_signals_blocked() as wait_for_signal:
        with Simulator(config) as sim:
            print(f"quiver sim listening on {sim.url} (models: {', '.join(sim_model_names())})",
                  flush=True)
            if ready_file is not None:
                _write_atomically(Path(ready_file), sim.url + "\n")
            wait_for_signal()


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def _stop_signals_blocked() -> Iterator[Any]:
    """Block SIGTERM/SIGINT (threads started inside inherit it) and yield a waiter."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: Ctrl-C raises KeyboardInterrupt
        def wait_interruptibly() -> None:
            never = threading.Event()
            try:
                while not never.wait(0.5):  # short waits keep Ctrl-C responsive
                    pass
            except KeyboardInterrupt:
                pass
        yield wait_interruptibly
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield lambda: signal.sigwait(_STOP_SIGNALS)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- subprocess


class SimulatorProcess:
    """The simulator in a subprocess (``python -m quiver.replay._sim.process``).

    Use :meth:`start`, then :attr:`url`; :meth:`stop` (or leaving the ``with`` block)
    ends the process.
    """

    def __init__(self, process: subprocess.Popen[bytes], url: str, workdir: Path) -> None:
        self._process = process
        self._url = url
        self._workdir = workdir

    @classmethod
    def start(
        cls,
        config: SimulatorConfig,
        *,
        startup_timeout_s: float = 30,
        pythonpath: Sequence[str | os.PathLike[str]] = (),
    ) -> SimulatorProcess:
        """Start a simulator subprocess and wait until it listens.

        Args:
            config: The simulator's configuration.
            startup_timeout_s: How long to wait for it to listen.
            pythonpath: Directories to put first on the child's ``PYTHONPATH``, e.g.
                where the modules of ``config.models`` live. The child runs in a
                temporary directory and inherits this process's environment.

        Raises:
            SimulatorError: The process exited before listening (the message quotes the
                end of its stderr) or did not listen within ``startup_timeout_s``.
        """
        workdir = Path(tempfile.mkdtemp(prefix="quiver-sim-"))
        config_file, ready_file = workdir / "config.json", workdir / "ready"
        config_file.write_text(config.model_dump_json(), encoding="utf-8")
        # quiver.replay imports this module, so runpy warns that it is already loaded.
        command = [sys.executable, "-W", "ignore::RuntimeWarning:runpy",
                   "-m", "quiver.replay._sim.process",
                   "--config", str(config_file), "--ready-file", str(ready_file),
                   "--parent", str(os.getpid())]
        # a session of its own: the SIGINT a terminal sends to the whole foreground group
        # on Ctrl-C reaches the run, not its simulator, which serves the replays in flight
        # until the run stops it (or dies: it watches its parent)
        with open(workdir / "stdout.log", "wb") as out, open(workdir / "stderr.log", "wb") as err:
            process = subprocess.Popen(command, cwd=workdir, env=_child_env(pythonpath),
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        try:
            url = _wait_until_ready(process, ready_file, workdir / "stderr.log", startup_timeout_s)
        except BaseException:
            _end(process)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return cls(process, url, workdir)

    @property
    def url(self) -> str:
        """The OpenAI base URL, ``http://HOST:PORT/v1``."""
        return self._url

    @property
    def pid(self) -> int:
        """The process id."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or ``None`` while the process runs."""
        return self._process.poll()

    def stop(self) -> None:
        """SIGTERM the process, wait up to 5 s, then kill it; remove its work dir."""
        _end(self._process)
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> SimulatorProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _child_env(pythonpath: Sequence[str | os.PathLike[str]]) -> dict[str, str]:
    env = dict(os.environ)
    entries = [str(Path(p).resolve()) for p in pythonpath]
    if env.get("PYTHONPATH"):
        entries.append(env["PYTHONPATH"])
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(entries)
    return env


def _wait_until_ready(
    process: subprocess.Popen[bytes], ready_file: Path, stderr_file: Path, timeout_s: float
) -> str:
    deadline = time.monotonic() + timeout_s
    while not ready_file.exists():
        try:
            code = process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                raise SimulatorError(
                    f"quiver sim (pid {process.pid}) did not listen within {timeout_s:g} s; "
                    f"end of its stderr:\n{_tail(stderr_file)}"
                ) from None
            continue
        raise SimulatorError(
            f"quiver sim exited with code {code} before listening; "
            f"end of its stderr:\n{_tail(stderr_file)}"
        )
    return ready_file.read_text(encoding="utf-8").strip()


def _tail(path: Path, max_chars: int = 2000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "<no stderr>"
    return text[-max_chars:].strip() or "<empty>"


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --------------------------------------------------------------------------- CLI


def _read_config(path: Path) -> SimulatorConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimulatorError(f"cannot read the simulator config {path}: {exc}") from exc
    try:
        return SimulatorConfig.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()
        )
        raise SimulatorError(f"{path}: not a valid simulator config: {problems}") from None


def _watch_parent(pid: int, interval_s: float = 0.5) -> None:
    """Stop (SIGTERM to this process) once ``pid`` is no longer the parent: a simulator
    started for a run that was killed (SIGKILL included) does not outlive it."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="quiver-sim-parent", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m quiver.replay._sim.process [--config PATH] [--ready-file PATH] [--parent PID]``."""
    parser = argparse.ArgumentParser(
        prog="python -m quiver.replay._sim.process",
        description="Serve the quiver LLM simulator (OpenAI-compatible) on loopback.",
    )
    parser.add_argument("--config", type=Path, help="JSON file of a SimulatorConfig")
    parser.add_argument("--ready-file", type=Path, help="file to write the URL to once listening")
    parser.add_argument("--parent", type=int, help="stop when the process with this id is gone")
    args = parser.parse_args(argv)
    if args.parent:
        _watch_parent(args.parent)
    try:
        config = _read_config(args.config) if args.config else SimulatorConfig()
        serve(config, args.ready_file)
    except SimulatorError as exc:
        print(f"quiver sim: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run the package's copy of this module, not this __main__ duplicate, so that model
    # modules importing quiver.replay._sim.process share its classes.
    from quiver.replay._sim.process import main as _main

    sys.exit(_main())
