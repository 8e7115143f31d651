"""The LLM response cache: responses on disk, keyed by (request body, sample key).

A response is a pure function of the request and its sample key wherever the endpoint
honours the key (the simulator does), so a resumed or repeated run asks for nothing
twice and different repeats, which carry different sample keys, still get different
samples (DESIGN.md "Pairs, samples and caches"). A call without a sample key is never
cached: its answer is not determined by the request alone.

The cache is a ``diskcache`` folder, safe across threads and processes. Responses pass
through the run's redactor before they are stored.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import diskcache

from quiver._canonical import canonical_json
from quiver._trace import Redactor

__all__ = ["ResponseCache"]


class ResponseCache:
    """LLM responses on disk.

    Args:
        directory: The cache folder (created if missing; shared across runs).
        redactor: Applied to every response before it is stored.
    """

    def __init__(self, directory: str | Path, *, redactor: Redactor | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(str(self.directory))
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
        """The stored response (the endpoint's JSON), or None."""
        value = self._cache.get(key)
        with self._lock:
            self.stats["hits" if value is not None else "misses"] += 1
        return value  # type: ignore[no-any-return]

    def put(self, key: str, response: dict[str, Any]) -> None:
        """Store a response (redacted first)."""
        self._cache.set(key, self._redactor.data(response) if self._redactor is not None else response)

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        """Close the folder's database."""
        self._cache.close()
