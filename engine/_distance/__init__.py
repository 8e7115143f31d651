"""Type-dispatched distances between node outputs (QUIVER.md §2) and the text embeddings
they use.

* ``registry``: the field types and their kernels (:func:`register_kernel`);
* ``kernels``: the built-in kernels, the per-field and per-node distances;
* ``embed``: sentence embeddings, cached on disk by content hash.

Every name is imported on first use (PEP 562 ``__getattr__``), as in the ``quiver``
facade: validating a graph's field types needs the registry only, and a pipeline that
declares its fields loads neither NumPy nor the embedding cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver._lazy import lazy_exports

_MODULES: dict[str, tuple[str, ...]] = {
    ".registry": (
        "TextDistance", "KernelFunction", "Kernel", "KernelError", "register_kernel", "registered_kernels",
        "get_kernel", "unregister_kernel",
    ),
    ".kernels": (
        "FieldTypeError", "value_distance", "output_distance", "output_distances", "output_texts", "OutputColumns",
        "texts_to_compare", "numeric_distance", "jaccard_distance", "edit_distance", "footrule_distance",
    ),
    ".embed": (
        "Embedder", "EmbeddingError", "SentenceTransformerEmbedder", "FunctionEmbedder", "OneTextEmbedder",
        "EmbeddingStore", "DEFAULT_MODEL", "default_cache_dir", "make_embedder",
    ),
}

if TYPE_CHECKING:  # what type checkers see (``X as X``: re-exported); nothing here runs
    from .embed import (
        DEFAULT_MODEL as DEFAULT_MODEL,
        Embedder as Embedder,
        EmbeddingError as EmbeddingError,
        EmbeddingStore as EmbeddingStore,
        FunctionEmbedder as FunctionEmbedder,
        OneTextEmbedder as OneTextEmbedder,
        SentenceTransformerEmbedder as SentenceTransformerEmbedder,
        default_cache_dir as default_cache_dir,
        make_embedder as make_embedder,
    )
    from .kernels import (
        FieldTypeError as FieldTypeError,
        OutputColumns as OutputColumns,
        edit_distance as edit_distance,
        footrule_distance as footrule_distance,
        jaccard_distance as jaccard_distance,
        numeric_distance as numeric_distance,
        output_distance as output_distance,
        output_distances as output_distances,
        output_texts as output_texts,
        texts_to_compare as texts_to_compare,
        value_distance as value_distance,
    )
    from .registry import (
        Kernel as Kernel,
        KernelError as KernelError,
        KernelFunction as KernelFunction,
        TextDistance as TextDistance,
        get_kernel as get_kernel,
        register_kernel as register_kernel,
        registered_kernels as registered_kernels,
        unregister_kernel as unregister_kernel,
    )


__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
