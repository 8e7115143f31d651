"""An invoice desk in five steps, whose simulated models err at known rates at known
steps: the injected-fault benchmark of ``quiver localize`` (``benchmarks/localize.py``).

1. ``restate`` (LLM) restates the customer's request in one of four equivalent
   phrasings, nearly equally likely: it varies from run to run and never matters (the
   trap for a reader of logs, who sees the first difference there);
2. ``extract`` (LLM, JSON) reads the customer and the amount from the restated request;
   it transposes two digits of the amount at a known rate (:data:`sim_models.RATES`);
3. ``lookup`` (tool) finds the customer's tier in the book (no error);
4. ``price`` (LLM, JSON) gives the tier's discount rate; it gives another tier's at a
   known rate;
5. ``reply`` (LLM) writes the total due; it writes the amount before the discount at a
   known rate.

The outcome check (``outcome.py``) passes a reply whose total is the right one for the
invoice. ``oracle.py`` names the erring steps of a trace from its outputs alone, without
the engine. ``BUGGY`` (the environment variable ``INVOICE_CHAIN_BUG=1``) gives ``lookup``
a deterministic bug for one customer: a failure no single step's intervention repairs.
"""

from __future__ import annotations

import json
import os
from typing import Any

import quiver
from quiver.experiments.invoice_chain.book import TIERS

BUGGY_CUSTOMER = "Wonka"


@quiver.node("restate", kind="llm")
def restate(request: str) -> str:
    return quiver.llm().chat(messages=[{"role": "system", "content": "Restate the customer's request."},
                                       {"role": "user", "content": request}],
                             model="invoice-restate", temperature=1.0).content


@quiver.node("extract", kind="llm", fields={"customer": {"type": "categorical"}, "amount": {"type": "numeric"}})
def extract(restated: str) -> dict[str, Any]:
    reply = quiver.llm().chat(messages=[{"role": "system", "content": "Give the customer and the amount as JSON."},
                                        {"role": "user", "content": restated}],
                              model="invoice-extract", temperature=1.0, response_format={"type": "json_object"})
    return dict(json.loads(reply.content))


@quiver.node("lookup", kind="tool")
def lookup(customer: str) -> dict[str, str]:
    tier = TIERS.get(customer, "bronze")
    if os.environ.get("INVOICE_CHAIN_BUG") == "1" and customer == BUGGY_CUSTOMER:
        tier = "platinum"  # a tier no price list has: every run of this customer fails
    return {"customer": customer, "tier": tier}


@quiver.node("price", kind="llm", fields={"rate": {"type": "numeric"}})
def price(tier: str) -> dict[str, float]:
    reply = quiver.llm().chat(messages=[{"role": "system", "content": "Give the discount rate of the tier as JSON."},
                                        {"role": "user", "content": f"Tier: {tier}"}],
                              model="invoice-price", temperature=1.0, response_format={"type": "json_object"})
    return dict(json.loads(reply.content))


@quiver.node("reply", kind="llm")
def reply(customer: str, amount: float, rate: float) -> str:
    total = round(amount * (1 - rate), 2)
    return quiver.llm().chat(messages=[{"role": "system", "content": "Tell the customer the total due."},
                                       {"role": "user", "content": f"Customer: {customer}\nAmount: {amount:.2f}\n"
                                                                   f"Discount: {rate}\nTotal: {total:.2f}"}],
                             model="invoice-reply", temperature=1.0).content


def run(request: str) -> dict[str, Any]:
    said = restate(request)
    found = extract(said)
    tier = lookup(found["customer"])["tier"]
    rate = price(tier)["rate"]
    return {"customer": found["customer"], "reply": reply(found["customer"], float(found["amount"]), float(rate))}
