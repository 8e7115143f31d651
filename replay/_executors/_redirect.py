"""What a Ray worker process writes, redacted before it leaves the process.

Ray writes a worker's standard output and error to its session's ``worker-*.out`` and
``worker-*.err`` files: Python's prints and tracebacks, the records of its log handlers
(some of which took ``sys.stderr`` when Ray started), and whatever native code writes
to file descriptors 1 and 2. :func:`redact_worker_output` puts a pipe on each of those
two descriptors (``os.dup2``) and a daemon thread behind it that reads the pipe,
redacts line by line (:func:`~quiver._trace.redact_output.split_lines`) and writes to
the descriptor Ray gave, kept aside; and it redacts every log record the process makes
(:func:`~quiver._trace.redact_output.redact_process_output`). Both use the process's
:func:`~quiver._trace.redact_output.output_redactor`: the built-in rules with every
literal and pattern of the redactors made in the worker, the run's among them. When the
process exits, what its streams hold is written through the pipes and what the pipes
hold is written on (a drain mark follows it through each pipe) before the process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from quiver._trace import Redactor, output_redactor, redact_process_output, split_lines

__all__ = ["redact_worker_output"]

_LOCK = threading.Lock()
_PUMPS: list[_Pump] = []

_DROPPED = b"[output dropped: it could not be redacted]\n"
_DRAIN = "\x00quiver: drained\x00"
"""Written to a pipe at exit: what came before it has been written on when the pump reads it."""
_DRAIN_S = 5.0
"""The longest a process's exit waits for one pipe to be written on."""


def redact_worker_output(redaction: Mapping[str, Any] | None) -> Redactor:
    """Redact this process's output from now on (see the module docstring; done once per
    process), with the redactor ``redaction`` describes
    (:meth:`~quiver.Redactor.to_json`) among the rules; returns that redactor."""
    redactor = Redactor.from_json(redaction) if redaction is not None else Redactor()
    with _LOCK:
        if not _PUMPS:
            redact_process_output()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            _PUMPS.extend(_Pump(fd) for fd in (1, 2))
            for pump in _PUMPS:
                pump.start()
            atexit.register(_drain)
    return redactor


def _drain() -> None:
    """Write what the streams and the pipes hold on, before the process ends."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    for pump in _PUMPS:
        pump.drain()


class _Pump(threading.Thread):
    """Reads what the process writes to ``fd`` (a pipe now) and writes it on redacted."""

    def __init__(self, fd: int) -> None:
        super().__init__(name=f"quiver-redact-fd{fd}", daemon=True)
        self.fd = fd
        self.target = os.dup(fd)
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        self.read = read
        self.drained = threading.Event()

    def run(self) -> None:
        pending = ""
        while chunk := os.read(self.read, 1 << 16):
            pending += chunk.decode("utf-8", "surrogateescape")
            while _DRAIN in pending:  # what came before, the start of a line included, goes now
                before, pending = pending.split(_DRAIN, 1)
                self._write(before)
                self.drained.set()
            done, pending = split_lines(pending)
            if done:
                self._write(done)

    def drain(self) -> None:
        """Return once what was written to the pipe so far has been written on (or after
        :data:`_DRAIN_S`)."""
        self.drained.clear()
        with contextlib.suppress(OSError):
            os.write(self.fd, _DRAIN.encode())
            self.drained.wait(_DRAIN_S)

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            data = output_redactor().text(text).encode("utf-8", "surrogateescape")
        except Exception:  # a line it cannot redact is not written as it is
            data = _DROPPED
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.target, view) :]
            except InterruptedError:
                continue
            except OSError:  # the file Ray gave is gone: nothing can be shown
                return
