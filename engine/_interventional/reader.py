"""Reading interventional results back from JSON, and writing their estimates flat.

``campaign.json`` and ``pairs.jsonl`` are plain JSON; :class:`Reader` reads one object
of them with typed getters that name the place of any problem
(``campaign.json: perturbations[2].beta_shape.bins[0]: no 'excess_ci'``). Estimates are
written flat as :meth:`quiver._stats.Estimate.as_dict` writes them (``name``,
``name_ci``, ``name_n``) and read back without draws.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from quiver._errors import QuiverError
from quiver._stats import Estimate

__all__ = ["CampaignFormatError", "Reader", "estimate_json", "nodes_json"]

T = TypeVar("T")


class CampaignFormatError(QuiverError):
    """A mapping that cannot be read as a campaign result or a pair row.

    Attributes:
        where: The place in the document (``campaign.json: perturbations[0].strata``).
        reason: What was wrong and what would be right.
    """

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


def _child(where: str, key: str) -> str:
    """The place of ``key`` inside ``where``: ``campaign.json: perturbations[0].strata``."""
    return f"{where}.{key}" if ": " in where else f"{where}: {key}"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_number(value: Any) -> bool:
    """A finite int or float (NumPy's included: rows built in Python may hold them), not a
    bool: the engine never writes NaN, an infinity or an integer past a float's range."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _number(value: Any) -> float:
    """``value`` as written when it is a Python int or float, else as a float."""
    return value if isinstance(value, (int, float)) else float(value)


class Reader:
    """One JSON object, read key by key with the place of every problem.

    Args:
        data: The object.
        where: Its place, for errors (``campaign.json: perturbations[1]``).

    Raises:
        CampaignFormatError: ``data`` is not an object.
    """

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise CampaignFormatError(where, f"expected an object; got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def has(self, key: str) -> bool:
        """Whether the object has ``key``."""
        return key in self.data

    def raw(self, key: str) -> Any:
        """The value of a required ``key``, as it is."""
        if key not in self.data:
            raise CampaignFormatError(self.where, f"no {key!r}; its keys are {', '.join(self.data) or 'none'}")
        return self.data[key]

    def wrong(self, key: str, expected: str) -> CampaignFormatError:
        """The error for a ``key`` whose value is not ``expected``."""
        return CampaignFormatError(self.where, f"{key!r} must be {expected}; got {self.data.get(key)!r}")

    def obj(self, key: str) -> Reader:
        """The object under ``key``."""
        return Reader(self.raw(key), _child(self.where, key))

    def read(self, key: str, parse: Callable[..., T]) -> T:
        """The object under ``key`` read with ``parse(data, where=...)`` (a ``from_json``)."""
        found = self.obj(key)
        return parse(found.data, where=found.where)

    def read_opt(self, key: str, parse: Callable[..., T]) -> T | None:
        """As :meth:`read`, None when the value is null."""
        return None if self.raw(key) is None else self.read(key, parse)

    def read_all(self, key: str, parse: Callable[..., T]) -> tuple[T, ...]:
        """Each object of the list under ``key`` read with ``parse(data, where=...)``."""
        return tuple(parse(item.data, where=item.where) for item in self.objs(key))

    def read_each(self, key: str, parse: Callable[..., T]) -> dict[str, T]:
        """Each value of the object under ``key`` read with ``parse(data, where=...)``, keys in order."""
        found = self.obj(key)
        return {name: found.read(name, parse) for name in found.data}

    def opt_obj(self, key: str) -> Reader | None:
        """The object under ``key``, None when it is null."""
        return None if self.raw(key) is None else self.obj(key)

    def objs(self, key: str) -> list[Reader]:
        """The objects of the list under ``key``."""
        return [Reader(item, f"{_child(self.where, key)}[{i}]") for i, item in enumerate(self.array(key))]

    def array(self, key: str) -> list[Any]:
        """The list under ``key``."""
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.wrong(key, "a list")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """The list of strings under ``key``."""
        value = self.array(key)
        if not all(isinstance(v, str) for v in value):
            raise self.wrong(key, "a list of strings")
        return tuple(value)

    def string(self, key: str) -> str:
        """The string under ``key``."""
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.wrong(key, "a string")
        return value

    def opt_string(self, key: str) -> str | None:
        """The string under ``key``, None when it is null."""
        return None if self.raw(key) is None else self.string(key)

    def integer(self, key: str) -> int:
        """The integer under ``key``."""
        value = self.raw(key)
        if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
            raise self.wrong(key, "an integer")
        return int(value)

    def opt_integer(self, key: str) -> int | None:
        """The integer under ``key``, None when it is null."""
        return None if self.raw(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        """The number under ``key``, as written (an integer stays one)."""
        value = self.raw(key)
        if not _is_number(value):
            raise self.wrong(key, "a number")
        return _number(value)

    def opt_number(self, key: str) -> float | None:
        """The number under ``key``, None when it is null."""
        return None if self.raw(key) is None else self.number(key)

    def boolean(self, key: str) -> bool:
        """The boolean under ``key``."""
        value = self.raw(key)
        if not isinstance(value, (bool, np.bool_)):
            raise self.wrong(key, "true or false")
        return bool(value)

    def opt_boolean(self, key: str) -> bool | None:
        """The boolean under ``key``, None when it is null."""
        return None if self.raw(key) is None else self.boolean(key)

    def pair(self, key: str) -> tuple[float, float] | None:
        """``[lo, hi]`` under ``key`` (an interval), None when it is null."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 2 or not all(_is_number(v) for v in value):
            raise self.wrong(key, "null or a list of two numbers")
        return _number(value[0]), _number(value[1])

    def estimate(self, name: str, n_key: str | None = None) -> Estimate:
        """The estimate written flat as ``name``, ``name_ci`` and ``n_key`` (default ``name_n``)."""
        return Estimate(self.opt_number(name), self.pair(f"{name}_ci"), self.integer(n_key or f"{name}_n"))

    def node_estimates(self, prefix: str) -> dict[str, Estimate]:
        """Per-node estimates written as ``{prefix: {node: v}, prefix_ci: {...}, prefix_n: {...}}``."""
        values, cis, ns = self.obj(prefix), self.obj(f"{prefix}_ci"), self.obj(f"{prefix}_n")
        return {node: Estimate(values.opt_number(node), cis.pair(node), ns.integer(node)) for node in values.data}


def estimate_json(estimate: Estimate, name: str, n_key: str | None = None) -> dict[str, Any]:
    """``estimate.as_dict(name)``, its n written under ``n_key`` when one is given."""
    out = estimate.as_dict(name)
    if n_key is not None:
        out[n_key] = out.pop(f"{name}_n")
    return out


def nodes_json(prefix: str, estimates: Mapping[str, Estimate]) -> dict[str, dict[str, Any]]:
    """``{prefix: {node: v}, prefix_ci: {node: [lo, hi]}, prefix_n: {node: n}}``, nodes in order."""
    out: dict[str, dict[str, Any]] = {prefix: {}, f"{prefix}_ci": {}, f"{prefix}_n": {}}
    for node, est in estimates.items():
        flat = est.as_dict("x")
        out[prefix][node], out[f"{prefix}_ci"][node], out[f"{prefix}_n"][node] = flat["x"], flat["x_ci"], flat["x_n"]
    return out
