"""Output-mode operators: they perturb the recorded output of the target call.

``override``, ``bool_flip`` and ``categorical_flip`` are binary (their stratum is
decided by value); ``list_edit``, ``numeric_edit`` and ``text_edit`` are continuous
(decided by the target's distance). Every operator addresses a ``field`` of the output by a dotted
path into nested objects (``"sufficient"``, ``"plan.action"``); ``field=None`` is the
whole output. The recorded output is never modified: operators work on a deep copy.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from quiver._canonical import canonical_json
from quiver.perturbations._fields import field_spec, get_field, keys_text, set_field
from quiver.perturbations._logprobs import logprob_alternatives, same_value
from quiver.perturbations._registry import (
    ANY_VALUE,
    FieldTouch,
    Magnitude,
    Operator,
    OperatorContext,
    OperatorError,
    OperatorParams,
    operator,
)

__all__ = [
    "Override",
    "Replace",
    "BoolFlip",
    "CategoricalFlip",
    "ListEdit",
    "NumericEdit",
    "TextEdit",
    "logprob_alternatives",
]

_SCALARS = (str, bool, int, float, type(None))


def _require(value: Any, kinds: tuple[type, ...], what: str, op: str, field: str | None) -> None:
    if not isinstance(value, kinds):
        where = f"field '{field}'" if field else "the output"
        raise OperatorError(
            f"operator '{op}' applies to {what}; {where} of this call is "
            f"{type(value).__name__} ({json.dumps(value, default=str)[:60]})"
        )


class _FieldParams(OperatorParams):
    field: str | None = None
    """Dotted path of the field to perturb in an object output ("plan.action");
    null for the whole output."""


class _FieldOperator(Operator):
    """An operator on one field of the output (``params.field``; none: the whole output)."""

    params: _FieldParams

    def fields_touched(self) -> list[FieldTouch]:
        """The field it edits, its new value not known until it runs."""
        return [FieldTouch(self.params.field)] if self.params.field else []


class OverrideParams(OperatorParams):
    """Parameters of ``override``."""

    set: dict[str, Any] = Field(min_length=1)
    """Dotted field path -> the value to force it to (at least one)."""


@operator("override")
class Override(Operator):
    """Force fields to given values. A no-op when they all already had them."""

    mode = "output"
    binary = True
    Params = OverrideParams
    params: OverrideParams

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with every field of ``set`` set to its value.

        A field the output lacks may be set only when the graph spec declares it.
        """
        result = output
        for path, value in self.params.set.items():
            declared = field_spec(ctx.spec, path) is not None
            result = set_field(result, path, value, self.name, create=declared)
        return copy.deepcopy(result)

    def fields_touched(self) -> list[FieldTouch]:
        """Every field of ``set``, with its value."""
        return [FieldTouch(path, value) for path, value in self.params.set.items()]

    def is_noop(self, output: Any, perturbed: Any, ctx: OperatorContext) -> bool:
        """Every forced field already had its value in the recorded output."""
        for path, value in self.params.set.items():
            try:
                if not same_value(get_field(output, path, self.name), value):
                    return False
            except OperatorError:
                return False
        return True


# --------------------------------------------------------------------------- identity


class IdentityParams(OperatorParams):
    """``identity`` takes no parameters."""


@operator("identity")
class Identity(Operator):
    """Serve the recorded output unchanged: the control replay of output perturbations.

    Everything upstream and the target are as recorded; everything downstream runs live
    with the replay's own samples, so its pairs measure the downstream noise of exactly
    the replays the node's output perturbations make (a campaign's control replays).
    """

    mode = "output"
    binary = True
    Params = IdentityParams
    params: IdentityParams

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """A copy of the recorded output."""
        return copy.deepcopy(output)

    def is_noop(self, output: Any, perturbed: Any, ctx: OperatorContext) -> bool:
        """Always: nothing was changed."""
        return True


# --------------------------------------------------------------------------- replace


class ReplaceParams(OperatorParams):
    """Parameters of ``replace``."""

    value: Any
    """The output served in place of the recorded one (any JSON value)."""


