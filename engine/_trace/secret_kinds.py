"""The built-in kinds of secret (:data:`SECRET_KINDS`) and their quick checks.

Each kind has the :class:`~quiver._trace.redact.RedactionConfig` switch that turns it
on, the kind named in its replacement (``[REDACTED:aws_secret]``), its rules (whole
matches replaced, or the value after a key kept: ``password=[REDACTED:assignment]``)
and quick checks (:class:`Quick`) one of which is true of any text its rules would
change, whether the text is a string or the JSON text of data holding the string: most
text holds no secret, and the checks let it pass without running the rules (see
:meth:`~quiver._trace.redact.Redactor._prechecks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["SECRET_KINDS", "SecretKind", "Quick", "View", "has_email"]

_KEYED = re.IGNORECASE | re.ASCII
"""Flags of the rules anchored on a key name (``password=``, ``AccountKey=``)."""
_ASSIGNED_NAMES = (r"(?:passw(?:or)?d|passphrase|secret(?:[_-]?(?:access[_-]?)?key)?|token|api[_-]?key"
                   r"|private[_-]?key|access[_-]?key)")
_ASSIGNED_VALUE = (r"""(?!(?:[0-9.]+|None|null|nil|true|false|True|False|undefined)(?![^\s"'&,;<>]))(?![{$%*])"""
                   r"""(?:(?<=["'])[^"'\n]+|[^\s"'&,;<>\\]{3,})""")
"""A quoted value up to its closing quote, or a bare one of three characters or more;
not a plain number (``token=512`` is a count), nor a null or a boolean
(``first_token=None`` in a repr), nor a placeholder (``{token}``, ``$TOKEN``,
``%(token)s``, ``***``)."""
_AWS_NAMES = r"(?:aws[_-]?)?secret[_-]?access[_-]?key|aws[_-]?secret(?:[_-]?key)?"
_PEM_END = r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"
"""Where a word-like secret may begin: not after a letter or digit, except the one of an
escaped line break or tab (``\\n``: text that holds JSON text)."""
_CAPITALS = bytes(c for c in range(256) if not (65 <= c <= 90 or c == 46))
"""What :attr:`View.capitals` deletes: all but the capital letters and the dot."""


class View:
    """A text as the quick checks read it: as it is, in lowercase, its capitals (the
    capital letters and dots alone, in order), the pieces of it that end right before a
    ``-`` or a ``_`` with a key's prefix (:data:`_BEFORE`), and whether a word occurs in
    one of these forms; each made once, when a check first asks for it. ``json``: the
    text is the JSON text of data (:meth:`~quiver._trace.redact.Redactor.encode`), not a string of it."""

    __slots__ = ("text", "json", "_low", "_capitals", "_before", "_found")

    def __init__(self, text: str, json: bool = False) -> None:
        self.text, self.json = text, json
        self._low: str | None = None
        self._capitals: str | None = None
        self._before: dict[str, list[str]] = {}
        self._found: dict[tuple[str, str], bool] = {}

    @property
    def low(self) -> str:
        if self._low is None:
            self._low = self.text.lower()
        return self._low

    @property
    def capitals(self) -> str:
        if self._capitals is None:
            self._capitals = self.text.encode("utf-8", "ignore").translate(None, _CAPITALS).decode("ascii")
        return self._capitals

    def has(self, word: str, form: str) -> bool:
        """Whether ``word`` occurs in the form ``form`` of the text."""
        key = (word, form)
        found = self._found.get(key)
        if found is None:
            src = self.low if form == "low" else self.capitals if form == "capitals" else self.text
            found = self._found[key] = word in src
        return found

    def ends_before(self, sep: str, words: tuple[str, ...]) -> bool:
        """Whether one of ``words`` (of :data:`_BEFORE`) comes right before a ``sep``."""
        pieces = self._before.get(sep)
        if pieces is None:
            prefixes = _BEFORE[sep]
            pieces = self._before[sep] = [p for p in self.text.split(sep)[:-1] if p.endswith(prefixes)]
        return any(piece.endswith(words) for piece in pieces)


def _sep(quote: str, space: str) -> str:
    """What follows a key name before its value: a quote, spaces, then ``=``, or ``:``
    and a quote; ``quote`` and ``space`` are how the text holds them."""
    return f"(?:{quote})?(?:{space})*(?:=|:(?:{space})*(?:{quote}))"


_RAW_SEP = _sep(r"[\"']", r"[ \t]")
_JSON_SEP = _sep(r"\\\"|'", r"[ \t]|\\t")
"""After a key name in the JSON text of a string: a quote of the string is ``\"`` there
(a bare ``"`` is JSON's own, around keys and values), a tab ``\t``."""


@dataclass(frozen=True)
class Quick:
    """A cheap test that is true of any text a kind's rules would change, whether the
    text is a string or the JSON text of data holding that string (see
    :meth:`Redactor._prechecks`).

    It is true when one of ``gate``'s characters occurs in the text (when there is a
    gate), one of ``words`` occurs in the form ``form`` of it (``text``, ``low`` its
    lowercase form, ``capitals`` its capital letters and dots alone), or, with
    ``before``, right before that character, and the regular expression ``then`` (if
    any) is found in the text (lowercase for ``low``); ``keyed``: ``then`` is a key
    name, followed by a separator as the text holds it (:data:`_RAW_SEP`,
    :data:`_JSON_SEP`).
    """

    words: tuple[str, ...]
    then: str | None = None
    form: Literal["text", "low", "capitals"] = "text"
    before: str = ""
    gate: str = ""
    keyed: bool = False

    def compile(self) -> Callable[[View], bool]:
        """The test, as a function of a :class:`View`."""
        words, form, before, gate = self.words, self.form, self.before, self.gate
        raw = json = re.compile(self.then) if self.then else None
        if self.keyed:
            raw, json = re.compile(f"(?:{self.then}){_RAW_SEP}"), re.compile(f"(?:{self.then}){_JSON_SEP}")

        def check(view: View) -> bool:
            text = view.text
            if gate and not any(c in text for c in gate):
                return False
            if before:
                found = view.ends_before(before, words)
            else:
                found = any(view.has(w, form) for w in words)
            then = json if view.json else raw
            return found and (then is None or then.search(view.low if form == "low" else text) is not None)

        return check


@dataclass(frozen=True)
class SecretKind:
    """One built-in kind of secret: the :class:`RedactionConfig` switch that turns it on,
    its rules, and how its quick check finds text it could match."""

    name: str
    """The kind in the replacement: ``[REDACTED:<name>]``."""
    switch: str
    """The :class:`RedactionConfig` field that turns the kind on or off."""
    what: str
    """What it matches, for people."""
    patterns: tuple[str, ...] = ()
    """Regular expressions whose whole match is replaced."""
    assigned: tuple[tuple[str, str], ...] = ()
    """``(key, value)`` pairs: a match of ``key`` followed by ``value``; only the value
    is replaced (``password=[REDACTED:assignment]``)."""
    quick: tuple[Quick, ...] = ()
    """The quick checks, one of which is true of any text the rules would change."""
    flags: int = 0


_KEYS = "|".join(f"(?<={name})" for name in ("api_key", "api-key", "apikey", "private_key", "private-key",
                                                 "privatekey", "access_key", "access-key", "accesskey"))

SECRET_KINDS: tuple[SecretKind, ...] = (
    SecretKind(
        "private_key", "private_keys", "PEM private key blocks (RSA, EC, DSA, OpenSSH, PGP, PKCS#8), also "
        "with their line breaks escaped as \\n (a GCP service account's private_key)",
        patterns=(rf"-----BEGIN[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----(?:.*?{_PEM_END}|(?:[A-Za-z0-9+/=\s]"
                  r"|\\[nr])*)",),
        quick=(Quick(("PRIVATEKEY",), "PRIVATE KEY", form="capitals"),), flags=re.DOTALL,
    ),
    SecretKind(
        "api_key", "api_keys", "OpenAI and Anthropic sk-..., AWS key ids AKIA/ASIA..., GitHub gh?_ and "
        "github_pat_, Slack xox?-, Google AIza..., Hugging Face hf_",
        patterns=(r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_\-]{16,}", r"AKIA[0-9A-Z]{16}", r"ASIA[0-9A-Z]{16}",
                  r"gh[pousr]_[A-Za-z0-9]{30,}", r"github_pat_[A-Za-z0-9_]{30,}", r"xox[abposr]-[A-Za-z0-9\-]{10,}",
                  r"AIza[0-9A-Za-z\-_]{35}", r"hf_[A-Za-z0-9]{30,}"),
        quick=(Quick(("sk",), r"sk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_\-]{16}", before="-"),
               Quick(("AKIA", "ASIA"), r"A[KS]IA[0-9A-Z]{16}", form="capitals"),
               Quick(("ghp", "gho", "ghu", "ghs", "ghr"), r"gh[pousr]_[A-Za-z0-9]{30}", before="_"),
               Quick(("github",), "github_pat_", before="_"),
               Quick(("xoxa", "xoxb", "xoxp", "xoxo", "xoxs", "xoxr"), before="-"),
               Quick(("AI",), "AIza", form="capitals"), Quick(("hf",), "hf_[A-Za-z0-9]{30}", before="_")),
    ),
    SecretKind(
        "stripe_key", "stripe_keys", "Stripe secret and restricted keys sk_live_, rk_live_ (and _test_)",
        patterns=(r"[rs]k_(?:live|test)_[0-9A-Za-z]{24,}",),
        quick=(Quick(("sk", "rk"), r"k_(?:live|test)_", before="_"),),
    ),
    SecretKind(
        "gitlab_token", "gitlab_tokens", "GitLab tokens glpat-, gldt-, glrt-, gloas-, ...",
        patterns=(r"gl(?:pat|dt|ft|rt|oas|ptt|cbt|soat|imt|agent)-[A-Za-z0-9_\-]{20,}",),
        quick=(Quick(("glpat", "gldt", "glft", "glrt", "gloas", "glptt", "glcbt", "glsoat", "glimt", "glagent"),
                     before="-"),),
    ),
    SecretKind(
        "npm_token", "npm_tokens", "npm access tokens npm_...",
        patterns=(r"npm_[A-Za-z0-9]{36}",), quick=(Quick(("npm",), "npm_[A-Za-z0-9]{36}", before="_"),),
    ),
    SecretKind(
        "sendgrid_key", "sendgrid_keys", "SendGrid API keys SG.<22>.<43>",
        patterns=(r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",),
        quick=(Quick(("SG.",), r"SG\.[A-Za-z0-9_\-]{22}\.", form="capitals"),),
    ),
    SecretKind(
        "twilio_key", "twilio_keys", "Twilio account and API key ids AC/SK + 32 hex digits",
        patterns=(rf"{_START}(?:AC|SK)[0-9a-f]{{32}}(?![A-Za-z0-9])",),
        quick=(Quick(("AC",), "AC[0-9a-f]{32}", form="capitals"), Quick(("SK",), "SK[0-9a-f]{32}", form="capitals")),
    ),
    SecretKind(
        "bearer", "bearer_tokens", "Bearer <token> credentials",
        patterns=(rf"{_START}(?i:bearer)\s+[A-Za-z0-9\-._~+/]+=*",), quick=(Quick(("bearer",), form="low"),),
    ),
    SecretKind(
        "jwt", "jwts", "JSON Web Tokens eyJ<header>.<payload>.<signature>",
        patterns=(r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*",),
        quick=(Quick(("J",), r"eyJ[A-Za-z0-9_\-]{10,}\.", form="capitals"),),
    ),
    SecretKind(
        "url_password", "url_passwords", "the password of scheme://user:password@host",
        assigned=((r"\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/?#@\"'<>\[\]]{0,256}:", r"[^\s/?#@\"'<>]{1,256}(?=@)"),),
        quick=(Quick(("://",), gate="@"),),
    ),
    SecretKind(
        "aws_secret", "aws_secrets", "AWS secret access keys (40 characters) after aws_secret_access_key, "
        "SecretAccessKey, aws_secret, ...",
        assigned=((rf"{_START}(?:{_AWS_NAMES})[\"']?[ \t]*[:=][ \t]*[\"']?",
                   r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),),
        quick=(Quick(("secret",), r"secret(?:[_-]?access)?(?:[_-]?key)?(?:\\?[\"'])?(?:[ \t]|\\t)*[:=]", form="low"),),
        flags=_KEYED,
    ),
    SecretKind(
        "azure_key", "azure_keys", "Azure storage and service bus keys: AccountKey=, SharedAccessKey=",
        assigned=((rf"{_START}(?:AccountKey|SharedAccessKey)[ \t]*=[ \t]*", r"[A-Za-z0-9+/]{20,}={0,2}"),),
        quick=(Quick(("key",), r"key(?:(?<=accountkey)|(?<=sharedaccesskey))(?:[ \t]|\\t)*=", form="low", gate="="),),
        flags=_KEYED,
    ),
    SecretKind(
        "azure_sas", "azure_sas", "Azure SAS signatures: sig= in a URL or connection string",
        assigned=((r"[?&;]sig=", r"[A-Za-z0-9%+/=]{16,}"),), quick=(Quick(("sig=",), gate="="),),
    ),
    SecretKind(
        "assignment", "assignments", "password=, secret=, token=, api_key=, ... and \"password\": \"...\" "
        "(a quoted value after a colon); not a plain number",
        assigned=((rf"(?<![\w.\-])[\w.\-]*?{_ASSIGNED_NAMES}[\"']?[ \t]*(?:=[ \t]*[\"']?|:[ \t]*[\"'])",
                   _ASSIGNED_VALUE),),
        quick=(Quick(("pass",), "pass(?:word|wd|phrase)", form="low", keyed=True),
               Quick(("secret",), r"secret(?:[_-]?(?:access[_-]?)?key)?", form="low", keyed=True),
               Quick(("token",), "token", form="low", keyed=True),
               Quick(("key",), f"key(?:{_KEYS})", form="low", keyed=True)),
        flags=_KEYED,
    ),
    SecretKind(
        "email", "emails", "e-mail addresses",
        patterns=(r"(?<!\\)[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",),
    ),
)
"""The built-in kinds, in the order they are applied (a private key block before the
keys it could hold, a bearer token before the JWT it carries, e-mail addresses last)."""

_BEFORE = {sep: tuple(w for kind in SECRET_KINDS for q in kind.quick if q.before == sep for w in q.words)
           for sep in ("-", "_")}
"""The prefixes the quick checks look for right before a ``-`` and before a ``_``."""

_EMAIL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")


def has_email(view: View) -> bool:
    """Whether some ``@`` in the text has an address character before it and a domain
    after it: true wherever the e-mail rule matches."""
    text = view.text
    at = text.find("@")
    while at != -1:
        if at > 0 and text[at - 1] in _EMAIL_CHARS and _EMAIL_DOMAIN.match(text, at + 1):
            return True
        at = text.find("@", at + 1)
    return False
