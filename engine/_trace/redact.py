"""Redaction at write time.

Secrets and personal data are removed from a trace, a cache entry, a log line or a
console line *before* it is written, never later (QUIVER.md section 12): a secret that
passes through a pipeline never reaches disk or a terminal. What is removed is
configured by a :class:`RedactionConfig` (the ``redact:`` block of a spec):

* built-in kinds of secret (:data:`SECRET_KINDS`), each switchable and named in its
  replacement (``[REDACTED:aws_secret]``): provider API keys and tokens (OpenAI,
  Anthropic, AWS key ids, GitHub, Slack, Google, Hugging Face; Stripe, GitLab, npm,
  SendGrid, Twilio), AWS secret access keys, PEM private keys (a GCP service account's
  ``private_key`` among them), bearer tokens, JWTs, passwords in URLs, Azure account
  keys and SAS signatures, ``password=`` / ``secret=`` / ``token=`` assignments and
  e-mail addresses;
* user regular expressions;
* literal strings (the recorder adds the value of the API-key variable it uses);
* field paths, whose whole value is replaced: ``inputs.customer.ssn``,
  ``calls.*.tool.args.password``, ``**.password`` (``*`` matches one key or list
  index, ``**`` any number of them).

Hashes (input hashes, content hashes) are computed on the original values before
redaction: a hash does not reveal the text, and replay compares hashes of live inputs.

The kinds are hand-written patterns, not a detector library. detect-secrets 1.5 (Yelp;
its plugins' regular expressions were the starting point of several here) was measured
on the secrets of ``tests/pipelines/planted_secrets.py`` and on a 19 KB replay: its
regex plugins miss AWS secret keys, Google ``AIza`` keys, bare npm tokens, Azure SAS
signatures and ``password=`` assignments, and take 66 ms per replay (this module's
quick check takes about 0.1 ms); its entropy plugins flag every content hash, UUID,
trace id, sample key and base64 embedding, whose redaction would break replay; and it
reports findings per line rather than spans to replace. Every kind here is anchored on
a literal (a prefix, a key name, a ``://``), so that a string with none of them is
passed over by a substring search (:meth:`Redactor._prechecks`).

What this process logs and prints passes through one boundary as well: see
:func:`redacted_logs`, :func:`redacted_console` and :func:`output_redactor`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .secret_kinds import SECRET_KINDS, Quick, SecretKind, View, has_email

__all__ = ["RedactionConfig", "Redactor", "RedactingFilter", "SecretKind", "SECRET_KINDS", "redact_record",
           "known_secrets_redactor"]

_SEEN_MAX = 65536
"""Strings a :class:`Redactor` remembers the redaction of (keys and repeated values)."""


class RedactionConfig(BaseModel):
    """What to remove before anything is written (the ``redact:`` block of a spec)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    api_keys: bool = True
    """Remove strings shaped like provider API keys (sk-..., AKIA..., ghp_..., xoxb-..., AIza..., hf_...)."""
    bearer_tokens: bool = True
    """Remove ``Bearer <token>`` credentials."""
    emails: bool = True
    """Remove e-mail addresses."""
    aws_secrets: bool = True
    """Remove AWS secret access keys given after their name (``aws_secret_access_key=``, ``SecretAccessKey``)."""
    stripe_keys: bool = True
    """Remove Stripe secret and restricted keys (``sk_live_...``, ``rk_live_...``)."""
    gitlab_tokens: bool = True
    """Remove GitLab tokens (``glpat-...``, ``gldt-...``, ``glrt-...``)."""
    npm_tokens: bool = True
    """Remove npm access tokens (``npm_...``)."""
    sendgrid_keys: bool = True
    """Remove SendGrid API keys (``SG.<id>.<secret>``)."""
    twilio_keys: bool = True
    """Remove Twilio account and API key ids (``AC``/``SK`` and 32 hexadecimal digits)."""
    jwts: bool = True
    """Remove JSON Web Tokens (``eyJ...``, three dot-separated parts)."""
    private_keys: bool = True
    """Remove PEM private key blocks (``-----BEGIN ... PRIVATE KEY-----`` to its END line)."""
    url_passwords: bool = True
    """Remove the password of ``scheme://user:password@host``."""
    azure_keys: bool = True
    """Remove Azure account keys (``AccountKey=``, ``SharedAccessKey=`` in connection strings)."""
    azure_sas: bool = True
    """Remove Azure SAS signatures (``sig=`` in a URL or connection string)."""
    assignments: bool = True
    """Remove the value of ``password=``, ``secret=``, ``token=``, ``api_key=`` (and ``"password": "..."``)."""
    patterns: list[str] = Field(default_factory=list)
    """Extra regular expressions; every match is removed."""
    literals: list[str] = Field(default_factory=list)
    """Exact strings to remove wherever they occur."""
    fields: list[str] = Field(default_factory=list)
    """Field paths whose whole value is removed (``calls.*.tool.args.password``)."""
    replacement: str = "[REDACTED:{kind}]"
    """What a removed value becomes; ``{kind}`` is the rule that matched."""

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
        return value


