"""Which steps of an invoice-desk trace erred, read from the trace's outputs alone.

This is the benchmark's ground truth, written apart from the engine: it knows the
pipeline's rules (:mod:`.pipeline`), recomputes what each step should have given from
the request and what the earlier steps gave, and names the steps whose output is not
that. ``restate`` has no wrong output (every phrasing is right).
"""

from __future__ import annotations

import re
from typing import Any

from quiver import Trace
from quiver.experiments.invoice_chain.book import RATES, TIERS

_NAME = re.compile(r"\b(" + "|".join(TIERS) + r")\b")
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?) dollar")


def erring_steps(trace: Trace) -> list[str]:
    """The nodes whose output is wrong given the request and what came before them."""
    calls = {c.node: c for c in trace.calls}
    request = trace.inputs["request"]
    customer = _NAME.search(request).group(1)  # type: ignore[union-attr]
    amount = float(_AMOUNT.search(request).group(1))  # type: ignore[union-attr]
    wrong: list[str] = []
    extract: dict[str, Any] = calls["extract"].output
    if extract.get("customer") != customer or float(extract.get("amount", -1)) != amount:
        wrong.append("extract")
    tier = calls["lookup"].output.get("tier")
    if tier != TIERS.get(str(extract.get("customer")), "bronze"):
        wrong.append("lookup")
    rate = float(calls["price"].output.get("rate", -1))
    if rate != RATES.get(str(tier), -1.0):
        wrong.append("price")
    total = round(float(extract.get("amount", 0)) * (1 - rate), 2)
    if f"is {total:.2f} dollars" not in str(calls["reply"].output):
        wrong.append("reply")
    return wrong
