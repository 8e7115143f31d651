"""Key-value files in SQLite: the engine's caches on disk.

A :class:`KeyValueFile` is one table of ``key TEXT PRIMARY KEY, value`` in a SQLite file
with a WAL journal, shared by the threads of a process (one connection, one lock) and by
processes (SQLite's own locks; a writer waits up to a minute for another). It stores
bytes or text as it is given and reads it back as stored: what a value means, and
whether a row read back is one, is the caller's (nothing is ever unpickled or
evaluated). The response cache (JSON text, :mod:`quiver.replay._llm.cache`) and the
embedding cache (float32 bytes, :mod:`quiver._distance.embed`) are two.

A file that cannot be used is refused when it is opened, in one line naming it, saying
what was found and the way out (:class:`StoreError`): bytes that are not a SQLite
database, a database cut short, a folder where the file should be (or a file where its
folder should be), a database of another kind or of a layout newer than this version
reads, a file the process may not read and write. Later reads and writes that fail are
reported the same way. The layout's version is the file's ``PRAGMA user_version``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from quiver._errors import QuiverError

__all__ = ["KeyValueFile", "Layout", "StoreError"]

_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""
_HEADER = 100
"""The size of a SQLite file's header."""
_BUSY_SECONDS = 60.0
"""How long a write waits for another process's (SQLite's busy timeout)."""
_CHUNK = 900
"""Keys per query where SQLite lacks ``json_each``: under its smallest limit on bound parameters."""
_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT"}
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}

_OPEN: dict[str, int] = {}
"""Per file (its real path), how many :class:`KeyValueFile` of this process hold it open."""
_OPEN_LOCK = threading.Lock()
"""Held while a file is checked and connected, and while :data:`_OPEN` changes."""


class StoreError(QuiverError):
    """An on-disk store that cannot be opened, read or written.

    Attributes:
        path: The file (or the folder in its way).
        reason: What was found.
    """

    def __init__(self, path: Path, reason: str, way_out: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}; {way_out}")


@dataclass(frozen=True)
class Layout:
    """What a store's file holds, and what to tell a user whose file cannot be used.

    Attributes:
        kind: What the file is, in messages (``"response cache"``).
        table: The table of keys and values.
        value: The column type of the values.
        column: The column of the values (its keys' is ``key``).
        version: The layout this code writes, and the newest it reads.
        way_out: What a user does with a file that cannot be used (``"delete the folder
            X to start an empty cache"``).
        earlier: Layouts of other formats this file may hold from earlier versions, and
            never reads: the set of their table names -> what they are, in messages.
    """

    kind: str
    table: str
    value: Literal["TEXT", "BLOB"]
    version: int
    way_out: str
    column: str = "value"
    earlier: Mapping[frozenset[str], str] = field(default_factory=dict)

    @property
    def a_kind(self) -> str:
        """The kind with its article (``"an embedding cache"``)."""
        return f"{'an' if self.kind[:1] in 'aeiou' else 'a'} {self.kind}"