@operator("replace")
class Replace(Operator):
    """Serve another whole output in place of the recorded one: a step's output taken
    from another run (a passing run of the same input, as ``quiver localize``
    transplants it), or a value written by hand. A no-op when it equals the recorded one.
    """

    mode = "output"
    binary = True
    Params = ReplaceParams
    params: ReplaceParams

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """A copy of ``value``."""
        return copy.deepcopy(self.params.value)

    def is_noop(self, output: Any, perturbed: Any, ctx: OperatorContext) -> bool:
        """The recorded output already was ``value``."""
        return canonical_json(output) == canonical_json(self.params.value)


# --------------------------------------------------------------------------- bool_flip


class BoolFlipParams(_FieldParams):
    """Parameters of ``bool_flip``."""


@operator("bool_flip")
class BoolFlip(_FieldOperator):
    """Negate a boolean field."""

    mode = "output"
    binary = True
    Params = BoolFlipParams
    params: BoolFlipParams

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with the field negated; the field must be a bool."""
        value = get_field(output, self.params.field, self.name)
        _require(value, (bool,), "a boolean (true/false)", self.name, self.params.field)
        return set_field(output, self.params.field, not value, self.name)


# --------------------------------------------------------------------------- categorical_flip


class CategoricalFlipParams(_FieldParams):
    """Parameters of ``categorical_flip``."""

    omitted_when_none = ("allow_unseen",)

    to: Any = None
    """The class to flip to (strategy "value"); giving it selects that strategy."""
    strategy: Literal["value", "logprobs", "next"] | None = None
    """How the new class is chosen: "value" (params.to), "logprobs" (the next-most-likely
    class in the recorded token logprobs), "next" (the next declared category, cyclic).
    Default: "value" when `to` is given, else "logprobs" when the recorded logprobs
    offer another class, else "next"."""
    allow_unseen: bool | None = None
    """Allow a `to` that no baseline output of the target holds in the field (a campaign
    refuses one before its first replay otherwise: a misspelt class is no perturbation
    the pipeline could have seen)."""

    @model_validator(mode="before")
    @classmethod
    def _to_selects_value(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "to" in data and data.get("strategy") is None:
            return {**data, "strategy": "value"}
        return data

    @model_validator(mode="after")
    def _strategy_and_to(self) -> CategoricalFlipParams:
        given = "to" in self.model_fields_set
        if self.strategy == "value" and not given:
            raise ValueError("strategy 'value' needs the class to flip to in 'to'")
        if self.strategy in ("logprobs", "next") and given:
            raise ValueError(f"'to' is only used by strategy 'value'; strategy '{self.strategy}' chooses the class")
        if given and not isinstance(self.to, _SCALARS):
            raise ValueError(f"'to' must be a string, number, boolean or null; got {type(self.to).__name__}")
        if self.allow_unseen is not None and not given:
            raise ValueError("'allow_unseen' is only used with 'to' (the class to flip to)")
        return self


@operator("categorical_flip")
class CategoricalFlip(_FieldOperator):
    """Flip a categorical field to another class (QUIVER.md §11: the next-most-likely)."""

    mode = "output"
    binary = True
    Params = CategoricalFlipParams
    params: CategoricalFlipParams

    def fields_touched(self) -> list[FieldTouch]:
        """The flipped field, with ``to`` when it is given (its other strategies pick the
        class when they run)."""
        if not self.params.field:
            return []
        return [FieldTouch(self.params.field, self.params.to if self.params.to is not None else ANY_VALUE)]

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with the field set to the class the strategy chooses."""
        path = self.params.field
        value = get_field(output, path, self.name)
        _require(value, _SCALARS, "a categorical value (string, number, boolean)", self.name, path)
        spec = field_spec(ctx.spec, path)
        categories = spec.categories if spec is not None else None
        return set_field(output, path, self._choose(output, value, categories, ctx), self.name)

    def _choose(self, output: Any, value: Any, categories: list[Any] | None, ctx: OperatorContext) -> Any:
        strategy = self.params.strategy
        if strategy == "value":
            if categories and not any(same_value(self.params.to, c) for c in categories):
                raise OperatorError(
                    f"operator '{self.name}' to={self.params.to!r} is not a declared category of "
                    f"{self._where(ctx)}; categories: {keys_text(categories)}"
                )
            return self.params.to
        if strategy in (None, "logprobs") and ctx.logprobs:
            alternatives = logprob_alternatives(output, self.params.field, ctx.logprobs, categories)
            if alternatives:
                return alternatives[0][0]
        if not categories:
            raise OperatorError(
                f"operator '{self.name}' cannot choose a class for {self._where(ctx)}: the graph "
                "declares no categories for it and the recorded logprobs offer no other class; "
                "declare its categories in the graph, or give params.to"
            )
        return _next_category(value, categories)

    def _where(self, ctx: OperatorContext) -> str:
        return f"node '{ctx.node}' field '{self.params.field}'" if self.params.field else f"node '{ctx.node}'"


