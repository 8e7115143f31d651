"""Perturbation operators: what each one does, its stratum, its errors, the registry."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from importlib.metadata import entry_points as _registry_entry_points
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import quiver._registry as quiver_registry
from quiver._graph import NodeSpec
from quiver.perturbations import (
    ANY_VALUE,
    ExecutionChange,
    FieldTouch,
    Operator,
    OperatorContext,
    OperatorError,
    OperatorParams,
    TemplateRef,
    _registry,
    expand_ladder,
    expand_variants,
    get_operator,
    logprob_alternatives,
    make_operator,
    operator,
    registered_operators,
    resolve_template_ref,
)
from quiver.replay import LLMClient, template

SIGNAL_SPEC = NodeSpec.model_validate({"fields": {  # as experiments/support_bot/graph.yaml declares it
    "turn_type": {"type": "categorical", "role": "routing",
                  "categories": ["how_to", "problem", "billing", "follow_up", "small_talk"]},
    "sentiment": {"type": "categorical", "categories": ["negative", "neutral", "positive"]},
    "web_search_hint": {"type": "bool", "role": "routing"},
    "is_small_talk": {"type": "bool", "role": "routing"},
}})
SIGNAL = {"turn_type": "billing", "sentiment": "neutral", "web_search_hint": False, "is_small_talk": False}
PLAN = {
    "action": "RETRY", "plan": {"action": "COMPOSE", "gaps": ["sso", "quota"]}, "refs": ["A-1", "B-2", "C-3", "D-4"],
}
SUPPORT_BOT = Path(__file__).resolve().parents[2] / "experiments" / "support_bot"


def ctx_for(output: Any, *, spec: NodeSpec | None = None, seed: int = 0, **kwargs: Any) -> OperatorContext:
    return OperatorContext(node="signal_analysis", spec=spec, output=output, rng=random.Random(seed), **kwargs)


def perturb(name: str, params: dict[str, Any], output: Any, **kwargs: Any) -> Any:
    """Apply an output operator, checking that the recorded output is left untouched."""
    before = copy.deepcopy(output)
    result = make_operator(name, params).apply(output, ctx_for(output, **kwargs))
    assert output == before, "the recorded output was modified"
    return result


# --------------------------------------------------------------------------- registry


def test_the_seven_operators_are_registered_with_their_mode_and_stratum() -> None:
    expected = {
        "override": ("output", True), "bool_flip": ("output", True), "categorical_flip": ("output", True),
        "list_edit": ("output", False), "text_edit": ("output", False),
        "prompt_swap": ("execution", False), "param_change": ("execution", False),
    }
    ops = registered_operators()
    assert expected.items() <= {n: (c.mode, c.binary) for n, c in ops.items()}.items()
    for name in expected:
        assert get_operator(name).name == name


def test_every_builtin_param_is_documented() -> None:
    for name in ("override", "bool_flip", "categorical_flip", "list_edit", "text_edit", "prompt_swap", "param_change"):
        params = get_operator(name).Params
        assert params.model_config.get("extra") == "forbid", name
        undocumented = [f for f, info in params.model_fields.items() if not info.description]
        assert not undocumented, f"{name}: {undocumented}"


def test_unknown_operator_lists_the_known_names() -> None:
    with pytest.raises(OperatorError,
                       match=r"unknown operator 'flip'; the registered operators are bool_flip, categorical_flip"):
        get_operator("flip")


def test_a_name_taken_by_another_class_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry.OPERATORS, "_entries", dict(_registry.OPERATORS._entries))

    class Again(Operator):
        mode = "output"
        binary = True
        Params = OperatorParams

    with pytest.raises(OperatorError, match=r"'override' is already registered by "
                                            r"quiver\.perturbations\._operators\.output\.Override"):
        operator("override")(Again)
    operator("again")(Again)
    operator("again")(Again)  # the same class again is fine
    assert get_operator("again") is Again and Again.name == "again"


def test_an_operator_class_must_set_mode_binary_and_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry.OPERATORS, "_entries", dict(_registry.OPERATORS._entries))

    class Incomplete(Operator):
        mode = "sideways"  # type: ignore[assignment]

    with pytest.raises(OperatorError, match=r"must set mode = 'output' or 'execution'; binary = True or False; Params"):
        operator("incomplete")(Incomplete)


def test_bad_params_name_the_param_and_list_the_valid_ones() -> None:
    with pytest.raises(OperatorError) as err:
        make_operator("list_edit", {"action": "remove", "count": 0})
    assert str(err.value) == (
        "operator 'list_edit' params.count: Input should be greater than or equal to 1; "
        "valid params: field, action, count, fraction, pool"
    )
    with pytest.raises(OperatorError, match=r"params\.colour: Extra inputs are not permitted; valid params: field$"):
        make_operator("bool_flip", {"colour": "red"})
    with pytest.raises(OperatorError, match=r"params must be a mapping .* got list"):
        make_operator("bool_flip", ["field"])  # type: ignore[arg-type]


def test_describe_records_the_operator_and_all_its_params() -> None:
    op = make_operator("list_edit", {"action": "remove", "fraction": 0.5, "field": "refs"})
    assert op.describe() == {"op": "list_edit", "params": {
        "field": "refs", "action": "remove", "count": None, "fraction": 0.5, "pool": None}}
    assert json.loads(json.dumps(make_operator("prompt_swap", {"variants": ["v2"]}).describe())) == {
        "op": "prompt_swap", "params": {"variant": "v2", "variants": None, "template": None}}


def test_an_operator_built_by_hand_needs_its_own_params_model() -> None:
    with pytest.raises(OperatorError, match=r"takes BoolFlipParams parameters; got ListEditParams"):
        get_operator("bool_flip")(make_operator("list_edit", {"action": "reorder"}).params)


def test_output_and_execution_operators_refuse_the_other_mode() -> None:
    with pytest.raises(OperatorError, match=r"execution mode; it has no apply\(\)"):
        make_operator("param_change", {"seed": 1}).apply({}, ctx_for({}))
    with pytest.raises(OperatorError, match=r"output mode; it has no change\(\)"):
        make_operator("bool_flip", {}).change(ctx_for(True))


# --------------------------------------------------------------------------- override


def test_override_sets_dotted_fields_and_is_a_noop_when_they_already_match() -> None:
    op = make_operator("override", {"set": {"action": "COMPOSE", "plan.gaps": []}})
    perturbed = perturb("override", {"set": {"action": "COMPOSE", "plan.gaps": []}}, PLAN)
    assert perturbed == {**PLAN, "action": "COMPOSE", "plan": {"action": "COMPOSE", "gaps": []}}
    assert not op.is_noop(PLAN, perturbed, ctx_for(PLAN))
    assert op.is_noop(perturbed, op.apply(perturbed, ctx_for(perturbed)), ctx_for(perturbed))


def test_override_of_a_missing_field_names_it_and_the_keys_present() -> None:
    with pytest.raises(OperatorError, match=r"field 'plan\.acton': plan has no key 'acton'; its keys are action, gaps"):
        perturb("override", {"set": {"plan.acton": "RETRY"}}, PLAN)
    with pytest.raises(OperatorError, match=r"field 'refs\.x': refs is list, not an object"):
        perturb("override", {"set": {"refs.x": 1}}, PLAN)


def test_override_may_set_a_field_the_spec_declares_but_the_output_lacks() -> None:
    partial = {"turn_type": "billing"}
    assert perturb("override", {"set": {"is_small_talk": True}}, partial, spec=SIGNAL_SPEC) == {
        "turn_type": "billing", "is_small_talk": True}


def test_override_needs_at_least_one_field() -> None:
    with pytest.raises(OperatorError, match=r"params\.set: Dictionary should have at least 1 item"):
        make_operator("override", {"set": {}})


# --------------------------------------------------------------------------- bool_flip


def test_bool_flip_negates_a_field_or_the_whole_output() -> None:
    assert perturb("bool_flip", {"field": "is_small_talk"}, SIGNAL)["is_small_talk"] is True
    assert perturb("bool_flip", {}, True) is False
    op = make_operator("bool_flip", {"field": "web_search_hint"})
    assert not op.is_noop(SIGNAL, op.apply(SIGNAL, ctx_for(SIGNAL)), ctx_for(SIGNAL))


def test_bool_flip_of_a_non_boolean_says_what_it_found() -> None:
    with pytest.raises(OperatorError,
                       match=r"applies to a boolean \(true/false\); field 'turn_type' of this call is str"):
        perturb("bool_flip", {"field": "turn_type"}, SIGNAL)


# --------------------------------------------------------------------------- categorical_flip


def test_categorical_flip_to_a_value_is_a_noop_when_the_baseline_had_it() -> None:
    op = make_operator("categorical_flip", {"field": "turn_type", "to": "billing"})
    assert op.describe()["params"]["strategy"] == "value"
    perturbed = op.apply(SIGNAL, ctx_for(SIGNAL, spec=SIGNAL_SPEC))
    assert perturbed == SIGNAL and op.is_noop(SIGNAL, perturbed, ctx_for(SIGNAL))
    other = make_operator("categorical_flip", {"field": "turn_type", "to": "problem"})
    assert not other.is_noop(SIGNAL, other.apply(SIGNAL, ctx_for(SIGNAL)), ctx_for(SIGNAL))


def test_categorical_flip_to_an_undeclared_class_lists_the_categories() -> None:
    with pytest.raises(OperatorError, match=r"to='refund' is not a declared category of node 'signal_analysis' "
                                            r"field 'turn_type'; categories: how_to, problem, billing"):
        perturb("categorical_flip", {"field": "turn_type", "to": "refund"}, SIGNAL, spec=SIGNAL_SPEC)


def test_categorical_flip_next_cycles_through_the_declared_categories() -> None:
    params = {"field": "sentiment", "strategy": "next"}
    assert perturb("categorical_flip", params, SIGNAL, spec=SIGNAL_SPEC)["sentiment"] == "positive"
    positive = {**SIGNAL, "sentiment": "positive"}
    assert perturb("categorical_flip", params, positive, spec=SIGNAL_SPEC)["sentiment"] == "negative"


def test_categorical_flip_without_categories_or_logprobs_says_what_to_declare() -> None:
    with pytest.raises(OperatorError, match=r"declares no categories for it and the recorded logprobs offer no "
                                            r"other class; declare its categories in the graph, or give params.to"):
        perturb("categorical_flip", {"field": "turn_type"}, SIGNAL)


def test_categorical_flip_params_are_consistent() -> None:
    with pytest.raises(OperatorError, match=r"strategy 'value' needs the class to flip to in 'to'"):
        make_operator("categorical_flip", {"strategy": "value"})
    with pytest.raises(OperatorError, match=r"'to' is only used by strategy 'value'"):
        make_operator("categorical_flip", {"strategy": "next", "to": "x"})
    with pytest.raises(OperatorError, match=r"params\.strategy: Input should be 'value', 'logprobs' or 'next'"):
        make_operator("categorical_flip", {"strategy": "random"})


SIGNAL_TEMPLATE = "test_operators.signal_analysis"


def _recorded_signal(
    llm_client: LLMClient, message: str, model: str = "support-bot-signal",
) -> tuple[Any, list[dict[str, Any]]]:
    """A signal_analysis call answered by the simulator, with its logprobs, as recorded."""
    import quiver.experiments.support_bot.sim_models  # noqa: F401  (registers the model)

    template(SIGNAL_TEMPLATE, path=SUPPORT_BOT / "prompts" / "signal_analysis.txt")
    fmt = {"type": "json_schema", "json_schema": {"name": "signals", "schema": {"type": "object", "properties": {
        name: ({"type": "boolean"} if spec.type == "bool" else {"type": "string", "enum": spec.categories})
        for name, spec in (SIGNAL_SPEC.fields or {}).items()}}}}
    result = llm_client.chat(SIGNAL_TEMPLATE, message=message, history="(none)", model=model, temperature=0,
                             logprobs=True, top_logprobs=5, response_format=fmt)
    assert result.logprobs is not None
    return json.loads(result.content), result.logprobs


def test_categorical_flip_picks_the_next_most_likely_class_from_simulator_logprobs(llm_client: LLMClient) -> None:
    # "annoying" makes sentiment a near tie: negative 0.1, neutral 0.0, positive -0.9 logits
    output, logprobs = _recorded_signal(llm_client, "This is annoying: how do I export my invoices?")
    assert output["sentiment"] == "negative"
    ctx = ctx_for(output, spec=SIGNAL_SPEC, logprobs=logprobs)
    alternatives = logprob_alternatives(output, "sentiment", logprobs, ["negative", "neutral", "positive"])
    assert [c for c, _ in alternatives] == ["neutral", "positive"]
    for params in ({"field": "sentiment"}, {"field": "sentiment", "strategy": "logprobs"}):
        assert make_operator("categorical_flip", params).apply(output, ctx)["sentiment"] == "neutral"


def test_categorical_flip_falls_back_to_next_when_the_simulator_offers_no_alternative(llm_client: LLMClient) -> None:
    # support-bot-signal's turn type is never a near tie: a fixed value, its own only top_logprob
    output, logprobs = _recorded_signal(llm_client, "This is annoying: how do I export my invoices?")
    entry = next(e for e in logprobs if e["token"] == output["turn_type"])
    assert [t["token"] for t in entry["top_logprobs"]] == ["billing"]
    assert logprob_alternatives(output, "turn_type", logprobs) == []
    for strategy in (None, "logprobs"):
        op = make_operator("categorical_flip", {"field": "turn_type", "strategy": strategy})
        assert op.apply(output, ctx_for(output, spec=SIGNAL_SPEC, logprobs=logprobs))["turn_type"] == "follow_up"
    with pytest.raises(OperatorError, match=r"declares no categories"):
        make_operator("categorical_flip", {"field": "turn_type"}).apply(output, ctx_for(output, logprobs=logprobs))


@pytest.mark.parametrize("field", ["turn_type", "sentiment", "web_search_hint", "is_small_talk"])
def test_logprob_alternatives_read_every_field_of_a_sim_json_answer(llm_client: LLMClient, field: str) -> None:
    # sim-json samples every enum and boolean, so each field carries alternatives
    output, logprobs = _recorded_signal(llm_client, "Why is my invoice wrong? Is it small talk?", model="sim-json")
    index = list(output).index(field)  # one logprobs entry per field, in order
    emitted = logprobs[index]
    assert emitted["token"] == json.dumps(output[field]).strip('"')
    others = sorted((t for t in emitted["top_logprobs"] if t["token"] != emitted["token"]), key=lambda t: -t["logprob"])
    expected = json.loads(others[0]["token"]) if isinstance(output[field], bool) else others[0]["token"]
    flipped = make_operator("categorical_flip", {"field": field, "strategy": "logprobs"}).apply(
        output, ctx_for(output, logprobs=logprobs))
    assert flipped == {**output, field: expected}


def _tokens(*pieces: tuple[str, dict[str, float]]) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": -0.1, "top_logprobs": [{"token": a, "logprob": lp} for a, lp in alts.items()]}
            for t, alts in pieces]


def test_logprob_alternatives_read_a_json_answer_split_into_subword_tokens() -> None:
    # what an OpenAI backend returns: the JSON text in pieces, a class split over tokens
    logprobs = _tokens(
        ('{"', {}), ("billing", {"billing": -0.01, "turn": -5.0}), ('":"', {}), ("x", {}), ('","', {}),
        ("turn_type", {}), ('":"', {}),
        ("follow", {"follow": -0.1, "small": -1.2, "how": -2.5, " follow": -3.0}), ("_up", {}), ('","', {}),
        ("sentiment", {}), ('":', {}), (' "neutral', {' "neutral': -0.2, ' "neg': -1.7, ' "pos': -1.9}), ('"}', {}),
    )
    output = {"billing": "x", "turn_type": "follow_up", "sentiment": "neutral"}
    categories = ["how_to", "problem", "billing", "follow_up", "small_talk"]
    assert logprob_alternatives(output, "turn_type", logprobs, categories) == [("small_talk", -1.2), ("how_to", -2.5)]
    assert logprob_alternatives(output, "turn_type", logprobs) == []  # a piece of a class, no categories to complete it
    assert logprob_alternatives(output, "sentiment", logprobs, ["negative", "neutral", "positive"]) == [
        ("negative", -1.7), ("positive", -1.9)]


def test_logprob_alternatives_pick_the_occurrence_of_the_target_field() -> None:
    logprobs = _tokens(("yes", {"yes": -0.1, "no": -2.0}), ("yes", {"yes": -0.3, "maybe": -1.0}))
    output = {"first": "yes", "second": "yes"}
    assert logprob_alternatives(output, "first", logprobs) == [("no", -2.0)]
    assert logprob_alternatives(output, "second", logprobs) == [("maybe", -1.0)]


# --------------------------------------------------------------------------- list_edit


def test_list_edit_remove_drops_count_or_a_rounded_up_fraction() -> None:
    removed = perturb("list_edit", {"field": "refs", "action": "remove", "count": 2}, PLAN)["refs"]
    assert len(removed) == 2 and set(removed) < set(PLAN["refs"])
    assert [x for x in PLAN["refs"] if x in removed] == removed  # order kept
    assert len(perturb("list_edit", {"field": "refs", "action": "remove", "fraction": 0.3}, PLAN)["refs"]) == 2
    assert perturb("list_edit", {"field": "refs", "action": "remove", "count": 9}, PLAN)["refs"] == []


def test_list_edit_truncate_keeps_the_first_elements() -> None:
    kept = perturb("list_edit", {"field": "refs", "action": "truncate", "count": 1}, PLAN)
    assert kept["refs"] == ["A-1", "B-2", "C-3"]
    emptied = perturb("list_edit", {"field": "plan.gaps", "action": "truncate", "fraction": 1.0}, PLAN)
    assert emptied["plan"]["gaps"] == []


def test_list_edit_add_inserts_pool_items_the_list_lacks() -> None:
    params = {"action": "add", "count": 2, "pool": ["sso", "billing", "export", "billing"]}
    added = perturb("list_edit", params, ["sso", "quota"])
    assert len(added) == 4 and sorted(added) == ["billing", "export", "quota", "sso"]
    assert [x for x in added if x in ("sso", "quota")] == ["sso", "quota"]
    with pytest.raises(OperatorError, match=r"every item of the pool is already in the list \(3 items\)"):
        perturb("list_edit", {"action": "add", "count": 1, "pool": ["sso"]}, ["sso", "export", "billing"])


def test_list_edit_reorder_gives_another_order_of_the_same_items() -> None:
    for seed in range(20):
        shuffled = perturb("list_edit", {"field": "refs", "action": "reorder"}, PLAN, seed=seed)["refs"]
        assert shuffled != PLAN["refs"] and sorted(shuffled) == PLAN["refs"]
    assert perturb("list_edit", {"action": "reorder"}, ["a", "b"]) == ["b", "a"]
    assert perturb("list_edit", {"action": "reorder"}, ["only"]) == ["only"]
    assert perturb("list_edit", {"action": "reorder"}, ["same", "same"]) == ["same", "same"]


@pytest.mark.parametrize("params", [
    {"action": "remove", "count": 2},
    {"action": "add", "count": 2, "pool": ["x", "y", "z", "w"]},
    {"action": "reorder"},
])
def test_list_edit_is_deterministic_given_the_rng_seed(params: dict[str, Any]) -> None:
    items = ["a", "b", "c", "d", "e", "f"]
    by_seed = [perturb("list_edit", params, items, seed=seed) for seed in range(8)]
    assert by_seed == [perturb("list_edit", params, items, seed=seed) for seed in range(8)]
    assert len({json.dumps(r) for r in by_seed}) > 1, "the seed should matter"


def test_list_edit_params_need_one_amount_and_a_pool_to_add() -> None:
    with pytest.raises(OperatorError, match=r"action 'remove' needs exactly one of 'count' and 'fraction'"):
        make_operator("list_edit", {"action": "remove", "count": 1, "fraction": 0.5})
    with pytest.raises(OperatorError, match=r"action 'add' needs a non-empty 'pool'"):
        make_operator("list_edit", {"action": "add", "count": 1, "pool": []})
    with pytest.raises(OperatorError, match=r"params\.fraction: Input should be greater than 0"):
        make_operator("list_edit", {"action": "truncate", "fraction": 0})
    with pytest.raises(OperatorError,
                       match=r"params\.action: Input should be 'remove', 'reorder', 'add' or 'truncate'"):
        make_operator("list_edit", {"action": "shuffle"})


def test_list_edit_of_a_non_list_says_what_it_found() -> None:
    with pytest.raises(OperatorError, match=r"applies to a list; field 'action' of this call is str"):
        perturb("list_edit", {"field": "action", "action": "reorder"}, PLAN)


# --------------------------------------------------------------------------- text_edit

QUERY: dict[str, Any] = {"query": "How do I Export my invoices, export them to CSV?", "n": 3}


def test_text_edit_adds_keywords_at_the_end() -> None:
    params = {"field": "query", "action": "add_keyword", "keywords": ["urgent", "refund"]}
    assert perturb("text_edit", params, QUERY)["query"] == QUERY["query"] + " urgent refund"


def test_text_edit_removes_whole_words_case_insensitively() -> None:
    params = {"field": "query", "action": "remove_keyword", "keywords": ["export", "to csv"]}
    assert perturb("text_edit", params, QUERY)["query"] == "How do I my invoices, them?"
    exporting = perturb("text_edit", {"action": "remove_keyword", "keywords": ["export"]}, "Exporting is fine")
    assert exporting == "Exporting is fine"


def test_text_edit_paraphrase_asks_the_llm_with_the_instruction_and_temperature() -> None:
    calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    def chat(messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        calls.append((messages, params))
        return "  What is the way to download my bills as CSV?\n"

    params = {"field": "query", "action": "paraphrase", "temperature": 0.3, "model": "para", "instruction": "Reword."}
    assert perturb("text_edit", params, QUERY, chat=chat)["query"] == "What is the way to download my bills as CSV?"
    assert calls == [([{"role": "system", "content": "Reword."}, {"role": "user", "content": QUERY["query"]}],
                      {"temperature": 0.3, "model": "para"})]


def test_text_edit_paraphrase_through_the_simulator(llm_client: LLMClient) -> None:
    def chat(messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        return llm_client.chat(messages=messages, **{"model": "sim-echo", **params}).content

    assert perturb("text_edit", {"action": "paraphrase"}, "  export my invoices  ", chat=chat) == "export my invoices"


def test_a_temperature_ladder_builds_one_paraphrase_per_step() -> None:
    seen: list[float] = []

    def chat(messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        seen.append(params["temperature"])
        return "reworded"

    steps = expand_ladder({"action": "paraphrase"}, {"temperature": [0.2, 0.7, 1.2]})
    for params in steps:
        perturb("text_edit", params, "some text", chat=chat)
    assert seen == [0.2, 0.7, 1.2]


def test_text_edit_errors_say_what_is_missing() -> None:
    with pytest.raises(OperatorError, match=r"action 'paraphrase' needs an LLM, "
                                            r"and the replayer gave none for node 'signal_analysis'"):
        perturb("text_edit", {"action": "paraphrase"}, "text")
    with pytest.raises(OperatorError, match=r"action 'remove_keyword' needs a non-empty list of non-blank 'keywords'"):
        make_operator("text_edit", {"action": "remove_keyword"})
    with pytest.raises(OperatorError, match=r"applies to a text \(string\); field 'n' of this call is int"):
        perturb("text_edit", {"field": "n", "action": "add_keyword", "keywords": ["x"]}, QUERY)


# --------------------------------------------------------------------------- prompt_swap


def test_prompt_swap_replaces_the_recorded_template_with_a_registered_variant() -> None:
    op = make_operator("prompt_swap", {"variant": "support_bot.rewriter_terse"})
    change = op.change(ctx_for({}, prompt_template="support_bot.rewriter"))
    assert change == ExecutionChange(templates={"support_bot.rewriter": TemplateRef("support_bot.rewriter_terse")},
                                     params={})
    explicit = make_operator("prompt_swap", {"variant": "v2", "template": "planner"})
    assert explicit.change(ctx_for({}, prompt_template="other")).templates == {"planner": TemplateRef("v2")}


def test_prompt_swap_resolves_a_variant_file_against_the_spec_folder(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "terse.txt").write_text("[user]\n{query}\n")
    (tmp_path / "polite.md").write_text("Please: {query}\n")
    ctx = ctx_for({}, prompt_template="rewriter", base_dir=tmp_path)
    for variant, path in (
        ("prompts/terse.txt", tmp_path / "prompts" / "terse.txt"), ("polite.md", tmp_path / "polite.md"),
    ):
        assert make_operator("prompt_swap", {"variant": variant}).change(ctx).templates == {
            "rewriter": TemplateRef(variant, path.resolve())}
    with pytest.raises(OperatorError,
                       match=r"variant 'prompts/missing\.txt': template file .*missing\.txt .* does not exist"):
        make_operator("prompt_swap", {"variant": "prompts/missing.txt"}).change(ctx)


@pytest.mark.parametrize("ref,is_file", [
    ("support_bot.rewriter.v2", False), ("rewriter", False), ("planner.v2.final", False),
    ("prompts/terse.txt", True), ("terse.TXT", True), ("polite.md", True), ("x.prompt", True), ("sub\\x", True),
])
def test_a_template_reference_is_a_file_only_by_its_separator_or_ending(
    tmp_path: Path, ref: str, is_file: bool,
) -> None:
    if is_file:
        target = tmp_path / ref.replace("\\", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("{query}\n")
        if "\\" in ref:  # a Windows separator names a file too; here it is part of the name
            (tmp_path / ref).write_text("{query}\n")
    resolved = resolve_template_ref(ref, tmp_path)
    assert (resolved.path is not None) == is_file
    assert resolved.template_id == (None if is_file else ref)


def test_a_missing_template_file_names_the_folder_it_was_looked_for_in(tmp_path: Path) -> None:
    with pytest.raises(OperatorError, match=r"template file .*nothing\.txt \(from 'nothing\.txt'\) does not exist; "
                                            r"a relative path resolves against"):
        resolve_template_ref("nothing.txt", tmp_path)


def test_prompt_swap_without_a_template_to_replace_asks_for_one() -> None:
    with pytest.raises(OperatorError,
                       match=r"used no registered template .* give the template id to replace in params\.template"):
        make_operator("prompt_swap", {"variant": "v2"}).change(ctx_for({}))


def test_prompt_swap_variants_expand_into_one_perturbation_each() -> None:
    params = {"variants": ["a", "b.txt"], "template": "t"}
    assert expand_variants("prompt_swap", params) == [
        {"variant": "a", "template": "t"}, {"variant": "b.txt", "template": "t"},
    ]
    with pytest.raises(OperatorError, match=r"'variants' lists 2 replacements; .* expand_variants\(\)"):
        make_operator("prompt_swap", params)
    assert make_operator("prompt_swap", {"variants": ["a"]}).describe()["params"]["variant"] == "a"
    with pytest.raises(OperatorError, match=r"give exactly one of 'variant' .* and 'variants'"):
        make_operator("prompt_swap", {"variant": "a", "variants": ["b"]})
    assert expand_variants("bool_flip", {"field": "x"}) == [{"field": "x"}]


# --------------------------------------------------------------------------- param_change


def test_param_change_overrides_the_given_request_params() -> None:
    op = make_operator("param_change", {"temperature": 0.9, "seed": 7})
    assert op.change(ctx_for({})) == ExecutionChange(templates={}, params={"temperature": 0.9, "seed": 7})


def test_param_change_needs_a_valid_param() -> None:
    with pytest.raises(OperatorError, match=r"give at least one of model, temperature, top_p, seed, max_tokens"):
        make_operator("param_change", {})
    with pytest.raises(OperatorError, match=r"params\.top_p: Input should be less than or equal to 1"):
        make_operator("param_change", {"top_p": 1.5})


# --------------------------------------------------------------------------- ladders


def test_expand_ladder_gives_one_params_per_step_in_order() -> None:
    assert expand_ladder({"action": "remove"}, {"count": [3, 1, 2]}) == [
        {"action": "remove", "count": 3}, {"action": "remove", "count": 1}, {"action": "remove", "count": 2}]
    assert expand_ladder({"a": 1}, None) == [{"a": 1}] == expand_ladder({"a": 1}, {})


def test_expand_ladder_of_several_keys_is_their_product_in_key_order() -> None:
    assert expand_ladder({}, {"temperature": [0.0, 1.0], "seed": [1, 2]}) == [
        {"temperature": 0.0, "seed": 1}, {"temperature": 0.0, "seed": 2},
        {"temperature": 1.0, "seed": 1}, {"temperature": 1.0, "seed": 2}]


def test_expand_ladder_refuses_a_key_also_in_params() -> None:
    with pytest.raises(OperatorError, match=r"ladder\.count: 'count' is also given in params \(1\)"):
        expand_ladder({"count": 1}, {"count": [1, 2]})
    with pytest.raises(OperatorError, match=r"ladder\.count: the steps must be a non-empty list"):
        expand_ladder({}, {"count": []})


# --------------------------------------------------------------------------- entry points

SHOUT = '''
from pydantic import BaseModel, ConfigDict
from quiver.perturbations import Operator

class ShoutParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    suffix: str = "!"

class Shout(Operator):
    mode = "output"
    binary = False
    Params = ShoutParams

    def apply(self, output, ctx):
        return output.upper() + self.params.suffix
'''

WHISPER = '''
from quiver.perturbations import Operator, OperatorParams, operator

@operator("whisper")
class Whisper(Operator):
    mode = "output"
    binary = False
    Params = OperatorParams

    def apply(self, output, ctx):
        return output.lower()
'''


def test_a_third_party_operator_class_comes_in_through_its_entry_point(
    plugins: Callable[[str, str, str], None],
) -> None:
    plugins("thirdparty_ops", SHOUT, "[quiver.operators]\nshout = thirdparty_ops:Shout\n")
    _registry.OPERATORS.reload_entry_points()
    shout = get_operator("shout")
    assert shout.name == "shout" and "shout" in registered_operators()
    op = make_operator("shout", {"suffix": "?!"})
    assert op.apply("hello", ctx_for("hello")) == "HELLO?!"
    assert op.describe() == {"op": "shout", "params": {"suffix": "?!"}}
    with pytest.raises(OperatorError,
                       match=r"operator 'shout' params\.volume: Extra inputs are not permitted; valid params: suffix"):
        make_operator("shout", {"volume": 11})


def test_a_third_party_module_registers_its_operators_on_import(plugins: Callable[[str, str, str], None]) -> None:
    plugins("whisper_ops", WHISPER, "[quiver.operators]\nwhisper = whisper_ops\n")
    _registry.OPERATORS.reload_entry_points()
    assert make_operator("whisper", None).apply("HeLLo", ctx_for("HeLLo")) == "hello"


def test_a_broken_entry_point_is_reported_and_hides_nothing(plugins: Callable[[str, str, str], None]) -> None:
    plugins("thirdparty_ops", SHOUT, "[quiver.operators]\nshout = thirdparty_ops:Shout\nbroken = no_such_module:Op\n")
    _registry.OPERATORS.reload_entry_points()
    assert get_operator("shout").name == "shout"
    with pytest.raises(OperatorError, match=r"operator 'broken' could not be loaded from entry point "
                                            r"'broken = no_such_module:Op': ModuleNotFoundError"):
        get_operator("broken")


def test_entry_points_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def counting(group: str) -> Any:
        reads.append(group)
        return _registry_entry_points(group=group)

    monkeypatch.setattr(quiver_registry, "entry_points", counting)
    _registry.OPERATORS.forget_entry_points()
    for _ in range(3):
        with pytest.raises(OperatorError, match="unknown operator 'nope'"):
            get_operator("nope")
    registered_operators()
    assert reads == ["quiver.operators"]
    assert all(issubclass(cls.Params, BaseModel) for cls in registered_operators().values())


# --------------------------------------------------------------------------- fields touched


@pytest.mark.parametrize("op,params,expected", [
    ("override", {"set": {"sufficient": True, "plan.action": "EXECUTE"}},
     [FieldTouch("sufficient", True), FieldTouch("plan.action", "EXECUTE")]),
    ("categorical_flip", {"field": "turn_type", "to": "billing"}, [FieldTouch("turn_type", "billing")]),
    ("categorical_flip", {"field": "turn_type", "strategy": "next"}, [FieldTouch("turn_type", ANY_VALUE)]),
    ("bool_flip", {"field": "web_search_hint"}, [FieldTouch("web_search_hint", ANY_VALUE)]),
    ("list_edit", {"field": "fragments", "action": "remove", "count": 1}, [FieldTouch("fragments", ANY_VALUE)]),
    ("text_edit", {"field": "query", "action": "add_keyword", "keywords": ["x"]}, [FieldTouch("query", ANY_VALUE)]),
    ("bool_flip", {}, []),
    ("prompt_swap", {"variant": "v2"}, []),
    ("param_change", {"temperature": 0.5}, []),
])
def test_an_operator_says_which_fields_it_touches(op: str, params: dict[str, Any], expected: list[FieldTouch]) -> None:
    assert make_operator(op, params).fields_touched() == expected
