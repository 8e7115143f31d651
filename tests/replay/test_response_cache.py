"""The response cache: keyed by (request body, sample key), used when a replay asks."""

from __future__ import annotations

import contextlib
import contextvars
import json
import multiprocessing
import os
import pickle
import shlex
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver import iter_traces
from quiver._canonical import canonical_json
from quiver._errors import QuiverError
from quiver._trace import Redactor
from quiver.perturbations import make_operator
from quiver.replay import (
    InputItem,
    LLMClient,
    ReplayMode,
    ResponseCache,
    Simulator,
    Target,
    TraceBuilder,
    load_pipeline,
    record_corpus,
    replay_trace,
)
from quiver.replay._instrument import current_builder

PIPELINES = Path(__file__).parent.parent / "pipelines"


def _client(simulator: Simulator, cache: ResponseCache) -> LLMClient:
    return LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-test", cache=cache)


def test_cached_replays_ask_nothing_twice_and_repeats_get_their_own_samples(
    simulator: Simulator, llm_client: LLMClient, tmp_path: Path
) -> None:
    fn = load_pipeline(f"{PIPELINES / 'structured.py'}:pipeline")
    module = sys.modules[fn.__module__]
    module.JITTER.seed(0)
    item = InputItem("a4", {"text": "Cannot change billing address anywhere", "rounds": 3})
    recorded = record_corpus(fn, pipeline_name="structured", inputs=[item], repeats=1, output_dir=tmp_path / "rec",
                             llm=llm_client, progress_stream=None)
    trace = next(iter(iter_traces(recorded.traces_path)))
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    operator = make_operator("param_change", {"temperature": 1.5})
    cached = ReplayMode(downstream="cached")

    def run(mode: ReplayMode, repeat: int = 0) -> tuple[int, list[object]]:
        before = simulator.stats()["requests"]
        result = replay_trace(trace, fn, target=Target("draft"), operator=operator, client=client, mode=mode,
                              repeat=repeat)
        assert result.trace.status == "ok", result.trace.error
        return simulator.stats()["requests"] - before, [c.output for c in result.trace.calls]

    first_calls, first = run(cached)
    assert first_calls >= 2 and len(cache) == first_calls
    again_calls, again = run(cached)
    assert again_calls == 0 and again == first  # every live call answered from the cache
    live_calls, live = run(ReplayMode())
    assert live_calls == first_calls and live == first  # live asks again; same key, same answer
    other_calls, _ = run(cached, repeat=1)
    assert other_calls == first_calls  # another repeat, other sample keys: nothing cached
    assert client.stats["cache_hits"] == first_calls
    client.close()
    cache.close()