def _next_category(value: Any, categories: Sequence[Any]) -> Any:
    """The category after ``value`` (cyclic); the first one when ``value`` is not declared."""
    for i, category in enumerate(categories):
        if same_value(category, value):
            return categories[(i + 1) % len(categories)]
    return categories[0]


# --------------------------------------------------------------------------- list_edit


class ListEditParams(_FieldParams):
    """Parameters of ``list_edit``."""

    action: Literal["remove", "reorder", "add", "truncate"]
    """remove: drop elements at random positions; reorder: a random permutation;
    add: insert spurious items from the pool at random positions; truncate: drop the
    last elements."""
    count: int | None = Field(default=None, ge=1)
    """How many elements to remove, add or truncate (give this or fraction)."""
    fraction: float | None = Field(default=None, gt=0, le=1)
    """The share of the list's length to remove, add or truncate, rounded up (give this
    or count)."""
    pool: list[Any] | None = None
    """The items `add` chooses from (items already in the list are skipped)."""

    @model_validator(mode="after")
    def _amount(self) -> ListEditParams:
        if self.action != "reorder" and (self.count is None) == (self.fraction is None):
            raise ValueError(f"action '{self.action}' needs exactly one of 'count' and 'fraction'")
        if self.action == "add" and not self.pool:
            raise ValueError("action 'add' needs a non-empty 'pool' of items to add")
        if self.action != "add" and self.pool is not None:
            raise ValueError(f"'pool' is only used by action 'add', not '{self.action}'")
        return self


