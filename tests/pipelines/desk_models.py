"""Simulated models of the tool desks (``pydantic_desk``, ``react_desk``).

* ``pa-support`` and ``lg-react`` (the desks' agents): on the customer's message, call
  one tool with the invoice number or the service it names as ``query``: billing words
  -> ``lookup_invoice``, technical words -> ``check_service`` (the other now and then),
  urgent or angry words -> ``escalate`` (when the request offers it; every message when
  the instructions say to escalate every case); a greeting is answered without a tool.
  Given a tool's result, they answer from it in one of two wordings.
* ``pa-escalation`` answers through pydantic-ai's output tool with a team and a sampled
  severity.
* ``lg-summary`` (JSON): which team follows up, from the desk's answer.
"""

from __future__ import annotations

import json
import re

from quiver.replay import Fields, SimRequest, Text, ToolCall, sim_model

_NUMBER = re.compile(r"\b(\d{4})\b")
_SERVICE = re.compile(r"\b(email|login|api|dashboard)\b")


def _query(text: str) -> str:
    found = _NUMBER.search(text) or _SERVICE.search(text)
    return found.group(1) if found else "none"


def _answer(result: str) -> str:
    try:
        value = json.loads(result)
    except ValueError:
        return result
    if "status" in value:
        return f"Invoice {value.get('invoice')} is {value['status']}."
    if "state" in value:
        return f"The {value.get('service')} service is {value['state']}."
    return f"The {value.get('team')} team has your case ({value.get('severity')} severity)."


def desk(req: SimRequest) -> ToolCall | Text:
    text = req.last_user.lower()
    if req.tool_results:
        answer = _answer(req.tool_results[-1])
        return Text({answer: 1.0, f"I checked for you: {answer}": 0.5})
    escalating = "escalate every" in req.system_text.lower() or any(w in text for w in ("urgent", "angry"))
    if "escalate" in req.tool_names and escalating:
        return ToolCall("escalate", {"query": req.last_user})
    if any(w in text for w in ("invoice", "bill", "paid")):
        return ToolCall({"lookup_invoice": 2.0, "check_service": -1.0}, {"query": _query(text)})
    if any(w in text for w in ("down", "slow", "error", "login")):
        return ToolCall({"check_service": 2.0, "lookup_invoice": -1.0}, {"query": _query(text)})
    return Text({"Hello! How can I help?": 1.0, "Hi, what can I do for you?": 0.6})


sim_model("pa-support")(desk)
sim_model("lg-react")(desk)


@sim_model("pa-escalation")
def escalation(req: SimRequest) -> ToolCall:
    team = "technical" if _SERVICE.search(req.last_user.lower()) else "billing"
    return ToolCall("final_result", Fields(team=team, severity={"high": 1.0, "low": 0.3}))


@sim_model("lg-summary")
def summary(req: SimRequest) -> Fields:
    text = req.last_user.lower()
    team = "billing" if "invoice" in text else "technical" if "service" in text else "none"
    return Fields(team=team, resolved={True: 1.0 if "paid" in text or "operational" in text else -0.5, False: 0.0})
