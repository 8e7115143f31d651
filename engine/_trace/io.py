"""Reading and writing trace corpora: JSON Lines, one trace a line, ``.gz`` accepted.

Reading streams: a corpus is never held in memory unless asked for. A line that
cannot be read (not UTF-8, not JSON, nested deeper than :data:`MAX_NESTING`, not a v1
trace, calls whose parents do not form a graph) gives one
:class:`~quiver.TraceFormatError` naming the file, the line and the field, and the
other lines still load. A file whose bytes cannot be read on (a ``.gz`` that is not
gzip, or is truncated or damaged) gives the lines before the damage, then one error.
Writing is append-only and flushed per line, redacted before it touches the disk, and
byte-stable: reading a file this module wrote and writing it again gives the same bytes.
A line holding a replay as its difference from a baseline trace (``delta_of``, as a
campaign's ``replays.jsonl`` holds them: :mod:`.delta`) is read as the whole replay.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import ValidationError

from quiver._canonical import dumps_line
from quiver._errors import QuiverError, TraceFormatError
from quiver._outdir import make_folder, open_output

from .model import SCHEMA_VERSION, Trace, call_graph_problems, printable
from .redact import Redactor

__all__ = [
    "MAX_NESTING",
    "iter_traces",
    "iter_lines",
    "parse_line",
    "load_traces",
    "TraceLoad",
    "TraceWriter",
    "write_traces",
    "trace_to_line",
    "format_loc",
    "check_trace_file",
    "read_corpus",
]

OnError = Literal["raise", "skip"] | Callable[[TraceFormatError], None]

MAX_NESTING = 200
"""The deepest nesting of JSON arrays and objects a trace line may have. Deeper data
would exhaust the stack of the code that walks it (hashing, distances, redaction)."""

_GZIP_MAGIC = b"\x1f\x8b"


def format_loc(loc: Iterable[Any]) -> str:
    """Render a pydantic error location as a field path: ``calls[3].occurrence``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = printable(str(part), 40)
            out += f".{name}" if out else name
    return out


def trace_to_line(trace: Trace, redactor: Redactor | None = None) -> str:
    """Serialise one trace as its JSONL line (no trailing newline)."""
    data = trace.model_dump(mode="json")
    if redactor is not None:
        data = redactor.data(data)
    return dumps_line(data)


# --------------------------------------------------------------------------- reading


