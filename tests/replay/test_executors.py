"""The executors keep the garbage collector quiet while replays run.

``quiet_collector`` moves the objects alive at the start of a run to the collector's
permanent generation (``gc.freeze()``) and raises the young generation's threshold; both
are undone at the end. Runs may nest or overlap, so only the last one to end undoes them.
The local executor holds it for the whole run, including when a replay raises.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from quiver.replay._executors import (
    LocalExecutor,
    ReplayContext,
    ReplayJob,
    base as _executors,
    local as _local,
    quiet_collector,
)


def _context() -> ReplayContext:
    return ReplayContext(pipeline="unused.py:run", base_dir=".", llm={}, mode={}, graph=None, seed=0, run_id="r")


def _job(i: int) -> ReplayJob:
    return ReplayJob(job_id=f"j{i}", seq=i, trace={"trace_id": f"t{i}"}, perturbation_id="p", node="n",
                     occurrence=0, op="", params={}, repeat=0)


def test_quiet_collector_freezes_what_exists_nests_and_always_restores() -> None:
    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    kept = [{"i": i} for i in range(1000)]  # tracked containers alive before the run
    # The frozen count drops when a frozen object is freed (other threads may free some),
    # so the checks count on ``kept``, which stays alive and frozen.
    with quiet_collector():
        assert gc.get_freeze_count() >= len(kept)
        assert gc.get_threshold() == (max(before[0], _executors._YOUNG_THRESHOLD), *before[1:])
        with quiet_collector():  # a second run in the same process
            assert gc.get_freeze_count() >= len(kept)
        assert gc.get_freeze_count() >= len(kept), "the inner run's end must not unfreeze the outer run"
        assert gc.get_threshold()[0] == max(before[0], _executors._YOUNG_THRESHOLD)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    with pytest.raises(RuntimeError, match="boom"), quiet_collector():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


class _Replays:
    """Stands in for the loaded pipeline: records the freeze count each replay sees."""

    def __init__(self, fail: str | None = None) -> None:
        self.seen: list[int] = []
        self.lock = threading.Lock()
        self.fail = fail

    def run(self, job: ReplayJob) -> dict[str, Any]:
        with self.lock:
            self.seen.append(gc.get_freeze_count())
        if job.job_id == self.fail:
            raise RuntimeError(f"replay {job.job_id} broke")
        return {"job": job.job_id}


@pytest.mark.parametrize("fail", [None, "j3"])
def test_the_local_executor_replays_with_the_heap_frozen(monkeypatch: pytest.MonkeyPatch, fail: str | None) -> None:
    replays = _Replays(fail)
    before = gc.get_threshold()
    monkeypatch.setattr(_local, "worker_for", lambda context: replays)
    done: list[str] = []
    jobs = [_job(i) for i in range(12)]

    def run() -> None:
        LocalExecutor(concurrency=4).run(_context(), jobs, lambda job_id, data: done.append(job_id), lambda: False)

    if fail is None:
        run()
        assert sorted(done) == sorted(j.job_id for j in jobs)
    else:
        with pytest.raises(RuntimeError, match="replay j3 broke"):
            run()
    assert replays.seen and all(count > 0 for count in replays.seen)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
