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


class _SlowFinish:
    """Stands in for a worker process's replays: the first job's finishing waits for the
    second job's replay to have begun (or gives up after 20 s)."""

    def __init__(self) -> None:
        self.second_began = threading.Event()
        self.replayed_on: dict[str, str] = {}

    def replay(self, job: ReplayJob) -> tuple[dict[str, Any], bool]:
        self.replayed_on[job.job_id] = threading.current_thread().name
        if job.job_id == "j1":
            self.second_began.set()
        return {"job": job.job_id}, True

    def finish(self, job: ReplayJob, data: dict[str, Any]) -> dict[str, Any]:
        if job.job_id == "j0":
            data["waited_for_the_next_replay"] = self.second_began.wait(20)
        return {**data, "finished": True}


def test_a_worker_process_replays_the_next_job_while_the_last_one_is_finished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One replay thread: job j1's replay begins while j0 is still being finished (the
    finishing does not hold the replay's place), and both reach the driver finished."""
    from multiprocessing import Pipe

    from quiver.replay._executors import processes as _processes

    fake = _SlowFinish()
    monkeypatch.setattr(_executors, "worker_for", lambda context: fake)
    driver, child = Pipe()
    sent: list[tuple[Any, ...]] = []
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            sent.append(message)

    serving = threading.Thread(target=_processes._serve, args=(child, send, 1), daemon=True)
    serving.start()
    driver.send(("context", _context()))
    driver.send(("jobs", [_job(0), _job(1)]))
    deadline = threading.Event()
    for _ in range(300):
        with lock:
            if len(sent) == 2:
                break
        deadline.wait(0.1)
    driver.send(("close",))
    serving.join(30)
    assert not serving.is_alive()
    results = {m[1]: m[2] for m in sent if m[0] == "done"}
    assert set(results) == {"j0", "j1"}, sent
    assert results["j0"] == {"job": "j0", "waited_for_the_next_replay": True, "finished": True}
    assert results["j1"]["finished"] is True
    assert fake.replayed_on["j0"] == fake.replayed_on["j1"] == "quiver-replay-0"  # the one replay thread


def test_a_ray_actors_batch_replays_its_next_job_while_the_last_one_is_finished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run_jobs`` (a Ray actor's call): the batch's jobs are replayed in turn on the
    calling thread, each finished by the process's finishers meanwhile; the results come
    back finished and in order, and a replay that raises is raised once the jobs handed
    on are finished."""
    fake = _SlowFinish()
    monkeypatch.setattr(_executors, "worker_for", lambda context: fake)
    results = _executors.run_jobs(_context(), [_job(0), _job(1)])
    assert results == [("j0", {"job": "j0", "waited_for_the_next_replay": True, "finished": True}),
                       ("j1", {"job": "j1", "finished": True})]
    assert fake.replayed_on["j0"] == fake.replayed_on["j1"] == threading.current_thread().name

    class _Breaks(_SlowFinish):
        def replay(self, job: ReplayJob) -> tuple[dict[str, Any], bool]:
            if job.job_id == "j1":
                raise RuntimeError("replay j1 broke")
            return super().replay(job)

        def finish(self, job: ReplayJob, data: dict[str, Any]) -> dict[str, Any]:
            finished.append(job.job_id)
            return data

    finished: list[str] = []
    monkeypatch.setattr(_executors, "worker_for", lambda context: _Breaks())
    with pytest.raises(RuntimeError, match="replay j1 broke"):
        _executors.run_jobs(_context(), [_job(0), _job(1)])
    assert finished == ["j0"]
