"""A known-answer pipeline for dose-response: a numeric score feeds a decision whose
probability of turning over is logistic in the score.

::

    input ─ score ─ decide (LLM, temperature 1) ─ route (router) ─┬─ escalate
                                                                  └─ hold

* ``score`` returns ``{"value": 0.0}`` for every input: the recorded baseline.
* ``decide`` asks the simulated model ``dose-decide`` for an action; the model answers
  ``escalate`` with probability ``1 / (1 + exp(-(value - midpoint) / slope))`` and ``hold``
  otherwise (logits ``(value - midpoint) / slope`` and 0, sampled at temperature 1). The
  midpoint and slope come with the input, so a test chooses them.
* ``route`` records the decision (``quiver.decide``); ``escalate`` or ``hold`` runs.

Shifting ``score.value`` by ``x`` (``numeric_edit``, ``action: shift``) turns a baseline
``hold`` into ``escalate`` with probability ``p(x) = logistic((x - midpoint) / slope)``,
while the baseline's own chance of ``escalate`` is ``p(0)``, tiny when the midpoint is
many slopes above 0: the excess D_shape rate over the controls is ``p(x) - p(0)``, whose
half-plateau dose is the midpoint, to within ``p(0)``.
"""

from __future__ import annotations

from typing import Any

import quiver
from quiver.replay import Fields, SimRequest, sim_model

quiver.template("dose.decide", user="Score: {value}\nMidpoint: {midpoint}\nSlope: {slope}")


def _number(text: str, label: str) -> float:
    return float(text.split(f"{label}: ", 1)[1].split("\n", 1)[0])


@sim_model("dose-decide")
def _decide_model(req: SimRequest) -> Fields:
    text = req.user_text
    logit = (_number(text, "Score") - _number(text, "Midpoint")) / _number(text, "Slope")
    return Fields(action={"escalate": logit, "hold": 0.0})


@quiver.node("score")
def score(case: int) -> dict[str, Any]:
    return {"value": 0.0, "case": case}


@quiver.node("decide", kind="llm")
def decide(value: float, midpoint: float, slope: float) -> dict[str, Any]:
    data = quiver.llm().chat("dose.decide", model="dose-decide", temperature=1.0, value=f"{value:.6f}",
                             midpoint=f"{midpoint}", slope=f"{slope}", response_format={"type": "json_object"}).data
    return {"action": data["action"]}


@quiver.node("route", kind="router")
def route(decision: dict[str, Any]) -> str:
    return quiver.decide("action", decision["action"])


@quiver.node("escalate")
def escalate(case: int) -> str:
    return f"case {case} escalated"


@quiver.node("hold")
def hold(case: int) -> str:
    return f"case {case} on hold"


def pipeline(case: int, midpoint: float, slope: float) -> str:
    s = score(case)
    d = decide(s["value"], midpoint, slope)
    return escalate(case) if route(d) == "escalate" else hold(case)
