"""Type-dispatched distances between node outputs (QUIVER.md §2, §6 [engine], §13).

A node's output is compared field by field, each field by the kernel of its declared
type, and the per-field distances are combined with role weights (routing 2, context 1,
observability 0) normalised to sum 1. Each type's kernel is looked up in the registry
of field types (:mod:`quiver._distance.registry`); this module registers the built-in
ones below with :func:`~quiver.register_kernel`, as any other type registers::

    categorical, bool   1[a != b]
    numeric             |a - b| / max(|a|, |b|, 1e-9), at most 1
    set                 Jaccard distance 1 - |A & B| / |A | B|
    list                Levenshtein / max(len)   (order="rank": normalised footrule)
    text                1 - cos(phi(a), phi(b)), clipped to [0, 1]; identical -> 0
    mapping             mean(key-set Jaccard, mean text distance over shared keys)
    json                recursive weighted mean, weights normalised per level

Text distances come from a :class:`TextDistance` the caller supplies (in practice
:meth:`quiver._distance.EmbeddingStore.distance`); :func:`texts_to_compare` lists the text
pairs a computation will need, so that every text can be embedded once, in a batch,
first. For many pairs of one node's outputs at once (the analysis' pair table),
:func:`output_distances` gives the same numbers bit for bit with each field's kernel run
once per distinct pair of values, and :func:`output_texts` lists their text pairs.

Choices QUIVER.md leaves open, made here **[engine]**:

* Set elements, list elements and rank items are compared by their canonical JSON, so
  unhashable items work and ``1``, ``1.0`` and ``True`` are three different elements.
* ``order="rank"`` lists use Spearman's footrule with location parameter
  ``l = max(len(a), len(b)) + 1`` (Fagin et al. 2003, "Comparing top k lists"): items
  keep their 1-based position, an item missing from a list is ranked ``l`` (last), and
  the sum over the union is divided by its value for two disjoint lists of the same
  lengths, its maximum. Repeated items count at their first position.
* Numeric: the kernel is clipped to 1, so values of opposite signs (whose raw ratio
  reaches 2) are as far apart as a missing value, and every field distance lies in
  [0, 1]. Two equal values (also two infinities of one sign, or two NaNs) give 0; any
  other pair with a NaN or an infinity gives 1.
* Mapping: two empty mappings give 0; values that are not strings are compared as their
  canonical JSON text; list values are joined with newlines.
* JSON leaves: two strings are compared by text distance when either is long (more than
  32 characters or holding a newline), else by equality; values of different kinds (a
  number and a string, a dict and a list, a bool and a number) give 1. Values that are
  not plain JSON (sets, tuples, models) are first converted by
  :func:`quiver.to_jsonable`.
* A node whose kept fields all weigh 0 (observability only), or which has no field
  defined for the pair, has distance 0.0. A :class:`~quiver._graph.NodeSpec` with neither
  ``fields`` nor ``output`` is compared as one whole JSON output.
* Bools are Python or NumPy bools; NumPy is not imported at the top here (none of its
  bools can exist before it is; :func:`output_distances` imports it when called), so
  that validating a graph's types loads no numerical library.
"""

from __future__ import annotations

import math
import numbers
import reprlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rapidfuzz.distance import Levenshtein as _rapidfuzz_levenshtein

from quiver._canonical import canonical_json, to_jsonable
from quiver._errors import QuiverError
from quiver._graph import FieldSpec, NodeSpec, infer_field

from .registry import KERNELS, Kernel, KernelError, TextDistance, get_kernel, register_kernel

__all__ = [
    "TextDistance",
    "FieldTypeError",
    "value_distance",
    "output_distance",
    "texts_to_compare",
    "output_distances",
    "output_texts",
    "OutputColumns",
    "numeric_distance",
    "jaccard_distance",
    "edit_distance",
    "footrule_distance",
]

NUMERIC_EPS = 1e-9
"""The numeric kernel's floor on the denominator (QUIVER.md §13)."""
SHORT_TEXT = 32
"""JSON strings up to this length, without a newline, are compared by equality."""

