"""Addressing a field of a node's output: a dotted path of keys into nested objects
(``"sufficient"``, ``"plan.action"``); ``None`` is the whole output."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from quiver._graph import FieldSpec, NodeSpec
from quiver.perturbations._registry import OperatorError

__all__ = ["get_field", "set_field", "field_spec"]


def keys_text(value: Any) -> str:
    return ", ".join(map(str, value)) or "none"


def _walk(output: Any, field: str, op: str) -> tuple[Any, str]:
    """The object holding the last key of ``field``, and that key."""
    parts = field.split(".")
    node = output
    for i, key in enumerate(parts):
        where = ".".join(parts[:i]) or "the output"
        if not isinstance(node, Mapping):
            raise OperatorError(
                f"operator '{op}' field '{field}': {where} is {type(node).__name__}, not an "
                "object; a field is a dotted path of keys into nested objects (field: null "
                "perturbs the whole output)"
            )
        if i == len(parts) - 1:
            return node, key
        if key not in node:
            raise OperatorError(
                f"operator '{op}' field '{field}': {where} has no key '{key}'; its keys are {keys_text(node)}"
            )
        node = node[key]
    raise AssertionError("unreachable")  # pragma: no cover


def get_field(output: Any, field: str | None, op: str) -> Any:
    """The value of ``field`` in ``output`` (the whole output for ``None``).

    Raises:
        OperatorError: The field is missing; names it and the keys present.
    """
    if field is None:
        return output
    holder, key = _walk(output, field, op)
    if key not in holder:
        where = field.rpartition(".")[0] or "the output"
        raise OperatorError(
            f"operator '{op}' field '{field}': {where} has no key '{key}'; its keys are {keys_text(holder)}"
        )
    return holder[key]


def set_field(output: Any, field: str | None, value: Any, op: str, *, create: bool = False) -> Any:
    """A deep copy of ``output`` with ``field`` set to ``value``.

    ``create`` allows setting a key the output does not have yet (its parent must exist).
    """
    if field is None:
        return copy.deepcopy(value)
    result = copy.deepcopy(output)
    if not create:
        get_field(result, field, op)
    holder, key = _walk(result, field, op)
    holder[key] = copy.deepcopy(value)
    return result


def field_spec(spec: NodeSpec | None, field: str | None) -> FieldSpec | None:
    """The graph's spec of ``field`` (nested through json fields), if declared."""
    if spec is None:
        return None
    if field is None:
        return spec.output
    fields = spec.fields
    found: FieldSpec | None = None
    for key in field.split("."):
        if not fields or key not in fields:
            return None
        found = fields[key]
        fields = found.fields
    return found
