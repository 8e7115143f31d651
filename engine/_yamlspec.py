"""YAML specs that resolve into validated pydantic models, with errors that say where.

:func:`load_spec` reads a YAML file, keeps the line of every key and list item, and
validates the data against a pydantic model. A validation error becomes a
:class:`~quiver.SpecError` naming the file, the line, the field path and what would be
valid: ``specs/p.yaml:14: llm.retry.attempts: Input should be an integer in [1, 100],
got 0``; an unknown key lists the keys that are allowed there (and the one it most
resembles), and is reported before a required key that is missing.

What a spec file may not be, whatever the model: text that is not UTF-8; a mapping with
the same key twice (``duplicate key 'x' (first at line N)``); data nested more than
:data:`MAX_DEPTH` levels; aliases that expand to more than :data:`MAX_ALIAS_NODES`
nodes beyond the document's own (a "billion laughs"), or that contain themselves; a
number that is not finite (``.nan``, ``.inf``) in a spec.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import annotated_types
import typing_extensions
import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from quiver._errors import SpecError
from quiver._trace import format_loc, printable

__all__ = ["MAX_DEPTH", "MAX_ALIAS_NODES", "load_yaml_with_lines", "load_spec", "validate_spec"]

M = TypeVar("M", bound=BaseModel)
Path_ = tuple[str | int, ...]

MAX_DEPTH = 64
"""The deepest nesting of mappings and lists a YAML file may have."""

MAX_ALIAS_NODES = 100_000
"""How many nodes aliases (``*name``) may add to a YAML file's own when expanded."""


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing to compose nodes nested deeper than :data:`MAX_DEPTH`
    (the composer recurses once per level: deeper input would exhaust Python's stack)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(
                    problem=f"nested more than {MAX_DEPTH} levels deep; a spec needs far fewer",
                    problem_mark=self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(str(path), None, None, f"cannot read the spec: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(str(path), line, None, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at column {column}; "
                        "save the file as UTF-8") from None


def _compose(text: str, path: Path) -> yaml.Node | None:
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader refuses characters YAML does not allow here
        return loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or str(exc)
        raise SpecError(str(path), line, None, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:  # the reader's: a character YAML does not allow
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else 1
        raise SpecError(str(path), line, None, f"not valid YAML: {printable(str(exc).splitlines()[0], 200)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[Path_, int]]:
    """Parse a YAML file into plain data and a map from field path to 1-based line.

    Raises:
        SpecError: The file cannot be read, is not UTF-8, is not YAML, is empty, is
            nested too deeply, holds a key twice in one mapping, a key that is not a
            plain value, a value that cannot be read, or aliases that expand too far.
    """
    text = _read_text(path)
    root = _compose(text, path)
    if root is None:
        raise SpecError(str(path), 1, None, "the file is empty (or holds only comments)")
    _check_aliases(root, str(path))
    lines: dict[Path_, int] = {(): root.start_mark.line + 1}
    loader = yaml.SafeLoader("")
    return _Converter(str(path), lines, loader).convert(root, ()), lines


# --------------------------------------------------------------------------- aliases


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_aliases(root: yaml.Node, file: str) -> None:
    """Refuse a document whose aliases, expanded, would add more than
    :data:`MAX_ALIAS_NODES` nodes, or that contain themselves; counted on the composed
    graph (each distinct node once), before anything is expanded."""
    size: dict[int, int] = {}
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:  # post-order, iterative: a node's size once its children's are known
        node, children_done = stack.pop()
        if children_done:
            open_.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(c)] for c in _children(node)), 1 << 62)
            continue
        if id(node) in size:
            continue
        if id(node) in open_:
            raise SpecError(file, node.start_mark.line + 1, None,
                            "an alias refers to the node that contains it (a recursive alias); "
                            "YAML specs must be trees")
        open_.add(id(node))
        distinct += 1
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    if size[id(root)] - distinct > MAX_ALIAS_NODES:
        node = root
        while True:  # the smallest part that is too large on its own: where to look
            bigger = [c for c in _children(node) if size[id(c)] > MAX_ALIAS_NODES]
            if not bigger:
                break
            node = bigger[0]
        raise SpecError(file, node.start_mark.line + 1, None,
                        f"aliases expand to {size[id(root)]} nodes where the file holds {distinct}; "
                        f"at most {MAX_ALIAS_NODES} more are allowed (write the repeated part out, or nest "
                        "fewer aliases)")


# --------------------------------------------------------------------------- conversion


_STR = "tag:yaml.org,2002:str"
_EXPONENT = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+")


class _Converter:
    """Composed nodes into plain data, recording the line of every key and list item."""

    def __init__(self, file: str, lines: dict[Path_, int], loader: yaml.SafeLoader) -> None:
        self.file, self.lines, self.loader = file, lines, loader

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                items.append(self.convert(item, (*path, i)))
            return items
        return self._scalar(node, path)

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError(self.file, line, format_loc(path) or None,
                                "a key must be a plain value (a name), not a list or a mapping")
            key = self._scalar(key_node, path)
            if key in first:
                raise SpecError(self.file, line, format_loc(path) or None,
                                f"duplicate key {printable(str(key))!r} (first at line {first[key]})")
            first[key] = line
            self.lines[(*path, key)] = line
            out[key] = self.convert(value_node, (*path, key))
        return out

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        if node.tag == _STR and isinstance(node, yaml.ScalarNode) and node.style is None \
                and _EXPONENT.fullmatch(node.value):
            return float(node.value.replace("_", ""))  # 1e9: a number in YAML 1.2, a string in PyYAML's 1.1
        try:
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, AttributeError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(self.file, node.start_mark.line + 1, format_loc(path) or None,
                            f"cannot read the value {printable(str(node.value), 40)!r} "
                            f"({node.tag}): {printable(problem, 120)}") from None


