"""Inline prompts: a message of an LLM request selected without a registered template.

A prompt written inline in an SDK call (``messages=[{"role": "system", ...}]``,
``instructions=...``, Anthropic's ``system=...``) has no template id, so a swap names
the message instead, in the request as the replay contract records it (its assembled
``(role, text)`` messages and their fragment hashes):

* ``role`` and ``index``: the ``index``-th message of that role (0: the first);
* ``fragment``: the message whose fragment hash starts with this (at least 8 hex digits);
* ``contains``: the message whose text contains this text (it must be in exactly one).

:class:`MessageSwap` is a selector and the replacement text: a replay applies it to the
target's LLM requests, in each wire format's own field (a system message of the chat
format, the Responses API's ``instructions``, Anthropic's ``system``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quiver.perturbations._registry import OperatorError

__all__ = ["MessageSelector", "MessageSwap", "MIN_FRAGMENT"]

MIN_FRAGMENT = 8
"""The fewest hex digits of a fragment hash a selector may give."""


@dataclass(frozen=True)
class MessageSelector:
    """Which message of a request (see the module docstring); exactly one way is given."""

    role: str | None = None
    index: int | None = None
    fragment: str | None = None
    contains: str | None = None

    @classmethod
    def parse(cls, value: Mapping[str, Any]) -> MessageSelector:
        """A selector from a spec's mapping (``{role: system, index: 0}``, ``{fragment: ...}``,
        ``{contains: ...}``).

        Raises:
            OperatorError: Not exactly one way of selecting, or a value of the wrong kind.
        """
        unknown = sorted(set(value) - {"role", "index", "fragment", "contains"})
        if unknown:
            raise OperatorError(f"message selector: unknown key(s) {', '.join(unknown)}; give role (and index), "
                                "fragment or contains")
        ways = [k for k in ("role", "fragment", "contains") if value.get(k) is not None]
        if len(ways) != 1:
            raise OperatorError("message selector: give exactly one of role (with index, default 0), fragment "
                                f"(a fragment hash's first {MIN_FRAGMENT}+ hex digits) and contains (a text found "
                                "in exactly one message)")
        index = value.get("index")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0
                                  or ways != ["role"]):
            raise OperatorError("message selector: index goes with role and is a whole number >= 0")
        text = value[ways[0]]
        if not isinstance(text, str) or not text.strip():
            raise OperatorError(f"message selector: {ways[0]} must be a non-empty string")
        if ways == ["fragment"] and (len(text) < MIN_FRAGMENT or any(c not in "0123456789abcdef" for c in text)):
            raise OperatorError(f"message selector: fragment {text!r} must be at least {MIN_FRAGMENT} lowercase "
                                "hex digits of a recorded fragment hash")
        return cls(role=value.get("role"), index=index if ways == ["role"] else None,
                   fragment=value.get("fragment"), contains=value.get("contains"))

    def describe(self) -> str:
        """The selector in words (``the system message #0``, ``the message containing '...'``)."""
        if self.role is not None:
            return f"the {self.role} message #{self.index or 0}"
        if self.fragment is not None:
            return f"the message of fragment {self.fragment}"
        return f"the message containing {self.contains!r}"

    def matches(self, messages: Sequence[tuple[str, str]], fragments: Sequence[str] = ()) -> list[int]:
        """The indices of the messages this selector picks in a request."""
        if self.role is not None:
            of_role = [i for i, (role, _) in enumerate(messages) if role == self.role]
            k = self.index or 0
            return [of_role[k]] if k < len(of_role) else []
        if self.fragment is not None:
            return [i for i, h in enumerate(fragments) if h.startswith(self.fragment)]
        assert self.contains is not None
        return [i for i, (_, text) in enumerate(messages) if self.contains in text]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("role", self.role), ("index", self.index), ("fragment", self.fragment),
                                  ("contains", self.contains)) if v is not None}


@dataclass(frozen=True)
class MessageSwap:
    """A selected message and the text that replaces it."""

    selector: MessageSelector
    text: str

    def find(self, messages: Sequence[tuple[str, str]], fragments: Sequence[str] = ()) -> int | None:
        """The one message of a request to replace, or None when the selector picks none or several."""
        found = self.selector.matches(messages, fragments)
        return found[0] if len(found) == 1 else None
