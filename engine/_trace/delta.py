"""A replay stored as its difference from its baseline trace.

A perturbed replay runs everything upstream of its target from the baseline's own
calls, served; only the target and what it reached run live. Storing the whole replay
repeats the baseline each time. A *delta* holds what differs, as JSON:

* the trace's top-level fields that differ (``set``) or are gone (``del``);
* ``calls``: one entry per call of the replay, in order: the index of a baseline call
  it equals, or ``{"base": i, ...}``: baseline call ``i`` with the differences of
  :func:`dict_delta` applied (a call at the same node and occurrence), or
  ``{"call": {...}}``: a call the baseline has no counterpart of.

:func:`apply_delta` rebuilds the replay's JSON exactly (every key and value;
``Trace.model_validate`` of it is the replay). :func:`baseline_digest` names the
baseline's content, so that a delta is never applied to another version of its trace.

A *delta line* of a trace file (``replays.jsonl``) is a JSON object with the replay's
``trace_id`` first, ``schema_version``, ``delta_of`` (``file``: the baseline file,
relative to the folder of the file holding the line, and ``path``, in full, for a folder
moved; ``trace_id``; ``digest``) and ``delta``, or ``delta_z``: the delta compressed with
the baseline's text as zlib's dictionary (:func:`pack_delta`), where that pays;
:func:`quiver._trace.parse_line` reads it as the whole trace.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import zlib
from pathlib import Path
from typing import Any

from quiver._errors import TraceFormatError

__all__ = ["trace_delta", "apply_delta", "dict_delta", "apply_dict_delta", "text_delta", "apply_text_delta",
           "baseline_text", "baseline_digest", "pack_delta", "unpack_delta", "expand_line", "DELTA_KEY"]

DELTA_KEY = "delta_of"
"""The key that marks a delta line of a trace file."""


def baseline_text(base: dict[str, Any]) -> bytes:
    """A baseline trace's JSON as one canonical text (keys sorted, compact): what its
    digest hashes, and the dictionary compressed deltas are made with."""
    return json.dumps(base, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def baseline_digest(base: dict[str, Any] | bytes) -> str:
    """A short hash of a baseline trace's JSON (of :func:`baseline_text`)."""
    text = base if isinstance(base, bytes) else baseline_text(base)
    return hashlib.sha256(text).hexdigest()[:16]


_WINDOW = 32768
"""zlib's window: the end of the baseline's text that a compressed delta may refer to."""


