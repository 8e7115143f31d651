"""One redaction boundary for what a process logs and prints.

* **Log records.** A log record factory, installed once and chained to the factory in
  place, redacts every record the process makes, on any logger, whatever handler then
  writes it (a run's log file, the console, Ray's handlers): its message, its
  exception's traceback and its stack (:func:`~quiver._trace.redact.redact_record`).
  The redactor is the one of the innermost :func:`redacted_logs` block; outside of any,
  in a process whose whole output is redacted (:func:`redacted_console`, a Ray worker
  through :func:`redact_process_output`), the built-in rules with every literal and
  pattern the process's redactors were given
  (:func:`~quiver._trace.redact.known_secrets_redactor`); elsewhere records pass as
  they are.
* **Streams.** :class:`RedactingStream` redacts a text stream line by line (a line
  ends at ``\\n`` or ``\\r``, so that a progress line rewritten in place still shows);
  :func:`redacted_console` puts it on ``sys.stdout`` and ``sys.stderr`` for a block,
  and redacts the traceback of an exception that ends the process.
  :func:`split_lines` is what it and the file-descriptor pumps of Ray workers
  (``quiver.replay._executors._redirect``) cut their text with.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TextIO, cast

from .redact import Redactor, known_secrets_redactor, redact_record

__all__ = ["redacted_logs", "redacted_console", "redact_process_output", "output_redactor", "RedactingStream",
           "split_lines"]

PENDING_MAX = 1 << 16
"""The longest text held back while waiting for the end of its line: past it, the text
is redacted and passed on as it is (a secret cut there may be cut in two)."""


class _Output:
    """Which redactor this process's log records and printed lines go through now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.blocks: list[Redactor] = []
        self.whole = 0
        """Open redactions of the process's whole output (:func:`redact_process_output`)."""
        self.factory = False

    def redactor(self) -> Redactor | None:
        blocks = self.blocks
        if blocks:
            return blocks[-1]
        return known_secrets_redactor() if self.whole else None

    def install_factory(self) -> None:
        with self.lock:
            if self.factory:
                return
            previous = logging.getLogRecordFactory()

            def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = previous(*args, **kwargs)
                redactor = self.redactor()
                if redactor is not None:
                    redact_record(record, redactor)
                return record

            logging.setLogRecordFactory(factory)
            self.factory = True


_OUTPUT = _Output()


def output_redactor() -> Redactor:
    """The redactor of what this process logs and prints now: the innermost
    :func:`redacted_logs` block's, else the built-in rules with every literal and pattern
    this process's redactors were given."""
    return _OUTPUT.redactor() or known_secrets_redactor()


@contextlib.contextmanager
def redacted_logs(redactor: Redactor) -> Iterator[Redactor]:
    """Within the block, every log record this process makes is redacted by ``redactor``
    (a block opened inside it, by its own), whatever logger makes it and whatever
    handler writes it: the one function by which a run's log files, the console's
    handler and any other handler get the run's redactor."""
    _OUTPUT.install_factory()
    with _OUTPUT.lock:
        _OUTPUT.blocks.append(redactor)
    try:
        yield redactor
    finally:
        with _OUTPUT.lock:
            blocks = _OUTPUT.blocks
            del blocks[len(blocks) - 1 - blocks[::-1].index(redactor)]


def redact_process_output() -> Callable[[], None]:
    """From now on, every log record of this process is redacted, outside of
    :func:`redacted_logs` blocks too (with :func:`output_redactor`); returns the function
    that ends it."""
    _OUTPUT.install_factory()
    with _OUTPUT.lock:
        _OUTPUT.whole += 1
    ended = threading.Event()

    def end() -> None:
        if not ended.is_set():
            ended.set()
            with _OUTPUT.lock:
                _OUTPUT.whole -= 1

    return end


def split_lines(pending: str) -> tuple[str, str]:
    """``pending`` cut after its last line end (``\\n`` or ``\\r``): the complete lines,
    and what is left of the last one (all of it, when longer than :data:`PENDING_MAX`)."""
    cut = max(pending.rfind("\n"), pending.rfind("\r")) + 1
    if cut == 0 and len(pending) > PENDING_MAX:
        return pending, ""
    return pending[:cut], pending[cut:]


class RedactingStream:
    """A text stream that passes what is written to it on to ``stream`` redacted, line by
    line (with :func:`output_redactor`, or ``redactor``'s): a secret written in two
    pieces is held until its line ends, or until :meth:`flush`."""

    def __init__(self, stream: TextIO, redactor: Callable[[], Redactor] = output_redactor) -> None:
        self.stream = stream
        self._redactor = redactor
        self._pending = ""
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        with self._lock:
            done, self._pending = split_lines(self._pending + text)
            if done:
                self.stream.write(self._redactor().text(done))
        return len(text)

    def writelines(self, lines: Iterator[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, ""
            if pending:
                self.stream.write(self._redactor().text(pending))
            self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, errors, name, ...: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def redacted_console() -> Iterator[None]:
    """Within the block, ``sys.stdout`` and ``sys.stderr`` are :class:`RedactingStream`
    s and every log record is redacted (:func:`redact_process_output`); the traceback of
    an exception that ends the process after the block is printed redacted too (the
    hook stays: it only redacts)."""
    end = redact_process_output()
    out, err = sys.stdout, sys.stderr
    wrapped_out = cast(TextIO, RedactingStream(out)) if out is not None else out  # None: no console at all
    wrapped_err = cast(TextIO, RedactingStream(err)) if err is not None else err
    sys.stdout, sys.stderr = wrapped_out, wrapped_err
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _redacted_excepthook
    try:
        yield
    finally:
        for wrapped in (wrapped_out, wrapped_err):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more can be shown
                if wrapped is not None:
                    wrapped.flush()
        if sys.stdout is wrapped_out:
            sys.stdout = out
        if sys.stderr is wrapped_err:
            sys.stderr = err
        end()


def _redacted_excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write(known_secrets_redactor().text(text))
    sys.stderr.flush()
