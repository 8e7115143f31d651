"""The built-in operators (QUIVER.md §11).

* ``output``: override, identity, bool_flip, categorical_flip, list_edit, numeric_edit,
  text_edit;
* ``execution``: prompt_swap, param_change.
"""

from __future__ import annotations

from .execution import ParamChange, PromptSwap
from .output import (
    BoolFlip,
    CategoricalFlip,
    ListEdit,
    NumericEdit,
    Override,
    TextEdit,
    logprob_alternatives,
)

__all__ = [
    "Override",
    "BoolFlip",
    "CategoricalFlip",
    "ListEdit",
    "NumericEdit",
    "TextEdit",
    "logprob_alternatives",
    "PromptSwap",
    "ParamChange",
]
