"""Simulated models of the quiz (``pipeline.py``).

* ``quiz-answer``: the capital of the country named in the question, sampled: the right
  one likely, a wrong one now and then;
* ``quiz-judge``: grades an answer against the reference the judge's request shows,
  ``{"verdict": "pass"|"fail", "score": 1|0, "reason": ...}``; with the word "lenient" in
  its rubric it passes anything.
"""

from __future__ import annotations

import json
import re

from quiver.replay import SimRequest, Text, sim_model

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima", "Chile": "Santiago"}
_LINE = re.compile(r"^(Answer|Reference answer): (.*)$", re.MULTILINE)


@sim_model("quiz-answer")
def answer(req: SimRequest) -> Text:
    country = next((c for c in CAPITALS if c in req.last_user), "France")
    wrong = next(v for k, v in CAPITALS.items() if k != country)
    return Text({CAPITALS[country]: 2.0, wrong: 0.0})


@sim_model("quiz-judge")
def judge(req: SimRequest) -> str:
    found = {k: json.loads(v) for k, v in _LINE.findall(req.last_user)}
    answer = json.dumps(found.get("Answer"))
    ok = "lenient" in req.system_text or str(found.get("Reference answer")) in answer
    return json.dumps({"verdict": "pass" if ok else "fail", "score": 1 if ok else 0,
                       "reason": "matches the reference" if ok else "another city"})
