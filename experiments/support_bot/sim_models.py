"""Simulated models of the support bot (see ``pipeline.py``).

Each model reads what a real model would read, its prompt: the customer message, the
conversation so far, the template's instructions, the material listed in the prompt.
It describes its answer as groups of candidates with logits, and the simulator samples
them. The recordings run at temperature 0 (the paper's determinism contract), so a call
returns its argmax except at the simulator's ``nondeterminism`` rate, when one group
takes its runner-up, as real backends sometimes do.

**Near ties only.** A candidate more than :data:`NEAR_TIE` logits below the best is left
out: backend noise turns over answers the model was torn about, never a clear one. A
group with a single candidate cannot flip. Which answers are near ties is therefore a
property of the prompt, and the decision rules below say exactly when:

* ``support-bot-rewriter``: one subtask per request of the message, labelled with its
  key words (``my``/``our``/``we`` kept for questions about the customer's own account),
  and one search query per subtask, written in the style the template asks for
  (:func:`query_for`). Its runner-up query slips in one near-synonym (a near tie: the
  rewriter's noise, which sometimes moves retrieval but never a planner decision).
* ``support-bot-signal``: turn type, web-search hint and small talk from keyword cues,
  never near a tie; sentiment from mood cues, a near tie for mildly annoyed messages.
* ``support-bot-sufficiency``: sufficient for a short follow-up ("that", "it", "too")
  to an earlier turn; never a near tie.
* ``support-bot-planner``: the coverage of a subtask is the share of its key terms
  (the label's words, stemmed, without ``my``/``our``/``we`` and the cue words) that
  appear in the material; the threshold theta is read from the template ("at least 70%").
  The thought (an observability field) is one sentence, or a checklist when the
  template asks for "the thought as a checklist".
  Logits: COMPOSE ``PLAN_GAIN * (coverage - theta)``, RETRY 0, and, for a question
  about the customer's own account that an endpoint answers, EXECUTE
  ``EXECUTE_GAIN * (possessives + cue words in the label)``. So a subtask with every
  term covered composes clearly, one with at most half covered retries clearly, and
  one with exactly one term missing (coverage 0.6 to 0.8) is a near tie between
  COMPOSE and RETRY: the planner's coverage boundary. A fully covered account question
  with a single possessive or cue word is a near tie between COMPOSE and EXECUTE.
* ``support-bot-planner-v2``: the planner's next version, its threshold
  :data:`V2_THETA_SHIFT` below the prompt's (the support bot's ``model: v2`` deployment).
* ``support-bot-composer``: answers each subtask with the first sentence of the
  material fragment that shares most of its key terms (the first listed on a tie),
  cites it, and states the account data; two near-tie openings. It closes by offering a
  call back when the template asks for it (the ``prompt: v2`` deployment).
* ``support-bot-smalltalk``: a few friendly replies, two of them near a tie.
* ``support-bot-paraphraser``: swaps words for synonyms, more of them at higher
  temperatures (what ``text_edit`` paraphrase replays call).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

from quiver.experiments.support_bot.textnorm import STOPWORDS, WORD, stem
from quiver.replay import Fields, SimRequest, Text, sim_model

__all__ = [
    "rewriter", "signal", "sufficiency", "planner", "planner_v2", "composer", "smalltalk",
    "key_terms", "clauses", "label_words", "subtasks", "query_for", "query_style", "runner_up",
    "coverage", "action_logits", "near_ties",
]

K = TypeVar("K")

NEAR_TIE = 1.2
"""Candidates more than this many logits below the best are not offered."""
PLAN_GAIN = 8.0
"""The planner's COMPOSE logit per unit of coverage above the threshold."""
DEFAULT_THETA = 0.7
"""The planner's coverage threshold when the template states none."""
EXECUTE_GAIN = 2.0
"""The planner's EXECUTE logit per possessive or cue word in an account subtask: one
such word (2.0) ties with a fully covered COMPOSE (2.4); two or more (4.0) win clearly."""
RUNNER_UP = 0.4
"""How far below the best the noisy alternatives (rewrites, openings) sit."""
V2_THETA_SHIFT = 0.15
"""How much lower ``support-bot-planner-v2`` sets the coverage threshold than its prompt states."""
"""How far below the best the noisy alternatives (rewrites, openings) sit."""

# --------------------------------------------------------------------------- words