class KeyValueFile:
    """One SQLite table of keys and values, safe across threads and processes.

    Args:
        path: The database file; its folder is created if missing.
        layout: What it holds.
        error: The error class raised (a :class:`StoreError` subclass).

    Raises:
        StoreError: The file (or its folder) cannot be used; see the module docstring.
    """

    def __init__(self, path: Path, layout: Layout, *, error: type[StoreError] = StoreError) -> None:
        self.path = path
        self.layout = layout
        self._error = error
        self._lock = threading.Lock()
        self._json = True
        self._db: sqlite3.Connection | None = None
        self._key: str | None = None
        self._check_place()
        key = os.path.realpath(path)
        with _OPEN_LOCK:
            # Reading the header opens and closes the file, and closing any descriptor of a
            # file drops every POSIX lock this process holds on it: SQLite's locks of another
            # connection of this process to the same file would be lost and a second process
            # could write beside it (a malformed database). The file is checked only when no
            # connection of this process holds it; it was checked when that one opened it.
            if not _OPEN.get(key):
                self._check_header()
            try:
                self._db = sqlite3.connect(str(path), timeout=_BUSY_SECONDS, check_same_thread=False,
                                           isolation_level=None)
                _OPEN[key] = _OPEN.get(key, 0) + 1
                self._key = key
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None
        try:
            self._prepare(self._db)
        except sqlite3.Error as exc:
            self.close()
            raise self._sqlite_error(exc) from None
        except BaseException:  # a layout it does not read
            self.close()
            raise

    # -- opening -----------------------------------------------------------------------
    def fail(self, reason: str, way_out: str | None = None, path: Path | None = None) -> StoreError:
        """The error of this file: ``reason`` and the layout's way out (or ``way_out``)."""
        return self._error(path or self.path, reason, way_out or self.layout.way_out)

    def _check_place(self) -> None:
        folder = self.path.parent
        if folder.exists() and not folder.is_dir():
            raise self.fail(f"a file, not a folder (the {self.layout.kind} is kept in a folder)",
                            f"move it aside or delete it: the {self.layout.kind} is made there", path=folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.fail(f"its folder cannot be made ({exc.strerror or type(exc).__name__})") from None
        if self.path.is_dir():
            raise self.fail(f"a folder, not a file (the {self.layout.kind} is a SQLite file)")
        for name in (self.path, folder):
            if name.exists() and not os.access(name, os.R_OK | os.W_OK):
                what = "it" if name == self.path else "its folder"
                raise self.fail(f"permission denied: this user cannot read and write {what}",
                                f"give this user read and write access to {what}, or {self.layout.way_out}")

    def _check_header(self) -> None:
        """Refuse bytes that are not a SQLite database, and a database cut short (the file
        shorter than its header says, or not whole pages), before SQLite reads it."""
        try:
            with self.path.open("rb") as fh:
                head = fh.read(_HEADER)
                size = os.fstat(fh.fileno()).st_size
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self.fail(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
        if not size:
            return  # a file whose first write was cut short: it holds nothing yet
        if not head.startswith(_MAGIC):
            if _MAGIC.startswith(head):
                raise self.fail(f"truncated ({size} bytes, shorter than a SQLite header)")
            raise self.fail(f"not {self.layout.a_kind} (file is not a database)")
        if len(head) < _HEADER:
            raise self.fail(f"truncated ({size} bytes, shorter than a SQLite header)")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        pages = int.from_bytes(head[28:32], "big")
        counted = head[24:28] == head[92:96]  # the header's page count is valid
        wal = Path(f"{self.path}-wal")
        if wal.is_file() and wal.stat().st_size:
            return  # pages may still be in the journal: SQLite puts them back
        if page < 512 or size % page or (counted and size < pages * page):
            expected = f" of {pages * page}" if counted and pages else ""
            raise self.fail(f"truncated ({size}{expected} bytes)")

    def _prepare(self, db: sqlite3.Connection) -> None:
        layout = self.layout
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            self._check_layout(tables, version)
            if layout.table not in tables:
                columns = f"key TEXT PRIMARY KEY, {layout.column} {layout.value} NOT NULL"
                db.execute(f"CREATE TABLE {layout.table} ({columns})")
            if version != layout.version:
                db.execute(f"PRAGMA user_version = {int(layout.version)}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _check_layout(self, tables: set[str], version: int) -> None:
        layout = self.layout
        for names, what in layout.earlier.items():
            if names <= tables:
                raise self.fail(f"{what}, not read")
        if version > layout.version:
            raise self.fail(f"written by a newer version of quiver (layout {version}; this version reads "
                            f"up to {layout.version})",
                            f"run the version that wrote it, or {layout.way_out}")
        others = sorted(tables - {layout.table})
        if others and layout.table not in tables:
            raise self.fail(f"not {layout.a_kind} (it holds the tables {', '.join(others)})")

    def _sqlite_error(self, exc: sqlite3.Error) -> StoreError:
        name = getattr(exc, "sqlite_errorname", "")
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if name == "SQLITE_NOTADB" or "not a database" in text:
            return self.fail(f"not {self.layout.a_kind} (file is not a database)")
        if name in _DAMAGED or "malformed" in text:
            return self.fail(f"damaged ({text})")
        if name in _BUSY or "locked" in text:
            return self.fail(f"in use: another process held it for over {_BUSY_SECONDS:.0f} s ({text})",
                             f"wait for that process to finish, or {self.layout.way_out}")
        if "readonly" in text or "unable to open" in text or name in {"SQLITE_PERM", "SQLITE_CANTOPEN"}:
            return self.fail(f"cannot be opened for reading and writing ({text})",
                             f"check the permissions of the file and its folder, or {self.layout.way_out}")
        return self.fail(f"cannot be used ({text})")

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise self.fail("closed", "open it again")
        return self._db

    # -- reads and writes --------------------------------------------------------------
    def get_many(self, keys: Sequence[str]) -> dict[str, object]:
        """The stored values of those ``keys`` that are in the file, as stored: one query
        (the keys passed as one JSON array), or one per ``_CHUNK`` keys where SQLite lacks
        ``json_each``."""
        found: dict[str, object] = {}
        if not keys:
            return found
        select = f"SELECT key, {self.layout.column} FROM {self.layout.table} WHERE key IN"
        with self._lock:
            db = self._conn()
            try:
                if self._json:
                    try:
                        found.update(db.execute(f"{select} (SELECT value FROM json_each(?))", (json.dumps(keys),)))
                        return found
                    except sqlite3.OperationalError as exc:
                        if "json_each" not in str(exc):
                            raise
                        self._json = False  # an SQLite built without JSON1
                for i in range(0, len(keys), _CHUNK):
                    chunk = list(keys[i:i + _CHUNK])
                    found.update(db.execute(f"{select} ({','.join('?' * len(chunk))})", chunk))
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None
        return found

    def get(self, key: str) -> object | None:
        """The stored value of ``key``, as stored, or None."""
        with self._lock:
            try:
                row = self._conn().execute(f"SELECT {self.layout.column} FROM {self.layout.table} WHERE key = ?",
                                           (key,)).fetchone()
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None
        return None if row is None else row[0]

    def put_many(self, rows: Iterable[tuple[str, str | bytes]]) -> None:
        """Store ``(key, value)`` rows in one transaction, replacing what the keys held."""
        rows = list(rows)
        if not rows:
            return
        with self._lock:
            db = self._conn()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(f"INSERT OR REPLACE INTO {self.layout.table} (key, {self.layout.column}) "
                                   "VALUES (?, ?)", rows)
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None

    def __len__(self) -> int:
        with self._lock:
            try:
                return int(self._conn().execute(f"SELECT COUNT(*) FROM {self.layout.table}").fetchone()[0])
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc) from None

    def close(self) -> None:
        """Close the file (its journal is folded back in when the last process closes it)."""
        with self._lock:
            if self._db is not None:
                db, self._db = self._db, None
                try:
                    db.close()
                except sqlite3.Error:
                    pass
                finally:
                    with _OPEN_LOCK:
                        if self._key is not None and _OPEN.get(self._key, 0) > 1:
                            _OPEN[self._key] -= 1
                        elif self._key is not None:
                            _OPEN.pop(self._key, None)
                        self._key = None
