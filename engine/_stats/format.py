"""How numbers and estimates are written for people: one formatting for every report,
the gate's messages included."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DASH", "fmt", "fmt_n", "fmt_ci", "fmt_est"]

DASH = "—"
"""What an undefined number is written as."""


def fmt(x: Any, *, signed: bool = False) -> str:
    """A number with 3 decimals (``—`` for null or NaN; tiny values keep 2 significant digits)."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return DASH
    v = float(x)
    if math.isnan(v):
        return DASH
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    sign = "+" if signed else ""
    if v != 0 and abs(v) < 0.001:
        return f"{v:{sign}.2g}"
    return f"{v:{sign}.3f}"


def fmt_n(n: Any) -> str:
    """A count with thousands separators (``—`` for null)."""
    if n is None or isinstance(n, bool) or not isinstance(n, (int, float)) or math.isnan(float(n)):
        return DASH
    return f"{int(n):,}"


def fmt_ci(ci: Any, *, signed: bool = False) -> str:
    """``[lo, hi]``, or an empty string when there is no interval."""
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    return f"[{fmt(ci[0], signed=signed)}, {fmt(ci[1], signed=signed)}]"


def fmt_est(d: Mapping[str, Any], name: str, *, signed: bool = False) -> str:
    """``value [lo, hi]`` for the estimate ``name`` of ``d`` (the interval left out when absent)."""
    value = d.get(name)
    if value is None:
        return DASH
    ci = fmt_ci(d.get(f"{name}_ci"), signed=signed)
    return f"{fmt(value, signed=signed)} {ci}".rstrip()
