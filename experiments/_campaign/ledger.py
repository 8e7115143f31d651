"""The campaign ledger: every finished replay, committed durably soon after it is done.

A SQLite database in the run folder (WAL journal, ``synchronous=FULL``): one row per job
id holding the job's replay result (the perturbed trace as its difference from its
baseline trace, :mod:`.stored`; the target report, the LLM calls and retries; or the
error of a replay that failed), redacted, its JSON text compressed where that pays,
with a CRC-32 of what is stored and whether the replay failed. Finished replays are committed in batches, one
transaction each: a campaign killed at any instant (SIGKILL included) loses at most the
replays still in flight or waiting for their batch; ``quiver run SPEC --resume`` reads
the ledger, skips every job it holds and runs the rest, so no replay is lost and none is
run twice. The job id is the primary key: a second write of the same job is ignored,
never duplicated. ``--retry-failed`` removes the rows of failed replays first
(:meth:`Ledger.forget`), so exactly those run again.

Beside the replays the ledger keeps what each perturbation's replays were made with
(:mod:`quiver.experiments._campaign.identity`), so that a resume never reuses replays
of a perturbation whose parameters, files or code have changed since; and every round an
adaptive ladder decided (:mod:`quiver._interventional.dose`), written before the round's
replays run, so that a resumed or distributed campaign takes the same rounds.

Every read and write goes through one layer that turns what SQLite, the JSON decoder or
a row without its keys raise into :class:`LedgerError`: a damaged ledger (truncated,
bytes flipped, header overwritten, a row that is not a replay) is one line naming the
file and the way out, never a traceback. Opening a ledger checks it whole
(``PRAGMA quick_check`` and every row's CRC), so a damaged one is refused before any
work starts.

Pair rows (distances, strata, divergence indicators) are not stored: they are a pure
function of the baseline, the replay and the embedding model, computed from the ledger
block by block, in job order, as the blocks fill (see
:mod:`quiver.experiments._campaign.results`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from quiver._errors import OutputError, QuiverError
from quiver._outdir import WRITE_ERRNOS, check_database, make_folder, write_error

from .stored import unpack_text

__all__ = ["Ledger", "LedgerError", "LedgerRow", "Ref", "REPLAY_KEYS", "replay_failed"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS replays (
    job_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL,
    failed INTEGER,
    crc INTEGER
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS identities (perturbation TEXT PRIMARY KEY, identity TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    perturbation TEXT NOT NULL,
    round INTEGER NOT NULL,
    plan TEXT NOT NULL,
    crc INTEGER NOT NULL,
    PRIMARY KEY (perturbation, round)
);
"""

_ADDED_COLUMNS = (("failed", "INTEGER"), ("crc", "INTEGER"), ("facts", "TEXT"), ("place", "INTEGER"),
                  ("line_at", "INTEGER"), ("line_len", "INTEGER"), ("line_crc", "INTEGER"),
                  ("pair_at", "INTEGER"), ("pair_len", "INTEGER"), ("pair_crc", "INTEGER"))
"""Columns a ledger written before they existed gets on opening (NULL in its old rows:
those rows are read without a CRC check, and parsed to tell whether they failed; a row
without ``place`` holds its replay whole, or as its difference from its baseline)."""

REPLAY_KEYS = ("trace", "perturbation_id", "repeat", "divergences", "llm_calls", "served_calls", "seconds")
"""What a ledger row of a replay that ran holds (a failed one holds ``error``); a row
stored as a difference from its baseline holds ``trace_delta`` in place of ``trace``; a
row whose replay is a line of ``replays.jsonl`` (see :class:`LedgerRow`) holds
``trace_status`` in its place."""