def check_trace_file(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` when it is a file this process can open, else raise one
    :class:`~quiver.QuiverError` saying why not (missing, a folder, not readable)."""
    p = Path(path)
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise QuiverError(_open_problem(p, exc)) from None
    return p


def _open_problem(path: Path, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"trace file {path} does not exist"
    if isinstance(exc, IsADirectoryError) or path.is_dir():
        return f"{path} is a folder, not a trace file; give the .jsonl (or .jsonl.gz) file inside it"
    if isinstance(exc, PermissionError):
        return f"trace file {path} cannot be read: permission denied"
    return f"trace file {path} cannot be read: {exc.strerror or exc}"


def _damage(path: Path, exc: BaseException, lines_read: int) -> TraceFormatError:
    """The error of a file whose bytes stop being readable after ``lines_read`` lines."""
    before = f"the {lines_read} line(s) before it were read" if lines_read else "no line could be read"
    if isinstance(exc, EOFError):
        reason = f"the gzip data ends early (the file is truncated); {before}"
    elif isinstance(exc, gzip.BadGzipFile) and "Not a gzipped file" in str(exc):
        if lines_read:
            reason = f"bytes that are not gzip follow the compressed data; {before}"
        else:
            reason = "not a gzip file, though its name ends in .gz; a plain JSONL file must not be named .gz"
    elif isinstance(exc, (zlib.error, gzip.BadGzipFile)):
        reason = f"the gzip data is damaged ({exc}); {before}"
    else:
        reason = f"the file cannot be read on ({exc}); {before}"
    return TraceFormatError(str(path), lines_read + 1, None, reason)


def iter_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """The raw lines of a trace file (gunzipped when it ends in ``.gz``) with their
    1-based numbers, the newline kept.

    Raises:
        QuiverError: The file cannot be opened (missing, a folder, not readable).
        TraceFormatError: The bytes stop being readable (a ``.gz`` that is not gzip,
            or is truncated or damaged): raised after the lines before the damage.
    """
    p = Path(path)
    try:
        raw = open(p, "rb")
    except OSError as exc:
        raise QuiverError(_open_problem(p, exc)) from None
    with raw:
        if p.suffix != ".gz" and raw.peek(2)[:2] == _GZIP_MAGIC:
            raise TraceFormatError(str(p), 1, None, "gzip-compressed data in a file not named .gz; name it .jsonl.gz")
        fh: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if p.suffix == ".gz" else raw  # type: ignore[assignment]
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except (OSError, EOFError, zlib.error) as exc:
                raise _damage(p, exc, lineno) from None
            if not line:
                return
            lineno += 1
            yield lineno, line


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _too_deep(value: Any, depth: int = 0) -> bool:
    """Whether the arrays and objects of ``value`` (one of them) nest deeper than
    :data:`MAX_NESTING` (recursive, but never deeper than that itself; scalars are
    not visited)."""
    if depth >= MAX_NESTING:
        return True
    items: Iterable[Any] = value.values() if type(value) is dict else value
    for item in items:
        kind = type(item)
        if (kind is dict or kind is list) and _too_deep(item, depth + 1):
            return True
    return False


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: the only way a lone one gets into parsed text."""


def _too_deep_or_unencodable(obj: dict[str, Any], text: str) -> str | None:
    """Why parsed JSON cannot be a trace's data, or None: nesting deeper than
    :data:`MAX_NESTING`, or a string holding a lone surrogate (``\\ud800`` escapes),
    which no UTF-8 file can hold."""
    if text.count("[") + text.count("{") > MAX_NESTING and _too_deep(obj):
        return f"nested deeper than {MAX_NESTING} levels of arrays and objects"
    if _SURROGATE_ESCAPE.search(text) is None:
        return None
    stack: list[Any] = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any(_lone_surrogate(key) for key in value):
                return "a key holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), not text"
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and _lone_surrogate(value):
            return "a string holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), not text"
    return None


def _lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _where(obj: Any, reason: str) -> str | None:
    """The field path of the first value :func:`_too_deep_or_unencodable` objects to
    (a second, slower walk that runs only on a bad line)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(obj, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, (dict, list)):
            if len(path) >= MAX_NESTING and reason.startswith("nested"):
                return format_loc(path[:6]) + (" ..." if len(path) > 6 else "")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in reversed(list(items)):
                if isinstance(key, str) and _lone_surrogate(key) and "key" in reason:
                    return format_loc(path) or None
                stack.append((item, (*path, key)))
        elif isinstance(value, str) and _lone_surrogate(value) and "string" in reason:
            return format_loc(path) or None
    return None


def _decode(raw: bytes, file: str, lineno: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        raise TraceFormatError(
            file, lineno, None, f"not UTF-8: byte 0x{byte:02x} at byte {exc.start + 1} of the line ({exc.reason})"
        ) from None
    return text.removeprefix("\ufeff") if lineno == 1 else text


def parse_line(line: str | bytes, file: str, lineno: int) -> Trace:
    """Read one line of a trace file as a :class:`Trace`.

    Raises:
        TraceFormatError: What is wrong with the line, where (file, line, field).
    """
    text = _decode(line, file, lineno) if isinstance(line, bytes) else line
    try:
        obj = json.loads(text.rstrip("\r\n"), parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(file, lineno, None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise TraceFormatError(
            file, lineno, None, f"not readable JSON: nested deeper than {MAX_NESTING} levels of arrays and objects"
        ) from None
    except ValueError as exc:  # NaN and Infinity; integers of more than 4300 digits
        reason = "an integer of more than 4300 digits" if "integer string conversion" in str(exc) else str(exc)
        raise TraceFormatError(file, lineno, None, f"not valid JSON here: {reason}") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(file, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
    if "delta_of" in obj:  # a replay stored as its difference from a baseline trace
        from .delta import expand_line

        obj = expand_line(obj, file, lineno)
    problem = _too_deep_or_unencodable(obj, text)
    if problem is not None:
        raise TraceFormatError(file, lineno, _where(obj, problem), problem)
    version = obj.get("schema_version")
    if version != SCHEMA_VERSION:
        reason = (
            "missing; every trace line carries schema_version 1"
            if version is None
            else f"unsupported version {json.dumps(version)[:40]}; this engine reads version {SCHEMA_VERSION}"
        )
        raise TraceFormatError(file, lineno, "schema_version", reason)
    try:
        trace = Trace.model_validate(obj)
    except ValidationError as exc:
        raise _validation_error(exc, file, lineno) from None
    problems = call_graph_problems(trace)
    if problems:
        where, reason = problems[0]
        if len(problems) > 1:
            reason += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
        raise TraceFormatError(file, lineno, where, reason)
    return trace


def _validation_error(exc: ValidationError, file: str, lineno: int) -> TraceFormatError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    reason = first["msg"]
    if "input" in first and first["type"] != "missing":
        reason += f", got {json.dumps(first['input'], default=str)[:80]}"
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return TraceFormatError(file, lineno, format_loc(first["loc"]) or None, reason)


def iter_traces(path: str | os.PathLike[str], *, on_error: OnError = "raise") -> Iterator[Trace]:
    """Stream the traces of a JSONL (or JSONL.gz) file.

    Args:
        path: The file.
        on_error: ``"raise"`` stops at the first bad line with a
            :class:`~quiver.TraceFormatError`; ``"skip"`` drops bad lines; a callable
            receives each error and reading goes on. A file whose bytes stop being
            readable (a damaged ``.gz``) ends the stream after one such error.

    Raises:
        QuiverError: The file cannot be opened (missing, a folder, not readable),
            whatever ``on_error`` says.

    Blank lines are ignored. Line numbers in errors are 1-based.
    """
    p = Path(path)
    lines = iter_lines(p)
    while True:
        try:
            item = next(lines, None)
        except TraceFormatError as exc:  # the file's bytes: nothing after this is readable
            if on_error == "raise":
                raise
            if callable(on_error):
                on_error(exc)
            return
        if item is None:
            return
        lineno, raw = item
        if not raw.strip():
            continue
        try:
            yield parse_line(raw, str(p), lineno)
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


def read_corpus(
    paths: Iterable[str | os.PathLike[str]], warn: Callable[[str], None], *, what: str = "trace"
) -> tuple[list[Trace], int]:
    """Every readable trace of ``paths``, and how many lines were skipped: the rule of
    every command that reads a corpus. A bad line costs only itself: ``warn`` gets one
    line naming its file and line (``FILE:LINE: REASON; the line is skipped``) and the
    reading goes on; the command then ends with exit 1 (done, with problems).

    Raises:
        QuiverError: A file cannot be opened or holds no line, or no line of any file
            reads (exit 2: there is nothing to work on); the message names the files and
            the first bad line.
    """
    files = [Path(p) for p in paths]
    for path in files:
        check_trace_file(path)
    traces: list[Trace] = []
    errors: list[TraceFormatError] = []
    for path in files:
        loaded = load_traces(path)
        if not loaded.traces and not loaded.errors:
            raise QuiverError(f"trace file {path} holds no trace; record a corpus into it with `quiver record`")
        for err in loaded.errors:
            warn(f"{err}; the line is skipped")
        errors.extend(loaded.errors)
        traces.extend(loaded.traces)
    if not traces:
        names = ", ".join(map(str, files))
        raise QuiverError(f"no {what} in {names}: {len(errors)} bad line(s), none that reads (the first: {errors[0]})")
    return traces, len(errors)


class TraceWriter:
    """Append traces to a JSONL file, one line each, flushed as written. The file is
    opened as every file of an output folder is (:func:`quiver._outdir.open_output`: no
    link followed out of the folder); a write the disk refuses is an
    :class:`~quiver._errors.OutputError` naming the file.

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
        make_folder(self.path.parent)
        self._redactor = redactor
        self._fsync = fsync
        self._file = open_output(self.path, append=append)
        self._gz = gzip.GzipFile(fileobj=self._file, mode="ab" if append else "wb") \
            if self.path.suffix == ".gz" else None
        self.count = 0

    def write(self, trace: Trace) -> None:
        """Write one trace and flush it."""
        line = (trace_to_line(trace, self._redactor) + "\n").encode("utf-8")
        if self._gz is not None:
            self._gz.write(line)
            self._gz.flush()
        else:
            self._file.write(line)
            if self._fsync:
                self._file.sync()
            else:
                self._file.flush()
        self.count += 1

    def close(self) -> None:
        """Close the file."""
        try:
            if self._gz is not None:
                self._gz.close()
        finally:
            self._file.close()

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