@operator("list_edit")
class ListEdit(_FieldOperator):
    """Remove, reorder, add or truncate list elements; random choices use ``ctx.rng``."""

    mode = "output"
    binary = False
    Params = ListEditParams
    params: ListEditParams
    magnitudes = (
        Magnitude("fraction", 0, 1, lo_open=True, doc="a larger share of the list is removed, added or truncated"),
        Magnitude("count", 1, None, integer=True, doc="more elements are removed, added or truncated"),
    )

    @classmethod
    def magnitude(cls, param: str, params: Mapping[str, Any]) -> Magnitude:
        """``fraction`` (0, 1] or ``count`` [1, inf), the other one not given; ``count``
        of ``add`` runs up to the size of the pool. ``reorder`` has no magnitude."""
        declared = super().magnitude(param, params)
        action = params.get("action")
        if action == "reorder":
            raise OperatorError(
                f"operator '{cls.name}' action 'reorder' has no magnitude (it permutes the whole list); "
                f"ladder '{param}' with action remove, add or truncate"
            )
        other = "count" if param == "fraction" else "fraction"
        if params.get(other) is not None:
            raise OperatorError(
                f"operator '{cls.name}' params.{other} is given ({params[other]!r}) while '{param}' is laddered; "
                "give exactly one of count and fraction"
            )
        pool = params.get("pool")
        if param == "count" and action == "add" and isinstance(pool, list) and pool:
            return dataclasses.replace(declared, hi=len(pool))
        return declared

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with the list edited; the field must be a list."""
        items = get_field(output, self.params.field, self.name)
        _require(items, (list,), "a list", self.name, self.params.field)
        edited = copy.deepcopy(items)
        action = self.params.action
        if action == "reorder":
            edited = _reorder(edited, ctx)
        elif action == "remove":
            drop = set(ctx.rng.sample(range(len(edited)), min(self._amount(edited), len(edited))))
            edited = [x for i, x in enumerate(edited) if i not in drop]
        elif action == "truncate":
            edited = edited[: max(0, len(edited) - self._amount(edited))]
        else:
            edited = self._add(edited, ctx)
        return set_field(output, self.params.field, edited, self.name)

    def _amount(self, items: list[Any]) -> int:
        if self.params.count is not None:
            return self.params.count
        return math.ceil((self.params.fraction or 0.0) * len(items))

    def _add(self, items: list[Any], ctx: OperatorContext) -> list[Any]:
        present = {canonical_json(x) for x in items}
        available: list[Any] = []
        for item in self.params.pool or []:
            key = canonical_json(item)
            if key not in present:
                present.add(key)
                available.append(item)
        if not available:
            raise OperatorError(
                f"operator '{self.name}' action 'add': every item of the pool is already in the "
                f"list ({len(items)} items); give a pool with items the list does not have"
            )
        for item in ctx.rng.sample(available, min(self._amount(items), len(available))):
            items.insert(ctx.rng.randint(0, len(items)), copy.deepcopy(item))
        return items


def _reorder(items: list[Any], ctx: OperatorContext) -> list[Any]:
    """A random permutation different from ``items`` (unchanged when none exists)."""
    original = [canonical_json(x) for x in items]
    if len(set(original)) < 2:
        return items
    for _ in range(16):
        shuffled = list(items)
        ctx.rng.shuffle(shuffled)
        if [canonical_json(x) for x in shuffled] != original:
            return shuffled
    return items[1:] + items[:1]  # a non-constant list differs from its rotation


# --------------------------------------------------------------------------- numeric_edit


class NumericEditParams(_FieldParams):
    """Parameters of ``numeric_edit``."""

    action: Literal["shift", "scale"]
    """shift: the value plus amount; scale: the value times amount."""
    amount: int | float
    """What to add (shift, any sign) or multiply by (scale, at least 0)."""

    @field_validator("amount", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"'amount' must be a number, not a boolean ({value!r})")
        return value

    @model_validator(mode="after")
    def _finite_amount(self) -> NumericEditParams:
        if not math.isfinite(self.amount):
            raise ValueError(f"'amount' must be a finite number; got {self.amount!r}")
        if self.action == "scale" and self.amount < 0:
            raise ValueError(f"action 'scale' needs an amount of at least 0; got {self.amount!r}")
        return self


@operator("numeric_edit")
class NumericEdit(_FieldOperator):
    """Shift a number by an amount or scale it by a factor.

    The result is an int when the value and the amount are both ints (exact integer
    arithmetic, shift or scale), a float otherwise. A boolean is not a number here.
    """

    mode = "output"
    binary = False
    Params = NumericEditParams
    params: NumericEditParams
    magnitudes = (Magnitude("amount", None, None, doc="shift: a larger amount adds more; scale: a larger factor"),)

    @classmethod
    def magnitude(cls, param: str, params: Mapping[str, Any]) -> Magnitude:
        """``amount``: unbounded for shift, [0, inf) for scale."""
        declared = super().magnitude(param, params)
        if params.get("action") == "scale":
            return dataclasses.replace(declared, lo=0, doc="a larger factor multiplies the value more")
        if params.get("action") == "shift":
            return dataclasses.replace(declared, doc="a larger amount adds more to the value")
        return declared

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with the number shifted or scaled; the field must be a number."""
        value = get_field(output, self.params.field, self.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):  # refused: no kind fits
            _require(value, (), "a number (int or float; a boolean is not one)", self.name, self.params.field)
        amount = self.params.amount
        result = value + amount if self.params.action == "shift" else value * amount
        if isinstance(result, float) and not math.isfinite(result):
            where = f"field '{self.params.field}'" if self.params.field else "the output"
            raise OperatorError(
                f"operator '{self.name}' {self.params.action} of {where} ({value!r}) by {amount!r} is "
                f"{result!r}, which JSON cannot hold; use a smaller amount"
            )
        return set_field(output, self.params.field, result, self.name)


# --------------------------------------------------------------------------- text_edit

PARAPHRASE_INSTRUCTION = (
    "Paraphrase the text the user sends. Keep its meaning, its language, its facts and "
    "its named entities; change the wording. Answer with the paraphrase only."
)


