"""The support bot's outcome check: small talk is answered as small talk (input ids
``smalltalk-``); a question about the customer's own account (``account-``) is answered;
every other question is answered with at least one document cited. ``derive_truth.py``
computes which inputs pass at the models' argmax, and what each override does to that
(``truth.yaml``, ``outcome``)."""

from __future__ import annotations

from quiver import Trace


def answered(trace: Trace) -> bool:
    """Small talk as small talk; an account question answered; any other question answered
    with at least one document cited."""
    output = trace.output or {}
    if trace.input_id.startswith("smalltalk-"):
        return output.get("path") == "smalltalk"
    if trace.input_id.startswith("account-"):
        return output.get("path") == "answer"
    return bool(output.get("path") == "answer" and output.get("refs"))