def pack_delta(delta: dict[str, Any], base_text: bytes) -> str | None:
    """A delta compressed with its baseline's text as zlib's dictionary (the texts a
    replay shares with its baseline cost a reference each), in base64; None when that
    does not make it smaller by a tenth."""
    raw = json.dumps(delta, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    packer = zlib.compressobj(9, zdict=base_text[-_WINDOW:])
    small = base64.b64encode(packer.compress(raw) + packer.flush()).decode("ascii")
    return small if len(small) <= 0.9 * len(raw) else None


def unpack_delta(packed: str, base_text: bytes) -> Any:
    """The inverse of :func:`pack_delta`.

    Raises:
        ValueError: Not base64, not a zlib stream made with that dictionary, or not JSON.
    """
    try:
        unpacker = zlib.decompressobj(zdict=base_text[-_WINDOW:])
        raw = unpacker.decompress(base64.b64decode(packed, validate=True)) + unpacker.flush()
    except (zlib.error, binascii.Error) as exc:
        raise ValueError(f"a compressed delta that does not unpack with its baseline: {exc}") from None
    return json.loads(raw.decode("utf-8"))


def dict_delta(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What turns ``base`` into ``new``: ``set`` (new or replaced values), ``del`` (keys
    gone), ``sub`` (keys whose object values differ, as deltas of their own), ``items``
    (keys whose lists of one length differ, element by element), ``text`` (long strings
    that differ, as :func:`text_delta`) and ``order`` (the keys' order, when it is not the
    one these give); empty parts are left out, and ``{}`` means equal."""
    out: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    items: dict[str, Any] = {}
    text: dict[str, Any] = {}
    for key, value in new.items():
        if key in base:
            old = base[key]
            if _same(old, value):
                continue
            if type(old) is dict and type(value) is dict:
                nested[key] = dict_delta(old, value)
                continue
            if type(old) is list and type(value) is list and len(old) == len(value):
                items[key] = _items_delta(old, value)
                continue
            if type(old) is str and type(value) is str and len(value) >= _TEXT_DIFF:
                text[key] = text_delta(old, value)
                continue
        changed[key] = value
    gone = [key for key in base if key not in new]
    if changed:
        out["set"] = changed
    if gone:
        out["del"] = gone
    if nested:
        out["sub"] = nested
    if items:
        out["items"] = items
    if text:
        out["text"] = text
    order = list(new)
    if order != _applied_order(base, out):
        out["order"] = order
    return out


def _items_delta(base: list[Any], new: list[Any]) -> list[list[Any]]:
    """The elements of two lists of one length that differ: ``[index, "v", value]`` or,
    between two objects, ``[index, "d", delta]``."""
    out: list[list[Any]] = []
    for i, (old, value) in enumerate(zip(base, new, strict=True)):
        if _same(old, value):
            continue
        if type(old) is dict and type(value) is dict:
            out.append([i, "d", dict_delta(old, value)])
        elif type(old) is str and type(value) is str and len(value) >= _TEXT_DIFF:
            out.append([i, "t", text_delta(old, value)])
        else:
            out.append([i, "v", value])
    return out


def _apply_items(base: list[Any], delta: list[list[Any]]) -> list[Any]:
    out = list(base)
    for i, kind, value in delta:
        if kind == "d":
            out[i] = apply_dict_delta(base[i], value)
        elif kind == "t":
            out[i] = apply_text_delta(base[i], value)
        else:
            out[i] = value
    return out


_TEXT_DIFF = 64
"""Strings at least this long are stored as what differs between their common prefix and suffix."""


def _common_prefix(a: str, b: str) -> int:
    """The length of the common prefix (a binary search over slices: compared in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def text_delta(base: str, new: str) -> list[Any]:
    """``[prefix, middle, suffix]``: ``new`` is ``base``'s first ``prefix`` characters,
    ``middle``, and ``base``'s last ``suffix`` characters."""
    head = _common_prefix(base, new)
    tail = _common_prefix(base[head:][::-1], new[head:][::-1])
    return [head, new[head:len(new) - tail], tail]


def apply_text_delta(base: str, delta: list[Any]) -> str:
    """The inverse of :func:`text_delta`."""
    head, middle, tail = delta
    if not (type(head) is int and type(tail) is int and type(middle) is str and 0 <= head and 0 <= tail
            and head + tail <= len(base)):
        raise ValueError(f"a text delta does not fit a text of {len(base)} characters")
    return base[:head] + middle + base[len(base) - tail:]


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON, to the byte: ``1`` is not ``true``, and key order counts."""
    if a is b:
        return True
    if a != b or type(a) is not type(b):
        return False
    return type(a) not in (dict, list) or json.dumps(a) == json.dumps(b)


_PARTS = ("set", "del", "sub", "items", "text", "order")
"""The parts of an object's delta."""


def _applied_order(base: dict[str, Any], delta: dict[str, Any]) -> list[str]:
    gone = set(delta.get("del", ()))
    keys = [k for k in base if k not in gone]
    keys += [k for k in delta.get("set", {}) if k not in base]
    return keys


def apply_dict_delta(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`dict_delta`: ``new`` from ``base`` and their delta (``base``
    is not changed)."""
    if not delta:
        return dict(base)
    out = {k: v for k, v in base.items() if k not in set(delta.get("del", ()))}
    out.update(delta.get("set", {}))
    for key, sub in delta.get("sub", {}).items():
        out[key] = apply_dict_delta(base[key], sub)
    for key, changed in delta.get("items", {}).items():
        out[key] = _apply_items(base[key], changed)
    for key, changed in delta.get("text", {}).items():
        out[key] = apply_text_delta(base[key], changed)
    order = delta.get("order")
    if order is None:
        order = _applied_order(base, delta)
    return {k: out[k] for k in order}


def _call_key(call: Any) -> tuple[Any, ...]:
    return (call.get("node"), call.get("occurrence"), call.get("iteration")) if type(call) is dict else ()


def trace_delta(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The delta of the replay ``new`` from its baseline ``base`` (both traces' JSON)."""
    base_calls: list[Any] = base.get("calls") or []
    new_calls: list[Any] = new.get("calls") or []
    by_key: dict[tuple[Any, ...], int] = {}
    for i, call in enumerate(base_calls):
        by_key.setdefault(_call_key(call), i)
    calls: list[Any] = []
    for i, call in enumerate(new_calls):
        j = i if i < len(base_calls) and _call_key(base_calls[i]) == _call_key(call) else by_key.get(_call_key(call))
        if j is None or type(call) is not dict:
            calls.append({"call": call})
        elif _same(base_calls[j], call):
            calls.append(j)
        else:
            calls.append({"base": j, **dict_delta(base_calls[j], call)})
    top = dict_delta({k: v for k, v in base.items() if k != "calls"},
                     {k: v for k, v in new.items() if k != "calls"})
    out: dict[str, Any] = {**top, "calls": calls} if "calls" in new else dict(top)
    if list(apply_delta(base, out)) != list(new):
        out["keys"] = list(new)
    return out


def apply_delta(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The replay's JSON from its baseline's and :func:`trace_delta`'s result.

    Raises:
        ValueError: The delta does not fit the baseline (a call index out of range, an
            entry of another shape).
    """
    base_calls: list[Any] = base.get("calls") or []
    rest = apply_dict_delta({k: v for k, v in base.items() if k != "calls"},
                            {k: delta[k] for k in _PARTS if k in delta})
    if "calls" in delta:
        rest["calls"] = [_call(base_calls, entry) for entry in delta["calls"]]
    keys = delta.get("keys")
    if not isinstance(keys, list):
        keys = [k for k in base if k in rest] + [k for k in rest if k not in base]
    return {k: rest[k] for k in keys}


def _call(base_calls: list[Any], entry: Any) -> Any:
    if type(entry) is int:
        if not 0 <= entry < len(base_calls):
            raise ValueError(f"call {entry} is not a call of the baseline ({len(base_calls)} calls)")
        return base_calls[entry]
    if type(entry) is not dict:
        raise ValueError(f"a call entry must be an index or an object; got {type(entry).__name__}")
    if "call" in entry:
        return entry["call"]
    j = entry.get("base")
    if type(j) is not int or not 0 <= j < len(base_calls):
        raise ValueError(f"call base {j!r} is not a call of the baseline ({len(base_calls)} calls)")
    return apply_dict_delta(base_calls[j], {k: v for k, v in entry.items() if k != "base"})


# --------------------------------------------------------------------------- delta lines

_CACHE_FILES = 4
"""Baseline files whose traces' JSON stays in memory (the last read)."""

_cache: dict[tuple[str, int, int], dict[str, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def _baseline_file(path: Path, file: str, lineno: int) -> dict[str, dict[str, Any]]:
    """The traces' JSON of a baseline file by trace id (``Trace.model_dump(mode="json")``
    of each line, as a campaign stored its replays against), read once while unchanged."""
    from .io import iter_traces

    try:
        stat = path.stat()
    except OSError as exc:
        raise TraceFormatError(file, lineno, f"{DELTA_KEY}.file",
                               f"this replay is stored as its difference from baseline file {path}, which "
                               f"cannot be read ({exc.strerror or type(exc).__name__}); keep the campaign's "
                               "baseline where it was") from None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        found = _cache.get(key)
    if found is None:
        found = {t.trace_id: t.model_dump(mode="json") for t in iter_traces(path, on_error="skip")}
        with _cache_lock:
            if len(_cache) >= _CACHE_FILES:
                _cache.pop(next(iter(_cache)))
            _cache[key] = found
    return found


def expand_line(obj: dict[str, Any], file: str, lineno: int) -> dict[str, Any]:
    """The whole trace's JSON of a delta line (see the module docstring) of ``file``.

    Raises:
        TraceFormatError: The baseline file or trace is missing, was changed since, or
            the delta does not fit it.
    """
    ref = obj.get(DELTA_KEY)
    delta = obj.get("delta", obj.get("delta_z"))
    if type(ref) is not dict or not isinstance(delta, (dict, str)) or not isinstance(ref.get("file"), str):
        raise TraceFormatError(file, lineno, DELTA_KEY, "a delta line needs delta_of {file, trace_id, digest} "
                                                        "and a delta (an object, or delta_z: one compressed)")
    path = Path(file).parent / ref["file"]
    if not path.is_file() and isinstance(ref.get("path"), str):  # the folder was copied elsewhere
        path = Path(ref["path"])
    base = _baseline_file(path, file, lineno).get(str(ref.get("trace_id")))
    if base is None:
        raise TraceFormatError(file, lineno, f"{DELTA_KEY}.trace_id",
                               f"baseline file {path} holds no trace {str(ref.get('trace_id'))[:200]!r}, which "
                               "this replay is stored as a difference from")
    text = baseline_text(base)
    if baseline_digest(text) != ref.get("digest"):
        raise TraceFormatError(file, lineno, f"{DELTA_KEY}.digest",
                               f"baseline trace {str(ref.get('trace_id'))[:200]!r} in {path} is not the one this "
                               "replay was stored against (it changed since)")
    try:
        return apply_delta(base, unpack_delta(delta, text) if isinstance(delta, str) else delta)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TraceFormatError(file, lineno, "delta", f"does not fit its baseline trace: {exc}") from None
