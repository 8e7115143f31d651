"""Execution-mode operators: the target node runs again, live, with a change.

``prompt_swap`` replaces the prompt template the target call used with a variant;
``param_change`` changes the LLM request's model or sampling parameters. Both are
continuous: the pair is effective iff the target's own distance ``d_i > eps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from quiver.perturbations._registry import (
    ExecutionChange,
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

    variant: str | None = None
    """The replacement: a registered template id (dots allowed), or a template file (a
    path with a "/" or ending in .txt, .md or .prompt, relative to the spec's folder);
    see :func:`resolve_template_ref`."""
    variants: list[str] | None = None
    """Several replacements, one perturbation each (expanded by expand_variants; give
    this or variant)."""
    template: str | None = None
    """The template id to replace (default: the one the recorded call used)."""

    @model_validator(mode="before")
    @classmethod
    def _single_variant(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "variant" not in data:
            variants = data.get("variants")
            if isinstance(variants, list) and len(variants) == 1:
                return {**{k: v for k, v in data.items() if k != "variants"}, "variant": variants[0]}
        return data

    @model_validator(mode="after")
    def _one_variant(self) -> PromptSwapParams:
        if (self.variant is None) == (self.variants is None):
            raise ValueError("give exactly one of 'variant' (one replacement) and 'variants' (several)")
        if self.variants is not None:
            raise ValueError(
                f"'variants' lists {len(self.variants)} replacements; one operator applies one, "
                "expand them first with expand_variants() into one perturbation per variant"
            )
        if not self.variant or not self.variant.strip():
            raise ValueError("'variant' must be a non-empty template id or file path")
        return self


@operator("prompt_swap")
class PromptSwap(Operator):
    """Re-run the target node with its prompt template replaced by a variant."""

    mode = "execution"
    binary = False
    Params = PromptSwapParams
    params: PromptSwapParams

    @classmethod
    def variants(cls, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One parameter mapping per entry of ``variants`` (``variant`` set to it)."""
        variants = params.get("variants")
        if not isinstance(variants, list) or "variant" in params:
            return [dict(params)]
        rest = {k: v for k, v in params.items() if k != "variants"}
        return [{"variant": v, **rest} for v in variants]

    def change(self, ctx: OperatorContext) -> ExecutionChange:
        """Replace the template (params.template, else the recorded call's) by the variant.

        Raises:
            OperatorError: No template to replace, or a variant file that does not exist.
        """
        template = self.params.template or ctx.prompt_template
        if not template:
            raise OperatorError(
                f"operator '{self.name}': the recorded call of node '{ctx.node}' used no registered "
                "template (its prompt has no template_id); give the template id to replace in "
                "params.template"
            )
        variant = self.params.variant or ""
        return ExecutionChange(templates={template: self._resolve(variant, ctx)}, params={})

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

    def change(self, ctx: OperatorContext) -> ExecutionChange:
        """The request overrides: the parameters given."""
        return ExecutionChange(templates={}, params=self.params.model_dump(exclude_none=True))
