"""The built-in ``sim-json`` model: fills a ``json_schema`` response format.

``sim-json`` answers a request whose ``response_format`` is a ``json_schema`` with an
object of that schema, built from the words of the prompt (see :func:`_sim_json` for
the rules); without a schema it echoes, as ``sim-echo``. Importing this module registers
it; :mod:`quiver.replay._sim` imports this module at its end, so ``sim-json`` is
registered whenever the registry is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .models import (
    Fields,
    Fixed,
    ModelOutput,
    Text,
    _sim_echo,
    _token,
    register_sim_model,
)
from .request import MAX_SCHEMA_DEPTH, SimRequest, SimRequestError

_WORD = re.compile(r"[^\W\d_]+")
_MAX_FILL_DEPTH = MAX_SCHEMA_DEPTH // 2
"""How deep objects nest in an answer, and how many ``$ref``/``anyOf`` hops one node may
take: a schema within :data:`MAX_SCHEMA_DEPTH` never reaches it without ``$ref``."""

_MAX_FIELDS = 4096
"""The most fields one answer may have; a ``$ref`` used twice per level would
otherwise double them at every level."""


def _words(text: str) -> list[str]:
    """Lower-cased words of ``text``: runs of letters."""
    return _WORD.findall(text.lower())


@dataclass
class _SchemaContext:
    root: Mapping[str, Any]
    prompt_words: frozenset[str]
    prompt_length: int
    opening: str  # the first 12 words of the last user message
    fields: int = 0  # filled so far, against _MAX_FIELDS


def _sim_json(req: SimRequest) -> ModelOutput:
    """``sim-json``: fills a ``json_schema`` response format from the prompt's words.

    String enums get logits equal to how many of a candidate's words occur in the
    prompt, plus a small deterministic tie-break; a boolean is likelier ``true`` when a
    word of its property name occurs in the prompt; integers and numbers are derived
    from the prompt's length; free strings are the first 12 words of the last user
    message; arrays are empty; objects recurse. Without a schema it echoes, as
    ``sim-echo``. Parts of a schema it cannot read (a ``properties`` that is not an
    object, a ``$ref`` that points nowhere) are filled with ``null``.

    Raises:
        SimRequestError: The schema expands to more than :data:`_MAX_FIELDS` fields
            (through ``$ref``); the simulator answers 400.
    """
    schema = req.json_schema
    if schema is None:
        return _sim_echo(req)
    ctx = _SchemaContext(
        root=schema,
        prompt_words=frozenset(_words(req.text)),
        prompt_length=len(_words(req.text)),
        opening=" ".join(req.last_user.split()[:12]),
    )
    spec = _fill(schema, "", ctx, 0)
    if isinstance(spec, Fields):
        return spec
    if isinstance(spec, Fixed):
        return Text(json.dumps(spec.value))
    return Text({json.dumps(value): logit for value, logit in spec.items()})


def _fill(node: Any, name: str, ctx: _SchemaContext, depth: int) -> Any:
    """A :class:`Fields` value (logits, :class:`Fixed` or :class:`Fields`) for a schema."""
    node = _resolve(node, ctx, depth)
    if node is None:
        return Fixed(None)
    if "const" in node:
        return Fixed(node["const"])
    if isinstance(node.get("enum"), list) and node["enum"]:
        return _enum_logits(node["enum"], ctx)
    kind = _schema_type(node)
    if kind == "object":
        properties = node.get("properties")
        if not isinstance(properties, Mapping):
            properties = {}
        ctx.fields += len(properties)
        if ctx.fields > _MAX_FIELDS:
            raise SimRequestError(
                "'response_format.json_schema.schema' expands to more than "
                f"{_MAX_FIELDS} fields (through $ref); the simulator fills at most {_MAX_FIELDS}",
                "response_format.json_schema.schema",
            )
        return Fields(**{
            key: _fill(sub, key, ctx, depth + 1) for key, sub in properties.items()
        })
    return _fill_scalar(kind, node, name, ctx)


def _fill_scalar(kind: str | None, node: Mapping[str, Any], name: str, ctx: _SchemaContext) -> Any:
    if kind == "boolean":
        named = any(word in ctx.prompt_words for word in _words(name.replace("_", " ")))
        return {True: 1.0 if named else -1.0, False: 0.0}
    if kind == "integer":
        return Fixed(int(_clamp(ctx.prompt_length, node)))
    if kind == "number":
        return Fixed(_clamp(ctx.prompt_length / 10, node))
    if kind == "string":
        return Fixed(ctx.opening)
    if kind == "array":
        return Fixed([])
    return Fixed(None)


def _resolve(node: Any, ctx: _SchemaContext, depth: int) -> Mapping[str, Any] | None:
    """Follow ``$ref`` and pick the first non-null branch of ``anyOf``/``oneOf``."""
    for _ in range(_MAX_FILL_DEPTH):
        if depth > _MAX_FILL_DEPTH or not isinstance(node, Mapping):
            return None
        if isinstance(node.get("$ref"), str):
            node = _pointer(ctx.root, node["$ref"])
            continue
        branches = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
        if isinstance(branches, list) and branches:
            typed = [b for b in branches if not _is_null_schema(b)]
            node = (typed or branches)[0]
            continue
        return node
    return None


def _is_null_schema(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "null"


def _pointer(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node: Any = root
    for part in ref.lstrip("#").strip("/").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _schema_type(node: Mapping[str, Any]) -> str | None:
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and "properties" in node:
        return "object"
    return kind if isinstance(kind, str) else None


def _enum_logits(enum: Sequence[Any], ctx: _SchemaContext) -> dict[Any, float]:
    logits: dict[Any, float] = {}
    for value in enum:
        if isinstance(value, (str, bool, int, float, type(None))) and value not in logits:
            hits = sum(word in ctx.prompt_words for word in _words(_token(value)))
            logits[value] = hits + _tie_break(_token(value))
    return logits or {None: 0.0}


def _tie_break(token: str) -> float:
    """A small deterministic offset in [0, 0.1) that separates equal word counts."""
    digest = hashlib.sha256(token.encode("utf-8")).digest()
    return int.from_bytes(digest[:2], "big") / 65536 * 0.1


def _clamp(value: float, node: Mapping[str, Any]) -> float:
    for bound, pick in (("minimum", max), ("maximum", min)):
        limit = node.get(bound)
        if isinstance(limit, (int, float)) and not isinstance(limit, bool):
            value = pick(value, float(limit))
    return value


register_sim_model("sim-json", _sim_json)
