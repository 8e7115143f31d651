"""Three targetable edges whose observational and interventional sigmas are known in closed form.

Every noisy draw is one ``sim-json`` call at temperature 1 picking a level 0-4 (an enum of
five words, none in the prompt: close to uniform), so a recorded trace's draws follow
from its sample key and a replay's live draws from the replay's. A node's output is ten
(or twenty) bool flags, the first ``k`` set: two outputs at levels k and k' are at
distance |k - k'| / 10 (or / 20).

* ``mood -> reply``, confounded: ``latent`` draws u, which sets ``mood`` (u flags) and,
  past ``mood``, half of ``reply`` (``reply`` = u flags from ``latent`` and ``mood``'s
  ten flags copied, of twenty). Natural runs move both halves together: d_reply =
  d_mood, sigma_obs = 1. Overriding ``mood`` leaves u as recorded (``latent`` runs
  before it and is served from the recording): only the copied half follows, sigma_int
  = 1/2, at d_mood of 0.1 or 0.2, inside the natural range (up to 0.4).
* ``gauge -> alarm``, probed beyond its envelope: ``gauge``'s only natural noise is flag
  0 (a draw's parity), so natural d_gauge is 0 or 0.1; ``alarm`` is whether five of
  flags 1-9 are set, never in natural runs: sigma_obs = 0. Overriding flags 1-9 moves
  d_gauge to 0.9 and flips ``alarm``: sigma_int = 1 / 0.9.
* ``level -> summary``, linear and unconfounded: ``level`` draws k (k flags of ten),
  ``summary`` sets k flags of twenty: d_summary = d_level / 2 in natural runs and under
  an override alike, sigma_obs = sigma_int = 1/2.
"""

from __future__ import annotations

import quiver

LEVELS = ["zero", "one", "two", "three", "four"]
DRAW = {
    "type": "json_schema",
    "json_schema": {
        "name": "draw",
        "schema": {"type": "object", "properties": {"level": {"type": "string", "enum": LEVELS}},
                   "required": ["level"]},
    },
}

quiver.template("draw", user="Pick a level for the {what} of: {text}")


def _flags(k: int, n: int = 10, prefix: str = "f") -> dict[str, bool]:
    return {f"{prefix}{i}": i < k for i in range(n)}


def _fields(n: int = 10, prefix: str = "f") -> dict[str, dict[str, str]]:
    return {f"{prefix}{i}": {"type": "bool", "role": "context"} for i in range(n)}


def _draw(what: str, text: str) -> int:
    reply = quiver.llm().chat("draw", model="sim-json", what=what, text=text, response_format=DRAW, temperature=1.0)
    return LEVELS.index(reply.data["level"])


@quiver.node("latent", kind="llm", fields={"u": {"type": "categorical", "role": "context", "categories": LEVELS}})
def latent(text: str) -> dict:
    return {"u": LEVELS[_draw("latent", text)]}


@quiver.node("mood", parents=["latent"], fields=_fields())
def mood(hidden: dict) -> dict:
    return _flags(LEVELS.index(hidden["u"]))


@quiver.node("reply", parents=["latent", "mood"], fields={**_fields(prefix="u"), **_fields()})
def reply(hidden: dict, felt: dict) -> dict:
    return {**_flags(LEVELS.index(hidden["u"]), prefix="u"), **felt}


@quiver.node("gauge", kind="llm", fields=_fields())
def gauge(text: str) -> dict:
    return {**_flags(0), "f0": _draw("gauge", text) % 2 == 1}


@quiver.node("alarm", parents=["gauge"], fields={"alarm": {"type": "bool", "role": "context"}})
def alarm(reading: dict) -> dict:
    return {"alarm": sum(reading[f"f{i}"] for i in range(1, 10)) >= 5}


@quiver.node("level", kind="llm", fields=_fields())
def level(text: str) -> dict:
    return _flags(_draw("level", text))


@quiver.node("summary", parents=["level"], fields=_fields(20))
def summary(read: dict) -> dict:
    return _flags(sum(read.values()), 20)


def pipeline(text: str) -> dict:
    hidden = latent(text)
    out = reply(hidden, mood(hidden))
    return {"reply": out, "alarm": alarm(gauge(text)), "summary": summary(level(text))}
