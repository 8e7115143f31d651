"""Type-dispatched node distances (QUIVER.md §2, §6 [engine], §13).

Text distances here come from a deterministic stand-in (word-set Jaccard); the real
embedding model is exercised in test_embed.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from quiver._distance import (
    FieldTypeError,
    output_distance,
    texts_to_compare,
    value_distance,
)
from quiver._errors import QuiverError
from quiver._graph import FieldSpec, NodeSpec


def words(a: str, b: str) -> float:
    """A deterministic text distance: Jaccard distance of the word sets."""
    wa, wb = set(a.split()), set(b.split())
    return 1.0 - len(wa & wb) / len(wa | wb) if wa | wb else 0.0


def never(a: str, b: str) -> float:
    raise AssertionError(f"the text distance was called with {a!r}, {b!r}")


class Recorder:
    """A text distance that records its calls (and answers like ``words``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, a: str, b: str) -> float:
        self.calls.append((a, b))
        return words(a, b)


def d(type_: str, a: Any, b: Any, text: Any = never, **spec: Any) -> float:
    return value_distance(FieldSpec(type=type_, **spec), a, b, text)


LONG_A = "the refund policy allows returns within thirty days of purchase"
LONG_B = "the refund policy allows returns within fourteen days of delivery"


# --------------------------------------------------------------------------- scalars


def test_categorical_and_bool_are_the_discrete_metric() -> None:
    assert d("categorical", "question", "question") == 0.0
    assert d("categorical", "question", "complaint") == 1.0
    assert d("categorical", 3, 3) == 0.0
    assert d("bool", True, True) == 0.0
    assert d("bool", True, False) == 1.0


def test_categorical_keeps_bools_apart_from_numbers() -> None:
    assert d("categorical", True, 1) == 1.0


def test_numeric_kernel_is_the_relative_difference() -> None:
    assert d("numeric", 3, 4) == pytest.approx(0.25)
    assert d("numeric", 0.5, 0.5) == 0.0
    assert d("numeric", 0, 0) == 0.0
    assert d("numeric", 0.0, 1e-12) == pytest.approx(1e-3)  # eps = 1e-9 in the denominator
    assert d("numeric", -100, -75) == pytest.approx(0.25)


def test_numeric_kernel_is_clipped_to_one_across_signs() -> None:
    assert d("numeric", 10, -10) == 1.0
    assert d("numeric", 1, -0.5) == 1.0


def test_numeric_kernel_with_nan_and_infinity() -> None:
    nan, inf = float("nan"), float("inf")
    assert d("numeric", nan, nan) == 0.0
    assert d("numeric", inf, inf) == 0.0
    assert d("numeric", nan, 1.0) == 1.0
    assert d("numeric", inf, 1.0) == 1.0


def test_none_against_a_value_is_one_and_none_against_none_is_zero() -> None:
    for type_, value in [("categorical", "x"), ("numeric", 1), ("set", ["a"]), ("text", "t"),
                         ("list", []), ("mapping", {}), ("json", {"a": 1}), ("bool", False)]:
        assert d(type_, None, value) == 1.0, type_
        assert d(type_, value, None) == 1.0, type_
        assert d(type_, None, None) == 0.0, type_


# --------------------------------------------------------------------------- collections


