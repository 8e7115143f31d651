"""Simulated models of the invoice desk (``pipeline.py``), each erring at a known rate.

At temperature 1 a model takes its wrong answer with probability
``exp(w) / (exp(c) + exp(w))`` for a right answer's logit ``c`` and the wrong one's
``w``: :data:`RATES` gives those probabilities, :func:`_logits` the logits.
"""

from __future__ import annotations

import math
import re

from quiver.replay import Fields, SimRequest, Text, sim_model

RATES = {"extract": 0.20, "price": 0.10, "reply": 0.06}
"""The probability that each step errs, at temperature 1."""
PHRASINGS = ("The customer {c} asks about their invoice of {a} dollars.",
             "{c} wants to know what they owe on a {a} dollar invoice.",
             "Invoice question from {c}: the amount is {a} dollars.",
             "About an invoice for {a} dollars, {c} is asking what is due.")
TIER_RATES = {"gold": 0.2, "silver": 0.1, "bronze": 0.05}
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)")
_NAME = re.compile(r"\b(Acme|Globex|Initech|Umbrella|Hooli|Stark|Wayne|Wonka)\b")


def _logits(rate: float) -> tuple[float, float]:
    """Logits (right, wrong) that give the wrong answer with probability ``rate``."""
    return 0.0, math.log(rate / (1 - rate))


def transposed(amount: str) -> str:
    """The amount with its first two digits swapped (the extraction error)."""
    return amount[1] + amount[0] + amount[2:] if len(amount) > 1 and amount[0] != amount[1] else amount + "0"


@sim_model("invoice-restate")
def restate(req: SimRequest) -> Text:
    text = req.last_user
    customer = (_NAME.search(text) or re.search(r"(\w+)", text))
    amount = _AMOUNT.search(text)
    c, a = (customer.group(1) if customer else "?"), (amount.group(1) if amount else "0")
    return Text({p.format(c=c, a=a): 0.0 for p in PHRASINGS})


@sim_model("invoice-extract")
def extract(req: SimRequest) -> Fields:
    text = req.last_user
    customer = _NAME.search(text)
    found = _AMOUNT.search(text)
    amount = found.group(1) if found else "0"
    right, wrong = _logits(RATES["extract"])
    return Fields(customer=customer.group(1) if customer else "?",
                  amount={float(amount): right, float(transposed(amount)): wrong})


@sim_model("invoice-price")
def price(req: SimRequest) -> Fields:
    tier = req.last_user.removeprefix("Tier: ").strip()
    if tier not in TIER_RATES:
        return Fields(rate=0.0)
    other = next(t for t in TIER_RATES if t != tier)
    right, wrong = _logits(RATES["price"])
    return Fields(rate={TIER_RATES[tier]: right, TIER_RATES[other]: wrong})


@sim_model("invoice-reply")
def reply(req: SimRequest) -> Text:
    fields = dict(line.split(": ", 1) for line in req.last_user.splitlines() if ": " in line)
    right, wrong = _logits(RATES["reply"])
    customer = fields.get("Customer", "")
    return Text({f"Dear {customer}, your total due is {fields.get('Total')} dollars.": right,
                 f"Dear {customer}, your total due is {fields.get('Amount')} dollars.": wrong})
