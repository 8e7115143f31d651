"""What every fuzz suite shares: deterministic hypothesis settings, a time limit per
case, the command line run in-process, and the count of cases tried (printed at the
end of the test run, per suite).

A fuzz test states the contract of bad input, the same for every command:

* no traceback, ever (stdout and stderr are checked);
* no hang: every case finishes under :data:`CASE_SECONDS`;
* a rejection is one line, ``quiver CMD: error: ...`` (or a one-line warning naming the
  file and line of the bad item) and exit 2 when the command could not run.
"""

from __future__ import annotations

import contextlib
import io
import signal
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

from hypothesis import HealthCheck, settings

CASE_SECONDS = 20.0
"""The longest one fuzz case may take before it counts as a hang."""

FUZZ = settings(
    derandomize=True,  # the same cases on every run: a failure here fails again
    database=None,  # nothing written beside the tests
    deadline=None,  # time is limited by :func:`time_limit`, not hypothesis' own deadline
    max_examples=150,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
"""The settings of every fuzz test (pass ``max_examples=`` to change the count)."""

CASES: Counter[str] = Counter()
"""Cases tried, by suite name; printed by the ``pytest_terminal_summary`` hook."""


def tried(suite: str) -> None:
    """Count one case of ``suite``."""
    CASES[suite] += 1


class Hang(AssertionError):
    """A fuzz case ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float = CASE_SECONDS, what: str = "case") -> Iterator[None]:
    """Fail with :class:`Hang` when the block runs longer than ``seconds`` (SIGALRM: the
    main thread only; elsewhere the block runs unlimited)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"{what} still running after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class CliResult:
    """What one in-process ``quiver`` command did."""

    code: int
    stdout: str
    stderr: str

    def error_lines(self) -> list[str]:
        """The lines of stderr that report an error."""
        return [line for line in self.stderr.splitlines() if ": error: " in line]


def run_cli(argv: Sequence[str], seconds: float = CASE_SECONDS) -> CliResult:
    """Run ``quiver ARGV`` in this process under a time limit and check the contract:
    no traceback on stdout or stderr, and exit 2 comes with exactly one error line."""
    from quiver.experiments._cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_limit(seconds, f"quiver {argv}"):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 2
    result = CliResult(int(code), out.getvalue(), err.getvalue())
    for stream in (result.stdout, result.stderr):
        assert "Traceback (most recent call last)" not in stream, f"quiver {list(argv)} printed a traceback:\n{stream}"
    if result.code == 2 and ": error: " in result.stderr:
        assert len(result.error_lines()) == 1, f"quiver {list(argv)}: more than one error line:\n{result.stderr}"
        line = result.error_lines()[0]
        assert "\n" not in line and len(line) < 2000, line
    return result
