"""Simulated models of the pydantic-ai support desk (``pipeline.py``).

* ``pa-support``: on the customer's message, calls one tool with the invoice number or
  the service it names as ``query``: billing words -> ``lookup_invoice``, technical
  words -> ``check_service`` (the other now and then), urgent or angry words ->
  ``escalate``; a greeting is answered without a tool. Given a tool's result, it answers
  from it in one of two wordings.
* ``pa-escalation``: answers through the output tool with a team and a sampled severity.
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


@sim_model("pa-support")
def support(req: SimRequest) -> ToolCall | Text:
    text = req.last_user.lower()
    if req.tool_results:
        answer = _answer(req.tool_results[-1])
        return Text({answer: 1.0, f"I checked for you: {answer}": 0.5})
    if any(w in text for w in ("urgent", "angry")):
        return ToolCall("escalate", {"query": req.last_user})
    if any(w in text for w in ("invoice", "bill", "paid")):
        return ToolCall({"lookup_invoice": 2.0, "check_service": -1.0}, {"query": _query(text)})
    if any(w in text for w in ("down", "slow", "error", "login")):
        return ToolCall({"check_service": 2.0, "lookup_invoice": -1.0}, {"query": _query(text)})
    return Text({"Hello! How can I help?": 1.0, "Hi, what can I do for you?": 0.6})


@sim_model("pa-escalation")
def escalation(req: SimRequest) -> ToolCall:
    team = "technical" if _SERVICE.search(req.last_user.lower()) else "billing"
    return ToolCall("final_result", Fields(team=team, severity={"high": 1.0, "low": 0.3}))
