"""The LLM response cache: responses on disk, keyed by (request body, sample key).

A response is a pure function of the request and its sample key wherever the endpoint
honours the key (the simulator does), so a resumed or repeated run asks for nothing
twice and different repeats, which carry different sample keys, still get different
samples (DESIGN.md "Pairs, samples and caches"). A call without a sample key is never
cached: its answer is not determined by the request alone.

The cache is one SQLite file, ``cache.db`` in its folder (:class:`quiver._sqlite.KeyValueFile`:
WAL journal, safe across threads and processes), one row per response: the key, and the
endpoint's answer (a chat completion, a Responses API response, an Anthropic message or an
embeddings list; a streamed answer as the body it assembles to) as canonical JSON text
(UTF-8), after the run's redactor. Reading a row back only ever parses JSON: a row that is
not such an answer in JSON (bytes, another
JSON value, damaged text) is refused, counted in ``stats["unreadable"]`` with one
warning per cache, and treated as a miss, so the call is sent again and the row
overwritten.

A file that cannot be used is refused when the cache opens, in one line with the way
out: delete the folder, and the responses are fetched again. That includes the folder
an earlier version wrote with ``diskcache``, whose values are pickles: it is never read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from quiver._canonical import canonical_json
from quiver._sqlite import KeyValueFile, Layout, StoreError
from quiver._trace import Redactor
from quiver._wire import EMBEDDINGS, FORMATS

__all__ = ["ResponseCache", "ResponseCacheError"]

log = logging.getLogger(__name__)

FILE = "cache.db"
"""The cache's file in its folder."""
_DISKCACHE = frozenset({"Settings", "Cache"})
"""The tables of the ``diskcache`` folder earlier versions wrote (values pickled)."""


class ResponseCacheError(StoreError):
    """A response cache file that cannot be used (see :class:`quiver._sqlite.StoreError`)."""


def _layout(folder: Path) -> Layout:
    way_out = f"delete the folder {folder} to start an empty cache (responses are fetched again)"
    return Layout(
        kind="response cache", table="responses", value="TEXT", version=1, way_out=way_out,
        earlier={_DISKCACHE: "a response cache of an earlier quiver version (diskcache, whose values are pickles)"},
    )


def _completion(value: object) -> dict[str, Any] | None:
    """A stored row's answer (a chat completion, a response of the Responses API, an
    Anthropic message, an embeddings list), or None when the row is not one in JSON text."""
    if not isinstance(value, str):
        return None
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    readable = any(f.read_answer(data) is not None for f in FORMATS) or EMBEDDINGS.read_answer(data) is not None
    return data if readable else None


class ResponseCache:
    """LLM responses on disk.

    Args:
        directory: The cache folder (created if missing; shared across runs and processes).
        redactor: Applied to every response before it is stored.

    Attributes:
        stats: ``hits``, ``misses`` and ``unreadable`` (rows refused, also counted as misses).

    Raises:
        ResponseCacheError: The folder's ``cache.db`` cannot be used (not a database, cut
            short, a folder, another layout, an earlier version's pickles, no permission).
    """

    def __init__(self, directory: str | Path, *, redactor: Redactor | None = None) -> None:
        self.directory = Path(directory)
        self._file = KeyValueFile(self.directory / FILE, _layout(self.directory), error=ResponseCacheError)
        self._redactor = redactor
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()

    @staticmethod
    def key(body: dict[str, Any], sample_key: str) -> str:
        """The cache key of a request: its body (headers left out) and its sample key."""
        request = {k: v for k, v in body.items() if k not in ("extra_headers", "timeout")}
        text = canonical_json({"request": request, "sample_key": sample_key})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response (the endpoint's chat completion), or None (also for a row
        that cannot be read: it is counted, and overwritten by the next :meth:`put`)."""
        value = self._file.get(key)
        found = _completion(value) if value is not None else None
        unreadable = value is not None and found is None
        with self._lock:
            self.stats["hits" if found is not None else "misses"] += 1
            self.stats["unreadable"] += unreadable
            first = unreadable and self.stats["unreadable"] == 1
        if first:
            log.warning("%s: a row of the response cache could not be read (not a chat completion in JSON): its "
                        "call is sent again and the row overwritten; further such rows are only counted",
                        self._file.path)
        return found

    def put(self, key: str, response: dict[str, Any]) -> None:
        """Store a response (redacted first) as canonical JSON."""
        data = self._redactor.data(response) if self._redactor is not None else response
        self._file.put_many([(key, canonical_json(data))])

    def __len__(self) -> int:
        return len(self._file)

    def close(self) -> None:
        """Close the folder's database."""
        self._file.close()