_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40
_repr.maxlist = 4
_repr.maxdict = 4


class FieldTypeError(QuiverError):
    """A recorded value whose kind does not fit the field's declared type.

    Attributes:
        field_type: The type the graph declares (``numeric``, ``set``, ...).
        value: The offending value.
        path: Where the value sits in the output (``intent``, ``plan.steps``), when
            known.
    """

    def __init__(self, field_type: str, value: Any, path: str | None = None) -> None:
        self.field_type = field_type
        self.value = value
        self.path = path
        inferred = "set" if isinstance(value, (set, frozenset)) else infer_field([value]).type
        where = f"field {path!r}: " if path else ""
        super().__init__(
            f"{where}declared {field_type}, but the value is a {type(value).__name__} "
            f"({_repr.repr(value)}); declare it as {inferred} in the graph, "
            f"or record a {field_type} value"
        )


# --------------------------------------------------------------------------- public API


def value_distance(spec: FieldSpec, a: Any, b: Any, text: TextDistance) -> float:
    """The distance of two values of one field, by the field's type (QUIVER.md §2).

    Args:
        spec: The field's declared type (and, for json, the types of nested keys).
        a: One value; ``None`` stands for "no value".
        b: The other value.
        text: The text distance used for text, mapping and long JSON strings.

    Returns:
        A distance in [0, 1]: 0 for equal values, 1 for ``None`` against a value.

    Raises:
        FieldTypeError: A value of the wrong kind for ``spec.type`` (e.g. a ``str``
            for a numeric field, a ``dict`` for a set field).
    """
    return _value(spec, a, b, text, None)


def output_distance(
    node: NodeSpec, a: Any, b: Any, text: TextDistance
) -> tuple[float, dict[str, float]]:
    """The distance of two outputs of one node, and its per-field distances.

    A whole-output node gives ``(d, {"output": d})``. A node with fields compares each
    declared field present on both sides by its type; a field present on one side only
    counts 1; a field missing on both sides is left out and the remaining weights are
    renormalised (QUIVER.md §6 [engine]). Weights are ``FieldSpec.effective_weight``
    (routing 2, context 1, observability 0) normalised over the fields kept; when all
    of those weigh 0 the aggregate is 0.0. An output that is not a dict counts as
    missing every field.

    Args:
        node: The node's output spec.
        a: One output.
        b: The other output.
        text: The text distance.

    Returns:
        ``(distance, per_field)``; ``per_field`` has every declared field that is
        defined for the pair (present on at least one side).

    Raises:
        FieldTypeError: A field value of the wrong kind for its declared type.
    """
    if node.fields is None:
        spec = node.output if node.output is not None else _WHOLE_JSON
        d = _value(spec, a, b, text, "output")
        return d, {"output": d}
    side_a = a if isinstance(a, Mapping) else {}
    side_b = b if isinstance(b, Mapping) else {}
    per_field: dict[str, float] = {}
    total = weighted = 0.0
    for name, spec in node.fields.items():
        field_d = _present_distance(spec, side_a, side_b, name, text, name)
        if field_d is not None:
            per_field[name] = field_d
            weight = spec.effective_weight
            total += weight
            weighted += weight * field_d
    return (weighted / total if total > 0 else 0.0), per_field


def output_distances(
    node: NodeSpec, outputs: Sequence[Any], left: Sequence[int], right: Sequence[int], text: TextDistance
) -> tuple[Any, dict[str, Any]]:
    """:func:`output_distance` of many pairs of outputs of one node at once
    (:meth:`OutputColumns.distances`)."""
    return OutputColumns(node, outputs).distances(left, right, text)


def output_texts(
    node: NodeSpec, outputs: Sequence[Any], left: Sequence[int], right: Sequence[int]
) -> list[tuple[str, str]]:
    """The text pairs :func:`output_distances` of the same arguments passes to its text
    distance (:meth:`OutputColumns.texts`)."""
    return OutputColumns(node, outputs).texts(left, right)


