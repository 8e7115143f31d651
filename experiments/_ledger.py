"""The campaign ledger: every finished pair, committed durably the moment it is done.

A SQLite database in the run folder (WAL journal, ``synchronous=FULL``): one row per job
id, written in one transaction with the pair row and the perturbed trace. A campaign
killed at any instant (SIGKILL included) loses at most the pairs still in flight;
``quiver run SPEC --resume`` reads the ledger, skips every job it holds and runs the
rest, so no pair is lost and none is computed twice. The job id is the primary key: a
second write of the same job is refused, never duplicated.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Ledger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pairs (
    job_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    row TEXT NOT NULL,
    trace TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class Ledger:
    """Durable storage of finished pairs, keyed by job id.

    Args:
        path: The database file (created with its folder if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def done(self) -> set[str]:
        """The job ids already committed."""
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT job_id FROM pairs")}

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM pairs").fetchone()[0])

    def commit(self, job_id: str, seq: int, row: dict[str, Any], trace: dict[str, Any] | None) -> bool:
        """Write one finished pair; False (and nothing written) when the job is there already."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(
                    "INSERT INTO pairs (job_id, seq, row, trace) VALUES (?, ?, ?, ?)",
                    (job_id, seq, json.dumps(row, sort_keys=True), json.dumps(trace, sort_keys=True) if trace else None),
                )
                self._db.execute("COMMIT")
                return True
            except sqlite3.IntegrityError:
                self._db.execute("ROLLBACK")
                return False

    def rows(self) -> list[dict[str, Any]]:
        """Every committed pair row, in job order."""
        with self._lock:
            return [json.loads(r[0]) for r in self._db.execute("SELECT row FROM pairs ORDER BY seq")]

    def traces(self) -> Iterator[dict[str, Any]]:
        """Every committed perturbed trace, in job order."""
        with self._lock:
            found = list(self._db.execute("SELECT trace FROM pairs WHERE trace IS NOT NULL ORDER BY seq"))
        for (text,) in found:
            yield json.loads(text)

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