def _first_not_finite(data: Any, path: Path_ = ()) -> Path_ | None:
    """The path of the first number in ``data`` that is not finite (NaN, infinity)."""
    stack: list[tuple[Any, Path_]] = [(data, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where
        if isinstance(value, dict):
            stack.extend((v, (*where, k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(value))))
    return None


# --------------------------------------------------------------------------- validation


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


def _field_at(model: type[BaseModel], loc: Path_) -> FieldInfo | None:
    """The field the path ``loc`` ends at: a field of a model, or a key of a TypedDict field."""
    if not loc or not isinstance(loc[-1], str):
        return None
    owner = _model_at(model, loc[:-1])
    if owner is not None:
        return owner.model_fields.get(loc[-1])
    parent = _field_at(model, loc[:-1])
    if parent is not None and typing_extensions.is_typeddict(parent.annotation):
        hint = typing_extensions.get_type_hints(parent.annotation, include_extras=True).get(loc[-1])
        return FieldInfo.from_annotation(hint) if hint is not None else None
    return None


def _range(field: FieldInfo) -> str | None:
    """``[1, 100]``, ``(0, 3600]``, ``[0, inf)``: a numeric field's bounds, if it has any."""
    low = high = None
    for m in field.metadata:
        if isinstance(m, annotated_types.Ge):
            low = f"[{m.ge}"
        elif isinstance(m, annotated_types.Gt):
            low = f"({m.gt}"
        elif isinstance(m, annotated_types.Le):
            high = f"{m.le}]"
        elif isinstance(m, annotated_types.Lt):
            high = f"{m.lt})"
    if low is None and high is None:
        return None
    return f"{low or '(-inf'}, {high or 'inf)'}"


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                 "int_type", "int_parsing", "float_type", "float_parsing", "finite_number", "int_from_float"}


def _shown(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"a {len(str(abs(value)))}-digit number"
    return json.dumps(value, default=str)[:80]


def _reason(error: Any, model: type[BaseModel]) -> str:
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        if owner is None:
            return f"unknown key {printable(str(loc[-1]))!r}; see `quiver schema spec` for the valid keys"
        close = difflib.get_close_matches(str(loc[-1]), list(owner.model_fields), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key {printable(str(loc[-1]))!r}{hint}; valid keys here are: {', '.join(owner.model_fields)}"
    if error["type"] == "missing":
        return "required field is missing"
    reason = str(error["msg"]).removeprefix("Value error, ")
    field = _field_at(model, loc)
    bounds = _range(field) if field is not None and error["type"] in _RANGE_ERRORS else None
    if bounds is not None:
        kind = "an integer" if field is not None and field.annotation in (int, int | None) else "a number"
        reason = f"Input should be {kind} in {bounds}"
    if "input" in error and not isinstance(error["input"], dict):
        shown = _shown(error["input"])
        if not (error["type"] == "value_error" and (repr(error["input"]) in reason or shown in reason)):
            reason += f", got {shown}"
    return reason


def _data_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """``loc`` without the parts that name a validator or a union member (``str``,
    ``list[...]``, ``function-after[...]``) rather than a key or index of ``data``."""
    out: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        if isinstance(part, str) and (part.startswith("function-") or not isinstance(node, dict)):
            continue
        if isinstance(node, dict) and part not in node and i + 1 < len(loc) and loc[i + 1] in node:
            continue  # a union member's or a tag's name between a key and the keys inside it
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(out)


def _branch_errors(errors: list[Any], data: Any) -> list[Any]:
    """Errors at data locations; of a union's members, the one the value's type took
    (a value-type mismatch is dropped when another member's error reaches further in)."""
    cleaned = [{**e, "loc": _data_loc(tuple(e["loc"]), data)} for e in errors]
    kept = [e for e in cleaned
            if not (e["type"].endswith("_type") and any(len(f["loc"]) > len(e["loc"]) and f["loc"][:len(e["loc"])]
                                                      == e["loc"] for f in cleaned))]
    return kept or cleaned


def _order(error: Any) -> int:
    """Unknown keys first (a misspelt key also makes a required one missing), missing last."""
    return {"extra_forbidden": 0, "missing": 2}.get(error["type"], 1)


def validate_spec(model: type[M], data: Any, *, file: str | None, lines: dict[Path_, int] | None = None) -> M:
    """Validate ``data`` against ``model``; the first problem becomes a SpecError (an
    unknown key before anything else, a missing required key after anything else)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = sorted(_branch_errors(exc.errors(include_url=False), data), key=_order)
        error = errors[0]
        loc = tuple(error["loc"])
        reason = _reason(error, model)
        if len(errors) > 1:
            reason += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        line = _line_for(loc, lines) if lines else None
        raise SpecError(file, line, format_loc(loc) or None, reason) from None


def load_spec(model: type[M], path: str | Path) -> M:
    """Read and validate a YAML spec file (numbers in it must be finite)."""
    p = Path(path)
    data, lines = load_yaml_with_lines(p)
    if not isinstance(data, dict):
        raise SpecError(str(p), lines.get(()), None, "a spec must be a YAML mapping of keys to values")
    where = _first_not_finite(data)
    if where is not None:
        raise SpecError(str(p), _line_for(where, lines), format_loc(where) or None,
                        "not a finite number (.nan and .inf are not allowed in a spec); give a number")
    return validate_spec(model, data, file=str(p), lines=lines)