FILLER = frozenset(
    "hi hello hey thanks thank ok okay quick question wondering need want know tell guys "
    "anybody somebody someone possible way still again really".split()
)
"""Words that carry no request (dropped from labels)."""
POSSESSIVES = frozenset({"my", "our", "we"})
CUES = frozenset({"current", "left", "remaining", "last", "latest", "next", "many", "much"})
"""Words that ask for this customer's own figures rather than for documentation."""
ACCOUNT_WORDS = {
    "billing.plan": ("plan", "seat", "renewal", "renew", "subscription"),
    "billing.invoices": ("invoice", "charge", "bill"),
    "usage.storage": ("storage", "quota"),
    "security.sso": ("sso",),
}
"""Nouns of account questions, by the endpoint that answers them."""
ANAPHORS = frozenset({"that", "it", "this", "those", "same", "too"})
VAGUE = frozenset(
    "make whole everyone everybody thing things stuff way able work working use using set get getting "
    "see find like team people turn kind sort go going happen happens happened having right true show "
    "shows back often long only later even else keep keeps take takes say says someone nobody every "
    "each possible fix wrong more sometimes".split()
)
"""Words that name no feature: the planner does not look for them in the material."""


ACCOUNT_NOUNS = {stem(noun): endpoint for endpoint, nouns in ACCOUNT_WORDS.items() for noun in nouns}
"""Stemmed account nouns -> endpoint."""


def _vague(word: str) -> bool:
    return word in VAGUE or stem(word) in VAGUE


