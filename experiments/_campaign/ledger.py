"""The campaign ledger: every finished replay, committed durably soon after it is done.

A SQLite database in the run folder (WAL journal, ``synchronous=FULL``): one row per job
id holding the job's replay result (the perturbed trace, the target report, the LLM
calls and retries; or the error of a replay that failed), redacted. Finished replays are
committed in batches, one transaction each: a campaign killed at any instant (SIGKILL
included) loses at most the replays still in flight or waiting for their batch;
``quiver run SPEC --resume`` reads the ledger, skips every job it holds and runs the
rest, so no replay is lost and none is run twice. The job id is the primary key: a
second write of the same job is ignored, never duplicated.

Pair rows (distances, strata, divergence indicators) are not stored: they are a pure
function of the baseline, the replay and the embedding model, computed from the ledger
block by block, in job order, as the blocks fill (see
:mod:`quiver.experiments._campaign.results`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError

__all__ = ["Ledger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replays (
    job_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class Ledger:
    """Durable storage of finished replays, keyed by job id.

    Args:
        path: The database file (created with its folder if missing).

    Raises:
        QuiverError: The file is a ledger of an older layout (a ``pairs`` table), which
            this version cannot resume.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "pairs" in tables and "replays" not in tables:
            self._db.close()
            raise QuiverError(
                f"{self.path} is a campaign ledger of an older layout (pair rows, not replays); "
                "run the campaign into a new output folder"
            )
        self._db.executescript(_SCHEMA)

    def done(self) -> set[str]:
        """The job ids already committed."""
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT job_id FROM replays")}

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM replays").fetchone()[0])

    def commit(self, items: Sequence[tuple[str, int, dict[str, Any] | str]]) -> int:
        """Write finished replays ``(job_id, seq, data)`` in one transaction; ``data`` is
        a replay's JSON object, or its JSON text already encoded (keys sorted).

        Returns:
            How many were new (a job already in the ledger is left as it is).
        """
        if not items:
            return 0
        encoded = [(job_id, seq, data if isinstance(data, str) else json.dumps(data, sort_keys=True))
                   for job_id, seq, data in items]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                before = self._db.total_changes
                self._db.executemany("INSERT OR IGNORE INTO replays (job_id, seq, data) VALUES (?, ?, ?)", encoded)
                added = self._db.total_changes - before
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def replays(self, chunk: int = 256) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every committed ``(job_id, data)``, in job order, read ``chunk`` rows at a time."""
        last = -1
        while True:
            with self._lock:
                found = list(self._db.execute(
                    "SELECT seq, job_id, data FROM replays WHERE seq > ? ORDER BY seq LIMIT ?", (last, chunk)
                ))
            if not found:
                return
            for _seq, job_id, text in found:
                yield job_id, json.loads(text)
            last = found[-1][0]

    def replays_between(self, first: int, last: int) -> list[tuple[str, dict[str, Any]]]:
        """The committed ``(job_id, data)`` whose seq is in ``[first, last]``, in job order."""
        with self._lock:
            found = list(self._db.execute(
                "SELECT job_id, data FROM replays WHERE seq BETWEEN ? AND ? ORDER BY seq", (first, last)
            ))
        return [(job_id, json.loads(text)) for job_id, text in found]

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            found = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return found[0] if found else None

    def set_meta(self, items: Iterable[tuple[str, str]]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(items))

    def close(self) -> None:
        with self._lock:
            self._db.close()
