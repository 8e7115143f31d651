"""Reading and writing trace corpora: JSON Lines, one trace a line, ``.gz`` accepted.

Reading streams: a corpus is never held in memory unless asked for. A line that
cannot be read gives one :class:`~quiver.TraceFormatError` naming the file, the line
and the field, and the other lines still load. Writing is append-only and flushed per
line, redacted before it touches the disk, and byte-stable: reading a file this module
wrote and writing it again gives the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ValidationError

from quiver._canonical import dumps_line
from quiver._errors import TraceFormatError

from .model import SCHEMA_VERSION, Trace
from .redact import Redactor

__all__ = [
    "iter_traces",
    "load_traces",
    "TraceLoad",
    "TraceWriter",
    "write_traces",
    "trace_to_line",
    "format_loc",
]

OnError = Literal["raise", "skip"] | Callable[[TraceFormatError], None]


def format_loc(loc: Iterable[Any]) -> str:
    """Render a pydantic error location as a field path: ``calls[3].occurrence``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def trace_to_line(trace: Trace, redactor: Redactor | None = None) -> str:
    """Serialise one trace as its JSONL line (no trailing newline)."""
    data = trace.model_dump(mode="json")
    if redactor is not None:
        data = redactor.data(data)
    return dumps_line(data)


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        raw: IO[bytes] = gzip.open(path, mode + "b")  # type: ignore[assignment]
        return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def _parse_line(text: str, file: str, lineno: int) -> Trace:
    try:
        obj = json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        raise TraceFormatError(file, lineno, None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(file, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        reason = (
            "missing; every trace line carries schema_version 1"
            if version is None
            else f"unsupported version {version!r}; this engine reads version {SCHEMA_VERSION}"
        )
        raise TraceFormatError(file, lineno, "schema_version", reason)
    try:
        return Trace.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        reason = first["msg"]
        if "input" in first and first["type"] != "missing":
            reason += f", got {json.dumps(first['input'], default=str)[:80]}"
        if len(errors) > 1:
            reason += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        raise TraceFormatError(file, lineno, format_loc(first["loc"]) or None, reason) from None


def iter_traces(path: str | os.PathLike[str], *, on_error: OnError = "raise") -> Iterator[Trace]:
    """Stream the traces of a JSONL (or JSONL.gz) file.

    Args:
        path: The file.
        on_error: ``"raise"`` stops at the first bad line with a
            :class:`~quiver.TraceFormatError`; ``"skip"`` drops bad lines; a callable
            receives each error and reading goes on.

    Blank lines are ignored. Line numbers in errors are 1-based.
    """
    p = Path(path)
    with _open_text(p, "r") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                yield _parse_line(text, str(p), lineno)
            except TraceFormatError as exc:
                if on_error == "raise":
                    raise
                if callable(on_error):
                    on_error(exc)


@dataclass
class TraceLoad:
    """The result of :func:`load_traces`: the traces that loaded and the lines that did not."""

    traces: list[Trace] = field(default_factory=list)
    errors: list[TraceFormatError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every line loaded."""
        return not self.errors


def load_traces(path: str | os.PathLike[str]) -> TraceLoad:
    """Load a whole corpus, collecting bad lines instead of stopping at them."""
    result = TraceLoad()
    result.traces = list(iter_traces(path, on_error=result.errors.append))
    return result


class TraceWriter:
    """Append traces to a JSONL file, one line each, flushed as written.

    Args:
        path: The file; ``.gz`` compresses.
        redactor: Applied to every trace before it is serialised.
        append: Append to an existing file instead of truncating it.
        fsync: ``os.fsync`` after each line, so that a killed process loses nothing
            it reported as written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        redactor: Redactor | None = None,
        append: bool = False,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._redactor = redactor
        self._fsync = fsync
        self._fh = _open_text(self.path, "a" if append else "w")
        self.count = 0

    def write(self, trace: Trace) -> None:
        """Write one trace and flush it."""
        self._fh.write(trace_to_line(trace, self._redactor) + "\n")
        self._fh.flush()
        if self._fsync and self.path.suffix != ".gz":
            os.fsync(self._fh.fileno())
        self.count += 1

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_traces(
    path: str | os.PathLike[str], traces: Iterable[Trace], *, redactor: Redactor | None = None
) -> int:
    """Write ``traces`` to ``path`` (replacing it) and return how many were written."""
    with TraceWriter(path, redactor=redactor) as writer:
        for trace in traces:
            writer.write(trace)
        return writer.count