def words(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return WORD.findall(text.lower())


def stems(text: str) -> set[str]:
    """Stemmed content words."""
    return {stem(w) for w in words(text) if w not in STOPWORDS}


def key_terms(label: str) -> list[str]:
    """A subtask's key terms: its label's words, stemmed, without possessives and cues."""
    out: list[str] = []
    for w in words(label):
        if w in POSSESSIVES or w in CUES or w in STOPWORDS or _vague(w):
            continue
        if stem(w) not in out:
            out.append(stem(w))
    return out


def _block(text: str, label: str) -> str:
    found = re.search(rf"{re.escape(label)}:\n<<<\n(.*?)\n>>>", text, re.DOTALL)
    return found.group(1).strip() if found else ""


def _line(text: str, label: str) -> str:
    found = re.search(rf"^{re.escape(label)}: ?(.*)$", text, re.MULTILINE)
    return found.group(1).strip() if found else ""


def near_ties(logits: Mapping[K, float]) -> dict[K, float]:
    """The candidates within :data:`NEAR_TIE` of the best (declaration order kept)."""
    best = max(logits.values())
    return {k: v for k, v in logits.items() if v >= best - NEAR_TIE}


# --------------------------------------------------------------------------- rewriter

_SPLIT = re.compile(
    r"[?.!;\n]+|,\s*(?:and|but)\s+|\s+and\s+(?=(?:how|what|can|could|why|is|are|do|does|where|when|will)\b)"
)
SYNONYMS = {
    "export": "download", "invoice": "bill",
    "invoices": "bills", "seat": "license", "seats": "licenses", "guest": "external user",
    "guests": "external users", "2fa": "two-factor", "sso": "single sign-on", "delete": "remove",
    "archive": "hide", "recurring": "repeating", "board": "kanban", "boards": "kanbans",
    "csv": "spreadsheet", "password": "credentials", "mobile": "phone", "calendar": "agenda",
    "notifications": "alerts", "token": "key", "tokens": "keys", "import": "migrate",
    "timer": "stopwatch", "project": "initiative", "projects": "initiatives", "slack": "chat",
    "sync": "synchronisation", "report": "summary", "reports": "summaries", "offline": "no connection",
    "approval": "sign-off", "approvals": "sign-offs", "member": "user", "members": "users",
    "discount": "reduced price", "refund": "money back", "webhooks": "callbacks", "api": "developer",
}
"""Synonyms the verbose style adds."""
SLIPS = {
    "export": "download", "invoice": "bill", "2fa": "two-factor", "sso": "single sign-on",
    "delete": "remove", "password": "credentials", "calendar": "agenda",
    "token": "key", "import": "migrate", "timer": "stopwatch", "sync": "synchronise",
    "csv": "spreadsheet", "webhook": "callback", "recurring": "repeating", "slack": "chat",
    "report": "summary", "reports": "summaries", "project": "initiative", "api": "developer",
}
"""The word the rewriter nearly writes next to one of the query's words: its runner-up
rewrite (a near tie, so backend noise sometimes picks it)."""
GENERIC = frozenset(
    "add set use change make work working see find create turn show app team workspace account "
    "board task project new way".split()
)
"""Words the terse style drops as not specific."""


def clauses(message: str) -> list[str]:
    """The message's requests: sentences and ``, and how ...`` parts with content words."""
    parts = [p.strip() for p in _SPLIT.split(message) if p and p.strip()]
    return [p for p in parts if label_words(p)]


def label_words(clause: str) -> list[str]:
    """A request's key words in order: its words that are not stopwords, filler or vague,
    plus ``my``/``our``/``we`` when it asks about the customer's own account."""
    raw = words(clause)
    own = any(stem(w) in ACCOUNT_NOUNS for w in raw)
    out: list[str] = []
    for w in raw:
        keep = (w not in STOPWORDS and w not in FILLER and not _vague(w)) or (own and w in POSSESSIVES)
        if keep and w not in out:
            out.append(w)
    return out[:7]


def _topic(history: str) -> list[str]:
    """The key words of the last customer turn of the conversation."""
    turns = re.findall(r"^user: (.*)$", history, re.MULTILINE)
    if not turns:
        return []
    first = clauses(turns[-1])
    return [w for w in label_words(first[0]) if w not in POSSESSIVES] if first else []


def is_follow_up(message: str, history: str) -> bool:
    """A short message pointing back at the conversation ("that", "it", "too")."""
    return bool(_topic(history)) and len(words(message)) <= 14 and bool(ANAPHORS & set(words(message)))


def query_for(label: str, style: str) -> str:
    """The search query for a subtask in a style: default, terse, verbose or polite."""
    core = [w for w in words(label) if w not in POSSESSIVES and w not in CUES]
    if style == "terse":
        specific = [w for w in core if w not in GENERIC] or core
        return " ".join(specific[:3])
    if style == "verbose":
        extra = [SYNONYMS[w] for w in core if w in SYNONYMS]
        also = f", also called {', '.join(extra)}" if extra else ""
        return f"I would like to know how to {' '.join(core)} in Pebblestack{also}"
    if style == "polite":
        return f"Could you please tell me how to {' '.join(core)}?"
    return f"how to {' '.join(core)}"


def runner_up(label: str, style: str) -> str | None:
    """The rewrite the rewriter nearly wrote: the query with one near-synonym slipped in
    (None when no word of the query has one)."""
    core = [w for w in words(label) if w not in POSSESSIVES and w not in CUES]
    for w in core:
        if w in SLIPS and style != "verbose":
            return f"{query_for(label, style)} {SLIPS[w]}"
    return None


def query_style(system: str) -> str:
    """The query style the rewriter template asks for."""
    text = system.lower()
    if "two or three keywords" in text:
        return "terse"
    if "adds synonyms" in text:
        return "verbose"
    if "polite, complete question" in text:
        return "polite"
    return "default"


def subtasks(message: str, history: str) -> list[str]:
    """The subtask labels the rewriter writes for a message."""
    parts = clauses(message)
    if is_follow_up(message, history) and parts:
        topic = _topic(history)
        merged = topic + [w for w in label_words(" ".join(parts)) if w not in topic]
        return [" ".join(merged[:7])]
    labels: list[str] = []
    for part in parts:
        label = " ".join(label_words(part))
        if label not in labels:
            labels.append(label)
    return labels


@sim_model("support-bot-rewriter")
def rewriter(req: SimRequest) -> Fields:
    """``{label: query}`` per request of the message, in the template's query style."""
    message, history = _block(req.user_text, "Customer message"), _block(req.user_text, "Conversation so far")
    style = query_style(req.system_text)
    groups: dict[str, object] = {}
    for label in subtasks(message, history):
        best = query_for(label, style)
        alt = runner_up(label, style)
        groups[label] = {best: 1.0, alt: 1.0 - RUNNER_UP} if alt else best
    return Fields(**groups)


# --------------------------------------------------------------------------- signal analysis

SMALL_TALK = frozenset(
    "there hi hello hey thanks thank you so much that fixed it great day going how's how are doing bye "
    "all for today tell me joke about project managers good morning ok that's cheers have nice "
    "awesome the a an your is".split()
)
WEB_CUES = ("right now", "today", "outage", "status page", "anyone else", "zapier", "asana", "make.com",
            "reddit", "compare", "vs", "news")
PROBLEM_CUES = ("error", "not working", "can't", "won't", "broken", "stuck", "fail", "banner", "reset",
                "loop", "slow", "down", "timing out", "times out", "keeps", "missing", "wrong", "late")
BILLING_CUES = ("invoice", "charge", "price", "pricing", "cost", "plan", "seat", "refund", "discount",
                "vat", "renew", "billing", "payment")
"""Keyword cues; they match whole words (``down`` does not match "downgrade"), except the
stems of :data:`_STEM_CUES`, which match the start of a word (``fail``: "failed")."""
NEGATIVE_CUES = {"frustrat": 1.2, "annoying": 1.0, "ridiculous": 1.5, "unacceptable": 1.5, "again": 0.6,
                 "still": 0.6, "!!": 0.8, "angry": 1.5, "terrible": 1.5, "wasted": 1.0, "ugh": 0.8}
POSITIVE_CUES = {"thanks": 1.0, "thank": 1.0, "great": 0.8, "love": 1.2, "awesome": 1.0}


_STEM_CUES = frozenset({"fail", "frustrat", "renew", "charge", "invoice", "seat", "loop", "reset"})


def _has(text: str, cue: str) -> bool:
    """Whether ``cue`` occurs in ``text`` as words (stems may continue: "fail" -> "failed")."""
    tail = "" if cue in _STEM_CUES or not cue[-1].isalnum() else r"\b"
    return re.search(rf"(?<![a-z0-9]){re.escape(cue)}{tail}", text) is not None


def _mood(text: str, cues: Mapping[str, float]) -> float:
    return sum(w for cue, w in cues.items() if _has(text, cue))


def turn_type(message: str, history: str) -> str:
    """how_to, problem, billing, follow_up or small_talk."""
    text = message.lower()
    if is_small_talk(message):
        return "small_talk"
    if is_follow_up(message, history):
        return "follow_up"
    if any(_has(text, cue) for cue in PROBLEM_CUES):
        return "problem"
    if any(_has(text, cue) for cue in BILLING_CUES):
        return "billing"
    return "how_to"


def is_small_talk(message: str) -> bool:
    """Nothing but greetings, thanks and chit-chat."""
    return all(w in SMALL_TALK for w in words(message))


@sim_model("support-bot-signal")
def signal(req: SimRequest) -> Fields:
    """Turn type, sentiment, web-search hint and small talk from cues in the message."""
    message, history = _block(req.user_text, "Customer message"), _block(req.user_text, "Conversation so far")
    text = f" {message.lower()} "
    sentiment = near_ties({
        "negative": -0.9 + _mood(text, NEGATIVE_CUES),
        "neutral": 0.0,
        "positive": -0.9 + _mood(text, POSITIVE_CUES),
    })
    return Fields(
        turn_type=turn_type(message, history),
        sentiment=sentiment,
        web_search_hint=not is_small_talk(message) and any(_has(text, cue) for cue in WEB_CUES),
        is_small_talk=is_small_talk(message),
    )


@sim_model("support-bot-sufficiency")
def sufficiency(req: SimRequest) -> Fields:
    """Sufficient when the message follows up on the conversation so far."""
    message, history = _block(req.user_text, "Customer message"), _block(req.user_text, "Conversation so far")
    return Fields(sufficient=is_follow_up(message, history))


# --------------------------------------------------------------------------- planner

_FRAGMENT = re.compile(r"^\[([A-Z]+-\d+)\] (.*)$", re.MULTILINE)
_ACCOUNT = re.compile(r"^\[account:([a-z.]+)\] (.*)$", re.MULTILINE)


def _material(text: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The prompt's material: (id, text) fragments in order, and the account data."""
    section = text.split("Material:\n", 1)[1] if "Material:\n" in text else ""
    return _FRAGMENT.findall(section), dict(_ACCOUNT.findall(section))


def coverage(label: str, material: Iterable[str]) -> tuple[float, list[str]]:
    """The share of the subtask's key terms found in the material, and the missing
    ones (as the label writes them)."""
    keys = key_terms(label)
    found: set[str] = set()
    for text in material:
        found |= stems(text)
    written = {stem(w): w for w in reversed(words(label))}
    gaps = [written[t] for t in keys if t not in found]
    return (1.0 - len(gaps) / len(keys) if keys else 1.0), gaps


def _best_refs(label: str, frags: list[tuple[str, str]], k: int = 3) -> list[str]:
    """Fragment ids sharing key terms with the subtask, most shared first (ties: listed first)."""
    keys = set(key_terms(label))
    shared = [(len(keys & stems(text)), n, frag_id) for n, (frag_id, text) in enumerate(frags)]
    ranked = sorted((s for s in shared if s[0] > 0), key=lambda s: (-s[0], s[1]))
    return [frag_id for _, _, frag_id in ranked[:k]]


def endpoint_for(label: str) -> str:
    """The account endpoint a subtask about the customer's own account needs, or none."""
    ws = words(label)
    if not POSSESSIVES & set(ws):
        return "none"
    for w in ws:
        if stem(w) in ACCOUNT_NOUNS:
            return ACCOUNT_NOUNS[stem(w)]
    return "none"


def action_logits(label: str, cov: float, theta: float, fetched: Iterable[str]) -> dict[str, float]:
    """The planner's logits for one subtask (before near-tie pruning)."""
    logits = {"COMPOSE": PLAN_GAIN * (cov - theta), "RETRY": 0.0}
    tool = endpoint_for(label)
    if tool != "none" and tool not in set(fetched):
        specific = sum(1 for w in words(label) if w in POSSESSIVES or w in CUES)
        logits["EXECUTE"] = EXECUTE_GAIN * specific
    return logits


def _theta(system: str) -> float:
    found = re.search(r"at least (\d+)%", system)
    return int(found.group(1)) / 100 if found else DEFAULT_THETA


@sim_model("support-bot-planner")
def planner(req: SimRequest) -> Fields:
    """The action for the current subtask, with its task, remaining subtasks, gaps and refs."""
    return _plan(req, _theta(req.system_text))


@sim_model("support-bot-planner-v2")
def planner_v2(req: SimRequest) -> Fields:
    """The planner's next version (the support bot's ``model: v2`` deployment): the same
    answer, with a coverage threshold :data:`V2_THETA_SHIFT` below the prompt's, so a
    subtask with one key term in three missing composes instead of retrying."""
    return _plan(req, _theta(req.system_text) - V2_THETA_SHIFT)


def _plan(req: SimRequest, theta: float) -> Fields:
    text = req.user_text
    position = re.search(r"^Subtask \d+ of \d+", text, re.MULTILINE)
    label = _line(text, position.group(0)) if position else ""
    remaining = _line(text, "Remaining after this one")
    frags, account = _material(text)
    cov, gaps = coverage(label, [t for _, t in frags] + list(account.values()))
    logits = action_logits(label, cov, theta, account)
    refs = _best_refs(label, frags)
    terms = key_terms(label)
    if "thought as a checklist" in req.system_text:
        thought = "; ".join(f"[{' ' if t in gaps else 'x'}] {t}" for t in terms)
    else:
        thought = (
            f"{len(terms) - len(gaps)} of {len(terms)} key terms of '{label}' are in "
            f"the material" + (f"; missing: {', '.join(gaps)}." if gaps else ".")
        )
    return Fields(
        action=near_ties(logits),
        task=label,
        remaining=[] if remaining in ("", "none") else [r.strip() for r in remaining.split(",")],
        gaps=gaps,
        refs=refs,
        tool=endpoint_for(label),
        coverage=round(cov, 3),
        thought=thought,
    )


# --------------------------------------------------------------------------- composer

OPENINGS = {  # by sentiment: the opening and its near-tie runner-up
    "negative": ("Sorry for the trouble, let's get this sorted.",
                 "I'm sorry about the hassle, here is what should help."),
    "neutral": ("Hi! Here's what I found.", "Hello, happy to help with this."),
    "positive": ("Glad to help!", "Happy to help, thanks for the kind words!"),
}
CLOSING = "Let me know if anything is unclear."
CALLBACK_CLOSING = "If you'd rather talk it through, reply CALL and we'll ring you back."
"""The closing when the template asks for "offering a call back" (the ``prompt: v2`` deployment)."""


def _first_sentence(text: str) -> str:
    body = text.split(": ", 1)[1] if ": " in text else text
    return body.split(". ")[0].rstrip(".") + "."


@sim_model("support-bot-composer")
def composer(req: SimRequest) -> Fields:
    """A reply that answers each subtask from its best fragment and cites it."""
    text = req.user_text
    sentiment = _line(text, "Sentiment") or "neutral"
    labels = [s.strip() for s in _line(text, "Subtasks").split(";") if s.strip()]
    frags, account = _material(text)
    body, cited = [], []
    for label in labels:
        if endpoint_for(label) in account:
            continue  # answered from the account data below
        refs = _best_refs(label, frags, k=1)
        if not refs:
            body.append(f"I couldn't find a help-centre article about {label}, so I've passed it to our team.")
        elif refs[0] not in cited:
            cited.append(refs[0])
            body.append(f"{_first_sentence(dict(frags)[refs[0]])} [{refs[0]}]")
    body += [f"On your account: {facts}" for facts in account.values()]
    first, second = OPENINGS.get(sentiment, OPENINGS["neutral"])
    closing = CALLBACK_CLOSING if "offering a call back" in req.system_text else CLOSING
    reply = " ".join(body + [closing])
    return Fields(
        response={f"{first} {reply}": 1.0, f"{second} {reply}": 1.0 - RUNNER_UP},
        selected_refs=cited,
    )


# --------------------------------------------------------------------------- small talk


@sim_model("support-bot-smalltalk")
def smalltalk(req: SimRequest) -> Text:
    """A friendly reply; thanks get thanked back, goodbyes a goodbye."""
    message = _block(req.user_text, "Customer message").lower()
    if "thank" in message:
        return Text({"You're welcome, glad it's working! Anything else I can help with?": 1.0,
                     "Happy to help! Give me a shout if anything else comes up.": 1.0 - RUNNER_UP})
    if "bye" in message or "that's all" in message:
        return Text({"Thanks for stopping by, have a great day!": 1.0})
    if "joke" in message:
        return Text({"Why did the project manager bring a ladder? To reach the stretch goals. "
                     "Anything Pebblestack-related I can help with?": 1.0})
    return Text({"Hi there! I'm the Pebblestack assistant. How can I help today?": 1.0,
                 "Hello! Ask me anything about Pebblestack: projects, time tracking or billing.": 1.0 - RUNNER_UP})


# --------------------------------------------------------------------------- paraphraser

_SYNONYMS = {
    "reply": "answer", "answer": "reply", "help": "assist", "customer": "client", "account": "profile",
    "invoice": "bill", "plan": "subscription", "export": "download", "error": "failure",
    "problem": "issue", "issue": "problem", "change": "modify", "update": "refresh", "check": "verify",
    "settings": "preferences", "team": "group", "project": "workspace", "report": "summary",
    "page": "screen", "open": "launch", "use": "employ", "need": "require", "can": "may",
    "please": "kindly", "thanks": "cheers", "hello": "hi", "quick": "fast", "new": "fresh",
    "let": "allow", "know": "hear", "anything": "something", "unclear": "confusing", "here": "below",
    "found": "located", "get": "obtain", "sorry": "apologies", "trouble": "difficulty",
    "sorted": "resolved", "happy": "glad", "file": "document", "choose": "pick", "click": "press",
    "see": "view", "charge": "fee", "entries": "records", "members": "users", "invited": "added",
    "cannot": "can't", "create": "make", "available": "offered", "every": "each", "monthly": "per-month",
    "today": "now", "task": "item", "tasks": "items", "seats": "licences", "time": "hours",
}
"""Word swaps of the paraphraser (lower-case; the first letter's case is kept)."""
PARAPHRASE_STEP = 1.0
"""Each further swap costs this much logit: at temperature 0 the text comes back
unchanged, and higher temperatures swap more words."""


def _swap(word: str) -> str | None:
    repl = _SYNONYMS.get(word.lower())
    if repl is None:
        return None
    return repl.capitalize() if word[:1].isupper() else repl


@sim_model("support-bot-paraphraser")
def paraphraser(req: SimRequest) -> Text:
    """Paraphrase the user message by swapping words for synonyms: the candidate with
    the first ``j`` swappable words swapped has logit ``-PARAPHRASE_STEP * j``."""
    tokens = re.split(r"(\W+)", req.last_user)
    swappable = [i for i, t in enumerate(tokens) if _swap(t) is not None]
    candidates: dict[str, float] = {}
    for j in range(len(swappable) + 1):
        out = list(tokens)
        for i in swappable[:j]:
            out[i] = _swap(tokens[i]) or tokens[i]
        candidates.setdefault("".join(out), -PARAPHRASE_STEP * j)
    return Text(candidates)
