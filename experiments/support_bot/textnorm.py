"""Word handling shared by the support_bot pipeline and its simulated models.

The retriever and the simulated planner must agree on what a key term is: one
tokeniser, one stop-word list, one light stemmer.
"""

from __future__ import annotations

import re

__all__ = ["WORD", "STOPWORDS", "stem"]

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STOPWORDS = frozenset(
    "a about after all also am an and any anyone are as at be been but by can can't could did do does "
    "doesn't don't for from get gets got had has have how i i'm if in into is it it's its just me my no "
    "not now of off on once or our out per please so some than that the their them then there these they "
    "this those though to too up us was we were what what's when where which who why will with won't "
    "would you your".split()
)


def stem(word: str) -> str:
    """A light stemmer: plurals, then -ing / -ed, then a final -e
    (``invoices``, ``invoiced`` -> ``invoic``; ``exporting`` -> ``export``)."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word

