"""Simulated models of the helpdesk triage example (see ``pipeline.py``).

Each model reads what a real model would read, the prompt, and describes its answer as
groups of candidates with logits; the simulator samples them at the request's
temperature (or takes the argmax at temperature 0, with occasional runner-ups under
``nondeterminism``). The logits are set so that clear tickets are answered the same
way every time while a few sit near a boundary and flip between repeats:

* ``quickstart-classify``: keyword cues give logits for the category, urgency and
  sentiment of the ticket.
* ``quickstart-chat``: a few friendly replies.
* ``quickstart-draft``: replies built from the context articles in the prompt, citing
  their ids (or, less and less often as attempts go on, a generic or a miscited reply).
* ``quickstart-review``: ``accept`` is likelier when the draft cites an article of the
  context, less likely when it cites one that is not there, and likelier at each attempt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from quiver.replay import Fields, SimRequest, Text, sim_model

__all__ = ["classify", "chat", "draft", "review"]

_BLOCK = r"{label}:\n<<<\n(.*?)\n>>>"
_ATTEMPT = re.compile(r"Attempt (\d+) of (\d+)")
_CONTEXT_LINE = re.compile(r"^\[(KB-\d+)\] ([^:\n]+): (.*)$", re.MULTILINE)
_CITATION = re.compile(r"\[(KB-\d+)\]")


def _block(text: str, label: str) -> str:
    """The text between ``<<<`` and ``>>>`` after the line ``label:``."""
    found = re.search(_BLOCK.format(label=re.escape(label)), text, re.DOTALL)
    return found.group(1) if found else ""


def _section(text: str, label: str) -> str:
    """The lines after the line ``label:`` up to the next blank line."""
    found = re.search(rf"^{re.escape(label)}:\n(.*?)(?:\n\n|\Z)", text, re.DOTALL | re.MULTILINE)
    return found.group(1) if found else ""


def _attempt(text: str) -> int:
    """The 1-based attempt number the prompt states (1 when it states none)."""
    found = _ATTEMPT.search(text)
    return int(found.group(1)) if found else 1


def _cue_score(text: str, cues: Mapping[str, float]) -> float:
    """The sum of the weights of the cues found in the (lower-cased) text."""
    return sum(weight for cue, weight in cues.items() if cue in text)


# --------------------------------------------------------------------------- classify

CUE_GAIN = 2.0
"""Logit per unit of cue weight found in the ticket."""
NO_CUE = -1.5
"""The logit of a cue-driven candidate (a category, a sentiment) with no cue found."""
OTHER_PRIOR = 1.5
"""The logit of category ``other``: it wins unless the cues of another add up to ~1.5."""
NEUTRAL_PRIOR = 1.5
"""The logit of sentiment ``neutral``."""
URGENT_BIAS = -3.5
"""The logit of ``urgent: true`` before cues (``false`` is 0)."""

CATEGORY_CUES: dict[str, dict[str, float]] = {
    "billing": {
        "invoice": 1.5, "charged": 1.5, "refund": 1.5, "payment": 1.0, "card": 0.8,
        "subscription": 1.0, "renewal": 0.8, "receipt": 1.0, "plan": 0.6, "discount": 1.2,
        "price": 1.0, "nonprofit": 0.8,
    },
    "bug": {
        "error": 1.2, "crash": 1.5, "broken": 1.2, "bug": 1.5, "does nothing": 1.2,
        "failing": 1.2, "is down": 1.5, "outage": 1.5, "export": 0.6, "sync": 0.8,
        "not working": 1.2, "testing": 0.9,
    },
    "account": {
        "password": 1.5, "log in": 1.2, "login": 1.2, "sign in": 1.2, "2fa": 1.5,
        "locked out": 1.5, "email address": 1.0, "account": 0.8, "recover": 0.6,
    },
}
URGENT_CUES = {
    "urgent": 2.0, "asap": 1.5, "immediately": 1.8, "right now": 1.2, "is down": 1.2,
    "outage": 0.8, "in an hour": 1.2, "deadline": 1.0, "before friday": 0.8, "!!": 0.6,
}
NEGATIVE_CUES = {
    "unacceptable": 2.0, "fraud": 1.5, "disputing": 1.2, "ridiculous": 1.5, "terrible": 1.5,
    "angry": 1.5, "frustrat": 0.8, "annoying": 1.0, "disappointed": 1.0, "!!": 0.5,
    "can't": 0.3, "keeps failing": 0.5,
}
POSITIVE_CUES = {"thanks": 1.5, "thank you": 1.5, "great": 0.8, "helpful": 1.0, "love": 1.2}


def _cue_logit(text: str, cues: Mapping[str, float]) -> float:
    """The logit of a cue-driven candidate: :data:`NO_CUE` plus the cues found."""
    return NO_CUE + CUE_GAIN * _cue_score(text, cues)


@sim_model("quickstart-classify")
def classify(req: SimRequest) -> Fields:
    """Triage JSON from keyword cues in the ticket block of the prompt."""
    ticket = _block(req.user_text, "Ticket").lower()
    category = {name: _cue_logit(ticket, cues) for name, cues in CATEGORY_CUES.items()}
    return Fields(
        category={**category, "other": OTHER_PRIOR},
        urgent={True: URGENT_BIAS + CUE_GAIN * _cue_score(ticket, URGENT_CUES), False: 0.0},
        sentiment={
            "negative": _cue_logit(ticket, NEGATIVE_CUES),
            "neutral": NEUTRAL_PRIOR,
            "positive": _cue_logit(ticket, POSITIVE_CUES),
        },
    )


# --------------------------------------------------------------------------- chat


@sim_model("quickstart-chat")
def chat(req: SimRequest) -> Text:
    """A friendly reply; a thank-you note likely gets thanked back."""
    message = _block(req.user_text, "Customer message").lower()
    thanked = 1.5 if "thank" in message else 0.0
    return Text({
        "Thanks so much for the kind words, I'll make sure the team hears them! "
        "Anything else we can help with?": thanked,
        "That's lovely to hear, thank you for taking the time to write. "
        "We're here whenever you need us.": thanked - 0.1,
        "Hi there! Yes, we're here. How can we help you today?": 0.8,
        "Hello! This is Acme Cloud support. Tell us what you need and we'll take it "
        "from here.": 0.5,
    })


# --------------------------------------------------------------------------- draft


@dataclass(frozen=True)
class Article:
    """A context article as the draft prompt lists it."""

    doc_id: str
    title: str
    content: str

    @property
    def first_sentence(self) -> str:
        """The article's first sentence."""
        return self.content.split(". ")[0].rstrip(".") + "."