class LedgerRow(NamedTuple):
    """One replay as the ledger keeps it: the row (the replay's result without its
    trace, JSON text compressed where that pays, and its CRC-32), what the campaign
    counts of it (``facts``, JSON), and where its line of ``replays.jsonl`` and its row
    of ``pairs.jsonl`` are: in which of the files (``place``:
    :mod:`~quiver.experiments._campaign.journal`), at which byte, how long, their CRC-32
    (no line for a failed replay)."""

    job_id: str
    seq: int
    data: str | bytes
    failed: bool
    crc: int
    facts: str | None
    place: int
    line_at: int | None
    line_len: int | None
    line_crc: int | None
    pair_at: int
    pair_len: int
    pair_crc: int


class Ref(NamedTuple):
    """Where a committed replay's line and pair row are (see :class:`LedgerRow`)."""

    job_id: str
    seq: int
    failed: bool
    facts: str | None
    place: int
    line_at: int | None
    line_len: int | None
    line_crc: int | None
    pair_at: int
    pair_len: int
    pair_crc: int

_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""

_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_FORMAT", "SQLITE_MISMATCH", "SQLITE_RANGE"}
_REFUSED = (("SQLITE_FULL", errno.ENOSPC), ("SQLITE_READONLY", errno.EROFS), ("SQLITE_IOERR", errno.EIO),
            ("SQLITE_CANTOPEN", errno.EACCES))
"""SQLite's errors (extended codes included) that are the disk refusing a write, as the
system's error numbers."""
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}


class LedgerError(QuiverError):
    """A campaign ledger that cannot be read or written: damaged (truncated, bytes
    flipped, header overwritten, a row that is not a replay), or in use by another run
    (a disk that refuses a write is an :class:`~quiver._errors.OutputError`). The message
    names the file and the way out.

    Attributes:
        path: The ledger file.
        reason: What was wrong.
    """

    def __init__(self, path: Path, reason: str, way_out: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"campaign ledger {path}: {reason}; {way_out}")


def replay_failed(data: dict[str, Any]) -> bool:
    """Whether a ledger row is a failed replay: the replay could not run (``error``), or
    the pipeline failed in it (its trace's status is not ``ok``)."""
    if "error" in data:
        return True
    if "trace_delta" in data:  # stored as a difference from its baseline: the status kept beside it
        return bool(data.get("trace_status", "ok") != "ok")
    trace = data.get("trace")
    return isinstance(trace, dict) and trace.get("status", "ok") != "ok"


def _first_line(text: object, limit: int = 200) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else type(text).__name__
    return line if len(line) <= limit else line[:limit] + "..."


