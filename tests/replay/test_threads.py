"""``ReusingThreadPool`` (behind ``quiver.ThreadPoolExecutor``): the standard pool's
behaviour, on threads that outlive the pool."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor as StdPool
from pathlib import Path

import pytest

import quiver
from quiver.replay._instrument import ReusingThreadPool


def test_it_is_a_standard_pool_and_quiver_s_pool_is_one() -> None:
    with quiver.ThreadPoolExecutor(max_workers=2) as pool:
        assert isinstance(pool, ReusingThreadPool) and isinstance(pool, StdPool)
        assert list(pool.map(lambda x: x * x, range(20))) == [x * x for x in range(20)]


def test_at_most_max_workers_run_at_once_and_every_item_runs() -> None:
    running = peak = 0
    lock = threading.Lock()

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return i

    with ReusingThreadPool(max_workers=3) as pool:
        futures = [pool.submit(work, i) for i in range(30)]
    assert [f.result() for f in futures] == list(range(30))
    assert peak == 3


def test_exceptions_reach_the_future_and_the_pool_goes_on() -> None:
    def fail() -> None:
        raise ValueError("broken branch")

    with ReusingThreadPool(max_workers=2) as pool:
        bad = pool.submit(fail)
        good = pool.submit(lambda: "fine")
    with pytest.raises(ValueError, match="broken branch"):
        bad.result()
    assert good.result() == "fine"


def test_threads_are_reused_across_pools() -> None:
    def ident() -> int:
        return threading.get_ident()

    seen: set[int] = set()
    for _ in range(20):
        with ReusingThreadPool(max_workers=2, thread_name_prefix="branch") as pool:
            seen.update(f.result() for f in [pool.submit(ident) for _ in range(2)])
    assert len(seen) <= 4, f"20 pools of 2 ran on {len(seen)} threads"


def test_a_thread_is_named_after_the_pool_while_it_runs_its_work() -> None:
    with ReusingThreadPool(max_workers=1, thread_name_prefix="fanout") as pool:
        name = pool.submit(lambda: threading.current_thread().name).result()
    assert name.startswith("fanout_")


def test_shutdown_refuses_new_work_and_can_cancel_what_waits() -> None:
    gate, started = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(5)

    pool = ReusingThreadPool(max_workers=1)
    first = pool.submit(hold)
    assert started.wait(5)
    waiting = [pool.submit(lambda: None) for _ in range(3)]
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    gate.set()
    assert first.result(timeout=5) is True
    assert all(f.cancelled() for f in waiting)
    pool.shutdown(wait=True)


def test_shutdown_waits_for_running_work() -> None:
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        done.set()

    pool = ReusingThreadPool(max_workers=1)
    pool.submit(slow)
    pool.shutdown(wait=True)
    assert done.is_set()


def test_a_pool_with_an_initializer_runs_it_on_its_own_threads() -> None:
    local = threading.local()

    def init(value: str) -> None:
        local.value = value

    with ReusingThreadPool(max_workers=2, initializer=init, initargs=("set",)) as pool:
        values = [f.result() for f in [pool.submit(lambda: getattr(local, "value", None)) for _ in range(4)]]
    assert values == ["set"] * 4


def test_work_still_running_at_interpreter_exit_is_waited_for(tmp_path: Path) -> None:
    """The standard pool lets running work finish when the main thread ends; so does this
    one, although its threads are daemon threads."""
    out = tmp_path / "finished.txt"
    script = textwrap.dedent(f"""
        import time
        from quiver.replay._instrument import ReusingThreadPool

        def slow():
            time.sleep(0.5)
            open({str(out)!r}, "w").write("done")

        ReusingThreadPool(max_workers=1).submit(slow)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert out.read_text() == "done"
