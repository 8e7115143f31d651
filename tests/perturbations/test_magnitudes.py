"""Operator magnitudes: which parameter sets how strongly each operator perturbs, its
range (made concrete by the other parameters), and the operators and parameters that
come with them (numeric_edit, text_edit's count, prompt_swap's level)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from quiver.perturbations import (
    Magnitude,
    Operator,
    OperatorError,
    OperatorParams,
    _registry,
    get_operator,
    magnitude_of,
    make_operator,
    operator,
    registered_operators,
)

# --------------------------------------------------------------------------- the API


def test_a_magnitude_writes_its_range_in_interval_notation() -> None:
    assert Magnitude("fraction", 0, 1, lo_open=True).range_text() == "(0, 1]"
    assert Magnitude("count", 1, None, integer=True).range_text() == "[1, inf) integer"
    assert Magnitude("amount", None, None).range_text() == "(-inf, inf)"
    assert Magnitude("temperature", 0, 2.5).range_text() == "[0, 2.5]"
    assert str(Magnitude("level", 0, 3, integer=True)) == "level [0, 3] integer"


@pytest.mark.parametrize(("magnitude", "inside", "outside"), [
    (Magnitude("fraction", 0, 1, lo_open=True), [1e-9, 0.5, 1], [0, -0.1, 1.0001, math.nan, True, "0.5"]),
    (Magnitude("count", 1, None, integer=True), [1, 2.0, 10**9], [0, 1.5, -3, False]),
    (Magnitude("amount", None, None), [-1e300, 0, 1e300], [math.nan, None]),
    (Magnitude("t", 0, 2, hi_open=True), [0, 1.999], [2, 2.1]),
])
def test_a_magnitude_contains_exactly_its_range(magnitude: Magnitude, inside: list[Any], outside: list[Any]) -> None:
    assert all(magnitude.contains(v) for v in inside), inside
    assert not any(magnitude.contains(v) for v in outside), outside


def test_a_magnitude_needs_a_name_and_an_ordered_range() -> None:
    with pytest.raises(OperatorError, match=r"magnitude 'x': lo=2 is above hi=1"):
        Magnitude("x", 2, 1)
    with pytest.raises(OperatorError, match=r"a Magnitude needs a parameter name; got param=' '"):
        Magnitude(" ", 0, 1)


def test_magnitude_of_an_undeclared_param_names_the_valid_ones() -> None:
    with pytest.raises(OperatorError) as err:
        magnitude_of("list_edit", "pool", {"action": "remove"})
    assert str(err.value) == (
        "operator 'list_edit' cannot ladder 'pool' adaptively; its magnitudes: fraction (0, 1], count [1, inf) integer"
    )


@pytest.mark.parametrize("name", ["override", "bool_flip", "categorical_flip", "identity"])
def test_binary_operators_have_no_magnitude(name: str) -> None:
    assert get_operator(name).magnitudes == ()
    with pytest.raises(OperatorError, match=rf"^operator '{name}' has no magnitude to ladder adaptively "
                                            r"\(binary: it forces a value\); give 'to' as listed steps$"):
        magnitude_of(name, "to", {})


def test_magnitude_of_an_unknown_operator_lists_the_known_ones() -> None:
    with pytest.raises(OperatorError, match=r"unknown operator 'blur'; the registered operators are bool_flip"):
        magnitude_of("blur", "radius", {})
    with pytest.raises(OperatorError, match=r"operator 'list_edit' params must be a mapping .* got list"):
        magnitude_of("list_edit", "count", ["action"])  # type: ignore[arg-type]


def test_every_declared_magnitude_is_a_documented_param_of_its_operator() -> None:
    for name, cls in registered_operators().items():
        for declared in cls.magnitudes:
            assert declared.param in cls.Params.model_fields, (name, declared.param)
            assert declared.doc, (name, declared.param)
        if cls.binary:
            assert cls.magnitudes == (), name


class RadiusParams(OperatorParams):
    radius: float = 1.0
    """How far to blur."""


def test_a_plugged_in_operator_declares_its_magnitudes_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry.OPERATORS, "_entries", dict(_registry.OPERATORS._entries))

    @operator("blur")
    class Blur(Operator):
        mode = "output"
        binary = False
        Params = RadiusParams
        magnitudes = (Magnitude("radius", 0, 10, doc="a larger radius blurs more"),)

    assert magnitude_of("blur", "radius", {}) == Magnitude("radius", 0, 10, doc="a larger radius blurs more")

    class Sharpen(Operator):
        mode = "output"
        binary = False
        Params = RadiusParams
        magnitudes = (Magnitude("strength", 0, 1),)  # not one of its params

    with pytest.raises(OperatorError, match=r"must set magnitudes = a tuple of Magnitude, each naming one of its "
                                            r"Params fields"):
        operator("sharpen")(Sharpen)

    class Undeclared(Operator):
        mode = "output"
        binary = False
        Params = RadiusParams

    operator("undeclared")(Undeclared)
    with pytest.raises(OperatorError, match=r"^operator 'undeclared' has no magnitude to ladder adaptively \(it "
                                            r"declares no magnitude parameter\); give 'radius' as listed steps$"):
        magnitude_of("undeclared", "radius", {})


# --------------------------------------------------------------------------- list_edit


def test_list_edit_ladders_a_fraction_or_a_count() -> None:
    fraction = magnitude_of("list_edit", "fraction", {"action": "remove", "field": "refs"})
    assert (fraction.lo, fraction.hi, fraction.lo_open, fraction.integer) == (0, 1, True, False)
    count = magnitude_of("list_edit", "count", {"action": "truncate"})
    assert (count.lo, count.hi, count.integer) == (1, None, True)
    # every level inside the range builds; the open end does not
    make_operator("list_edit", {"action": "remove", "fraction": 1e-6})
    with pytest.raises(OperatorError, match=r"params\.fraction: Input should be greater than 0"):
        make_operator("list_edit", {"action": "remove", "fraction": fraction.lo})


def test_list_edit_count_of_add_runs_up_to_the_pool_size() -> None:
    count = magnitude_of("list_edit", "count", {"action": "add", "pool": ["x", "y", "z"]})
    assert (count.lo, count.hi, count.integer) == (1, 3, True)


def test_list_edit_magnitude_needs_an_action_with_an_amount_and_no_other_amount() -> None:
    with pytest.raises(OperatorError, match=r"action 'reorder' has no magnitude \(it permutes the whole list\); "
                                            r"ladder 'fraction' with action remove, add or truncate"):
        magnitude_of("list_edit", "fraction", {"action": "reorder"})
    with pytest.raises(OperatorError, match=r"params\.count is given \(2\) while 'fraction' is laddered; give "
                                            r"exactly one of count and fraction"):
        magnitude_of("list_edit", "fraction", {"action": "remove", "count": 2})