class TextEditParams(_FieldParams):
    """Parameters of ``text_edit``."""

    omitted_when_none = ("count",)

    action: Literal["add_keyword", "remove_keyword", "paraphrase"]
    """add_keyword: append the keywords; remove_keyword: delete every whole-word,
    case-insensitive occurrence; paraphrase: rewrite with an LLM."""
    keywords: list[str] = Field(default_factory=list)
    """The keywords to add or remove (required by those actions)."""
    count: int | None = Field(default=None, ge=1)
    """Use only the first `count` keywords (add_keyword, remove_keyword; default: all)."""
    temperature: float = Field(default=0.7, ge=0, le=2)
    """The paraphrase call's sampling temperature."""
    model: str | None = None
    """The paraphrase call's model (default: the replayer's model)."""
    instruction: str = PARAPHRASE_INSTRUCTION
    """The paraphrase call's system message."""

    @model_validator(mode="after")
    def _keywords(self) -> TextEditParams:
        if self.action != "paraphrase":
            if not self.keywords or not all(k.strip() for k in self.keywords):
                raise ValueError(f"action '{self.action}' needs a non-empty list of non-blank 'keywords'")
            if self.count is not None and self.count > len(self.keywords):
                raise ValueError(
                    f"'count' is {self.count} but 'keywords' lists {len(self.keywords)}; "
                    f"give a count from 1 to {len(self.keywords)}"
                )
        elif self.count is not None:
            raise ValueError("'count' is only used by actions add_keyword and remove_keyword, not 'paraphrase'")
        return self

    def used_keywords(self) -> list[str]:
        """The keywords the edit uses: the first ``count`` of them (all by default)."""
        return self.keywords[: self.count] if self.count is not None else list(self.keywords)


@operator("text_edit")
class TextEdit(_FieldOperator):
    """Add or remove keywords, or paraphrase a text field."""

    mode = "output"
    binary = False
    Params = TextEditParams
    params: TextEditParams
    magnitudes = (
        Magnitude("temperature", 0, 2, doc="paraphrase: a hotter paraphrase strays further from the wording"),
        Magnitude("count", 1, None, integer=True, doc="add_keyword, remove_keyword: more of the keywords are used"),
    )

    @classmethod
    def magnitude(cls, param: str, params: Mapping[str, Any]) -> Magnitude:
        """``temperature`` [0, 2] of paraphrase; ``count`` [1, len(keywords)] of the
        keyword actions."""
        declared = super().magnitude(param, params)
        action = params.get("action")
        uses = {"temperature": ("paraphrase",), "count": ("add_keyword", "remove_keyword")}[param]
        if action is not None and action not in uses:
            raise OperatorError(
                f"operator '{cls.name}' action '{action}' does not use '{param}'; "
                f"'{param}' is the magnitude of {'actions' if len(uses) > 1 else 'action'} {' and '.join(uses)}"
            )
        if param == "count":
            keywords = params.get("keywords")
            if not isinstance(keywords, list) or not keywords:
                raise OperatorError(
                    f"operator '{cls.name}' magnitude 'count' runs up to the number of keywords; "
                    "give the list in params.keywords"
                )
            return dataclasses.replace(declared, hi=len(keywords))
        return declared

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The output with the text edited; the field must be a string."""
        text = get_field(output, self.params.field, self.name)
        _require(text, (str,), "a text (string)", self.name, self.params.field)
        action = self.params.action
        if action == "add_keyword":
            edited = " ".join([text.rstrip(), *self.params.used_keywords()]).lstrip()
        elif action == "remove_keyword":
            edited = remove_keywords(text, self.params.used_keywords())
        else:
            edited = self._paraphrase(text, ctx)
        return set_field(output, self.params.field, edited, self.name)

    def _paraphrase(self, text: str, ctx: OperatorContext) -> str:
        if ctx.chat is None:
            raise OperatorError(
                f"operator '{self.name}' action 'paraphrase' needs an LLM, and the replayer gave "
                f"none for node '{ctx.node}'; configure the campaign's LLM endpoint"
            )
        messages = [{"role": "system", "content": self.params.instruction}, {"role": "user", "content": text}]
        request: dict[str, Any] = {"temperature": self.params.temperature}
        if self.params.model:
            request["model"] = self.params.model
        content = ctx.chat(messages, request)
        if not isinstance(content, str):
            raise OperatorError(
                f"operator '{self.name}': the paraphrase call returned {type(content).__name__}, not text"
            )
        return content.strip()


def remove_keywords(text: str, keywords: Sequence[str]) -> str:
    """``text`` without any whole-word, case-insensitive occurrence of the keywords,
    runs of spaces collapsed and no space left before punctuation."""
    for keyword in keywords:
        text = re.sub(rf"(?<!\w){re.escape(keyword.strip())}(?!\w)", "", text, flags=re.IGNORECASE)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" +([,.;:!?])", r"\1", text)
    return "\n".join(line.strip() for line in text.split("\n")).strip()
