"""What a right answer is: a spec's ``outcome:`` checks.

::

    outcome:                                  # a list is an `all` group
      - {name: exact, field: answer, equals: {input: answer}, normalize: answer}
      - {name: cites, field: sources, contains: {input: gold_title}}
      - {name: f1, python: metrics.py:token_f1, threshold: 0.5}
      - any:
          - {regex: "^(yes|no)$", field: answer}
          - {judge: {rubric: "Does the answer address the question?"}}

Each check reads the trace's final output (or the ``field`` of it: a dotted path
``answer.text``, list indices included ``items.0``, or a JSON path ``$.items[0].id``)
and compares it with a literal or with a field of the trace's inputs (``{input: NAME}``).
Exactly one kind per check:

* ``equals``: equal (JSON values; strings after ``normalize``);
* ``contains``: the text holds the value (a list: holds it as an element);
* ``regex``: the text matches the pattern (``re.search``);
* ``one_of``: equal to one of a list;
* ``number``: a number within ``tolerance`` (absolute) of the value;
* ``similar``: embedding cosine similarity with the value (the analysis embedder,
  all-MiniLM-L6-v2 by default) at least ``threshold`` (default 0.8); its score is the
  similarity;
* ``python``: ``file.py:function`` (relative to the spec) or ``module:function``, called
  with ``(output, inputs)`` (``takes: trace``: with the whole :class:`~quiver.Trace`); it
  returns a bool, or a score in [0, 1] that passes at ``threshold`` (default 0.5);
* ``judge``: an LLM judge with a ``rubric``, asked at the spec's endpoint (its own
  ``model``, default the spec's) to answer JSON ``{"verdict": "pass"|"fail", "score":
  0..1, "reason": ...}``; passes on its score at ``threshold`` (default 0.5), else on its
  verdict. Its request and answer are recorded in the trace's outcome and served on
  replay when the judged output is the recorded one;
* ``all`` / ``any``: a group of checks, passing when every one / one of them passes.

A check that raises or cannot be read is ``error``: never a pass, counted apart.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["CheckSpec", "InputRef", "JudgeSpec", "KINDS", "OutcomeSpec", "has_judge", "input_refs", "outcome_spec"]

KINDS = ("equals", "contains", "regex", "one_of", "number", "similar", "python", "judge", "all", "any")
"""Every kind of check, one of which each check gives."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


class InputRef(_Spec):
    """A field of the trace's inputs, compared with in place of a literal."""

    input: str = Field(min_length=1)
    """The input field's name (a dotted path for nested inputs)."""


class JudgeSpec(_Spec):
    """An LLM judge of the final output."""

    rubric: str = Field(min_length=1, max_length=20_000)
    """What a right answer is, in the judge's words."""
    model: str | None = None
    """The judge's model at the spec's endpoint (default: the spec's ``llm.model``)."""
    reference: Any = None
    """A reference answer shown to the judge: a literal or ``{input: NAME}``."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """The judge's sampling temperature."""


def _ref(value: Any) -> Any:
    """``{input: NAME}`` as an :class:`InputRef`; anything else as it is."""
    if isinstance(value, dict) and set(value) == {"input"}:
        return InputRef.model_validate(value)
    return value


