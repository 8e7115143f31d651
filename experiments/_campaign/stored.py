"""Replays as a campaign stores them: each one its difference from its baseline trace.

Everything upstream of a replay's target is its baseline's own calls, served; storing
the whole replay repeats the baseline each time (about 17 KB a replay of the support
bot). The ledger row of a replay that ran holds, in place of its ``trace``,
``trace_delta`` (:func:`quiver._trace.delta.trace_delta` from the baseline trace's JSON),
``baseline`` (the baseline's :func:`~quiver._trace.delta.baseline_digest`) and
``trace_status``; the row's text is compressed (zlib) where that makes it smaller
(:func:`pack_text`). ``replays.jsonl`` holds one delta line per replay
(:func:`delta_line`), which every trace reader of the engine reads as the whole replay
given its baseline file. A row or line is made back into the whole replay exactly:
the baseline's JSON with the delta applied.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from quiver._errors import QuiverError
from quiver._trace import (
    DELTA_KEY,
    SCHEMA_VERSION,
    Trace,
    apply_delta,
    baseline_digest,
    baseline_text,
    pack_delta,
    trace_delta,
)

__all__ = ["Baselines", "packed", "unpacked", "pack_text", "unpack_text", "delta_line", "whole_rows", "STORED_KEYS"]

_T = TypeVar("_T")

STORED_KEYS = ("trace_delta", "baseline", "trace_status")
"""What a stored row holds in place of ``trace``."""

_ZLIB_LEVEL = 6
_WORTH = 0.9
"""Compressed text is stored when at most this share of the plain text's size."""


class Baselines:
    """The baseline traces' JSON (as jobs carry it: ``Trace.model_dump(mode="json")``) and
    digests, by trace id, computed once each."""

    def __init__(self) -> None:
        self._json: dict[str, dict[str, Any]] = {}
        self._digest: dict[str, str] = {}
        self._text: dict[str, bytes] = {}

    def add(self, trace_id: str, data: dict[str, Any]) -> None:
        """Know ``data`` as the JSON of baseline ``trace_id`` (a job's ``trace``)."""
        self._json.setdefault(trace_id, data)

    def json_of(self, trace: Trace | Mapping[str, Any]) -> dict[str, Any]:
        """The JSON of a baseline trace."""
        trace_id = trace.trace_id if isinstance(trace, Trace) else str(trace["trace_id"])
        found = self._json.get(trace_id)
        if found is None:
            found = self._json[trace_id] = trace.model_dump(mode="json") if isinstance(trace, Trace) else dict(trace)
        return found

    def text(self, trace: Trace | Mapping[str, Any]) -> bytes:
        """:func:`~quiver._trace.delta.baseline_text` of a baseline trace."""
        data = self.json_of(trace)
        return _once(self._text, str(data["trace_id"]), lambda: baseline_text(data))

    def digest(self, trace: Trace | Mapping[str, Any]) -> str:
        """:func:`~quiver._trace.delta.baseline_digest` of a baseline trace."""
        return _once(self._digest, str(self.json_of(trace)["trace_id"]), lambda: baseline_digest(self.text(trace)))


def _once(memo: dict[str, _T], key: str, make: Callable[[], _T]) -> _T:
    """``memo[key]``, made by ``make`` the first time."""
    found = memo.get(key)
    if found is None:
        found = memo[key] = make()
    return found


def packed(data: dict[str, Any], baseline: Trace | Mapping[str, Any], baselines: Baselines) -> dict[str, Any]:
    """The row to store for a replay's result ``data``: its trace as a delta from
    ``baseline`` (a failed job's row, or one already stored so, is kept as it is)."""
    trace = data.get("trace")
    if "error" in data or not isinstance(trace, dict):
        return data
    row = {k: v for k, v in data.items() if k != "trace"}
    row["trace_delta"] = trace_delta(baselines.json_of(baseline), trace)
    row["baseline"] = baselines.digest(baseline)
    row["trace_status"] = trace.get("status", "ok")
    return row


