"""Execution-mode operators: the target node runs again, live, with a change.

``prompt_swap`` replaces the prompt template the target call used with a variant (one,
or the ``level``-th of an ordered list); ``param_change`` changes the LLM request's model
or sampling parameters. Both are continuous: the pair is effective iff the target's own
distance ``d_i > eps``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from quiver.perturbations._prompts import MessageSelector, MessageSwap
from quiver.perturbations._registry import (
    ExecutionChange,
    Magnitude,
    Operator,
    OperatorContext,
    OperatorError,
    OperatorParams,
    operator,
)
from quiver.perturbations._templates import TemplateRef, resolve_template_ref

__all__ = ["PromptSwap", "ParamChange"]


# --------------------------------------------------------------------------- prompt_swap


class PromptSwapParams(OperatorParams):
    """Parameters of ``prompt_swap``."""

    omitted_when_none = ("level", "message", "text")

    variant: str | None = None
    """The replacement: a registered template id (dots allowed), or a template file (a
    path with a "/" or ending in .txt, .md or .prompt, relative to the spec's folder);
    see :func:`resolve_template_ref`."""
    variants: list[str] | None = None
    """Several replacements: one perturbation each (expanded by expand_variants; give
    this or variant), or, with level, an ordered scale from the weakest to the strongest."""
    level: int | None = Field(default=None, ge=0)
    """Apply variants[level] (0: the first of the list); the list stays one perturbation
    whose strength is the level."""
    template: str | None = None
    """The template id to replace (default: the one the recorded call used)."""
    message: dict[str, Any] | None = None
    """An inline prompt to replace instead of a template: the message of the target's
    requests to swap, by ``{role: system, index: 0}``, ``{fragment: HASH_PREFIX}`` (a
    recorded fragment hash) or ``{contains: TEXT}`` (a text in exactly one message). The
    replacement is ``text``, or the whole text of the ``variant`` file."""
    text: str | None = None
    """The replacing text of an inline ``message`` (instead of a ``variant`` file)."""

    @model_validator(mode="before")
    @classmethod
    def _single_variant(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "variant" not in data and "level" not in data:
            variants = data.get("variants")
            if isinstance(variants, list) and len(variants) == 1:
                return {**{k: v for k, v in data.items() if k != "variants"}, "variant": variants[0]}
        return data

    @model_validator(mode="after")
    def _one_variant(self) -> PromptSwapParams:
        if self.message is not None:
            return self._inline()
        if self.text is not None:
            raise ValueError("'text' replaces an inline 'message'; give 'message' to say which, or a 'variant'")
        if self.level is not None:
            return self._leveled()
        if (self.variant is None) == (self.variants is None):
            raise ValueError("give exactly one of 'variant' (one replacement) and 'variants' (several)")
        if self.variants is not None:
            raise ValueError(
                f"'variants' lists {len(self.variants)} replacements; one operator applies one, "
                "expand them first with expand_variants() into one perturbation per variant "
                "(or give 'level' to apply one of an ordered list)"
            )
        if not self.variant or not self.variant.strip():
            raise ValueError("'variant' must be a non-empty template id or file path")
        return self

    def _inline(self) -> PromptSwapParams:
        try:
            MessageSelector.parse(self.message or {})
        except OperatorError as exc:
            raise ValueError(str(exc)) from None
        if self.template is not None:
            raise ValueError("give either 'template' (a registered template to replace) or 'message' (an inline one)")
        if (self.text is None) == (self.variant is None and self.variants is None):
            raise ValueError("an inline 'message' is replaced by 'text' or by a 'variant' file: give one of them")
        if self.variants is not None and self.level is None:
            raise ValueError("expand 'variants' first (expand_variants), or give 'level'")
        return self

    def selector(self) -> MessageSelector | None:
        """The inline message this swap replaces, if it replaces one."""
        return MessageSelector.parse(self.message) if self.message is not None else None

    def _leveled(self) -> PromptSwapParams:
        if self.variants is None or self.variant is not None:
            raise ValueError("'level' picks one of 'variants' (listed from the weakest to the strongest); "
                             "give the list in 'variants', and no 'variant'")
        if not self.variants:
            raise ValueError("'variants' must list at least one template id or file path")
        blank = [i for i, v in enumerate(self.variants) if not v.strip()]
        if blank:
            raise ValueError(f"variants[{blank[0]}] must be a non-empty template id or file path")
        if self.level is not None and self.level >= len(self.variants):
            raise ValueError(
                f"'level' is {self.level} but 'variants' lists {len(self.variants)}; "
                f"give a level from 0 to {len(self.variants) - 1}"
            )
        return self

    def applied_variant(self) -> str:
        """The replacement this perturbation applies: ``variants[level]``, else ``variant``."""
        if self.level is not None and self.variants is not None:
            return self.variants[self.level]
        return self.variant or ""


@operator("prompt_swap")
class PromptSwap(Operator):
    """Re-run the target node with its prompt template replaced by a variant."""

    mode = "execution"
    binary = False
    Params = PromptSwapParams
    params: PromptSwapParams
    magnitudes = (
        Magnitude("level", 0, None, integer=True, doc="a later entry of variants (listed weakest to strongest)"),
    )

    @classmethod
    def magnitude(cls, param: str, params: Mapping[str, Any]) -> Magnitude:
        """``level`` [0, len(variants) - 1]: it needs the ordered list in ``variants``."""
        declared = super().magnitude(param, params)
        variants = params.get("variants")
        if not isinstance(variants, list) or not variants or "variant" in params:
            raise OperatorError(
                f"operator '{cls.name}' magnitude 'level' picks one of params.variants, listed from the weakest "
                "to the strongest; give that list (and no 'variant')"
            )
        return dataclasses.replace(declared, hi=len(variants) - 1)

    @classmethod
    def variants(cls, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One parameter mapping per entry of ``variants`` (``variant`` set to it); with
        ``level``, the parameters as they are (one perturbation over the ordered list)."""
        variants = params.get("variants")
        if not isinstance(variants, list) or "variant" in params or "level" in params:
            return [dict(params)]
        rest = {k: v for k, v in params.items() if k != "variants"}
        return [{"variant": v, **rest} for v in variants]

    def change(self, ctx: OperatorContext) -> ExecutionChange:
        """Replace the template (params.template, else the recorded call's) by the variant.

        Raises:
            OperatorError: No template to replace, or a variant file that does not exist.
        """
        selector = self.params.selector()
        if selector is not None:
            return ExecutionChange(messages=(MessageSwap(selector, self._text(ctx)),))
        template = self.params.template or ctx.prompt_template
        if not template:
            raise OperatorError(
                f"operator '{self.name}': the recorded call of node '{ctx.node}' used no registered "
                "template (its prompt has no template_id); give the template id to replace in "
                "params.template, or select the inline message to replace in params.message "
                "({role: system, index: 0}, {contains: TEXT} or {fragment: HASH})"
            )
        variant = self.params.applied_variant()
        return ExecutionChange(templates={template: self._resolve(variant, ctx)}, params={})

    def _text(self, ctx: OperatorContext) -> str:
        """The replacing text of an inline message: ``text``, or the variant file's text."""
        if self.params.text is not None:
            return self.params.text
        ref = self._resolve(self.params.applied_variant(), ctx)
        if ref.path is None:
            raise OperatorError(f"operator '{self.name}': an inline message is replaced by a file's text or by "
                                f"params.text; {ref.ref!r} is not a file")
        return ref.path.read_text(encoding="utf-8").strip()

    def _resolve(self, variant: str, ctx: OperatorContext) -> TemplateRef:
        try:
            return resolve_template_ref(variant, ctx.base_dir)
        except OperatorError as exc:
            raise OperatorError(f"operator '{self.name}' variant '{variant}': {exc}") from None


# --------------------------------------------------------------------------- param_change


class ParamChangeParams(OperatorParams):
    """Parameters of ``param_change`` (give at least one)."""

    model: str | None = None
    """The model to call instead."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """The sampling temperature."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """The nucleus sampling mass."""
    seed: int | None = None
    """The request seed."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The completion length limit."""

    @model_validator(mode="after")
    def _at_least_one(self) -> ParamChangeParams:
        if not self.model_dump(exclude_none=True):
            raise ValueError(f"give at least one of {', '.join(type(self).model_fields)}")
        return self


@operator("param_change")
class ParamChange(Operator):
    """Re-run the target node with other LLM request parameters."""

    mode = "execution"
    binary = False
    Params = ParamChangeParams
    params: ParamChangeParams
    magnitudes = (
        Magnitude("temperature", 0, 2, doc="a hotter sampling strays further from the recorded answer"),
        Magnitude("top_p", 0, 1, lo_open=True, doc="a larger nucleus samples from more of the distribution"),
    )

    def change(self, ctx: OperatorContext) -> ExecutionChange:
        """The request overrides: the parameters given."""
        return ExecutionChange(templates={}, params=self.params.model_dump(exclude_none=True))
