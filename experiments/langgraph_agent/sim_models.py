"""Simulated models of the LangGraph support agent (see ``pipeline.py``).

Each reads the prompt a real model would read and answers plain text, sampled at the
request's temperature from candidates with logits, so that clear questions get the same
answer every time and a few near a boundary change between repeats:

* ``lg-router``: ``retrieve`` unless the question reads like small talk;
* ``lg-grader``: ``yes`` the likelier the more of the question's words the articles share;
* ``lg-rewriter``: the question with the knowledge base's words for its vague ones;
* ``lg-composer``: an answer citing the first article (a short one when the system prompt
  asks for terseness), or an offer to open a ticket when there is no article. When the
  articles say a person has to act and the request offers ``open_ticket``, it
  calls that tool instead (OpenAI ``tool_calls``: the team from that article, a sampled
  priority, the question as summary); once the tool's answer is in the conversation, it
  answers with the article and the ticket.
"""

from __future__ import annotations

import re

from quiver.replay import Fields, SimRequest, Text, ToolCall, sim_model

__all__ = ["router", "grader", "rewriter", "composer"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the i my me is do does to of in on for and or what how can why when where it this that "
                  "with your you get from by be at was will".split())
_ARTICLE = re.compile(r"^\[(KB-\d+)\] (.*)$", re.MULTILINE)
HANDOFFS = {"ask an admin": "support", "billing confirms": "billing", "workspace owner": "support"}
"""Words of an article that mean a person has to act -> the team a ticket goes to."""
_TICKET = re.compile(r"T-\d+")
SMALL_TALK = ("hi ", "hello", "thanks", "thank you", "good morning")
EXPANSIONS = {
    "slow": "outages status page incident",
    "weird": "outages status page",
    "get in": "password reset 2fa account",
    "phone": "2fa device backup code",
    "charged": "refunds duplicate charges",
    "download": "invoice pdf billing",
    "syncing": "sync errors calendar",
    "deleted": "restore deleted projects trash",
    "429": "api limits requests",
    "cost": "plans upgrades prorated",
    "export": "csv export reports",
}


def _block(text: str) -> str:
    found = re.search(r"<<<\n(.*?)\n>>>", text, re.DOTALL)
    return found.group(1) if found else text


def _blocks(text: str) -> list[str]:
    return re.findall(r"<<<\n(.*?)\n>>>", text, re.DOTALL)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


@sim_model("lg-router")
def router(req: SimRequest) -> Text:
    """``compose`` for small talk, else ``retrieve``."""
    question = _block(req.user_text).lower() + " "
    chat = 2.5 if any(cue in question for cue in SMALL_TALK) else -1.0
    return Text({"retrieve": 1.0, "compose": chat})


@sim_model("lg-grader")
def grader(req: SimRequest) -> Text:
    """``yes`` with a logit that grows with the words the question shares with the articles."""
    question = _words(_block(req.user_text))
    articles = _words(" ".join(content for _, content in _ARTICLE.findall(req.user_text)))
    overlap = len(question & articles)
    return Text({"yes": 1.2 * overlap - 1.6, "no": 0.0})


@sim_model("lg-rewriter")
def rewriter(req: SimRequest) -> Text:
    """The question with the knowledge base's words for its vague ones."""
    question, query = (_blocks(req.user_text) + ["", ""])[:2]
    lowered = f"{question} {query}".lower()
    extra = " ".join(words for cue, words in EXPANSIONS.items() if cue in lowered)
    if not extra:
        return Text({f"help with {question.strip()}": 0.0, f"{question.strip()} account settings": -0.5})
    return Text({f"{question.strip()} {extra}": 1.0, extra: 0.4, f"help with {question.strip()}": -0.8})


@sim_model("lg-composer")
def composer(req: SimRequest) -> Text | ToolCall:
    """An answer citing the first article; terse when the system prompt says so; a call of
    ``open_ticket`` when the article hands the matter to a person."""
    articles = _ARTICLE.findall(req.user_text)
    ticket = "I could not find an article about this. Shall I open a ticket for you?"
    if not articles:
        return Text({ticket: 1.0, "Happy to help! Is there anything else you need?": 1.0})
    doc_id, content = articles[0]
    first = content.split(":", 1)[-1].strip()
    terse = "terse" in req.system_text.lower()
    handoff = next(((d, c, team) for d, c in articles for cue, team in HANDOFFS.items() if cue in c.lower()), None)
    if handoff is not None and req.tool_results:
        doc_id, content, team = handoff
        first = content.split(":", 1)[-1].strip()
        opened = _TICKET.search(req.tool_results[-1])
        number = opened.group() if opened else "a ticket"
        return Text({
            f"According to [{doc_id}], {first} I opened {number} so that the {team} team takes it from "
            "here.": -1.0 if terse else 1.0,
            f"{first} (see [{doc_id}]); {number} is open for you.": -0.5 if terse else 0.5,
            f"See [{doc_id}]; {number} is open.": 2.0 if terse else -2.0,
        })
    if handoff is not None and "open_ticket" in req.tool_names:
        urgent = 1.0 if any(w in req.user_text.lower() for w in ("twice", "lost", "can't")) else 0.0
        return ToolCall("open_ticket", Fields(
            team=handoff[2], priority={"normal": 1.0, "high": urgent}, summary=_block(req.user_text).strip(),
        ))
    return Text({
        f"According to [{doc_id}], {first}": -1.0 if terse else 1.2,
        f"{first} (see [{doc_id}])": -0.5 if terse else 0.6,
        f"See [{doc_id}].": 2.0 if terse else -2.0,
        ticket: -1.5,
    })