_Check = Callable[[View], bool]
"""A quick check: true of a text (:class:`View`) when a group's rules could change it."""
_Rule = tuple[re.Pattern[str], str]
"""A compiled rule and its replacement template."""
_Group = tuple[_Check | None, list[_Rule]]
"""Rules that apply together, and their quick check (None: they always run)."""


class Redactor:
    """Applies a :class:`RedactionConfig` to text and to JSON data.

    Every redactor made in a process also adds its literals and patterns to
    :func:`known_secrets_redactor`, which redacts what the process logs and prints.
    """

    def __init__(self, config: RedactionConfig | None = None, *, literals: Iterable[str] = ()) -> None:
        self.config = config or RedactionConfig()
        self.literals = tuple(s for s in literals if s)
        extra_literals = sorted({s for s in (*self.config.literals, *self.literals) if s}, key=len, reverse=True)
        self._groups = self._prechecks(extra_literals)
        self._fields = [_split_path(p) for p in self.config.fields]
        self._user = bool(self.config.patterns)
        self._seen: dict[str, str] = {}
        _KNOWN.add(extra_literals, self.config.patterns)

    def to_json(self) -> dict[str, Any]:
        """The redactor as plain data (its config and extra literals), for
        :meth:`from_json` in another process: a worker redacts what it writes the same way."""
        return {"config": self.config.model_dump(mode="json"), "literals": list(self.literals)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Redactor:
        """The redactor that :meth:`to_json` described."""
        return cls(RedactionConfig.model_validate(data.get("config") or {}), literals=data.get("literals") or ())

    def _replacement(self, kind: str) -> str:
        return self.config.replacement.replace("{kind}", kind)

    def _template(self, kind: str, keep: bool = False) -> str:
        """The replacement of ``kind`` as a :func:`re.sub` template (backslashes as written)."""
        return (r"\g<keep>" if keep else "") + self._replacement(kind).replace("\\", "\\\\")

    def _kind_rules(self, kind: SecretKind) -> list[_Rule]:
        """The compiled rules of a built-in kind. A rule that keeps its key does not
        match a value that is a replacement already (``password=[REDACTED:api_key]``)."""
        done = self.config.replacement.split("{kind}")[0]
        guard = f"(?!{re.escape(done)})" if done else ""
        rules = [(re.compile(p, kind.flags), self._template(kind.name)) for p in kind.patterns]
        rules += [(re.compile(f"(?P<keep>{key}){guard}(?:{value})", kind.flags), self._template(kind.name, True))
                  for key, value in kind.assigned]
        return rules

    def _prechecks(self, literals: list[str]) -> list[_Group]:
        """The rules in groups, in the order they apply, each with a quick check that is
        true of any text the group's rules would change, whether the text is a string or
        the JSON text of data holding that string (None: the group always runs).

        Most strings match no rule, and then the rules need not run. A match of a
        built-in rule holds a literal that JSON writes as it is: a key's prefix right
        before its ``-`` or ``_`` (``sk-``, ``ghp_``), capitals (``AKIA``, ``PRIVATE
        KEY``, the ``J`` of ``eyJ``), a key name before ``=`` or ``:`` and a quote, a
        ``://`` with an ``@``. A substring search costs about 1 ns a character, so the
        checks share a few passes over the text instead of one each (:class:`View`):
        its lowercase form; its capitals alone, a few hundred characters where a search
        costs nothing; its pieces between ``-`` and between ``_``, whose ends are
        compared with the prefixes. Where such a literal is common (``token``, ``AI``,
        a prefix before ``-``), a short regular expression that begins with a literal
        (the regex engine's prefix scan) confirms it. Where JSON escapes what sits
        between a key name and its value (a quote, a tab), the check reads the escaped
        form in JSON text, and does not take JSON's own quotes around keys for a
        string's. ``Bearer`` is looked for alone, in any case, since JSON may escape the
        whitespace after it. A literal is looked for as written and as JSON escapes it.
        An e-mail address is looked for at each ``@``: one address character before it
        and a domain after it. No check scans a character class at every position (an
        alternation of the rules took 1.3 ms on a 19 KB replay, its JSON dump 0.2 ms).
        User patterns are not reasoned about: they run on each string (:meth:`text`),
        and data with any (or with field paths) is always walked (:meth:`encode`).
        """
        groups: list[_Group] = []
        if literals:
            forms = tuple({form for s in literals for form in (s, json.dumps(s)[1:-1])})
            groups.append((Quick(forms).compile(),
                           [(re.compile("|".join(re.escape(s) for s in literals)), self._template("secret"))]))
        for kind in SECRET_KINDS:
            if getattr(self.config, kind.switch):
                groups.append((_any([q.compile() for q in kind.quick] or [has_email]), self._kind_rules(kind)))
        if self.config.patterns:
            groups.append((None, [(re.compile(p), self._template("pattern")) for p in self.config.patterns]))
        return groups

    def _could_change(self, text: str) -> list[_Group]:
        """The groups whose quick check is true of the JSON text ``text``: no other
        group can change a string of the data it is the text of."""
        view = View(text, json=True)
        return [group for group in self._groups if group[0] is None or group[0](view)]

    def text(self, value: str) -> str:
        """Return ``value`` with every matching span replaced."""
        return self._text(value, self._groups)

    def _text(self, value: str, groups: list[_Group]) -> str:
        if not groups:
            return value
        found = self._seen.get(value)
        if found is not None:
            return found
        out = value
        view = View(out)
        for check, rules in groups:
            if check is not None and not check(view):
                continue
            for regex, template in rules:
                out = regex.sub(template, out)
            if out is not view.text:
                view = View(out)
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen[value] = out
        return out

    def data(self, value: Any) -> Any:
        """Return a redacted copy of JSON data (dicts, lists, strings, scalars)."""
        return self._data(value, self._groups)

    def _data(self, value: Any, groups: list[_Group]) -> Any:
        if self._fields:
            return self._walk(value, (), groups)
        return self._walk_all(value, groups)

    def encode(self, value: Any) -> tuple[Any, str]:
        """A redacted copy of JSON data and its JSON text (keys sorted).

        When the text shows that no rule can match (see :meth:`_prechecks`), ``value``
        itself is returned with the text, without walking it string by string; else the
        walk runs the rules whose check the text passed.
        """
        text = json.dumps(value, sort_keys=True)
        groups = self._could_change(text)
        if not groups and not self._fields:
            return value, text
        redacted = self._data(value, groups)
        return redacted, json.dumps(redacted, sort_keys=True)

    def _walk(self, value: Any, path: tuple[str, ...], groups: list[_Group]) -> Any:
        if path and any(_path_matches(pattern, path) for pattern in self._fields):
            return self._replacement("field")
        if isinstance(value, str):
            return self._text(value, groups)
        if isinstance(value, dict):
            return {self._text(k, groups): self._walk(v, (*path, k), groups) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v, (*path, str(i)), groups) for i, v in enumerate(value)]
        return value

    def _walk_all(self, value: Any, groups: list[_Group]) -> Any:
        """:meth:`_walk` without field paths to match (none configured)."""
        if isinstance(value, str):
            return self._text(value, groups)
        if isinstance(value, dict):
            return {self._text(k, groups): self._walk_all(v, groups) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk_all(v, groups) for v in value]
        return value


