"""The ``quiver`` command line.

One module per command, each with ``add_parser(sub)`` (which registers it and sets its
handler) and the handler itself; this module puts them together. Building the parser
imports no engine module: ``quiver --help`` stays light, and a command pays for what
it uses when it runs.

Exit codes, for every command (:mod:`quiver.experiments._cli.common`): 0 done; 1 done,
with problems found (failed traces or pairs, bad trace lines, a failed negative control,
a gate that fails); 2 could not run (bad spec or arguments, pipeline not importable,
endpoint down); 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import (
    analyze,
    attribute,
    compare,
    diff,
    gate,
    imports,
    init,
    localize,
    record,
    replay,
    report,
    run,
    schema,
    show,
    sim,
    validate,
)
from .common import EXIT_CANNOT_RUN, EXIT_INTERRUPTED

__all__ = ["main", "build_parser", "COMMANDS"]

COMMANDS = (init, record, analyze, diff, compare, attribute, replay, run, gate, localize, report, show, sim, schema,
            imports, validate)
"""The command modules, in the order ``quiver --help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """The parser of ``quiver`` and of its commands (``add_subparsers`` makes its own kind):
    an error message, which quotes the arguments given, is printed redacted."""

    def error(self, message: str) -> NoReturn:
        from quiver._trace import output_redactor

        super().error(output_redactor().text(message))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``quiver`` command."""
    from quiver import __version__

    parser = _Parser(
        prog="quiver",
        description=(
            "QUIVER engine: record, analyse and perturb compound LLM pipelines. "
            "Exit codes: 0 done, 1 done with problems found, 2 could not run."
        ),
    )
    parser.add_argument("--version", action="version", version=f"quiver {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``quiver`` command; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)  # INFO goes to the run's log file only
    parser = build_parser()
    args = parser.parse_args(argv)
    from quiver._trace import redacted_console

    with redacted_console():  # every line printed, every record logged, from here on
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the command ``args`` name; returns the exit code."""
    from quiver._errors import QuiverError
    from quiver._interrupt import signals_interrupt

    try:
        with signals_interrupt(args.command):
            return int(args.handler(args))
    except QuiverError as exc:
        print(f"quiver {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except OSError as exc:  # a disk that refused a write where no command said what to do
        from quiver._outdir import WRITE_ERRNOS, write_error

        if exc.errno not in WRITE_ERRNOS:
            raise
        print(f"quiver {args.command}: error: {write_error(exc, exc.filename or 'a file')}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt as exc:  # SIGINT or SIGTERM: the message says what was kept
        said = str(exc)
        print(f"quiver {args.command}: {said if said.startswith('interrupted') else 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
