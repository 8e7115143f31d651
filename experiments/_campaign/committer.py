"""Finished replays committed to a campaign's ledger in batches, off the executor's loop."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Redactor

from .ledger import Ledger

__all__ = ["LedgerCommitter"]


class LedgerCommitter(threading.Thread):
    """Commits finished replays to the ledger in batches, off the executor's loop.

    The executor hands a finished replay to :meth:`put` and goes straight back to
    submitting work; this thread redacts whatever has arrived, turns each replay into
    the row stored (``pack``: its trace as a difference from its baseline,
    :mod:`.stored`), writes them in one transaction and then reports each replay, whole,
    to ``on_committed``. An error here stops the campaign (``failed``) and is raised
    again by :meth:`close`.
    """

    def __init__(self, ledger: Ledger, redactor: Redactor, seq: dict[str, int],
                 on_committed: Callable[[str, dict[str, Any]], None], max_batch: int = 512,
                 gather_s: float = 0.05,
                 pack: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None) -> None:
        super().__init__(name="quiver-ledger", daemon=True)
        self.ledger, self.redactor, self.seq, self.pack = ledger, redactor, seq, pack
        self.on_committed, self.max_batch, self.gather_s = on_committed, max_batch, gather_s
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self.error: BaseException | None = None

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
                items = [(job_id, *self.redactor.encode(data)) for job_id, data in (b for b in batch if b is not None)]
                self.ledger.commit([(job_id, self.seq[job_id], data, self._stored(job_id, data, text))
                                    for job_id, data, text in items])
                for job_id, data, _ in items:
                    self.on_committed(job_id, data)
            except BaseException as exc:  # reported by close()
                self.error = exc

    def _stored(self, job_id: str, data: dict[str, Any], text: str) -> str:
        """The text of the row stored for ``job_id`` (``data``, redacted, is its replay)."""
        if self.pack is None:
            return text
        row = self.pack(job_id, data)
        return text if row is data else json.dumps(row, sort_keys=True)

    def close(self) -> None:
        self.queue.put(None)
        self.join()
        if isinstance(self.error, QuiverError):
            raise self.error
        if self.error is not None:
            raise QuiverError(f"the campaign ledger could not be written: {self.error}") from self.error
