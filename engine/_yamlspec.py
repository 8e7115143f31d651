"""YAML specs that resolve into validated pydantic models, with errors that say where.

:func:`load_spec` reads a YAML file, keeps the line of every key and list item, and
validates the data against a pydantic model. A validation error becomes a
:class:`~quiver.SpecError` naming the file, the line, the field path and what would be
valid: ``specs/p.yaml:14: llm.retry.attempts: Input should be greater than or equal to
1, got 0``; an unknown key lists the keys that are allowed there.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from quiver._errors import SpecError
from quiver._trace import format_loc

__all__ = ["load_yaml_with_lines", "load_spec", "validate_spec"]

M = TypeVar("M", bound=BaseModel)
Path_ = tuple[str | int, ...]


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[Path_, int]]:
    """Parse a YAML file into plain data and a map from field path to 1-based line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(str(path), None, None, f"cannot read the spec: {exc.strerror}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(str(path), line, None, f"not valid YAML: {problem}") from None
    if root is None:
        raise SpecError(str(path), None, None, "the spec is empty")
    lines: dict[Path_, int] = {(): root.start_mark.line + 1}
    loader = yaml.SafeLoader("")
    return _convert(root, (), lines, loader), lines


def _convert(node: yaml.Node, path: Path_, lines: dict[Path_, int], loader: yaml.SafeLoader) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            lines[(*path, key)] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, (*path, key), lines, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            items.append(_convert(item, (*path, i), lines, loader))
        return items
    return loader.construct_object(node, deep=True)


def _line_for(loc: Path_, lines: dict[Path_, int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _unwrap_model(annotation: Any) -> Any:
    """The pydantic model (or list/dict item model) an annotation leads to, if any."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _model_at(model: type[BaseModel], loc: Path_) -> type[BaseModel] | None:
    """The pydantic model that the field path ``loc`` leads to, if any."""
    current: Any = model
    skip_key = False
    for part in loc:
        if isinstance(part, int) or skip_key:
            skip_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        args = typing.get_args(annotation)
        current = _unwrap_model(annotation) or next(
            (m for m in (_unwrap_model(a) for a in args) if m is not None), None
        )
        skip_key = _is_mapping(annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _is_mapping(annotation: Any) -> bool:
    """A dict-valued field (possibly optional): its next path part is a key."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_mapping(a) for a in typing.get_args(annotation))
    return origin is dict


def _reason(error: Any, model: type[BaseModel]) -> str:
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        valid = ", ".join(owner.model_fields) if owner is not None else "see `quiver schema spec`"
        return f"unknown key {loc[-1]!r}; valid keys here are: {valid}"
    if error["type"] == "missing":
        return "required field is missing"
    reason = str(error["msg"]).removeprefix("Value error, ")
    if "input" in error and not isinstance(error["input"], dict):
        reason += f", got {json.dumps(error['input'], default=str)[:80]}"
    return reason


def validate_spec(model: type[M], data: Any, *, file: str | None, lines: dict[Path_, int] | None = None) -> M:
    """Validate ``data`` against ``model``; the first problem becomes a SpecError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        error = errors[0]
        loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        reason = _reason(error, model)
        if len(errors) > 1:
            reason += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        line = _line_for(loc, lines) if lines else None
        raise SpecError(file, line, format_loc(loc) or None, reason) from None


def load_spec(model: type[M], path: str | Path) -> M:
    """Read and validate a YAML spec file."""
    p = Path(path)
    data, lines = load_yaml_with_lines(p)
    if not isinstance(data, dict):
        raise SpecError(str(p), lines.get(()), None, "a spec must be a YAML mapping of keys to values")
    return validate_spec(model, data, file=str(p), lines=lines)