class Ledger:
    """Durable storage of finished replays, keyed by job id.

    Args:
        path: The database file (created with its folder if missing).
        resume: The command that resumes the campaign, named in error messages.

    Raises:
        LedgerError: The file is damaged, is not a ledger, is a ledger of an older
            layout (a ``pairs`` table), is in use by another run, or cannot be opened.
    """

    def __init__(self, path: str | Path, *, resume: str = "quiver run SPEC --resume") -> None:
        self.path = Path(path)
        self.resume = resume
        make_folder(self.path.parent)
        check_database(self.path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            with self._guard():
                self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
                self._open()
        except BaseException:
            self.close()
            raise

    # -- the layer every read and write goes through -------------------------------
    @contextlib.contextmanager
    def _guard(self, job_id: str | None = None) -> Iterator[None]:
        """Turn what SQLite, the JSON decoder or a row without its keys raise into one
        :class:`LedgerError` (``job_id``: the row being read, named in the message); a
        disk that refuses a write (full, read-only, failing) into an
        :class:`~quiver._errors.OutputError`, which the command completes with the way out."""
        where = f"the row of job {job_id!r}: " if job_id is not None else ""
        try:
            yield
        except LedgerError:
            raise
        except sqlite3.Error as exc:
            raise self._sqlite_error(exc, where) from None
        except OSError as exc:
            if exc.errno in WRITE_ERRNOS:
                raise write_error(exc, self.path) from None
            raise LedgerError(self.path, f"cannot be opened ({exc.strerror or type(exc).__name__})",
                              "check the path and its permissions, then resume") from None
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, zlib.error) as exc:
            # bad JSON, bad UTF-8, a row without its keys or of the wrong shape
            raise self.damaged(f"{where}{type(exc).__name__}: {_first_line(exc)}") from None

    def damaged(self, reason: str) -> LedgerError:
        """The error of a damaged ledger: what was found, and the way out."""
        return LedgerError(
            self.path, f"damaged ({reason})",
            f"move it aside (mv {shlex.quote(str(self.path))} {shlex.quote(str(self.path) + '.damaged')}) and run "
            f"`{self.resume}`: "
            "the replays it held are run again",
        )

    def _sqlite_error(self, exc: sqlite3.Error, where: str) -> QuiverError:
        name = getattr(exc, "sqlite_errorname", "")
        reason = f"{where}{_first_line(exc)}"
        refused = next((code for prefix, code in _REFUSED if name.startswith(prefix)), None)
        if refused is not None:  # the disk's refusal: the command says what it kept and the way out
            return OutputError(f"cannot write {self.path}: {os.strerror(refused)} (SQLite: {reason})",
                               path=str(self.path), errno=refused)
        if name in _BUSY or "locked" in reason:
            return LedgerError(self.path, f"in use ({reason})",
                               "another `quiver run` is writing to this folder: wait for it, or use another "
                               "output folder")
        if type(exc) is sqlite3.DatabaseError or name in _DAMAGED or "malformed" in reason \
                or "not a database" in reason:
            return self.damaged(reason)
        return LedgerError(self.path, f"cannot be read or written ({reason})",
                           "check the disk and the folder's permissions, then resume")

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise LedgerError(self.path, "is closed", "open it again")
        return self._db

    def _open(self) -> None:
        size = self.path.stat().st_size if self.path.exists() else 0
        if size:  # an empty file is a ledger whose first write was cut short: it holds nothing yet
            with self.path.open("rb") as fh:
                if fh.read(len(_MAGIC)) != _MAGIC:
                    raise self.damaged("its header is not a SQLite database's: overwritten, or cut short")
        db = self._conn()
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "pairs" in tables and "replays" not in tables:
            raise LedgerError(self.path, "a ledger of an older layout (pair rows, not replays)",
                              "run the campaign into a new output folder")
        db.executescript(_SCHEMA)
        columns = {r[1] for r in db.execute("PRAGMA table_info(replays)")}
        for name, kind in _ADDED_COLUMNS:
            if name not in columns:
                db.execute(f"ALTER TABLE replays ADD COLUMN {name} {kind}")
        self._check()

    def _check(self) -> None:
        """The whole file: SQLite's own structural check, then every row's CRC."""
        db = self._conn()
        found = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
        if found != ["ok"]:
            raise self.damaged("; ".join(_first_line(f) for f in found))
        for job_id, raw, crc in db.execute("SELECT job_id, CAST(data AS BLOB), crc FROM replays"):
            if crc is not None and zlib.crc32(raw) != crc:
                raise self.damaged(f"the row of job {job_id!r} does not match its checksum")

    def _decode(self, job_id: str, raw: bytes) -> dict[str, Any]:
        """A row's replay, checked: a JSON object with a replay's keys, or an error."""
        with self._guard(job_id):
            data = json.loads(unpack_text(raw).decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
            if "error" in data:
                if not isinstance(data["error"], str):
                    raise ValueError("its 'error' is not a string")
                return data
            trace = "trace_delta" if "trace_delta" in data else "trace" if "trace" in data else "trace_status"
            missing = [k for k in REPLAY_KEYS if k not in data and not (k == "trace" and trace != k)]
            if missing:
                raise ValueError(f"no {', '.join(map(repr, missing))} key")
            if trace != "trace_status" and not isinstance(data[trace], dict):
                raise ValueError(f"its {trace!r} is not an object")
            return data

    @contextlib.contextmanager
    def reading(self, job_id: str) -> Iterator[None]:
        """For callers that turn a row into objects: what they raise on a row that is
        not a replay becomes the one :class:`LedgerError`."""
        with self._guard(job_id):
            yield

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock, self._guard():
            return list(self._conn().execute(sql, args))

    # -- reads ---------------------------------------------------------------------
    def done(self) -> set[str]:
        """The job ids already committed."""
        return {r[0] for r in self._query("SELECT job_id FROM replays")}

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM replays")[0][0])

    def failed(self) -> list[str]:
        """The job ids whose replay failed (see :func:`replay_failed`), in job order."""
        found = self._query("SELECT job_id FROM replays WHERE failed = 1 ORDER BY seq")
        legacy = self._query("SELECT job_id, CAST(data AS BLOB) FROM replays WHERE failed IS NULL ORDER BY seq")
        old = [job_id for job_id, raw in legacy if replay_failed(self._decode(job_id, raw))]
        if not old:
            return [r[0] for r in found]
        order = {r[0]: r[1] for r in self._query("SELECT job_id, seq FROM replays")}
        return sorted([r[0] for r in found] + old, key=order.__getitem__)

    def replays(self, chunk: int = 256) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every committed ``(job_id, data)``, in job order, read ``chunk`` rows at a time."""
        last = -1
        while True:
            found = self._query(
                "SELECT seq, job_id, CAST(data AS BLOB) FROM replays WHERE seq > ? ORDER BY seq LIMIT ?", (last, chunk)
            )
            if not found:
                return
            for _seq, job_id, raw in found:
                yield job_id, self._decode(job_id, raw)
            last = found[-1][0]

    def replays_between(self, first: int, last: int) -> list[tuple[str, dict[str, Any]]]:
        """The committed ``(job_id, data)`` whose seq is in ``[first, last]``, in job order."""
        found = self._query(
            "SELECT job_id, CAST(data AS BLOB) FROM replays WHERE seq BETWEEN ? AND ? ORDER BY seq", (first, last)
        )
        return [(job_id, self._decode(job_id, raw)) for job_id, raw in found]

    def refs(self, place: int | None = None) -> list[Ref]:
        """Where every committed replay's line and pair row are (those in ``place``
        only, when given), in job order; rows without (an older layout) are left out."""
        where = "place IS NOT NULL" if place is None else "place = ?"
        found = self._query("SELECT job_id, seq, failed, facts, place, line_at, line_len, line_crc, pair_at, pair_len, "
                            f"pair_crc FROM replays WHERE {where} ORDER BY seq", () if place is None else (place,))
        return [Ref(str(r[0]), int(r[1]), bool(r[2]), r[3], *r[4:]) for r in found]

    def unplaced(self) -> list[str]:
        """The job ids of rows of an older layout (no line nor pair row in files)."""
        return [r[0] for r in self._query("SELECT job_id FROM replays WHERE place IS NULL ORDER BY seq")]

    def check_rows(self) -> None:
        """Read every row (each must be a replay's, see :meth:`_decode`), in one pass: a
        damaged one is found now, not when the results are written."""
        for job_id, raw in self._query("SELECT job_id, CAST(data AS BLOB) FROM replays"):
            self._decode(job_id, raw)

    def get_meta(self, key: str) -> str | None:
        found = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(found[0][0]) if found else None

    def identities(self) -> dict[str, dict[str, Any]]:
        """What each perturbation's replays were made with (perturbation id -> identity)."""
        out: dict[str, dict[str, Any]] = {}
        for perturbation, text in self._query("SELECT perturbation, identity FROM identities"):
            with self._guard():
                value = json.loads(text)
                if not isinstance(value, dict):
                    raise ValueError(f"the identity of {perturbation!r} is not a JSON object")
            out[str(perturbation)] = value
        return out

    def rounds(self) -> dict[str, list[dict[str, Any]]]:
        """The rounds of adaptive searches decided so far: perturbation id -> its plans
        (JSON objects), in round order from round 1 (round 0 follows from the spec)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for perturbation, round_, text, crc in self._query(
                "SELECT perturbation, round, CAST(plan AS BLOB), crc FROM rounds ORDER BY perturbation, round"):
            where = f"round {round_} of {perturbation!r}"
            if zlib.crc32(text) != crc:
                raise self.damaged(f"the {where} does not match its checksum")
            with self._guard():
                plan = json.loads(text.decode("utf-8"))
                if not isinstance(plan, dict) or plan.get("round") != round_:
                    raise ValueError(f"the {where} is not a round's plan")
            plans = out.setdefault(str(perturbation), [])
            if round_ != len(plans) + 1:
                raise self.damaged(f"the rounds of {perturbation!r} skip from {len(plans)} to {round_}")
            plans.append(plan)
        return out

    # -- writes --------------------------------------------------------------------
    def add_rounds(self, items: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Record the next round of adaptive searches, ``(perturbation id, plan)`` each, in
        one transaction, before any of its replays runs: a resumed campaign takes the same
        rounds instead of deciding them again."""
        rows = []
        for perturbation, plan in items:
            raw = json.dumps(plan, sort_keys=True).encode("utf-8")
            rows.append((perturbation, int(plan["round"]), raw.decode("utf-8"), zlib.crc32(raw)))
        self._changes("INSERT INTO rounds (perturbation, round, plan, crc) VALUES (?, ?, ?, ?)", rows)

    def commit(self, rows: Sequence[LedgerRow]) -> int:
        """Write finished replays in one transaction (their lines and pair rows are in
        their files already).

        Returns:
            How many were new (a job already in the ledger is left as it is).
        """
        if not rows:
            return 0
        return self._changes(
            "INSERT OR IGNORE INTO replays (job_id, seq, data, failed, crc, facts, place, line_at, line_len, line_crc, "
            "pair_at, pair_len, pair_crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(*row[:3], int(row.failed), *row[4:]) for row in rows],
        )

    def move(self, places: Sequence[tuple[int, int | None, int | None, int, int, str]]) -> int:
        """Say in one transaction that rows' lines and pair rows are elsewhere now:
        ``(place, line_at, line_len, pair_at, pair_len, job_id)`` each (their CRCs
        stay: the bytes are the same)."""
        return self._changes("UPDATE replays SET place = ?, line_at = ?, line_len = ?, pair_at = ?, pair_len = ? "
                             "WHERE job_id = ?", places)

    def move_all(self, source: int, target: int) -> int:
        """Every row in place ``source`` is in place ``target`` now (the same bytes)."""
        return self._changes("UPDATE replays SET place = ? WHERE place = ?", [(target, source)])

    def forget(self, job_ids: Iterable[str]) -> int:
        """Remove the rows of ``job_ids`` in one transaction (``--retry-failed``: their
        jobs run again). Returns how many were removed."""
        return self._changes("DELETE FROM replays WHERE job_id = ?", [(job_id,) for job_id in job_ids])

    def _changes(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        """Run ``sql`` once per row in one transaction; the rows it changed."""
        with self._lock, self._guard():
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                before = db.total_changes
                db.executemany(sql, rows)
                changed = db.total_changes - before
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite rolls back itself on some errors (a full disk)
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        return int(changed)

    def set_meta(self, items: Iterable[tuple[str, str]]) -> None:
        with self._lock, self._guard():
            self._conn().executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(items))

    def set_identities(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Record what each perturbation's replays are made with (replacing what was there)."""
        rows = [(pid, json.dumps(identity, sort_keys=True)) for pid, identity in items]
        with self._lock, self._guard():
            self._conn().executemany("INSERT OR REPLACE INTO identities (perturbation, identity) VALUES (?, ?)", rows)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):  # the write-ahead log folded in and emptied: its
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # pages would take the ledger's size again
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None