def unpacked(data: dict[str, Any], baseline: Trace | Mapping[str, Any], baselines: Baselines) -> dict[str, Any]:
    """The inverse of :func:`packed`: the row with the whole replay trace.

    Raises:
        ValueError: The row was stored against another version of the baseline trace,
            or its delta does not fit it.
    """
    if "trace_delta" not in data:
        return data
    digest = baselines.digest(baseline)
    if data.get("baseline") != digest:
        trace_id = baseline.trace_id if isinstance(baseline, Trace) else baseline.get("trace_id")
        raise ValueError(f"it was stored against another version of baseline trace {trace_id!r}")
    row = {k: v for k, v in data.items() if k not in STORED_KEYS}
    row["trace"] = apply_delta(baselines.json_of(baseline), data["trace_delta"])
    return row


def pack_text(text: str) -> str | bytes:
    """A row's JSON text as stored: compressed when that pays (zlib; it never starts
    with ``{`` as the text does)."""
    raw = text.encode("utf-8")
    small = zlib.compress(raw, _ZLIB_LEVEL)
    return small if len(small) <= _WORTH * len(raw) else text


def unpack_text(raw: bytes) -> bytes:
    """The JSON text of a stored row (its bytes as SQLite holds them)."""
    return zlib.decompress(raw) if raw[:1] == b"\x78" else raw


def delta_line(replay_id: str, delta: dict[str, Any], baseline: Trace, baselines: Baselines, baseline_file: Path,
               folder: Path | None, *, relative: str | None = None) -> str:
    """One line of ``replays.jsonl`` (in ``folder``): the replay ``replay_id`` as its
    delta from ``baseline``, a trace of ``baseline_file`` (named relative to ``folder``,
    or as ``relative`` gives it, and in full for a folder copied elsewhere), compressed
    where that pays."""
    full = baseline_file.resolve() if folder is not None else baseline_file
    where = relative if relative is not None else os.path.relpath(full, (folder or Path.cwd()).resolve())
    head = {"trace_id": replay_id, "schema_version": SCHEMA_VERSION,
            DELTA_KEY: {"file": Path(where).as_posix(), "path": str(full), "trace_id": baseline.trace_id,
                        "digest": baselines.digest(baseline)}}
    small = pack_delta(delta, baselines.text(baseline))
    body = {"delta_z": small} if small is not None else {"delta": delta}
    return json.dumps({**head, **body}, ensure_ascii=False, separators=(",", ":")) + "\n"


def whole_rows(ledger_path: Path, baseline_path: Path) -> dict[str, dict[str, Any]]:
    """Every row of a campaign's ledger with its whole replay trace, by job id (the
    baseline's traces read from ``baseline_path``; a replay kept as a line of
    ``replays.jsonl``, :mod:`.journal`, read from there): for tools and tests that read a
    ledger outside a campaign."""
    from quiver._trace import expand_line, load_traces

    from .journal import Journals
    from .ledger import Ledger

    baselines = Baselines()
    by_digest = {baselines.digest(t): t for t in load_traces(baseline_path).traces}
    ledger = Ledger(ledger_path)
    journals = Journals(ledger_path.parent, ledger)
    try:
        refs = {r.job_id: r for r in ledger.refs()}
        out = {}
        for job_id, data in ledger.replays():
            ref = refs.get(job_id)
            line = journals.line(ref) if ref is not None else None
            if line is not None:
                trace = expand_line(json.loads(line), str(ledger_path.parent / "replays.jsonl"), 0)
                out[job_id] = {**{k: v for k, v in data.items() if k not in STORED_KEYS}, "trace": trace}
                continue
            base = by_digest.get(str(data.get("baseline"))) if "trace_delta" in data else None
            if "trace_delta" in data and base is None:
                raise QuiverError(f"{ledger_path}: the row of job {job_id!r} was stored against a baseline trace "
                                  f"that {baseline_path} does not hold")
            out[job_id] = unpacked(data, base, baselines) if base is not None else data
        return out
    finally:
        ledger.close()