def test_set_is_the_jaccard_distance() -> None:
    assert d("set", {"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(0.5)
    # the paper's example: 15 shared of 20 each -> 1 - 15/25
    assert d("set", list(range(20)), list(range(5, 25))) == pytest.approx(0.4)


def test_set_accepts_lists_ignores_order_and_repeats() -> None:
    assert d("set", ["a", "b", "b"], ("b", "a")) == 0.0


def test_set_empty_cases() -> None:
    assert d("set", [], set()) == 0.0
    assert d("set", [], ["a"]) == 1.0


def test_set_compares_unhashable_items_by_canonical_json() -> None:
    a = [{"id": 1, "tag": "x"}, {"id": 2}]
    b = [{"tag": "x", "id": 1}]
    assert d("set", a, b) == pytest.approx(0.5)


def test_list_is_the_normalised_levenshtein_distance() -> None:
    assert d("list", ["a", "b", "c", "d"], ["a", "c", "d", "e"]) == pytest.approx(2 / 4)
    assert d("list", list("kitten"), list("sitting")) == pytest.approx(3 / 7)
    assert d("list", ["x", "y"], ["y", "x"]) == pytest.approx(2 / 2)
    assert d("list", [], []) == 0.0
    assert d("list", ["x"], []) == 1.0
    assert d("list", [{"q": 1}, {"q": 2}], [{"q": 1}, {"q": 3}]) == pytest.approx(1 / 2)


def _textbook_levenshtein(a: list[Any], b: list[Any]) -> int:
    """The Wagner-Fischer table, written out, to check the C implementation against."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def test_list_distance_equals_the_textbook_table_on_random_lists() -> None:
    import random

    rng = random.Random(5)
    alphabet: list[Any] = ["a", "b", "c", 1, 1.0, True, {"q": 1}, {"q": 2}, [1, 2], None]
    for _ in range(2000):
        a = [rng.choice(alphabet) for _ in range(rng.randint(0, 9))]
        b = [rng.choice(alphabet) for _ in range(rng.randint(0, 9))]
        # 1, 1.0 and True stay three different elements, as their canonical JSON would make them
        expected = _textbook_levenshtein([_key(x) for x in a], [_key(y) for y in b])
        assert d("list", a, b) == pytest.approx(expected / max(len(a), len(b), 1), abs=0), (a, b)


def _key(x: Any) -> str:
    return type(x).__name__ + ":" + json.dumps(x, sort_keys=True)


def test_rank_list_is_the_normalised_footrule() -> None:
    # l = max(len) + 1 = 4; the disjoint maximum is (3*4 - 6) * 2 = 12
    assert d("list", ["x", "y", "z"], ["x", "y", "z"], order="rank") == 0.0
    assert d("list", ["x", "y", "z"], ["y", "x", "z"], order="rank") == pytest.approx(2 / 12)
    assert d("list", ["x", "y", "z"], ["z", "y", "x"], order="rank") == pytest.approx(4 / 12)
    assert d("list", ["x", "y", "z"], ["u", "v", "w"], order="rank") == 1.0


def test_rank_list_ranks_missing_items_last() -> None:
    # l = 3; x agrees, y: |2 - 3| = 1; maximum (2*3 - 3) + (1*3 - 1) = 5
    assert d("list", ["x", "y"], ["x"], order="rank") == pytest.approx(1 / 5)
    assert d("list", ["x"], [], order="rank") == 1.0
    assert d("list", [], [], order="rank") == 0.0


# --------------------------------------------------------------------------- text and mapping


def test_identical_strings_are_exactly_zero_without_a_text_call() -> None:
    assert d("text", LONG_A, LONG_A, never) == 0.0
    assert d("mapping", {"k": LONG_A}, {"k": LONG_A}, never) == 0.0
    assert d("json", {"note": LONG_A}, {"note": LONG_A}, never) == 0.0


def test_text_uses_the_text_distance_clipped_to_the_unit_interval() -> None:
    assert d("text", "a b c", "a b d", words) == pytest.approx(0.5)
    assert d("text", "x", "y", lambda a, b: 1.7) == 1.0
    assert d("text", "x", "y", lambda a, b: -0.2) == 0.0


def test_mapping_is_the_mean_of_key_jaccard_and_shared_value_distance() -> None:
    a = {"billing": ["refund policy", "late fee"], "tech": "reset password"}
    b = {"billing": ["refund policy", "late fee"], "shipping": "track order"}
    assert d("mapping", a, b, words) == pytest.approx((2 / 3 + 0.0) / 2)
    assert d("mapping", {"k": "a b"}, {"k": "a c"}, words) == pytest.approx((0.0 + 2 / 3) / 2)


def test_mapping_joins_list_values_with_newlines() -> None:
    assert d("mapping", {"k": ["a", "b"]}, {"k": "a\nb"}, never) == 0.0
    rec = Recorder()
    d("mapping", {"k": ["a", "b"]}, {"k": ["a", "c"]}, rec)
    assert rec.calls == [("a\nb", "a\nc")]


def test_mapping_without_shared_keys_counts_the_value_part_as_one() -> None:
    assert d("mapping", {"a": "x"}, {"b": "x"}, never) == 1.0
    assert d("mapping", {"a": "x", "b": "y"}, {"b": "y", "c": "z"}, never) == pytest.approx((2 / 3 + 0) / 2)
    assert d("mapping", {"a": "x"}, {}, never) == 1.0
    assert d("mapping", {}, {}, never) == 0.0


# --------------------------------------------------------------------------- json


def test_json_normalises_weights_per_level() -> None:
    spec = {"fields": {"intent": FieldSpec(type="categorical", role="routing")}}
    a = {"intent": "buy", "meta": {"x": 1, "y": "p"}}
    b = {"intent": "buy", "meta": {"x": 2, "y": "p"}}
    # meta = mean(0.5, 0) = 0.25, weight 1 next to intent's 2 -> 0.25 / 3
    assert d("json", a, b, **spec) == pytest.approx(0.25 / 3)
    b["intent"] = "sell"
    assert d("json", a, b, **spec) == pytest.approx((2 * 1 + 0.25) / 3)


def test_json_key_missing_on_one_side_counts_one() -> None:
    assert d("json", {"a": 1}, {"a": 1, "b": 2}) == pytest.approx(0.5)
    assert d("json", {"a": {"b": 1}}, {"a": {}}) == 1.0


def test_json_declared_key_missing_on_both_sides_is_left_out() -> None:
    fields = {"gone": FieldSpec(type="text", role="routing")}
    assert d("json", {"a": 1}, {"a": 2}, fields=fields) == pytest.approx(0.5)


def test_json_declared_keys_use_their_type_and_role() -> None:
    fields = {
        "tags": FieldSpec(type="set"),
        "log": FieldSpec(type="text", role="observability"),
        "plan": FieldSpec(type="json", fields={"action": FieldSpec(type="categorical", role="routing")}),
    }
    a = {"tags": ["x", "y"], "log": "started", "plan": {"action": "search", "n": 2}}
    b = {"tags": ["y", "z"], "log": "began", "plan": {"action": "answer", "n": 2}}
    plan = (2 * 1 + 0) / 3
    assert d("json", a, b, words, fields=fields) == pytest.approx((2 / 3 + plan) / 2)


def test_json_lists_are_edit_distances_over_canonical_elements() -> None:
    assert d("json", {"s": ["a", "b", "c"]}, {"s": ["a", "c"]}) == pytest.approx(1 / 3)
    assert d("json", [{"k": 1, "j": 2}], [{"j": 2, "k": 1}]) == 0.0


def test_json_leaves_short_strings_by_equality_long_by_text() -> None:
    assert d("json", {"n": "short one"}, {"n": "short two"}, never) == 1.0
    assert d("json", {"n": "line\none"}, {"n": "line\ntwo"}, words) == pytest.approx(2 / 3)
    assert d("json", {"n": LONG_A}, {"n": LONG_B}, words) == pytest.approx(words(LONG_A, LONG_B))
    assert d("json", {"n": "short"}, {"n": LONG_A}, words) == pytest.approx(1.0)


def test_json_leaves_of_different_kinds_count_one() -> None:
    assert d("json", {"v": 1}, {"v": "1"}) == 1.0
    assert d("json", {"v": True}, {"v": 1}) == 1.0
    assert d("json", {"v": [1]}, {"v": {"0": 1}}) == 1.0
    assert d("json", {"v": 4}, {"v": 3}) == pytest.approx(0.25)
    assert d("json", {"v": None}, {"v": None}) == 0.0


def test_json_all_zero_weights_at_a_level_give_zero() -> None:
    fields = {"log": FieldSpec(type="text", role="observability")}
    assert d("json", {"log": "a"}, {"log": "b"}, words, fields=fields) == 0.0


# --------------------------------------------------------------------------- nodes


ROLES = NodeSpec(fields={
    "intent": FieldSpec(type="categorical", role="routing"),
    "query": FieldSpec(type="text"),
    "trace": FieldSpec(type="text", role="observability"),
})


def test_whole_output_node_reports_one_output_field() -> None:
    node = NodeSpec(output=FieldSpec(type="set"))
    assert output_distance(node, ["a", "b"], ["b", "c"], never) == (
        pytest.approx(2 / 3), {"output": pytest.approx(2 / 3)}
    )


def test_roles_weigh_routing_two_context_one_observability_zero() -> None:
    a = {"intent": "buy", "query": "red shoes", "trace": "step one"}
    b = {"intent": "sell", "query": "red shoes", "trace": "step two"}
    total, per_field = output_distance(ROLES, a, b, words)
    assert total == pytest.approx((2 * 1 + 1 * 0) / 3)
    assert per_field == {"intent": 1.0, "query": 0.0, "trace": pytest.approx(2 / 3)}


def test_explicit_weight_overrides_the_role() -> None:
    node = NodeSpec(fields={"a": FieldSpec(type="bool", weight=3), "b": FieldSpec(type="bool", role="routing")})
    assert output_distance(node, {"a": True, "b": True}, {"a": False, "b": True}, never)[0] == pytest.approx(3 / 5)


def test_field_missing_on_one_side_counts_one_and_on_both_is_left_out() -> None:
    node = NodeSpec(fields={
        "x": FieldSpec(type="numeric"),
        "y": FieldSpec(type="categorical", role="routing"),
        "z": FieldSpec(type="text"),
    })
    total, per_field = output_distance(node, {"x": 1, "y": "p"}, {"x": 1}, never)
    assert per_field == {"x": 0.0, "y": 1.0}
    assert total == pytest.approx((1 * 0 + 2 * 1) / (1 + 2))


def test_a_field_present_as_none_is_not_missing() -> None:
    node = NodeSpec(fields={"x": FieldSpec(type="numeric"), "y": FieldSpec(type="numeric")})
    assert output_distance(node, {"x": None, "y": 1}, {"x": None, "y": 2}, never) == (
        pytest.approx(0.25), {"x": 0.0, "y": pytest.approx(0.5)})


def test_all_observability_node_has_distance_zero_with_field_values() -> None:
    node = NodeSpec(fields={"log": FieldSpec(type="text", role="observability"),
                            "n": FieldSpec(type="numeric", role="observability")})
    total, per_field = output_distance(node, {"log": "a b", "n": 1}, {"log": "a c", "n": 2}, words)
    assert total == 0.0
    assert per_field == {"log": pytest.approx(2 / 3), "n": pytest.approx(0.5)}


def test_non_dict_output_of_a_fields_node_misses_every_field() -> None:
    node = NodeSpec(fields={"x": FieldSpec(type="numeric"), "y": FieldSpec(type="numeric")})
    assert output_distance(node, "not an object", {"x": 1}, never) == (1.0, {"x": 1.0})
    assert output_distance(node, None, None, never) == (0.0, {})


def test_node_without_a_spec_is_compared_as_json() -> None:
    assert output_distance(NodeSpec(), {"a": 1, "b": 2}, {"a": 1, "b": 4}, never) == (
        pytest.approx(0.25), {"output": pytest.approx(0.25)})


# --------------------------------------------------------------------------- texts_to_compare


RICH = NodeSpec(fields={
    "answer": FieldSpec(type="text"),
    "same": FieldSpec(type="text"),
    "by_topic": FieldSpec(type="mapping"),
    "plan": FieldSpec(type="json", fields={"why": FieldSpec(type="text"),
                                           "steps": FieldSpec(type="list")}),
    "extra": FieldSpec(type="json"),
    "gone": FieldSpec(type="text"),
})

CASES = [
    (
        {"answer": LONG_A, "same": "x y", "by_topic": {"a": ["p q", "r"], "b": "s", "c": "only a"},
         "plan": {"why": "ok", "steps": ["a", "b"], "notes": {"deep": LONG_A, "tag": "t1"}},
         "extra": [{"text": LONG_A}], "gone": "here"},
        {"answer": LONG_B, "same": "x y", "by_topic": {"a": ["p q", "r s"], "b": "s", "d": "only b"},
         "plan": {"why": "not ok", "steps": ["b"], "notes": {"deep": LONG_B, "tag": "t2"}},
         "extra": [{"text": LONG_B}]},
    ),
    (
        {"answer": "same text", "plan": {"why": "because\nreasons", "more": {"x": {"y": LONG_B + "!"}}}},
        {"answer": "same text", "plan": {"why": "because\nother reasons", "more": {"x": {"y": LONG_B}}}},
    ),
    (
        {"by_topic": {}, "extra": {"long": LONG_A, "short": "a"}},
        {"by_topic": {"k": "v"}, "extra": {"long": LONG_A, "short": "b", "new": LONG_B}},
    ),
    ("not an object", {"answer": LONG_A}),
]


@pytest.mark.parametrize("a, b", CASES)
def test_texts_to_compare_predicts_exactly_the_text_calls(a: Any, b: Any) -> None:
    rec = Recorder()
    output_distance(RICH, a, b, rec)
    predicted = texts_to_compare(RICH, a, b)
    assert predicted == rec.calls
    assert all(s != t for s, t in predicted)


def test_texts_to_compare_finds_nested_texts() -> None:
    pairs = texts_to_compare(RICH, *CASES[0])
    assert (LONG_A, LONG_B) in pairs          # a text field and a long json leaf
    assert ("p q\nr", "p q\nr s") in pairs    # a mapping value, list joined
    assert ("ok", "not ok") in pairs          # a declared text key inside json
    assert len(pairs) == 4                    # json lists compare canonical JSON, not text


def test_texts_to_compare_for_a_whole_text_output() -> None:
    node = NodeSpec(output=FieldSpec(type="text"))
    assert texts_to_compare(node, "a", "b") == [("a", "b")]
    assert texts_to_compare(node, "a", "a") == []


# --------------------------------------------------------------------------- errors


def test_wrong_kind_for_numeric_says_what_to_declare() -> None:
    with pytest.raises(FieldTypeError) as err:
        d("numeric", "3.5", 2)
    assert isinstance(err.value, QuiverError)
    assert (err.value.field_type, err.value.value) == ("numeric", "3.5")
    assert str(err.value) == (
        "declared numeric, but the value is a str ('3.5'); declare it as categorical in the graph, "
        "or record a numeric value"
    )


def test_wrong_kind_for_set_names_the_field_in_a_node() -> None:
    node = NodeSpec(fields={"docs": FieldSpec(type="set")})
    with pytest.raises(FieldTypeError, match=r"^field 'docs': declared set, but the value is a dict "
                                             r"\(\{'a': 1\}\); declare it as json in the graph"):
        output_distance(node, {"docs": {"a": 1}}, {"docs": ["a"]}, never)


def test_wrong_kind_inside_json_gives_the_path() -> None:
    fields = {"plan": FieldSpec(type="json", fields={"n": FieldSpec(type="numeric")})}
    node = NodeSpec(fields=fields)
    with pytest.raises(FieldTypeError, match=r"^field 'plan\.n': declared numeric, but the value is a str"):
        output_distance(node, {"plan": {"n": "many"}}, {"plan": {"n": 2}}, never)


@pytest.mark.parametrize("type_, value, suggested", [
    ("bool", 1, "numeric"),
    ("text", 3, "numeric"),
    ("list", {"a", "b"}, "set"),
    ("categorical", ["a"], "list"),
    ("mapping", "k: v", "categorical"),
    ("set", "abc", "categorical"),
])
def test_wrong_kinds_are_refused(type_: str, value: Any, suggested: str) -> None:
    with pytest.raises(FieldTypeError, match=f"declared {type_}, .*declare it as {suggested} in the graph"):
        d(type_, value, value)


def test_long_reprs_are_shortened() -> None:
    with pytest.raises(FieldTypeError) as err:
        d("numeric", "x" * 500, 1)
    assert len(str(err.value)) < 200
    assert "declare it as text in the graph" in str(err.value)
