"""Type-dispatched distances between node outputs (QUIVER.md §2) and the text embeddings
they use.

* ``kernels``: one kernel per field type, the per-field and per-node distances;
* ``embed``: sentence embeddings, cached on disk by content hash.
"""

from __future__ import annotations

from .kernels import TextDistance, FieldTypeError, value_distance, output_distance, texts_to_compare, numeric_distance, jaccard_distance, edit_distance, footrule_distance
from .embed import Embedder, EmbeddingError, SentenceTransformerEmbedder, FunctionEmbedder, EmbeddingStore, DEFAULT_MODEL, default_cache_dir, make_embedder

__all__ = [
    "TextDistance",
    "FieldTypeError",
    "value_distance",
    "output_distance",
    "texts_to_compare",
    "numeric_distance",
    "jaccard_distance",
    "edit_distance",
    "footrule_distance",
    "Embedder",
    "EmbeddingError",
    "SentenceTransformerEmbedder",
    "FunctionEmbedder",
    "EmbeddingStore",
    "DEFAULT_MODEL",
    "default_cache_dir",
    "make_embedder",
]
