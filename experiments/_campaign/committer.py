"""Finished replays committed to a campaign's ledger in batches, off the executor's loop."""

from __future__ import annotations

import json
import queue
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from quiver._errors import QuiverError
from quiver.replay import ReplayJob

from .finish import Finisher, is_package
from .journal import JOURNAL, Journals
from .ledger import Ledger, LedgerRow

__all__ = ["LedgerCommitter"]


class LedgerCommitter(threading.Thread):
    """Commits finished replays in batches, off the executor's loop.

    The executor hands a finished replay to :meth:`put` and goes straight back to
    submitting work. What arrives is, from the campaign's own workers, a replay finished
    where it ran (:mod:`.finish`: redacted, stored as a difference, compressed, paired);
    this thread only checks it (its row's CRC) and commits it: its line and pair row
    appended to the journals and synced, then its row written to the ledger in one
    transaction (:mod:`.journal`), and reports each to ``on_committed`` with what the
    campaign counts of it. A raw replay result (from an executor that does not finish
    its replays) is finished here first, by the same ``finish``. An error here stops
    the campaign (``failed``) and is raised again by :meth:`close`.
    """

    def __init__(self, ledger: Ledger, journals: Journals, jobs: Mapping[str, ReplayJob], finish: Finisher,
                 on_committed: Callable[[str, dict[str, Any]], None], max_batch: int = 512,
                 gather_s: float = 0.05) -> None:
        super().__init__(name="quiver-ledger", daemon=True)
        self.ledger, self.journals, self.jobs, self.finish = ledger, journals, jobs, finish
        self.on_committed, self.max_batch, self.gather_s = on_committed, max_batch, gather_s
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self.error: BaseException | None = None
        self.seconds = 0.0
        """Time spent committing (checks, files, ledger), for the benchmarks."""

    def put(self, job_id: str, data: dict[str, Any]) -> None:
        self.queue.put((job_id, data))

    @property
    def failed(self) -> bool:
        return self.error is not None

    def run(self) -> None:
        stop = False
        while not stop:
            batch = [self.queue.get()]
            # gather what finishes in the next moment too, then what is already there:
            # fewer, larger transactions (a kill loses at most this much finished work,
            # which a resume runs again); None, the last item ever put, ends the thread
            deadline = time.monotonic() + self.gather_s
            while batch[-1] is not None and len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            stop = batch[-1] is None
            if self.error is not None:
                continue  # drain until the end; close() reports the error
            try:
                self._commit([b for b in batch if b is not None])
            except BaseException as exc:  # reported by close()
                self.error = exc

    def _commit(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        start = time.perf_counter()
        packages = [(job_id, data if is_package(data) else self.finish(self.jobs[job_id], data))
                    for job_id, data in batch]
        for job_id, p in packages:
            raw = p["row"] if isinstance(p["row"], bytes) else p["row"].encode("utf-8")
            if zlib.crc32(raw) != p["crc"]:
                raise QuiverError(f"the replay of job {job_id!r} came back from its worker damaged (its row does not "
                                  "match its checksum); resume the campaign to run it again")
        written = self.journals.append([(p["line"], p["pair"]) for _, p in packages])
        self.ledger.commit([
            LedgerRow(job_id, self.jobs[job_id].seq, p["row"], bool(p["failed"]), int(p["crc"]),
                      json.dumps(p["facts"], sort_keys=True, separators=(",", ":")), JOURNAL, *where)
            for (job_id, p), where in zip(packages, written, strict=True)
        ])
        self.seconds += time.perf_counter() - start
        for job_id, p in packages:
            self.on_committed(job_id, p["facts"])

    def close(self) -> None:
        self.queue.put(None)
        self.join()
        if isinstance(self.error, QuiverError):
            raise self.error
        if self.error is not None:
            raise QuiverError(f"the campaign ledger could not be written: {self.error}") from self.error