class CheckSpec(_Spec):
    """One outcome check, or a group of them (see the module docstring)."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    """The check's name in reports (default: its kind, with its place in a group)."""
    field: str | None = Field(default=None, min_length=1)
    """What of the final output is checked: a dotted path (``answer``, ``items.0.id``) or a
    JSON path (``$.items[0].id``); default the whole output."""
    equals: Any = None
    """Equal to this value (a literal or ``{input: NAME}``)."""
    contains: Any = None
    """The text (or list) holds this value."""
    regex: str | None = None
    """The text matches this pattern (``re.search``)."""
    one_of: Any = None
    """Equal to one of these values (a list, or ``{input: NAME}`` naming a list)."""
    number: Any = None
    """A number within ``tolerance`` of this value."""
    similar: Any = None
    """Embedding cosine similarity with this text at least ``threshold``."""
    python: str | None = Field(default=None, pattern=r"^[^:]+:[A-Za-z_][A-Za-z0-9_.]*$")
    """A Python check, ``file.py:function`` or ``module:function``."""
    judge: JudgeSpec | None = None
    """An LLM judge."""
    all: list[CheckSpec] | None = Field(default=None, min_length=1, max_length=1000)
    """Passes when every check of the group passes."""
    any: list[CheckSpec] | None = Field(default=None, min_length=1, max_length=1000)
    """Passes when one check of the group passes."""
    normalize: Literal["none", "casefold", "answer"] = "none"
    """How strings compare in ``equals``, ``contains`` and ``one_of``: as they are,
    case-folded with runs of whitespace as one space, or ``answer``: the normalisation
    of the QA literature (SQuAD, HotpotQA: lower case, punctuation and the articles a,
    an, the removed, whitespace collapsed)."""
    tolerance: float = Field(default=0.0, ge=0.0)
    """For ``number``: the largest absolute difference that passes."""
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    """For ``similar`` (default 0.8), ``python`` and ``judge`` (default 0.5): the score
    that passes."""
    takes: Literal["output", "trace"] = "output"
    """For ``python``: call the function with ``(output, inputs)``, or with the trace."""

    @field_validator("equals", "contains", "one_of", "number", "similar", mode="before")
    @classmethod
    def _references(cls, value: Any) -> Any:
        return _ref(value)

    @model_validator(mode="after")
    def _one_kind(self) -> CheckSpec:
        given = [k for k in KINDS if k in self.model_fields_set]
        if len(given) != 1:
            raise ValueError(f"a check gives exactly one of {', '.join(KINDS)}; "
                             + (f"this one gives {', '.join(given)}" if given else "this one gives none"))
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None
        if self.kind == "one_of" and not isinstance(self.one_of, (list, InputRef)):
            raise ValueError("one_of takes a list of values or {input: NAME}")
        if self.kind in ("all", "any") and self.field is not None:
            raise ValueError(f"field is given to the checks of an {self.kind!r} group, not to the group")
        return self

    @property
    def kind(self) -> str:
        """Which of :data:`KINDS` this check is."""
        return next(k for k in KINDS if k in self.model_fields_set)

    @property
    def members(self) -> list[CheckSpec]:
        """The checks of a group (empty for a single check)."""
        return list(self.all or self.any or [])

    def label(self, place: str = "") -> str:
        """The check's name in reports."""
        return self.name or (f"{place}{self.kind}" if place else self.kind)

    def pass_threshold(self) -> float:
        """The score at which a scored check passes."""
        if self.threshold is not None:
            return self.threshold
        return 0.8 if self.kind == "similar" else 0.5


OutcomeSpec = CheckSpec
"""A spec's ``outcome:``: one check or group (a list given in the spec is an ``all``
group, see :func:`outcome_spec`)."""


def outcome_spec(value: Any) -> Any:
    """A spec's ``outcome:`` value as one check: a list becomes an ``all`` group."""
    if isinstance(value, list):
        return {"all": value}
    return value


def has_judge(check: CheckSpec) -> bool:
    """Whether a check (or one of its group) asks an LLM judge."""
    return check.judge is not None or any(has_judge(m) for m in check.members)


def input_refs(check: CheckSpec, where: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
    """Every ``{input: NAME}`` a check refers to, with where it is (a path of keys under
    the spec's ``outcome:``)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for key in ("equals", "contains", "one_of", "number", "similar"):
        value = getattr(check, key)
        if isinstance(value, InputRef):
            found.append(((*where, key, "input"), value.input))
    if check.judge is not None and isinstance(_ref(check.judge.reference), InputRef):
        found.append(((*where, "judge", "reference", "input"), _ref(check.judge.reference).input))
    for group in ("all", "any"):
        for i, member in enumerate(getattr(check, group) or []):
            found += input_refs(member, (*where, group, i))
    return found
