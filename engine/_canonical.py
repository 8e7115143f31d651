"""Canonical JSON and content hashes.

Everything the engine hashes (node inputs, outputs, prompt fragments, retrieved
documents, tool responses) goes through :func:`to_jsonable` and :func:`canonical_json`
first, so that a hash depends on content only: not on dict insertion order, not on the
Python type that carried the value, and never on memory addresses.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["to_jsonable", "canonical_json", "content_hash", "dumps_line"]


def to_jsonable(value: Any) -> Any:
    """Convert a Python value to plain JSON data (dict, list, str, number, bool, None).

    Pydantic models are dumped in JSON mode, dataclasses become dicts, tuples become
    lists, sets and frozensets become sorted lists (their order carries no meaning),
    enums become their values, non-finite floats become strings. Anything else becomes
    ``"<TypeName>"``: the type is kept, the address in its repr never is, so hashes of
    inputs that carry clients or connections stay deterministic.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=canonical_json)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_jsonable(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return f"<{type(value).__name__}>"


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_LINE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps`` with these arguments builds on every call, built once (an
encoder keeps no state between calls): the same text, without the set-up."""


def canonical_json(value: Any) -> str:
    """Serialise ``value`` to canonical JSON: sorted keys, no whitespace, UTF-8."""
    return _CANONICAL.encode(to_jsonable(value))


def content_hash(value: Any) -> str:
    """Return ``"sha256:<hex>"`` of the canonical JSON of ``value``.

    A ``str`` is hashed as its UTF-8 bytes, not as a JSON string, so that the hash of
    a document's content is the plain sha256 of its text.
    """
    data = value if isinstance(value, str) else canonical_json(value)
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


def dumps_line(data: Any) -> str:
    """Serialise already-jsonable data as one compact JSON line, keys in given order."""
    return _LINE.encode(data)