class OutputColumns:
    """One node's distinct outputs, split once into the columns its distance reads: the
    fields in declaration order, each output's value of each numbered among that field's
    distinct values (or, for a node without fields, the outputs themselves as the one
    column ``"output"``). Then, for any pairs of these outputs, :meth:`distances` gives
    :func:`output_distance` of each pair bit for bit, each field's kernel run once per
    distinct ordered pair of that field's values (a kernel's result is a function of its
    spec, its two values and the text distance), and the weighted mean summed field by
    field in declaration order, as there. What is saved is the per-pair work of fields
    whose values repeat across outputs (categories, flags, lists of ids, texts).

    Args:
        node: The node's output spec.
        outputs: Distinct outputs of the node, as parsed from their canonical JSON
            (:func:`quiver._canonical.canonical_json`): plain dicts with sorted keys,
            lists, strings, numbers, bools, None. Values are told apart by type and
            canonical JSON, which is exact for such values.
    """

    def __init__(self, node: NodeSpec, outputs: Sequence[Any]) -> None:
        self.node = node
        self.columns = _columns_of(node, outputs)

    def check(self) -> None:
        """Check every distinct value against its declared type (each compared with
        itself, as :func:`output_distance` of an output with itself would).

        Raises:
            FieldTypeError: A value of the wrong kind for its field's type.
        """
        for name, spec, _, values in self.columns:
            for value in values:
                _if_present(spec, value, value, _no_text, name)

    def distances(self, left: Sequence[int], right: Sequence[int], text: TextDistance) -> tuple[Any, dict[str, Any]]:
        """The distance of each pair ``k``: ``outputs[left[k]]`` (as ``a``) against
        ``outputs[right[k]]``.

        Returns:
            ``(distance, per_field)``: NumPy float arrays of one value per pair;
            ``per_field`` has every declared field (``"output"`` for a whole-output
            node), NaN where the field is undefined for the pair (missing on both sides).

        Raises:
            FieldTypeError: A field value of the wrong kind for its declared type.
        """
        import numpy as np  # here, not at the top: validating a graph must not load NumPy

        lhs, rhs = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
        if self.node.fields is None:  # the outputs themselves, compared as they are
            _, spec, ids, values = self.columns[0]
            whole = _column(spec, ids, values, lhs, rhs, text, "output")
            return whole, {"output": whole}
        total = np.zeros(len(lhs))
        weighted = np.zeros(len(lhs))
        per_field: dict[str, Any] = {}
        for name, spec, ids, values in self.columns:
            column = per_field[name] = _column(spec, ids, values, lhs, rhs, text, name)
            defined = ~np.isnan(column)
            weight = spec.effective_weight
            total += np.where(defined, weight, 0.0)  # x + 0.0 is x: the same sums as output_distance's
            weighted += weight * np.where(defined, column, 0.0)
        distance = np.zeros(len(lhs))
        np.divide(weighted, total, out=distance, where=total > 0)
        return distance, per_field

    def texts(self, left: Sequence[int], right: Sequence[int]) -> list[tuple[str, str]]:
        """The text pairs :meth:`distances` of the same pairs passes to its text distance
        (each distinct pair of field values once, ``s != t``): embed their texts in one
        batch first. Read directly off fields of the plain text type; for other types
        whose kernel uses text (mapping, json, registered ones that say so) by running
        the kernel with a text distance that records its calls.

        Raises:
            FieldTypeError: As :meth:`distances` would.
        """
        import numpy as np

        lhs, rhs = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
        out: list[tuple[str, str]] = []

        def record(s: str, t: str) -> float:
            out.append((s, t))
            return 0.0

        for name, spec, ids, values in self.columns:
            kernel = _kernel(spec)
            if not kernel.uses_text:
                continue
            plain = kernel.fn is _text_kernel
            for a, b in _distinct_pairs(ids, values, lhs, rhs)[0]:
                if plain:
                    if type(a) is str and type(b) is str and a != b:
                        out.append((a, b))
                else:
                    _if_present(spec, a, b, record, name)
        return out


def _no_text(a: str, b: str) -> float:  # pragma: no cover - identical values never reach it
    raise AssertionError("a value compared with itself needs no text distance")