def _any(checks: list[_Check]) -> _Check:
    if len(checks) == 1:
        return checks[0]
    return lambda view: any(check(view) for check in checks)


def _split_path(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split(".") if part)


def _path_matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_path_matches(rest, path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    return (head == "*" or head == path[0]) and _path_matches(rest, path[1:])


class _KnownSecrets:
    """The literals and patterns of every :class:`Redactor` made in this process, and the
    redactor of the built-in rules with all of them (rebuilt when one is added)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._literals: dict[str, None] = {}
        self._patterns: dict[str, None] = {}
        self._redactor: Redactor | None = None

    def add(self, literals: Iterable[str], patterns: Iterable[str]) -> None:
        new_literals, new_patterns = dict.fromkeys(literals), dict.fromkeys(patterns)
        with self._lock:
            if not (new_literals.keys() <= self._literals.keys() and new_patterns.keys() <= self._patterns.keys()):
                self._literals.update(new_literals)
                self._patterns.update(new_patterns)
                self._redactor = None

    def redactor(self) -> Redactor:
        with self._lock:
            found = self._redactor
            if found is None:
                config = RedactionConfig(literals=list(self._literals), patterns=list(self._patterns))
        if found is None:
            found = Redactor(config)  # adds nothing new: its literals and patterns are known
            with self._lock:
                self._redactor = self._redactor or found
        return found


_KNOWN = _KnownSecrets()


def known_secrets_redactor() -> Redactor:
    """The built-in rules, with the literals and patterns of every :class:`Redactor`
    made in this process so far (a run's ``api_key_env`` value, a spec's ``literals``
    and ``patterns``): what a process's own output is redacted with outside a run."""
    return _KNOWN.redactor()


def redact_record(record: logging.LogRecord, redactor: Redactor) -> None:
    """Redact a log record in place: its message, the exception and stack text it carries.

    The message's format string and arguments are kept when redacting each argument is
    enough (filters that read ``record.msg`` still see it); otherwise the message is
    replaced by its redacted text. An exception becomes its redacted traceback text
    (``exc_text``; ``exc_info`` is cleared so that no handler formats it again). A
    message that cannot be formatted keeps failing where logging reports it (when it is
    emitted), with its parts redacted.
    """
    try:
        message: str | None = record.getMessage()
    except Exception:  # reported by the handler that emits it, as without redaction
        message = None
    if message is None or redactor.text(message) != message:
        _redact_message(record, redactor, message)
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = redactor.text(logging.Formatter().formatException(record.exc_info))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = redactor.text(record.exc_text)
    if record.stack_info:
        record.stack_info = redactor.text(record.stack_info)


def _redact_message(record: logging.LogRecord, redactor: Redactor, message: str | None) -> None:
    def arg(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        text = value if isinstance(value, str) else str(value)
        redacted = redactor.text(text)
        return value if redacted == text and not isinstance(value, str) else redacted

    record.msg = redactor.text(str(record.msg))
    if isinstance(record.args, Mapping):
        record.args = {k: arg(v) for k, v in record.args.items()}
    elif record.args:
        record.args = tuple(arg(v) for v in record.args)
    if message is None:
        return
    try:
        now = record.getMessage()
        kept = redactor.text(now) == now
    except (TypeError, ValueError):  # an argument became text where the format wants a number
        kept = False
    if not kept:
        record.msg, record.args = redactor.text(message), None


class RedactingFilter(logging.Filter):
    """A logging filter that redacts every record (:func:`redact_record`)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record, self.redactor)
        return True
