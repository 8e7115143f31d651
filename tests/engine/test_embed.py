"""Text embeddings: the real all-MiniLM-L6-v2 (offline, CPU), the store and its disk cache."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from quiver._distance import (
    EmbeddingError,
    EmbeddingStore,
    FunctionEmbedder,
    SentenceTransformerEmbedder,
)
from quiver._errors import QuiverError

TEXTS = [f"customer {i} asks how to return a pair of shoes bought in store {i % 3}" for i in range(15)]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    """The default model, loaded once for the module (on its first encode)."""
    return SentenceTransformerEmbedder()


@pytest.fixture
def store(minilm: SentenceTransformerEmbedder) -> Iterator[EmbeddingStore]:
    with EmbeddingStore(minilm) as s:
        yield s


def letters(texts: list[str]) -> list[list[float]]:
    """A toy embedding: letter counts a-z (unnormalised on purpose)."""
    return [[float(t.lower().count(c)) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


def test_importing_the_module_loads_no_model_library() -> None:
    code = "import sys, quiver._distance; print(any(m in sys.modules for m in ('torch', 'sentence_transformers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_default_model_gives_unit_float32_rows(minilm: SentenceTransformerEmbedder) -> None:
    vectors = minilm.encode(["a red shoe", "a blue car"])
    assert vectors.shape == (2, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.load_seconds > 0
    assert minilm.encode([]).shape == (0, 384)


def test_near_paraphrases_are_closer_than_unrelated_sentences(store: EmbeddingStore) -> None:
    anchor = "How do I reset my password?"
    paraphrase = "What are the steps to reset my password?"
    unrelated = "The train to Lyon leaves at nine in the morning."
    assert store.distance(anchor, paraphrase) < 0.3
    assert store.distance(anchor, paraphrase) < store.distance(anchor, unrelated) - 0.3


def test_distance_is_in_the_unit_interval_and_symmetric(store: EmbeddingStore) -> None:
    texts = ["refund my order", "I want my money back", "bananas are yellow", "", "  ", "¿dónde está?"]
    store.ensure(texts)
    for a in texts:
        for b in texts:
            d = store.distance(a, b)
            assert 0.0 <= d <= 1.0
            assert d == store.distance(b, a)


def test_identical_texts_are_zero_without_encoding(store: EmbeddingStore) -> None:
    assert store.distance("never embedded", "never embedded") == 0.0
    assert store.stats["needed"] == 0
    assert store.stats["embedded"] == 0


def test_distance_embeds_unseen_texts_on_the_spot(store: EmbeddingStore) -> None:
    store.distance("first unseen text", "second unseen text")
    assert store.stats["needed"] == 2
    assert store.stats["embedded"] == 2


def test_ensure_embeds_each_distinct_text_once_and_the_cache_serves_the_next_run(
    minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    texts = TEXTS + TEXTS[:5]
    done: list[int] = []
    with EmbeddingStore(minilm, cache_dir=tmp_path / "cache") as first:
        first.ensure(texts, progress=done.append)
        first.ensure(texts)  # already in memory: nothing new
        vectors = [first.vector(t) for t in TEXTS]
        assert first.stats["needed"] == 15
        assert first.stats["embedded"] == 15
        assert first.stats["cache_hits"] == 0
    assert sum(done) == 15

    with EmbeddingStore(minilm, cache_dir=tmp_path / "cache") as second:
        second.ensure(texts)
        assert second.stats["embedded"] == 0
        assert second.stats["cache_hits"] == 15
        assert second.stats["encode_seconds"] == 0.0
        for text, vector in zip(TEXTS, vectors, strict=True):
            assert np.array_equal(second.vector(text), vector)


def test_progress_counts_every_distinct_text_across_memory_cache_and_batches(tmp_path: Path) -> None:
    embedder = FunctionEmbedder(letters, name="letters", batch_size=4)
    with EmbeddingStore(embedder, cache_dir=tmp_path) as warm:
        warm.ensure(["a", "b"])
    done: list[int] = []
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        s.ensure(["c"])
        s.ensure(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "a"], progress=done.append)
        assert done == [3, 4, 3]  # a, b from the cache and c from memory; then d-j in batches of 4
        assert (s.stats["needed"], s.stats["embedded"], s.stats["cache_hits"]) == (10, 8, 2)
        assert s.stats["load_seconds"] == 0.0


def test_a_function_embedder_plugs_in_and_its_rows_are_normalised() -> None:
    embedder = FunctionEmbedder(letters, name="letters")
    vectors = embedder.encode(["aab", "zzz"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    with EmbeddingStore(embedder) as s:
        # "ab" -> (1, 1, 0...), "a" -> (1, 0, ...): cos = 1 / sqrt(2)
        assert s.distance("ab", "a") == pytest.approx(1 - 2 ** -0.5, abs=1e-6)
        assert s.distance("abc", "xyz") == 1.0


def test_cache_entries_are_keyed_by_the_embedder_name(tmp_path: Path) -> None:
    with EmbeddingStore(FunctionEmbedder(letters, name="letters"), cache_dir=tmp_path) as s:
        s.ensure(["shared text"])
    with EmbeddingStore(FunctionEmbedder(letters, name="letters-v2"), cache_dir=tmp_path) as s:
        s.ensure(["shared text"])
        assert s.stats["cache_hits"] == 0
        assert s.stats["embedded"] == 1


def test_a_function_returning_the_wrong_shape_is_refused() -> None:
    embedder = FunctionEmbedder(lambda texts: [[1.0, 0.0]], name="one-row")
    with pytest.raises(EmbeddingError, match=r"embedder 'one-row' returned an array of shape \(1, 2\) for 3 texts"):
        embedder.encode(["a", "b", "c"])


def test_a_missing_local_model_path_gives_a_one_line_embedding_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(EmbeddingError) as err:
        SentenceTransformerEmbedder(str(missing)).encode(["x"])
    assert isinstance(err.value, QuiverError)
    assert "\n" not in str(err.value)
    assert str(missing) in str(err.value)
    assert "sentence-transformers model" in str(err.value)


def test_a_folder_that_is_not_a_model_gives_a_one_line_embedding_error(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="cannot load embedding model") as err:
        SentenceTransformerEmbedder(str(tmp_path)).encode(["x"])
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- batches, windows, the cache file


def test_texts_go_to_the_model_longest_first_in_full_batches() -> None:
    calls: list[list[str]] = []

    def recording(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return letters(texts)

    texts = ["bb", "a", "dddd", "ccc", "eeeee", "f", "gg", "hhhhhhh"]
    with EmbeddingStore(FunctionEmbedder(recording, name="rec", batch_size=3)) as s:
        s.ensure(texts)
    assert [len(c) for c in calls] == [3, 3, 2]
    flat = [t for c in calls for t in c]
    assert flat == sorted(texts, key=lambda t: -len(t))  # one global order, not per batch
    assert flat[-2:] == ["a", "f"]  # equal lengths keep their arrival order


def test_texts_cut_at_the_window_share_one_vector_and_the_cache_finds_a_third(
    minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    head = " ".join(f"order {i} shipped from warehouse {i % 7} on time" for i in range(80))  # ~600 tokens
    a, b, short = head + " request id 1", head + " request id 2 and more", "where is my order?"
    with EmbeddingStore(minilm, cache_dir=tmp_path) as s:
        s.ensure([a, b, short])
        assert (s.stats["embedded"], s.stats["shared_window"]) == (2, 1)
        assert np.array_equal(s.vector(a), s.vector(b))
        alone = minilm.encode([b])[0]
        assert float(np.max(np.abs(s.vector(b) - alone))) < 1e-6  # what the model gives b by itself
    with EmbeddingStore(minilm, cache_dir=tmp_path) as s:
        s.ensure([head + " request id 3", b])  # a new text, seen like a and b; b by its own key
        assert (s.stats["embedded"], s.stats["cache_hits"]) == (0, 2)
        assert np.array_equal(s.vector(b), s.vector(head + " request id 3"))


def test_only_texts_that_fill_the_window_get_a_window_key(minilm: SentenceTransformerEmbedder) -> None:
    fills = " ".join(["word"] * 300)
    keys = minilm.window_keys(["short text", "x" * 63, "a " * 200, fills, "  " + fills.upper() + "  "])
    assert keys[:3] == [None, None, None]  # "a " * 200 is 200 tokens: seen whole
    assert keys[3] is not None and keys[3] == keys[4]  # stripped and lower-cased by the model, as it sees it


def test_the_cache_is_read_in_one_query(tmp_path: Path) -> None:
    embedder = FunctionEmbedder(letters, name="letters")
    texts = [f"text number {i}" for i in range(2500)]
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        s.ensure(texts)
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        statements: list[str] = []
        assert s._cache is not None
        s._cache._file._db.set_trace_callback(statements.append)
        s.ensure(texts)
        assert s.stats["cache_hits"] == 2500
    assert sum(q.lstrip().upper().startswith("SELECT") for q in statements) == 1


def _truncated(db: Path) -> None:
    with EmbeddingStore(FunctionEmbedder(letters, name="letters"), cache_dir=db.parent) as s:
        s.ensure([f"text number {i}" for i in range(2000)])
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2 // 4096 * 4096])  # whole pages: the header still reads


UNREADABLE_FILES = {
    "junk bytes": (lambda db: db.write_bytes(b"this is not sqlite" * 100),
                   "not an embedding cache (file is not a database)"),
    "truncated": (_truncated, "truncated"),
    "a folder in the way": (lambda db: db.mkdir(), "a folder, not a file"),
}


@pytest.mark.parametrize("case", list(UNREADABLE_FILES))
def test_a_cache_file_that_cannot_be_read_gives_a_one_line_error(case: str, tmp_path: Path) -> None:
    make, reason = UNREADABLE_FILES[case]
    make(tmp_path / "vectors.sqlite")
    with pytest.raises(EmbeddingError) as err:
        with EmbeddingStore(FunctionEmbedder(letters, name="letters"), cache_dir=tmp_path) as s:
            s.ensure(["a"])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'vectors.sqlite'}: "), message
    assert reason in message and f"delete {tmp_path / 'vectors.sqlite'}" in message, message


def test_a_row_that_is_not_a_vector_is_embedded_again_and_overwritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes of another length than the other rows', NaN, text: each refused, its text
    sent to the model again and the row rewritten; one warning for them all."""
    asked: list[str] = []

    def counted(texts: list[str]) -> list[list[float]]:
        asked.extend(texts)
        return letters(texts)

    embedder = FunctionEmbedder(counted, name="letters")
    texts = ["alpha", "bravo", "charlie", "delta"]
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        s.ensure(texts)
        right = [s.vector(t) for t in texts]
    keys = [s._key(t) for t in texts[1:]]
    bad = [np.ones(7, dtype=np.float32).tobytes(), np.full(26, np.nan, dtype=np.float32).tobytes(), "not bytes"]
    with contextlib.closing(sqlite3.connect(tmp_path / "vectors.sqlite")) as db, db:
        db.executemany("UPDATE vectors SET vector = ? WHERE key = ?", list(zip(bad, keys, strict=True)))
    asked.clear()
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        s.ensure(texts)
        assert sorted(asked) == sorted(texts[1:]) and s.stats["cache_hits"] == 1
        assert all(np.array_equal(s.vector(t), v) for t, v in zip(texts, right, strict=True))
    asked.clear()
    with EmbeddingStore(embedder, cache_dir=tmp_path) as s:
        s.ensure(texts)
        assert asked == [] and s.stats["cache_hits"] == 4  # the rows were overwritten
    warned = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "vectors.sqlite") in warned[0].getMessage()


_OPEN_AND_WRITE = """
import random, sys, threading
from pathlib import Path
import numpy as np
from quiver._distance.embed import _VectorCache

folder = Path(sys.argv[1])
def rows(n):
    out = []
    for _ in range(n):
        v = np.random.rand(384).astype(np.float32)
        out.append((f"k{random.randrange(10**6)}", (v / np.linalg.norm(v)).tobytes()))
    return out
def worker():
    for _ in range(40):
        cache = _VectorCache(folder)
        cache.vectors([f"k{random.randrange(10**6)}" for _ in range(50)])
        cache.put_many(rows(50))
        cache.close()
threads = [threading.Thread(target=worker) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


@pytest.mark.slow
def test_caches_opened_and_closed_by_threads_of_several_processes_stay_whole(tmp_path: Path) -> None:
    """Threads of four processes open, read, write and close the one cache file over and
    over. Opening checks the file's header by reading it, and closing that descriptor used to
    drop the SQLite locks of the process's other connections: a second process then folded
    the journal back under them, and the file came out malformed (2 runs in 3)."""
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AND_WRITE, str(tmp_path)], stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    with contextlib.closing(sqlite3.connect(tmp_path / "vectors.sqlite")) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] > 0