def _columns_of(node: NodeSpec, outputs: Sequence[Any]) -> list[tuple[str, FieldSpec, Any, list[Any]]]:
    """Each column a node's distance reads, with its spec and, per output, the index of
    its value among the column's distinct values: the fields in declaration order, or
    the outputs themselves (``"output"``) for a node without fields."""
    import numpy as np

    if node.fields is None:
        spec = node.output if node.output is not None else _WHOLE_JSON
        return [("output", spec, np.arange(len(outputs), dtype=np.int64), list(outputs))]
    return [(name, spec, *_field_values(outputs, name)) for name, spec in node.fields.items()]


def _distinct_pairs(ids: Any, values: list[Any], lhs: Any, rhs: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """The distinct ordered pairs of values the pairs ``(lhs[k], rhs[k])`` compare, and
    for each pair the index of its value pair."""
    import numpy as np

    size = len(values)
    distinct, inverse = np.unique(ids[lhs] * size + ids[rhs], return_inverse=True)
    return [(values[code // size], values[code % size]) for code in distinct.tolist()], inverse.reshape(-1)


def _column(
    spec: FieldSpec, ids: Any, values: list[Any], lhs: Any, rhs: Any, text: TextDistance, path: str
) -> Any:
    """One column's distance for every pair (NaN: missing on both sides): its kernel
    once per distinct ordered pair of values. Plain text pairs go to ``text.distances``
    in one call when the text distance offers it (an :class:`~quiver.EmbeddingStore`
    does)."""
    import numpy as np

    pairs, inverse = _distinct_pairs(ids, values, lhs, rhs)
    found = np.empty(len(pairs))
    many = getattr(text, "distances", None)
    plain_text = many is not None and _kernel(spec).fn is _text_kernel
    batch: list[tuple[str, str]] = []
    batch_at: list[int] = []
    for u, (a, b) in enumerate(pairs):
        if plain_text and type(a) is str and type(b) is str and a != b:
            batch.append((a, b))  # what _text_kernel would hand to the text distance
            batch_at.append(u)
            continue
        field_d = _if_present(spec, a, b, text, path)
        found[u] = math.nan if field_d is None else field_d
    if batch:
        found[batch_at] = [min(max(float(d), 0.0), 1.0) for d in many(batch)]  # type: ignore[misc]
    column: Any = found[inverse]
    return column


def _field_values(outputs: Sequence[Any], name: str) -> tuple[Any, list[Any]]:
    """For each output the index of its value of field ``name`` (``_ABSENT`` when it has
    none) among the distinct values, and those values."""
    import numpy as np

    index: dict[Any, int] = {}
    values: list[Any] = []
    ids = np.empty(len(outputs), dtype=np.int64)
    for i, output in enumerate(outputs):
        value = output.get(name, _ABSENT) if isinstance(output, Mapping) else _ABSENT
        kind = type(value)
        if kind in _SCALAR_KEYED:
            key: Any = (kind, value)  # the types keep 1, 1.0 and True apart
        else:
            try:
                key = (kind, canonical_json(value))  # the type too: a list and a set may write the same
            except (TypeError, ValueError):
                key = (object, i)  # not JSON: compared on its own
        at = index.get(key)
        if at is None:
            at = index[key] = len(values)
            values.append(value)
        ids[i] = at
    return ids, values


class _Absent:
    """A field missing from an output (a value of a column, see :func:`_field_values`)."""


_ABSENT = _Absent()
_SCALAR_KEYED = frozenset({str, int, float, bool, type(None), _Absent})
"""Types whose values key a column's distinct values as they are (with their type)."""


def texts_to_compare(node: NodeSpec, a: Any, b: Any) -> list[tuple[str, str]]:
    """The text pairs :func:`output_distance` would pass to its text distance.

    One ``(s, t)`` entry per call, in call order, ``s != t`` always (identical strings
    never reach the text distance). Embed the texts of these pairs once, in a batch,
    before computing distances. Exact by construction: it runs the same computation
    with a text distance that records its calls.

    Args:
        node: The node's output spec.
        a: One output.
        b: The other output.

    Raises:
        FieldTypeError: As :func:`output_distance` would.
    """
    calls: list[tuple[str, str]] = []

    def record(s: str, t: str) -> float:
        calls.append((s, t))
        return 0.0

    output_distance(node, a, b, record)
    return calls


# --------------------------------------------------------------------------- dispatch


class _TextRefused(Exception):
    """The text distance handed to a kernel registered with ``uses_text=False`` was called."""


def _refused_text(a: str, b: str) -> float:
    raise _TextRefused


def _kernel(spec: FieldSpec) -> Kernel:
    """The registered kernel of ``spec.type`` (``find``: the fast path, once per value)."""
    return KERNELS.find(spec.type) or get_kernel(spec.type)


def _value(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    """The kernel of ``spec.type`` on two values, ``None`` meaning "no value" (QUIVER.md §2)."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else 1.0
    kernel = _kernel(spec)
    if kernel.uses_text:
        d = kernel.fn(spec, a, b, text, path)
    else:
        try:
            d = kernel.fn(spec, a, b, _refused_text, path)
        except _TextRefused:
            raise KernelError(
                f"{_where(path)}the kernel of field type '{spec.type}' called the text distance, but it was "
                f"registered with uses_text=False; register it with uses_text=True"
            ) from None
    try:
        in_range = 0.0 <= d <= 1.0
    except TypeError:
        in_range = False
    if not in_range:
        raise KernelError(
            f"{_where(path)}the kernel of field type '{spec.type}' returned {d!r} for "
            f"{_repr.repr(a)} and {_repr.repr(b)}; a distance is a number in [0, 1]"
        )
    return d


def _where(path: str | None) -> str:
    return f"field {path!r}: " if path else ""


def _present_distance(
    spec: FieldSpec, a: Mapping[str, Any], b: Mapping[str, Any], key: str,
    text: TextDistance, path: str | None,
) -> float | None:
    """Distance of ``key`` in two objects: both -> kernel, one -> 1, neither -> None."""
    return _if_present(spec, a.get(key, _ABSENT), b.get(key, _ABSENT), text, path)


def _if_present(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float | None:
    """Distance of two field values, ``_ABSENT`` for a missing one: both present -> the
    kernel, one -> 1, neither -> None."""
    if a is not _ABSENT and b is not _ABSENT:
        return _value(spec, a, b, text, path)
    return None if a is _ABSENT and b is _ABSENT else 1.0


def _weighted_mean(values: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Weighted mean with weights normalised over ``values``; 0.0 when they sum to 0."""
    total = sum(weights[k] for k in values)
    if total <= 0:
        return 0.0
    return sum(weights[k] * v for k, v in values.items()) / total


def _check(ok: bool, spec_type: str, value: Any, path: str | None) -> None:
    if not ok:
        raise FieldTypeError(spec_type, value, path)


def _is_number(x: Any) -> bool:
    kind = type(x)
    if kind is int or kind is float:  # the common case, without the ABC check
        return True
    return isinstance(x, numbers.Real) and not isinstance(x, bool)  # NumPy bools are not Real


def _is_bool(x: Any) -> bool:
    return x is True or x is False or _is_numpy_bool(x)


def _is_numpy_bool(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.bool_)


def _is_scalar(x: Any) -> bool:
    return type(x) in _SCALARS or isinstance(x, (str, bool, numbers.Real)) or _is_numpy_bool(x)


def _is_collection(x: Any) -> bool:
    return isinstance(x, (list, tuple, set, frozenset))


# --------------------------------------------------------------------------- kernels


def _categorical(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(_is_scalar(v), spec.type, v, path)
    return 0.0 if _scalar_equal(a, b) else 1.0


def _bool(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(_is_bool(v), spec.type, v, path)
    return 0.0 if bool(a) == bool(b) else 1.0


def _numeric_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(_is_number(v), spec.type, v, path)
    return numeric_distance(float(a), float(b))


def _set_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(_is_collection(v), spec.type, v, path)
    return jaccard_distance({_element_key(x) for x in a}, {_element_key(x) for x in b})


def _list_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(isinstance(v, (list, tuple)), spec.type, v, path)
    keys_a, keys_b = [_element_key(x) for x in a], [_element_key(x) for x in b]
    if spec.order == "rank":
        return footrule_distance(keys_a, keys_b)
    return edit_distance(keys_a, keys_b)


_SCALARS = (str, int, float, bool)


def _element_key(x: Any) -> Any:
    """An element's identity for sets and lists, as its canonical JSON would give it.

    Scalars are keyed by (type, value) without serialising (``1``, ``1.0`` and ``True``
    stay three different elements, as their canonical JSON would make them); anything
    else by its canonical JSON.
    """
    kind = type(x)
    if kind in _SCALARS and not (kind is float and not math.isfinite(x)):
        return (kind.__name__, x)
    return ("json", canonical_json(x))


def _text_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(isinstance(v, str), spec.type, v, path)
    return _text(a, b, text)


def _mapping_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    for v in (a, b):
        _check(isinstance(v, Mapping), spec.type, v, path)
    if not a and not b:
        return 0.0
    keys = jaccard_distance({str(k) for k in a}, {str(k) for k in b})
    shared = [k for k in a if k in b]
    if not shared:
        return (keys + 1.0) / 2
    values = sum(_text(_mapping_text(a[k]), _mapping_text(b[k]), text) for k in shared)
    return (keys + values / len(shared)) / 2


def _json_kernel(spec: FieldSpec, a: Any, b: Any, text: TextDistance, path: str | None) -> float:
    return _json(to_jsonable(a), to_jsonable(b), spec.fields, text, path)


register_kernel("categorical", _categorical, uses_text=False, description="1[a != b]")
register_kernel("bool", _bool, uses_text=False, description="1[a != b]")
register_kernel("numeric", _numeric_kernel, uses_text=False,
                description="|a - b| / max(|a|, |b|, 1e-9), at most 1")
register_kernel("set", _set_kernel, uses_text=False, description="Jaccard distance 1 - |A & B| / |A | B|")
register_kernel("list", _list_kernel, uses_text=False,
                description='Levenshtein / max(len) (order="rank": normalised footrule)')
register_kernel("text", _text_kernel, uses_text=True, description="1 - cos(phi(a), phi(b)), clipped to [0, 1]")
register_kernel("mapping", _mapping_kernel, uses_text=True,
                description="mean(key-set Jaccard, mean text distance over shared keys)")
register_kernel("json", _json_kernel, uses_text=True,
                description="recursive weighted mean, weights normalised per level")

_WHOLE_JSON = FieldSpec(type="json")  # after the registrations: its type is validated against them
"""The spec of a node that declares neither fields nor a whole output type."""


def _scalar_equal(a: Any, b: Any) -> bool:
    """Equality that keeps bools apart from numbers (``True != 1`` here)."""
    if _is_bool(a) != _is_bool(b):
        return False
    return bool(a == b)


def _text(a: str, b: str, text: TextDistance) -> float:
    """Text distance: exactly 0 for identical strings (no call), else clipped to [0, 1]."""
    if a == b:
        return 0.0
    return min(max(float(text(a, b)), 0.0), 1.0)


def _mapping_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(v if isinstance(v, str) else canonical_json(v) for v in value)
    return canonical_json(value)


# --------------------------------------------------------------------------- json


def _json(
    a: Any, b: Any, fields: dict[str, FieldSpec] | None, text: TextDistance, path: str | None
) -> float:
    """Recursive distance of two plain JSON values (QUIVER.md §13: per-level weights)."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else 1.0
    if isinstance(a, dict) and isinstance(b, dict):
        return _json_object(a, b, fields or {}, text, path)
    if isinstance(a, list) and isinstance(b, list):
        return edit_distance([canonical_json(x) for x in a], [canonical_json(x) for x in b])
    return _json_leaf(a, b, text)


def _json_object(
    a: dict[str, Any], b: dict[str, Any], fields: dict[str, FieldSpec],
    text: TextDistance, path: str | None,
) -> float:
    values: dict[str, float] = {}
    weights: dict[str, float] = {}
    for key in [*a, *(k for k in b if k not in a)]:
        sub = f"{path}.{key}" if path else key
        spec = fields.get(key)
        if key not in a or key not in b:
            values[key] = 1.0
        elif spec is None:
            values[key] = _json(a[key], b[key], None, text, sub)
        else:
            values[key] = _value(spec, a[key], b[key], text, sub)
        weights[key] = spec.effective_weight if spec is not None else 1.0
    return _weighted_mean(values, weights)


def _json_leaf(a: Any, b: Any, text: TextDistance) -> float:
    if _is_bool(a) or _is_bool(b):
        return 0.0 if _is_bool(a) and _is_bool(b) and a == b else 1.0
    if _is_number(a) and _is_number(b):
        return numeric_distance(float(a), float(b))
    if isinstance(a, str) and isinstance(b, str):
        if a == b:
            return 0.0
        if _is_short(a) and _is_short(b):
            return 1.0
        return _text(a, b, text)
    return 1.0


def _is_short(s: str) -> bool:
    return len(s) <= SHORT_TEXT and "\n" not in s


# --------------------------------------------------------------------------- formulas


def numeric_distance(a: float, b: float) -> float:
    """``min(|a - b| / max(|a|, |b|, 1e-9), 1)`` (QUIVER.md §2, §13).

    The clip at 1 only acts on values of opposite signs. Equal values (two equal
    infinities, two NaNs) give 0; another pair with a NaN or an infinity gives 1.
    """
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return 1.0
    return min(abs(a - b) / max(abs(a), abs(b), NUMERIC_EPS), 1.0)


def jaccard_distance(a: set[str], b: set[str]) -> float:
    """``1 - |A & B| / |A | B|``; two empty sets give 0 (QUIVER.md §2)."""
    union = a | b
    if not union:
        return 0.0
    return 1.0 - len(a & b) / len(union)


def edit_distance(a: Sequence[str], b: Sequence[str]) -> float:
    """Levenshtein distance over elements divided by ``max(len(a), len(b))`` (§2).

    Two empty sequences give 0.
    """
    longest = max(len(a), len(b))
    if longest == 0:
        return 0.0
    return _levenshtein(a, b) / longest


def _levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Unit-cost Levenshtein distance over elements (compared with ``==``).

    Elements are replaced by small integer codes (equal elements, equal codes) before
    rapidfuzz's C implementation runs: it compares hashes, and codes make that exact.
    """
    start, shortest = 0, min(len(a), len(b))
    while start < shortest and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a, end_b = end_a - 1, end_b - 1
    if start == end_a or start == end_b:
        return (end_a - start) + (end_b - start)
    codes: dict[Any, int] = {}
    ca = [codes.setdefault(x, len(codes)) for x in a[start:end_a]]
    cb = [codes.setdefault(y, len(codes)) for y in b[start:end_b]]
    return int(_rapidfuzz_levenshtein.distance(ca, cb))


def footrule_distance(a: Sequence[str], b: Sequence[str]) -> float:
    """Normalised Spearman footrule of two rankings (``order="rank"`` lists).

    Items keep their 1-based position (repeats count at their first one); an item
    missing from one list is ranked ``l = max(len(a), len(b)) + 1`` there (Fagin et
    al.'s location parameter). The sum of ``|rank_a - rank_b|`` over the union is
    divided by its value for two disjoint lists of these lengths, which is its maximum:
    0 for identical rankings, 1 for disjoint ones.
    """
    rank_a, rank_b = _ranks(a), _ranks(b)
    p, q = len(rank_a), len(rank_b)
    if p == 0 and q == 0:
        return 0.0
    last = max(p, q) + 1
    union = rank_a.keys() | rank_b.keys()
    total = sum(abs(rank_a.get(x, last) - rank_b.get(x, last)) for x in union)
    worst = p * last - p * (p + 1) // 2 + q * last - q * (q + 1) // 2
    return total / worst


def _ranks(items: Sequence[str]) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for item in items:
        ranks.setdefault(item, len(ranks) + 1)
    return ranks