def test_calls_without_a_sample_key_are_never_cached(simulator: Simulator, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    client.chat(messages=[{"role": "user", "content": "hello"}], model="sim-echo")
    assert len(cache) == 0
    client.close()
    cache.close()


def test_cached_responses_are_redacted(simulator: Simulator, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache", redactor=Redactor())
    client = _client(simulator, cache)
    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0, inputs={},
                           sample_key="k" * 32)

    def ask() -> str:
        current_builder.set(builder)
        return client.chat(messages=[{"role": "user", "content": "write to jane.doe@example.com"}],
                           model="sim-echo").content

    assert "jane.doe@example.com" in contextvars.Context().run(ask)
    assert len(cache) == 1
    client.close()
    cache.close()
    stored = [p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert stored and not any(b"jane.doe@example.com" in data for data in stored)


# --------------------------------------------------------------------------- what the cache file holds


def _rows(folder: Path) -> list[tuple[str, object]]:
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        return list(db.execute("SELECT key, value FROM responses"))


def _plant(folder: Path, value: object) -> int:
    """Write ``value`` into every row of the cache file in ``folder``, in the layout it has
    (the ``diskcache`` layout of earlier versions: mode 4 is a pickle); the rows written."""
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db, db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "Cache" in tables:
            return db.execute("UPDATE Cache SET value = ?, mode = 4", (value,)).rowcount
        return db.execute("UPDATE responses SET value = ?", (value,)).rowcount


class _Planted:
    """Unpickled, it runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def _ask(client: LLMClient, text: str) -> str:
    """One chat call with a sample key (so it is cached), as a recording makes it."""
    builder = TraceBuilder(trace_id="t", run_id="r", pipeline="p", input_id="i", repeat=0, inputs={},
                           sample_key="s" * 32)

    def call() -> str:
        current_builder.set(builder)
        return client.chat(messages=[{"role": "user", "content": text}], model="sim-echo").content

    return contextvars.Context().run(call)


def test_responses_are_stored_as_canonical_json_text(simulator: Simulator, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    _ask(client, "hello")
    client.close()
    cache.close()
    [(key, value)] = _rows(tmp_path / "cache")
    assert isinstance(value, str) and canonical_json(json.loads(value)) == value
    assert json.loads(value)["choices"][0]["message"]["content"]


def test_a_row_that_cannot_be_read_is_fetched_again_and_overwritten(
    simulator: Simulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not JSON, not an object, not a chat completion, not text (a pickle): each refused,
    counted, the call sent to the endpoint again and the row written anew; one warning."""
    marker = tmp_path / "unpickled"
    cache = ResponseCache(tmp_path / "cache")
    client = _client(simulator, cache)
    answer = _ask(client, "hello")
    planted = [pickle.dumps(_Planted(marker)), "not json {", "[1, 2]", '{"id": "x"}', 42]
    for n, value in enumerate(planted, start=1):
        assert _plant(tmp_path / "cache", value) == 1
        before = simulator.stats()["requests"]
        assert _ask(client, "hello") == answer
        assert simulator.stats()["requests"] == before + 1  # fetched again
        assert cache.stats["unreadable"] == n
        [(_, value)] = _rows(tmp_path / "cache")
        assert isinstance(value, str) and json.loads(value)["choices"]  # overwritten
        assert _ask(client, "hello") == answer and simulator.stats()["requests"] == before + 1  # then served
    warned = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "cache" / "cache.db") in warned[0].getMessage()
    assert not marker.exists()
    client.close()
    cache.close()


def _junk(db: Path) -> None:
    db.write_bytes(b"\x00\xffnot a database at all\n" * 200)


def _truncated(db: Path) -> None:
    cache = ResponseCache(db.parent)
    for i in range(200):
        cache.put(cache.key({"messages": [{"role": "user", "content": str(i)}]}, "k"),
                  {"choices": [{"message": {"role": "assistant", "content": "x" * 500}}]})
    cache.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2 // 4096 * 4096])  # whole pages: the header still reads


def _directory(db: Path) -> None:
    db.mkdir()
    (db / "something").write_text("x")


def _newer(db: Path) -> None:
    ResponseCache(db.parent).close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA user_version = 99")


def _diskcache(db: Path) -> None:
    """The folder an earlier version left: diskcache's tables (values pickled)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE Settings (key TEXT NOT NULL UNIQUE, value)")
        conn.execute("CREATE TABLE Cache (rowid INTEGER PRIMARY KEY, key BLOB, raw INTEGER, store_time REAL, "
                     "expire_time REAL, access_time REAL, access_count INTEGER DEFAULT 0, tag BLOB, size INTEGER "
                     "DEFAULT 0, mode INTEGER DEFAULT 0, filename TEXT, value BLOB)")
        conn.commit()


def _other(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
        conn.commit()


UNREADABLE_FILES = {
    "junk bytes": (_junk, "not a response cache (file is not a database)"),
    "truncated": (_truncated, "truncated"),
    "a folder in the way": (_directory, "a folder, not a file"),
    "a newer layout": (_newer, "newer"),
    "an earlier version's diskcache folder": (_diskcache, "pickle"),
    "another database": (_other, "not a response cache"),
}


@pytest.mark.parametrize("case", list(UNREADABLE_FILES))
def test_a_cache_file_that_cannot_be_read_is_refused_in_one_line(case: str, tmp_path: Path) -> None:
    make, reason = UNREADABLE_FILES[case]
    folder = tmp_path / "cache"
    folder.mkdir()
    make(folder / "cache.db")
    with pytest.raises(QuiverError) as err:
        ResponseCache(folder)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{folder / 'cache.db'}: "), message
    assert reason in message and f"delete the folder {folder}" in message, message


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` not writable by this user (for root, which file modes do not stop: immutable)."""
    if os.geteuid() != 0:
        path.chmod(0o555 if path.is_dir() else 0o444)
        undo = [lambda: path.chmod(0o755 if path.is_dir() else 0o644)]
    elif subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0:
        undo = [lambda: subprocess.run(["chattr", "-i", str(path)], check=True)]
    else:
        pytest.skip("running as root where chattr +i does not work: nothing is read-only")
    try:
        yield
    finally:
        undo[0]()


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_cache_this_user_cannot_write_is_refused_in_one_line(where: str, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    ResponseCache(folder).close()
    with _read_only(folder / "cache.db" if where == "file" else folder), pytest.raises(QuiverError) as err:
        ResponseCache(folder)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{folder / 'cache.db'}: permission denied"), message
    assert "give this user read and write access" in message, message


def test_a_file_where_the_cache_folder_should_be_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("x")
    with pytest.raises(QuiverError) as err:
        ResponseCache(tmp_path / "cache")
    assert "\n" not in str(err.value) and str(tmp_path / "cache") in str(err.value), err.value
    assert "a file, not a folder" in str(err.value), err.value


def _write(folder: Path, name: str) -> None:
    """Two threads writing 150 responses each to ``folder``, reading each back."""
    cache = ResponseCache(folder)

    def write(thread: int) -> None:
        for i in range(150):
            text = f"{name}-{thread}-{i}"
            key = cache.key({"messages": [{"role": "user", "content": text}]}, "k")
            cache.put(key, {"choices": [{"message": {"role": "assistant", "content": text}}]})
            if cache.get(key) is None:
                raise SystemExit(f"{text} was not read back")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cache.close()


def test_processes_and_threads_share_one_cache_folder(tmp_path: Path) -> None:
    """Three processes of two threads each write and read the same folder at once (as Ray
    workers and local replay threads do): every response is there, readable, once."""
    folder = tmp_path / "cache"
    fork = multiprocessing.get_context("fork")  # the children start with the modules imported
    procs = [fork.Process(target=_write, args=(folder, f"p{n}")) for n in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    cache = ResponseCache(folder)
    assert len(cache) == 3 * 2 * 150
    cache.close()
    rows = _rows(folder)
    assert len({key for key, _ in rows}) == len(rows) == 900
    assert sorted(_completion_text(value) for _, value in rows) == sorted(
        f"p{n}-{t}-{i}" for n in range(3) for t in range(2) for i in range(150))


def _completion_text(value: object) -> str:
    assert isinstance(value, str)
    return str(json.loads(value)["choices"][0]["message"]["content"])


# --------------------------------------------------------------------------- quiver run, as a user runs it

QUICKSTART = Path(__file__).parents[2] / "experiments" / "quickstart"

CAMPAIGN = """\
pipeline: {quickstart}/pipeline.py:run
llm:
  simulator: {{models: [{quickstart}/sim_models.py], nondeterminism: 0.05}}
  model: quickstart-classify
  params: {{temperature: 0.7}}
{source}
perturbations:
  - {{id: hot, node: classify, op: param_change, params: {{temperature: 1.5}}}}
replay: {{repeats: 1, controls: 1, downstream: cached}}
executor: {{kind: local, concurrency: 2}}
analysis: {{resamples: 100, permutations: 100}}
output: {output}
"""


def _quiver(*argv: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("quiver")
    command = [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three quickstart tickets recorded twice, one perturbation and its control (12
    replays), downstream served from the run's response cache: run once, uninterrupted."""
    root = tmp_path_factory.mktemp("cached-campaign")
    lines = (QUICKSTART / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (root / "inputs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = root / "campaign.yaml"
    spec.write_text(CAMPAIGN.format(quickstart=QUICKSTART, source=f"inputs: {root / 'inputs.jsonl'}\nrepeats: 2",
                                    output=root / "reference"), encoding="utf-8")
    started = time.perf_counter()
    proc = _quiver("run", str(spec), "--quiet")
    print(f"reference campaign: {time.perf_counter() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (root / "reference" / "cache" / "cache.db").is_file()
    return root / "reference"


def _killed_before_its_first_commit(reference: Path, out: Path) -> None:
    """At ``out``: the reference's run folder as a run killed before it committed any
    replay leaves it (its ledger without replays, no results), its response cache whole."""
    shutil.copytree(reference, out)
    for name in (".finished", "pairs.jsonl", "replays.jsonl", "campaign.json", "report.md", "report.html",
                 "summary.json"):
        (out / name).unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(out / "ledger.sqlite")) as db, db:
        assert db.execute("DELETE FROM replays").rowcount == 12


def _resume(reference: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return _quiver("run", str(reference.parent / "campaign.yaml"), "--output", str(out), "--resume", "--quiet")


def test_a_planted_pickle_never_runs_on_resume_and_the_resume_equals_an_uninterrupted_run(
    reference: Path, tmp_path: Path
) -> None:
    """A run killed before its first replay was committed, whose response cache holds, in
    every row, a pickle that would create a file when unpickled: ``quiver run --resume``
    never runs it, fetches every response again, and gives the uninterrupted run's results."""
    out, marker = tmp_path / "run", tmp_path / "unpickled"
    _killed_before_its_first_commit(reference, out)
    planted = _plant(out / "cache", pickle.dumps(_Planted(marker)))
    assert planted > 12
    started = time.perf_counter()
    proc = _resume(reference, out)
    print(f"resume: {time.perf_counter() - started:.1f} s")
    assert not marker.exists(), "a pickle from the response cache was loaded"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("campaign.json", "pairs.jsonl"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    warned = [line for line in proc.stderr.splitlines() if "could not be read" in line]
    assert len(warned) == 1, proc.stderr  # one line for the run, not one per row
    assert all(isinstance(value, str) and json.loads(value)["choices"] for _, value in _rows(out / "cache"))


@pytest.mark.parametrize("case", ["junk bytes", "truncated", "a folder in the way"])
def test_quiver_run_on_a_cache_file_that_cannot_be_read_exits_2_with_one_line(
    case: str, reference: Path, tmp_path: Path
) -> None:
    """A run folder whose response cache file was damaged since: ``quiver run --resume``
    refuses it in one line, before any replay."""
    make, reason = UNREADABLE_FILES[case]
    out = tmp_path / "run"
    _killed_before_its_first_commit(reference, out)
    db = out / "cache" / "cache.db"
    db.unlink()
    if case == "truncated":
        shutil.copyfile(reference / "cache" / "cache.db", db)
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2 // 4096 * 4096])
    else:
        make(db)
    started = time.perf_counter()
    proc = _resume(reference, out)
    print(f"{case}: {time.perf_counter() - started:.1f} s")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert lines[0].startswith(f"quiver run: error: {db}: "), lines[0]
    assert reason in lines[0] and f"delete the folder {out / 'cache'}" in lines[0], lines[0]