def _articles(text: str) -> list[Article]:
    """The articles of the prompt's ``Context:`` section, in order."""
    return [Article(*m.groups()) for m in _CONTEXT_LINE.finditer(_section(text, "Context"))]


GENERIC_REPLY = (
    "Hi, thanks for reaching out. We're looking into this and will get back to you "
    "shortly with next steps."
)


def _draft_candidates(articles: list[Article], attempt: int) -> dict[str, float]:
    """Reply candidates and logits: citing ones gain and uncited ones lose per attempt."""
    gain = 0.5 * (attempt - 1)
    candidates = {GENERIC_REPLY: 0.5 - gain}
    if not articles:
        return candidates
    top = articles[0]
    candidates[
        f"Hi, thanks for getting in touch. {top.first_sentence} The full steps are in "
        f"\"{top.title}\" [{top.doc_id}]. Let us know if anything is unclear."
    ] = 0.9 + gain
    candidates[
        f"Hi, sorry for the trouble. {top.first_sentence} Our article \"{top.title}\" "
        "walks you through it [KB-100]."
    ] = 0.0 - gain
    if len(articles) > 1:
        second = articles[1]
        candidates[
            f"Hi, thanks for writing in. {top.first_sentence} [{top.doc_id}] "
            f"You may also find \"{second.title}\" useful [{second.doc_id}]."
        ] = 0.5 + gain
    return candidates


@sim_model("quickstart-draft")
def draft(req: SimRequest) -> Text:
    """A reply built from the context articles, citing their ids (or not)."""
    return Text(_draft_candidates(_articles(req.user_text), _attempt(req.user_text)))


# --------------------------------------------------------------------------- review

REVIEW_BIAS = -1.3
"""The logit of ``accept`` before the evidence (``revise`` is 0)."""
CITES_CONTEXT = 1.4
"""Added when the draft cites an article of the context."""
MISCITES = -1.2
"""Added when the draft cites an article that is not in the context."""
PER_ATTEMPT = 0.8
"""Added per attempt after the first: reviewers relent."""


@sim_model("quickstart-review")
def review(req: SimRequest) -> Fields:
    """``accept`` or ``revise``, from the draft's citations and the attempt number."""
    context_ids = {a.doc_id for a in _articles(req.user_text)}
    cited = set(_CITATION.findall(_block(req.user_text, "Draft reply")))
    accept = (
        REVIEW_BIAS
        + (CITES_CONTEXT if cited & context_ids else 0.0)
        + (MISCITES if cited - context_ids else 0.0)
        + PER_ATTEMPT * (_attempt(req.user_text) - 1)
    )
    return Fields(verdict={"accept": accept, "revise": 0.0})
