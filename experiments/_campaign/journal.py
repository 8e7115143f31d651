"""Where a campaign keeps each replay once: its line of ``replays.jsonl`` and its row of
``pairs.jsonl``, in files the ledger points into.

The ledger row of a replay holds its result without its trace (small) and, for its line
and its pair row, which files hold them (the row's *place*), at which byte, how long and
their CRC-32 (:class:`~.ledger.LedgerRow`). The bytes of a replay are stored once: in
these files, never again in the ledger.

* Place 0, the journals (``replays.jsonl.journal``, ``pairs.jsonl.journal``): while the
  replays run, each batch of finished replays is appended to them in the order the
  replays finished and synced to disk, then committed to the ledger. A kill between the
  two leaves bytes past the last committed one: they are cut when the campaign resumes.
* Place 1, the final files (``replays.jsonl``, ``pairs.jsonl``), in job order, written
  when the campaign finishes (:meth:`Journals.finish`): first as place 2
  (``*.next``), synced; the ledger then points there (one transaction); the files are
  renamed into place and the ledger says place 1 (one statement); the journals go. A
  kill at any point leaves every row pointing at bytes that are there: a resume that finds
  rows in place 2 and no ``*.next`` files (renamed already) moves them to place 1.

A resume checks every row's bytes against its CRC (:meth:`Journals.open`): a row whose
line or pair row is missing or changed (a final file cut or deleted by hand) is taken
out of the ledger, with one warning, and its replay runs again: the same replay, as its
sample keys are fixed.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from quiver._outdir import OutputFile, open_output, replace

from .ledger import Ledger, Ref

__all__ = ["Journals", "FILES", "JOURNAL", "FINAL", "NEXT"]

log = logging.getLogger("quiver.campaign")

JOURNAL, FINAL, NEXT = 0, 1, 2
FILES = {
    JOURNAL: ("replays.jsonl.journal", "pairs.jsonl.journal"),
    FINAL: ("replays.jsonl", "pairs.jsonl"),
    NEXT: ("replays.jsonl.next", "pairs.jsonl.next"),
}
"""The files of each place: (replays' lines, pair rows)."""

Written = tuple[int | None, int | None, int | None, int, int, int]
"""Where one replay's line and pair row were written: (line_at, line_len, line_crc,
pair_at, pair_len, pair_crc)."""


class Journals:
    """The files of a campaign's folder ``out`` that its ledger points into (see the
    module docstring).

    Args:
        out: The campaign's output folder.
        ledger: Its ledger.
    """

    def __init__(self, out: Path, ledger: Ledger) -> None:
        self.out, self.ledger = out, ledger
        self._writers: tuple[OutputFile, OutputFile] | None = None
        self._ends = [0, 0]

    def path(self, place: int, which: int) -> Path:
        return self.out / FILES[place][which]

    # -- opening: the files as the ledger knows them ---------------------------------
    def open(self) -> int:
        """Make the files agree with the ledger (see the module docstring) and open the
        journals for appending. Returns how many rows were taken out (their replays run
        again)."""
        refs = self.ledger.refs()
        if any(r.place == NEXT for r in refs) and not self.path(NEXT, 0).exists() \
                and self.path(FINAL, 0).exists():
            self.ledger.move_all(NEXT, FINAL)  # renamed into place, the ledger not told yet
            refs = self.ledger.refs()
        with _Reader(self) as reader:
            bad = [r.job_id for r in refs if not self._intact(r, reader)]
        if bad:
            self.ledger.forget(bad)
            log.warning("%s: %d replay(s) whose line of replays.jsonl or row of pairs.jsonl is missing or changed "
                        "(a result file cut or removed) are run again", self.out, len(bad))
            refs = self.ledger.refs()
        ends = [0, 0]
        for r in refs:
            if r.place == JOURNAL:
                if r.line_at is not None and r.line_len is not None:
                    ends[0] = max(ends[0], r.line_at + r.line_len)
                ends[1] = max(ends[1], r.pair_at + r.pair_len)
        for which in (0, 1):  # bytes past the last committed row: a kill between sync and commit
            path = self.path(JOURNAL, which)
            if path.exists() and path.stat().st_size != ends[which]:
                with open_output(path, append=True) as fh:
                    os.truncate(fh.name, ends[which])
        if not any(r.place == NEXT for r in refs):
            for which in (0, 1):
                self.path(NEXT, which).unlink(missing_ok=True)
        for name in FILES[FINAL]:  # what a kill left of a final file written whole (write_text) or of an
            (self.out / f"{name}.tmp").unlink(missing_ok=True)  # earlier version's pairing: never read
        self._ends = ends
        self._writers = (open_output(self.path(JOURNAL, 0), append=True),
                         open_output(self.path(JOURNAL, 1), append=True))
        return len(bad)

    def _intact(self, ref: Ref, reader: _Reader) -> bool:
        """Whether the bytes ``ref`` points at are there, unchanged."""
        pair = reader.read(ref.place, 1, ref.pair_at, ref.pair_len)
        if pair is None or zlib.crc32(pair) != ref.pair_crc:
            return False
        if ref.line_at is None or ref.line_len is None:
            return True
        line = reader.read(ref.place, 0, ref.line_at, ref.line_len)
        return line is not None and zlib.crc32(line) == ref.line_crc

    # -- while the replays run -------------------------------------------------------
    def append(self, items: Sequence[tuple[str | None, str]]) -> list[Written]:
        """Append ``(line, pair row)`` of each replay (no line for a failed one) to the
        journals and sync them; where each went."""
        if self._writers is None:
            raise RuntimeError("the journals are not open")
        lines, pairs = self._writers
        out: list[Written] = []
        for line, pair in items:
            line_at = line_len = line_crc = None
            if line is not None:
                raw = line.encode("utf-8")
                line_at, line_len, line_crc = self._ends[0], len(raw), zlib.crc32(raw)
                lines.write(raw)
                self._ends[0] += len(raw)
            raw = (pair + "\n").encode("utf-8")
            out.append((line_at, line_len, line_crc, self._ends[1], len(raw), zlib.crc32(raw)))
            pairs.write(raw)
            self._ends[1] += len(raw)
        lines.sync()
        pairs.sync()
        return out

    def close(self) -> None:
        if self._writers is not None:
            for writer in self._writers:
                writer.close()
            self._writers = None

    # -- reading back ----------------------------------------------------------------
    def pair_rows(self, refs: Sequence[Ref]) -> Iterator[str]:
        """The pair rows ``refs`` point at, in their order (their text, without the newline)."""
        with _Reader(self) as reader:
            for ref in refs:
                raw = reader.read(ref.place, 1, ref.pair_at, ref.pair_len)
                if raw is None:
                    raise OSError(f"{self.path(ref.place, 1)} ends before the row of job {ref.job_id!r}")
                yield raw.decode("utf-8").rstrip("\n")

    def line(self, ref: Ref) -> str | None:
        """The line of ``replays.jsonl`` ``ref`` points at (None for a failed replay)."""
        if ref.line_at is None or ref.line_len is None:
            return None
        with _Reader(self) as reader:
            raw = reader.read(ref.place, 0, ref.line_at, ref.line_len)
        return raw.decode("utf-8") if raw is not None else None

    # -- finishing -------------------------------------------------------------------
    def finish(self) -> None:
        """Write ``replays.jsonl`` and ``pairs.jsonl`` in job order from where the rows
        are now, and point the ledger at them (see the module docstring)."""
        refs = self.ledger.refs()
        moved: list[tuple[int, int | None, int | None, int, int, str]] = []
        ends = [0, 0]
        with open_output(self.path(NEXT, 0)) as lines, open_output(self.path(NEXT, 1)) as pairs, \
                _Reader(self) as reader:
            for ref in refs:
                line_at = line_len = None
                if ref.line_at is not None and ref.line_len is not None:
                    line = reader.read(ref.place, 0, ref.line_at, ref.line_len) or b""
                    lines.write(line)
                    line_at, line_len = ends[0], len(line)
                    ends[0] += len(line)
                pair = reader.read(ref.place, 1, ref.pair_at, ref.pair_len) or b""
                pairs.write(pair)
                moved.append((NEXT, line_at, line_len, ends[1], len(pair), ref.job_id))
                ends[1] += len(pair)
            lines.sync()
            pairs.sync()
        self.ledger.move(moved)
        for which in (0, 1):
            replace(self.path(NEXT, which), self.path(FINAL, which))
        self.ledger.move_all(NEXT, FINAL)
        self.close()
        for which in (0, 1):
            self.path(JOURNAL, which).unlink(missing_ok=True)


class _Reader:
    """The campaign's files open for reading, each once (what was appended flushed first)."""

    def __init__(self, journals: Journals) -> None:
        self.journals = journals
        self._handles: dict[tuple[int, int], BinaryIO | None] = {}
        for writer in journals._writers or ():
            writer.flush()

    def read(self, place: int, which: int, at: int, length: int) -> bytes | None:
        """``length`` bytes at ``at`` of the file, or None when they are not all there."""
        key = (place, which)
        if key not in self._handles:
            try:
                self._handles[key] = self.journals.path(place, which).open("rb")
            except OSError:
                self._handles[key] = None
        fh = self._handles[key]
        if fh is None:
            return None
        fh.seek(at)
        raw = fh.read(length)
        return raw if len(raw) == length else None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fh in self._handles.values():
            if fh is not None:
                fh.close()
