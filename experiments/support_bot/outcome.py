"""The support bot's outcome check: small talk is answered as small talk (input ids
``smalltalk-``), and every other message gets an answer that cites at least one document.
``derive_truth.py`` computes which inputs pass at the models' argmax."""

from __future__ import annotations

from quiver import Trace


def answered(trace: Trace) -> bool:
    """Small talk as small talk; a question answered with at least one document cited."""
    output = trace.output or {}
    if trace.input_id.startswith("smalltalk-"):
        return output.get("path") == "smalltalk"
    return bool(output.get("path") == "answer" and output.get("refs"))
