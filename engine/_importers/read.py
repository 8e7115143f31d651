"""Reading span files: every JSON value of every file, whatever the exporter wrote.

A file is read as one JSON document, a JSON array (element by element, so that a
truncated array gives its complete records), JSON Lines, JSON values one after the other
(the OTel SDK's ``ConsoleSpanExporter`` and file exporters write pretty-printed
``span.to_json()`` objects so), or an OTLP protobuf export
(:mod:`quiver._importers.otlp_proto`); gzip-compressed files are read through. A
truncated or invalid document gives what can be salvaged, with a problem naming the
place.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError

from .common import NOTHING, ImportProblem
from .otlp_proto import OtlpDecodeError, decode_export, looks_like_otlp
from .values import MAX_DEPTH, NestedTooDeep, loads

__all__ = ["read_sources", "read_file"]

_ID_IN_TEXT = re.compile(r'"(?:spanId|span_id|id)"\s*:\s*"([^"]{1,200})"')
_RECORD_KEYS = {"observations", "spans", "resourceSpans", "scopeSpans", "instrumentationLibrarySpans", "data"}


def _id_in(text: str) -> str | None:
    m = _ID_IN_TEXT.search(text)
    if m is None:
        return None
    return m.group(1)[2:] if m.group(1).startswith("0x") else m.group(1)


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise QuiverError(f"{path}: no such file; give span files exported as JSON or JSON Lines")
    raw = path.read_bytes()
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except zlib.error as exc:  # a damaged deflate stream (a bad header is an OSError)
            raise OSError(f"not a readable gzip file: {exc}") from None
    return raw


def _suffix(path: Path) -> str:
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix


def read_sources(sources: Iterable[Any], problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """Records with their location: every JSON value of every file, or the records passed in."""
    for i, item in enumerate(sources):
        if isinstance(item, (str, os.PathLike)):
            yield from read_file(Path(item), problems)
        else:
            yield item, f"<records>[{i}]"


def read_file(path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """A JSON document, a JSON array (element by element), JSON Lines, concatenated JSON values or
    an OTLP protobuf export; truncated files in part."""
    try:
        raw = _read_bytes(path)
        if looks_like_otlp(raw, _suffix(path)):
            yield from _protobuf(raw, path, problems)
            return
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raw = exc.object if isinstance(exc.object, bytes) else b""
        line = raw.count(b"\n", 0, exc.start) + 1
        problems.append(ImportProblem(f"{path}:{line}", None, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                                      f"byte {exc.start}); file skipped" if raw else "not UTF-8 text; file skipped"))
        return
    except (OSError, EOFError) as exc:
        problems.append(ImportProblem(str(path), None, f"cannot be read ({exc}); file skipped"))
        return
    if not text.strip():
        problems.append(ImportProblem(str(path), None, "the file is empty"))
        return
    whole = _try_json(text)
    if text.lstrip().startswith("["):  # an array is read record by record
        if whole is not NOTHING or not _looks_like_jsonl(text):
            yield from _array_items(text, path, problems)
            return
    if whole is _TOO_DEEP and not _looks_like_jsonl(text):
        problems.append(ImportProblem(str(path), None, f"the JSON is nested more than {MAX_DEPTH} levels deep; "
                                      "file skipped"))
        return
    if whole is not NOTHING and whole is not _TOO_DEEP:
        yield whole, str(path)
    elif _looks_like_jsonl(text):
        yield from _jsonl(text, path, problems)
    elif _concatenated(text):
        yield from _values(text, 0, path, problems)
    else:
        yield from _salvage(text, path, problems)


def _concatenated(text: str) -> bool:
    """JSON values one after the other (the OTel SDK's ``ConsoleSpanExporter`` and file exporters
    write pretty-printed ``span.to_json()`` objects so): the first value is whole and more follows."""
    start = len(text) - len(text.lstrip())
    try:
        _, end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        return False
    return bool(text[end:].strip())


def _protobuf(raw: bytes, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    try:
        yield decode_export(raw), str(path)
    except OtlpDecodeError as exc:
        problems.append(ImportProblem(str(path), None, f"not an OTLP protobuf export ({exc}); nothing in the file "
                                      "could be imported"))


_TOO_DEEP: Any = type("TooDeep", (), {"__repr__": lambda self: "TOO_DEEP"})()
"""What :func:`_try_json` returns for JSON nested more than :data:`MAX_DEPTH` levels."""


def _try_json(text: str) -> Any:
    try:
        return loads(text)
    except NestedTooDeep:
        return _TOO_DEEP
    except ValueError:
        return NOTHING


def _looks_like_jsonl(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) > 1 and any(isinstance(_try_json(line), (dict, list)) or _try_json(line) is _TOO_DEEP
                                  for line in lines[:2])


def _jsonl(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield loads(line), f"{path}:{lineno}"
        except ValueError as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            col = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            problems.append(ImportProblem(f"{path}:{lineno}", _id_in(line),
                                          f"not valid JSON ({msg}{col}); the line was skipped"))


def _array_items(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    yield from _values(text, text.index("[") + 1, path, problems, closing="]")


def _values(text: str, pos: int, path: Path, problems: list[ImportProblem], closing: str | None = None,
            ) -> Iterator[tuple[Any, str]]:
    """The JSON values of ``text`` from ``pos`` on, one after the other (commas and white space between
    them), with the line each starts on, up to ``closing`` (an array's ``]``) or the end; a value that
    does not parse ends the reading, with a problem."""
    decoder = json.JSONDecoder()
    line = 1 + text.count("\n", 0, pos)
    last = pos
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            if closing is not None:
                problems.append(ImportProblem(f"{path}:{line}", None,
                                              "the file ends before the JSON array closes (truncated); "
                                              "every complete record was imported"))
            return
        if text[pos] == closing:
            return
        line += text.count("\n", last, pos)
        last = pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            problems.append(ImportProblem(
                f"{path}:{exc.lineno}:{exc.colno}", _id_in(text[pos:pos + 4000]),
                f"truncated or invalid JSON ({exc.msg}); the records before line {line} were imported, "
                "the record from there on was not"))
            return
        except RecursionError:
            problems.append(ImportProblem(
                f"{path}:{line}", _id_in(text[pos:pos + 4000]),
                f"the record is nested more than {MAX_DEPTH} levels deep; the records before line {line} were "
                "imported, the record from there on was not"))
            return
        yield value, f"{path}:{line}"
        pos = end


@dataclass
class _Frame:
    char: str
    key: str | None
    cut: int
    last_string: str | None = None


def _salvage(text: str, path: Path, problems: list[ImportProblem]) -> Iterator[tuple[Any, str]]:
    """The complete records of a truncated JSON document: cut at the last whole record, close the rest."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        error = exc
    except (ValueError, RecursionError):  # not reached: read_file knows the text is not JSON
        problems.append(ImportProblem(str(path), None, "not valid JSON; nothing in the file could be imported"))
        return
    stack = _scan(text[: error.pos])
    recovered = NOTHING
    if stack:
        chosen = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].char == "[" and
                       (i == 0 or stack[i].key in _RECORD_KEYS)), 0)
        frame = stack[chosen]
        closers = "".join("]" if f.char == "[" else "}" for f in reversed(stack[: chosen + 1]))
        recovered = _try_json(text[: frame.cut] + closers)
        cut_id = _id_in(text[frame.cut: frame.cut + 4000])
    where = f"{path}:{error.lineno}:{error.colno}"
    if recovered is NOTHING or recovered is _TOO_DEEP or recovered in ({}, []):
        problems.append(ImportProblem(where, _id_in(text[: error.pos][-4000:]),
                                      f"not valid JSON ({error.msg}); nothing in the file could be imported"))
        return
    problems.append(ImportProblem(where, cut_id, f"truncated or invalid JSON ({error.msg}); the complete records "
                                  "before it were imported, the cut record and anything after it were not"))
    yield recovered, str(path)


def _scan(text: str) -> list[_Frame]:
    """The containers still open at the end of ``text``, with the last place each can be cut."""
    stack: list[_Frame] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if stack:
                stack[-1].last_string = text[i + 1: j]
            i = j + 1
            continue
        if ch in "[{":
            key = stack[-1].last_string if stack and stack[-1].char == "{" else None
            stack.append(_Frame(ch, key, i + 1))
        elif ch in "]}" and stack:
            stack.pop()
            if stack:
                stack[-1].cut = i + 1
        elif ch == "," and stack:
            stack[-1].cut = i
        i += 1
    return stack
