"""The invoice desk's outcome check: the reply states the right total for the invoice,
worked out here from the request itself (the customer and the amount it names, the
customer's tier in the book, the tier's discount)."""

from __future__ import annotations

import re

from quiver import Trace
from quiver.experiments.invoice_chain.book import RATES, TIERS

_NAME = re.compile(r"\b(" + "|".join(TIERS) + r")\b")
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?) dollar")


def expected_total(request: str) -> float:
    """The total due on the invoice a request names."""
    customer = _NAME.search(request)
    amount = _AMOUNT.search(request)
    assert customer is not None and amount is not None, request
    return round(float(amount.group(1)) * (1 - RATES[TIERS[customer.group(1)]]), 2)


def right_total(trace: Trace) -> bool:
    """The reply states the right total."""
    return f"is {expected_total(trace.inputs['request']):.2f} dollars" in str((trace.output or {}).get("reply", ""))
