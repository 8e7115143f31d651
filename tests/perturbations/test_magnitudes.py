"""Operator magnitudes: which parameter sets how strongly each operator perturbs, its
range (made concrete by the other parameters), and the operators and parameters that
come with them (numeric_edit, text_edit's count, prompt_swap's level)."""

from __future__ import annotations

import copy
import json
import math
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzing import FUZZ, time_limit, tried
from hypothesis import given, settings, strategies as st

from quiver._errors import SpecError
from quiver._trace import Trace, iter_traces
from quiver._yamlspec import load_spec
from quiver.experiments._campaign.checks import check_baseline, check_spec
from quiver.experiments._campaign.identity import campaign_identities
from quiver.experiments._config import CampaignSpec
from quiver.perturbations import (
    ANY_VALUE,
    FieldTouch,
    Magnitude,
    Operator,
    OperatorContext,
    OperatorError,
    OperatorParams,
    _registry,
    expand_ladder,
    expand_variants,
    get_operator,
    magnitude_of,
    make_operator,
    operator,
    registered_operators,
)
from quiver.replay import (
    InputItem,
    LLMClient,
    ReplayResult,
    Simulator,
    Target,
    declared_graph,
    load_pipeline,
    record_corpus,
    replay_trace,
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
    # beyond the pool there is nothing more to add: a larger count is the same edit
    edits = [make_operator("list_edit", {"action": "add", "pool": ["x", "y", "z"], "count": n}).apply(
        ["a"], OperatorContext(node="n", spec=None, output=["a"], rng=random.Random(5))) for n in (3, 4)]
    assert edits[0] == edits[1] and sorted(edits[0]) == ["a", "x", "y", "z"]


def test_list_edit_magnitude_needs_an_action_with_an_amount_and_no_other_amount() -> None:
    with pytest.raises(OperatorError, match=r"action 'reorder' has no magnitude \(it permutes the whole list\); "
                                            r"ladder 'fraction' with action remove, add or truncate"):
        magnitude_of("list_edit", "fraction", {"action": "reorder"})
    with pytest.raises(OperatorError, match=r"params\.count is given \(2\) while 'fraction' is laddered; give "
                                            r"exactly one of count and fraction"):
        magnitude_of("list_edit", "fraction", {"action": "remove", "count": 2})


# --------------------------------------------------------------------------- numeric_edit


def apply(name: str, params: dict[str, Any], output: Any) -> Any:
    """Apply an output operator, checking that the recorded output is left untouched."""
    before = copy.deepcopy(output)
    result = make_operator(name, params).apply(output, OperatorContext(node="measure", spec=None, output=output))
    assert output == before, "the recorded output was modified"
    return result


@pytest.mark.parametrize(("value", "action", "amount", "expected"), [
    (3, "shift", 2, 5), (3, "shift", -5, -2), (3, "shift", 0.5, 3.5), (2.5, "shift", 1, 3.5),
    (3, "scale", 2, 6), (3, "scale", 0.5, 1.5), (3, "scale", 0, 0), (2.5, "scale", 2, 5.0), (-4, "scale", 1.5, -6.0),
])
def test_numeric_edit_shifts_or_scales_a_number(value: Any, action: str, amount: Any, expected: Any) -> None:
    result = apply("numeric_edit", {"action": action, "amount": amount}, value)
    assert result == expected
    # an int stays an int only when the value and the amount are both ints
    assert type(result) is (int if type(value) is int and type(amount) is int else float)


def test_numeric_edit_reaches_a_nested_field_and_touches_only_it() -> None:
    output = {"stats": {"words": 7, "ratio": 0.25}, "label": "x"}
    result = apply("numeric_edit", {"field": "stats.ratio", "action": "scale", "amount": 4}, output)
    assert result == {"stats": {"words": 7, "ratio": 1.0}, "label": "x"}
    op = make_operator("numeric_edit", {"field": "stats.words", "action": "shift", "amount": -7})
    assert op.fields_touched() == [FieldTouch("stats.words", ANY_VALUE)]
    assert make_operator("numeric_edit", {"action": "shift", "amount": 1}).fields_touched() == []
    assert not get_operator("numeric_edit").binary and get_operator("numeric_edit").mode == "output"


@pytest.mark.parametrize(("output", "field", "found"), [
    (True, None, r"the output of this call is bool \(true\)"),
    ({"ok": False}, "ok", r"field 'ok' of this call is bool \(false\)"),
    ({"n": "7"}, "n", r"field 'n' of this call is str \(\"7\"\)"),
    ({"n": None}, "n", r"field 'n' of this call is NoneType \(null\)"),
    ({"n": [1]}, "n", r"field 'n' of this call is list \(\[1\]\)"),
])
def test_numeric_edit_refuses_what_is_not_a_number(output: Any, field: str | None, found: str) -> None:
    with pytest.raises(OperatorError, match=r"^operator 'numeric_edit' applies to a number \(int or float; a boolean "
                                            rf"is not one\); {found}$"):
        apply("numeric_edit", {"field": field, "action": "shift", "amount": 1}, output)


def test_numeric_edit_of_a_missing_field_names_the_keys_present() -> None:
    with pytest.raises(OperatorError, match=r"^operator 'numeric_edit' field 'stats\.count': stats has no key 'count'; "
                                            r"its keys are words, ratio$"):
        apply("numeric_edit", {"field": "stats.count", "action": "shift", "amount": 1},
              {"stats": {"words": 1, "ratio": 0.5}})


def test_numeric_edit_refuses_a_result_json_cannot_hold() -> None:
    with pytest.raises(OperatorError, match=r"scale of field 'x' \(1e\+308\) by 10 is inf, which JSON cannot hold"):
        apply("numeric_edit", {"field": "x", "action": "scale", "amount": 10}, {"x": 1e308})


@pytest.mark.parametrize(("params", "message"), [
    ({"action": "scale", "amount": -0.5}, r"action 'scale' needs an amount of at least 0; got -0\.5"),
    ({"action": "shift", "amount": True}, r"params\.amount: 'amount' must be a number, not a boolean \(True\)"),
    ({"action": "shift", "amount": math.inf}, r"'amount' must be a finite number; got inf"),
    ({"action": "shift"}, r"params\.amount: Field required"),
    ({"action": "double", "amount": 2}, r"params\.action: Input should be 'shift' or 'scale'"),
])
def test_numeric_edit_params_are_checked(params: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorError, match=rf"^operator 'numeric_edit' .*{message}.*; valid params: field, action, "
                                            r"amount$"):
        make_operator("numeric_edit", params)


def test_numeric_edit_amount_is_unbounded_for_shift_and_at_least_zero_for_scale() -> None:
    shift = magnitude_of("numeric_edit", "amount", {"action": "shift", "field": "x"})
    scale = magnitude_of("numeric_edit", "amount", {"action": "scale"})
    assert (shift.lo, shift.hi, shift.integer) == (None, None, False)
    assert (scale.lo, scale.hi, scale.lo_open, scale.integer) == (0, None, False, False)
    assert shift.contains(-1e9) and not scale.contains(-1e-9) and scale.contains(0)


# --------------------------------------------------------------------------- text_edit


def test_text_edit_count_uses_only_the_first_keywords() -> None:
    keywords = ["refund", "urgent", "lawyer"]
    assert apply("text_edit", {"action": "add_keyword", "keywords": keywords, "count": 2}, "Help me") == (
        "Help me refund urgent")
    assert apply("text_edit", {"action": "add_keyword", "keywords": keywords}, "Help me") == (
        "Help me refund urgent lawyer")
    text = "Refund now, urgent: call my lawyer"
    assert apply("text_edit", {"action": "remove_keyword", "keywords": keywords, "count": 1}, text) == (
        "now, urgent: call my lawyer")


def test_text_edit_count_is_checked_against_the_keywords_and_the_action() -> None:
    with pytest.raises(OperatorError, match=r"'count' is 4 but 'keywords' lists 3; give a count from 1 to 3"):
        make_operator("text_edit", {"action": "add_keyword", "keywords": ["a", "b", "c"], "count": 4})
    with pytest.raises(OperatorError, match=r"params\.count: Input should be greater than or equal to 1"):
        make_operator("text_edit", {"action": "add_keyword", "keywords": ["a"], "count": 0})
    with pytest.raises(OperatorError, match=r"'count' is only used by actions add_keyword and remove_keyword, "
                                            r"not 'paraphrase'"):
        make_operator("text_edit", {"action": "paraphrase", "count": 1})


def test_text_edit_ladders_a_keyword_count_or_a_paraphrase_temperature() -> None:
    count = magnitude_of("text_edit", "count", {"action": "remove_keyword", "keywords": ["a", "b", "c"]})
    assert (count.lo, count.hi, count.integer) == (1, 3, True)
    temperature = magnitude_of("text_edit", "temperature", {"action": "paraphrase"})
    assert (temperature.lo, temperature.hi, temperature.integer) == (0, 2, False)
    with pytest.raises(OperatorError, match=r"^operator 'text_edit' action 'paraphrase' does not use 'count'; 'count' "
                                            r"is the magnitude of actions add_keyword and remove_keyword$"):
        magnitude_of("text_edit", "count", {"action": "paraphrase"})
    with pytest.raises(OperatorError, match=r"action 'add_keyword' does not use 'temperature'; 'temperature' is the "
                                            r"magnitude of action paraphrase$"):
        magnitude_of("text_edit", "temperature", {"action": "add_keyword", "keywords": ["a"]})
    with pytest.raises(OperatorError, match=r"magnitude 'count' runs up to the number of keywords; give the list in "
                                            r"params\.keywords"):
        magnitude_of("text_edit", "count", {"action": "add_keyword"})


# --------------------------------------------------------------------------- prompt_swap


def swap(params: dict[str, Any]) -> str:
    change = make_operator("prompt_swap", params).change(
        OperatorContext(node="echo", spec=None, output="", prompt_template="mag.echo"))
    return change.templates["mag.echo"].ref


def test_prompt_swap_level_applies_that_entry_of_the_ordered_variants() -> None:
    variants = ["mag.echo.mild", "mag.echo.firm", "mag.echo.harsh"]
    assert [swap({"variants": variants, "level": k}) for k in range(3)] == variants
    assert swap({"variants": ["mag.echo.only"], "level": 0}) == "mag.echo.only"
    described = make_operator("prompt_swap", {"variants": variants, "level": 1}).describe()
    assert described == {"op": "prompt_swap",
                         "params": {"variant": None, "variants": variants, "level": 1, "template": None}}


def test_prompt_swap_with_a_level_is_one_perturbation_over_the_whole_list() -> None:
    params = {"variants": ["a", "b.txt", "c"], "level": 2, "template": "t"}
    assert expand_variants("prompt_swap", params) == [params]
    assert expand_variants("prompt_swap", {"variants": ["a", "b"]}) == [{"variant": "a"}, {"variant": "b"}]


def test_a_laddered_level_keeps_the_variants_one_perturbation() -> None:
    """A ladder over ``level`` (listed steps or an adaptive search) sets it after the
    variants are expanded: named as laddered, it counts as given."""
    params = {"variants": ["a", "b", "c"], "template": "t"}
    split = expand_variants("prompt_swap", params, laddered=["level"])
    assert split == [params]
    assert [s for v in split for s in expand_ladder(v, {"level": [0, 2]})] == [
        {**params, "level": 0}, {**params, "level": 2}]
    assert expand_variants("prompt_swap", params, laddered=["model"]) == [
        {"variant": v, "template": "t"} for v in ("a", "b", "c")]  # another laddered key splits as before
    assert expand_variants("list_edit", {"action": "remove"}, laddered=["count"]) == [{"action": "remove"}]


@pytest.mark.parametrize(("params", "message"), [
    ({"variants": ["a", "b"], "level": 2}, r"'level' is 2 but 'variants' lists 2; give a level from 0 to 1"),
    ({"variants": ["a", "b"], "level": -1}, r"level: Input should be greater than or equal to 0"),
    ({"level": 0}, r"'level' picks one of 'variants' \(listed from the weakest to the strongest\); give the list in "
                   r"'variants', and no 'variant'"),
    ({"variant": "a", "level": 0}, r"'level' picks one of 'variants' .* and no 'variant'"),
    ({"variant": "a", "variants": ["a", "b"], "level": 0}, r"give the list in 'variants', and no 'variant'"),
    ({"variants": [], "level": 0}, r"'variants' must list at least one template id or file path"),
    ({"variants": ["a", " "], "level": 0}, r"variants\[1\] must be a non-empty template id or file path"),
])
def test_prompt_swap_level_needs_the_variants_and_a_level_within_them(params: dict[str, Any], message: str) -> None:
    with pytest.raises(OperatorError, match=rf"^operator 'prompt_swap' params.*{message}; valid params: variant, "
                                            r"variants, level, template, message, text$"):
        make_operator("prompt_swap", params)


def test_prompt_swap_ladders_the_level_up_to_the_last_variant() -> None:
    level = magnitude_of("prompt_swap", "level", {"variants": ["a", "b", "c", "d"]})
    assert (level.lo, level.hi, level.integer) == (0, 3, True)
    assert [k for k in range(-1, 6) if level.contains(k)] == [0, 1, 2, 3]
    for params in ({}, {"variant": "a"}, {"variants": []}):
        with pytest.raises(OperatorError, match=r"^operator 'prompt_swap' magnitude 'level' picks one of "
                                                r"params\.variants, listed from the weakest to the strongest; give "
                                                r"that list \(and no 'variant'\)$"):
            magnitude_of("prompt_swap", "level", params)
    with pytest.raises(OperatorError, match=r"cannot ladder 'variant' adaptively; its magnitudes: level \[0, inf\) "
                                            r"integer$"):
        magnitude_of("prompt_swap", "variant", {"variants": ["a"]})


# --------------------------------------------------------------------------- param_change


def test_param_change_ladders_temperature_and_top_p() -> None:
    temperature = magnitude_of("param_change", "temperature", {})
    top_p = magnitude_of("param_change", "top_p", {"model": "m"})
    assert (temperature.lo, temperature.hi, temperature.lo_open) == (0, 2, False)
    assert (top_p.lo, top_p.hi, top_p.lo_open) == (0, 1, True)
    with pytest.raises(OperatorError, match=r"cannot ladder 'max_tokens' adaptively; its magnitudes: temperature "
                                            r"\[0, 2\], top_p \(0, 1\]$"):
        magnitude_of("param_change", "max_tokens", {})


@pytest.mark.parametrize(("op", "param", "params"), [
    ("list_edit", "fraction", {"action": "remove"}), ("list_edit", "count", {"action": "truncate"}),
    ("numeric_edit", "amount", {"action": "scale"}),
    ("text_edit", "count", {"action": "add_keyword", "keywords": ["a", "b"]}),
    ("text_edit", "temperature", {"action": "paraphrase"}),
    ("prompt_swap", "level", {"variants": ["a", "b", "c"]}),
    ("param_change", "temperature", {}), ("param_change", "top_p", {}),
])
def test_the_ends_of_a_range_are_exactly_what_the_operator_accepts(op: str, param: str, params: dict[str, Any]) -> None:
    magnitude = magnitude_of(op, param, params)
    step = 1 if magnitude.integer else 1e-6
    for end, outward, is_open in ((magnitude.lo, -step, magnitude.lo_open), (magnitude.hi, step, magnitude.hi_open)):
        if end is None:
            continue
        first_in, first_out = (end - outward, end) if is_open else (end, end + outward)
        assert magnitude.contains(first_in) and not magnitude.contains(first_out)
        make_operator(op, {**params, param: first_in})
        with pytest.raises(OperatorError, match=param):
            make_operator(op, {**params, param: first_out})


def test_parameters_without_a_level_or_count_describe_as_they_did_before_those_existed() -> None:
    """Results and campaign identities record the parameters: the new optional ones appear
    only when given, so a campaign started before them still resumes."""
    assert make_operator("prompt_swap", {"variant": "v2"}).describe()["params"] == {
        "variant": "v2", "variants": None, "template": None}
    text = make_operator("text_edit", {"action": "add_keyword", "keywords": ["a", "b"]}).describe()["params"]
    assert "count" not in text and text["keywords"] == ["a", "b"]
    counted = make_operator("text_edit", {"action": "add_keyword", "keywords": ["a", "b"], "count": 1})
    assert counted.describe()["params"]["count"] == 1


# --------------------------------------------------------------------------- through a replay and a campaign's checks

MAG_PIPELINE = '''\
"""A small pipeline for magnitude tests: a number, a grade computed from it, an LLM echo."""
import quiver

quiver.template("mag.echo", user="Echo this: {text}")


@quiver.node("measure")
def measure(text):
    return {"stats": {"words": len(text.split()), "ratio": 0.5}}


@quiver.node("grade")
def grade(measured):
    stats = measured["stats"]
    return "long" if stats["words"] * stats["ratio"] >= 3 else "short"


@quiver.node("echo", kind="llm")
def echo(text):
    return quiver.llm().chat("mag.echo", text=text, temperature=0).content


def run(text):
    measured = measure(text)
    return {"grade": grade(measured), "echo": echo(text)}
'''
VARIANTS = {"mild.txt": "[user]\nGently echo: {text}\n", "firm.txt": "[user]\nFirmly echo: {text}\n",
            "harsh.txt": "[user]\nHARSHLY ECHO: {text}\n", "unknown.txt": "[user]\nEcho {text} to {audience}\n"}


@dataclass
class Mag:
    folder: Path
    fn: Any
    client: LLMClient
    trace: Trace

    def replay(self, node: str, op: str, params: dict[str, Any]) -> ReplayResult:
        return replay_trace(self.trace, self.fn, target=Target(node), operator=make_operator(op, params),
                            client=self.client, base_dir=self.folder)


@pytest.fixture(scope="module")
def mag(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mag]:
    folder = tmp_path_factory.mktemp("mag")
    (folder / "mag.py").write_text(MAG_PIPELINE)
    for name, text in VARIANTS.items():
        (folder / name).write_text(text)
    fn = load_pipeline("mag.py:run", folder)
    client = LLMClient(base_url=simulator.url, model="sim-json", api_key="sk-test")
    result = record_corpus(fn, pipeline_name="mag", inputs=[InputItem("four", {"text": "one two three four"})],
                           repeats=1, output_dir=folder / "baseline", llm=client, progress_stream=None)
    assert result.failed == 0
    yield Mag(folder, fn, client, next(iter(iter_traces(result.traces_path))))
    client.close()


def _call(result: ReplayResult, node: str) -> Any:
    return next(c for c in result.trace.calls if c.node == node)


def test_numeric_edit_through_the_replayer_changes_what_runs_downstream(mag: Mag) -> None:
    assert mag.trace.output["grade"] == "short"  # 4 words x 0.5 < 3
    scaled = mag.replay("measure", "numeric_edit", {"field": "stats.ratio", "action": "scale", "amount": 2})
    assert _call(scaled, "measure").output == {"stats": {"words": 4, "ratio": 1.0}}
    assert scaled.trace.output["grade"] == "long"  # grade ran on the perturbed number
    assert scaled.target is not None and scaled.target.operator == {
        "op": "numeric_edit", "params": {"field": "stats.ratio", "action": "scale", "amount": 2}}
    shifted = mag.replay("measure", "numeric_edit", {"field": "stats.words", "action": "shift", "amount": -4})
    assert _call(shifted, "measure").output == {"stats": {"words": 0, "ratio": 0.5}}
    assert shifted.trace.output["grade"] == "short"


def test_prompt_swap_with_a_level_re_executes_the_node_with_that_variant(mag: Mag) -> None:
    params = {"variants": ["mild.txt", "firm.txt", "harsh.txt"]}
    assert _call(replay_trace(mag.trace, mag.fn, client=mag.client), "echo").prompt.assembled[0].content == (
        "Echo this: one two three four")
    for level, opening in enumerate(["Gently echo:", "Firmly echo:", "HARSHLY ECHO:"]):
        result = mag.replay("echo", "prompt_swap", {**params, "level": level})
        call = _call(result, "echo")
        assert call.prompt is not None and call.prompt.template_id == "mag.echo"
        assert call.prompt.assembled[0].content == f"{opening} one two three four"
        assert result.target is not None and result.target.operator["params"]["level"] == level
        assert result.llm_calls.get("echo") == 1  # the target ran again, live


def _campaign_spec(mag: Mag, params: dict[str, Any]) -> Path:
    spec = mag.folder / f"spec-{zlib.crc32(json.dumps(params, sort_keys=True).encode())}.yaml"
    spec.write_text(yaml.safe_dump({
        "pipeline": "mag.py:run", "llm": "simulator", "baseline": str(mag.folder / "baseline" / "traces.jsonl"),
        "perturbations": [{"id": "echo-level", "node": "echo", "op": "prompt_swap", "params": params}],
        "output": str(mag.folder / "out"),
    }, sort_keys=False))
    return spec


def test_a_campaign_checks_every_variant_a_level_can_apply(mag: Mag) -> None:
    spec = _campaign_spec(mag, {"variants": ["mild.txt", "missing.txt", "harsh.txt"], "level": 0})
    with pytest.raises(SpecError) as err:
        check_spec(load_spec(CampaignSpec, spec), spec)
    assert err.value.path == "perturbations[0].params.variants[1]" and err.value.line is not None
    assert "missing.txt" in str(err.value) and "does not exist" in str(err.value)

    spec = _campaign_spec(mag, {"variants": ["mild.txt", "firm.txt", "unknown.txt"], "level": 0})
    loaded = load_spec(CampaignSpec, spec)
    check_spec(loaded, spec)  # the files exist and parse
    traces = [mag.trace]
    with pytest.raises(SpecError) as err:
        check_baseline(loaded, spec, traces, declared_graph)
    assert err.value.path == "perturbations[0].params.variants[2]"
    assert "uses {audience}, which the recorded calls of template 'mag.echo' do not supply" in str(err.value)

    good = _campaign_spec(mag, {"variants": ["mild.txt", "firm.txt", "harsh.txt"], "level": 2})
    loaded = load_spec(CampaignSpec, good)
    check_spec(loaded, good)
    check_baseline(loaded, good, traces, declared_graph)


def test_a_campaign_identifies_a_leveled_swap_by_every_variant_file(mag: Mag) -> None:
    spec = _campaign_spec(mag, {"variants": ["mild.txt", "firm.txt", "harsh.txt"], "level": 0})
    loaded = load_spec(CampaignSpec, spec)
    identity = campaign_identities(loaded, mag.folder, mag.fn, [mag.trace])["echo-level"]
    assert set(identity["files"]) == {"mild.txt", "firm.txt", "harsh.txt"}
    assert identity["params"] == [{"variant": None, "variants": ["mild.txt", "firm.txt", "harsh.txt"], "level": 0,
                                   "template": None}]
    before = identity["files"]["harsh.txt"]
    (mag.folder / "harsh.txt").write_text("[user]\nVery harshly echo: {text}\n")
    try:
        again = campaign_identities(loaded, mag.folder, mag.fn, [mag.trace])["echo-level"]
    finally:
        (mag.folder / "harsh.txt").write_text(VARIANTS["harsh.txt"])
    assert again["files"]["harsh.txt"] != before  # a level not applied yet still changes the identity


# --------------------------------------------------------------------------- fuzz: the range is the validation

RANGES = [
    ("list_edit", "fraction", {"action": "remove"}), ("list_edit", "count", {"action": "truncate"}),
    ("numeric_edit", "amount", {"action": "scale"}), ("numeric_edit", "amount", {"action": "shift"}),
    ("text_edit", "count", {"action": "add_keyword", "keywords": ["a", "b", "c"]}),
    ("text_edit", "temperature", {"action": "paraphrase"}),
    ("prompt_swap", "level", {"variants": ["a", "b", "c", "d"]}),
    ("param_change", "temperature", {}), ("param_change", "top_p", {}),
]


@settings(parent=FUZZ, max_examples=300)
@given(case=st.sampled_from(RANGES), value=st.one_of(
    st.integers(-3, 6), st.floats(-3, 6, allow_nan=False),
    st.sampled_from([0, 1, 2, 3]).flatmap(lambda end: st.sampled_from([end - 1e-9, end, end + 1e-9])),
))
def test_fuzz_a_level_is_in_the_declared_range_iff_the_operator_accepts_it(
    case: tuple[str, str, dict[str, Any]], value: float,
) -> None:
    tried("magnitudes")
    op, param, params = case
    with time_limit():
        magnitude = magnitude_of(op, param, params)
        try:
            make_operator(op, {**params, param: value})
            accepted = True
        except OperatorError as exc:
            assert param in str(exc) and "\n" not in str(exc)
            accepted = False
    assert magnitude.contains(value) == accepted, (op, param, value, str(magnitude))
