"""The built-in operators (QUIVER.md §11).

* ``output``: override, bool_flip, categorical_flip, list_edit, text_edit;
* ``execution``: prompt_swap, param_change.
"""

from __future__ import annotations

from .output import Override, BoolFlip, CategoricalFlip, ListEdit, TextEdit, logprob_alternatives
from .execution import PromptSwap, ParamChange

__all__ = [
    "Override",
    "BoolFlip",
    "CategoricalFlip",
    "ListEdit",
    "TextEdit",
    "logprob_alternatives",
    "PromptSwap",
    "ParamChange",
]
