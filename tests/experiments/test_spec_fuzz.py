"""Broken specs: never a traceback, never a hang, always one line with the file and line.

Every case starts from a spec the project ships (``experiments/specs/support_bot.yaml``
for campaigns, the ``record.yaml`` of each example for recordings) and breaks it: a
value of the wrong type, a string, a bool, a huge or not finite number in a field; a key
dropped, misspelt or written twice; data nested hundreds deep; aliases that expand to
millions of nodes or contain themselves; bytes that are not UTF-8; lines cut short. The
spec is checked the way a user checks one without running it (``quiver schema KIND
--check FILE``): it is valid (exit 0), or its first problem is one line ``FILE:LINE:
...`` (exit 1), and then ``quiver record`` / ``quiver run`` refuse it the same way,
with exit 2, before anything starts.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver._yamlspec import MAX_ALIAS_NODES, MAX_DEPTH, load_spec
from quiver.experiments._config import CampaignSpec, RecordSpec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
SEEDS: dict[str, list[Path]] = {
    "spec": [EXPERIMENTS / "specs" / "support_bot.yaml"],
    "record": [EXPERIMENTS / name / "record.yaml" for name in ("quickstart", "multihop_qa", "support_bot")],
}
COMMAND = {"spec": "run", "record": "record"}
MODEL = {"spec": CampaignSpec, "record": RecordSpec}

BAD_VALUES: list[Any] = [
    True, False, None, "3", "hot", "not a url", "", -5, 0, -1, 10**12, 10**40, 10**400, 1e308,
    float("nan"), float("inf"), float("-inf"), 0.5, [], {}, [1, "a"], {"x": 1}, "x" * 5000, "\t\u202e\x85",
]
"""Values every field gets in turn: the wrong type, a string or bool for a number,
numbers out of any sane range, not finite, empty containers."""


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*prefix, i))
    return out


def _misspelt(key: str, rng: random.Random) -> str:
    if len(key) < 2:
        return key + "x"
    i = rng.randrange(len(key))
    return rng.choice([key[:i] + key[i + 1:], key[:i] + key[i] * 2 + key[i + 1:], key + "s", key.upper()])


def _mutate_data(data: dict[str, Any], rng: random.Random, how: str) -> dict[str, Any]:
    paths = _paths(data)
    path = rng.choice(paths)
    node: Any = data
    for part in path[:-1]:
        node = node[part]
    key = path[-1]
    if how == "value":
        node[key] = rng.choice(BAD_VALUES)
    elif how == "drop":
        del node[key]
    elif how == "rename" and isinstance(key, str):
        node[_misspelt(key, rng)] = node.pop(key)
    elif how == "extra" and isinstance(node, dict):
        node[rng.choice(["extra", "repeat", "llm_params", "timeout", "seeds"])] = 1
    elif how == "nest":
        value: Any = rng.choice([1, "x", None])
        for _ in range(rng.choice([5, 40, MAX_DEPTH + 5, 150])):
            value = rng.choice([[value], {"k": value}])
        node[key] = value
    return data


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else '1'] * 9)}]\n" for i in range(9))
"""A billion laughs: nine levels of nine aliases each (9**9 nodes when expanded)."""


def _damage_text(text: str, rng: random.Random, how: str) -> bytes:
    lines = text.splitlines(keepends=True)
    if how == "duplicate" and lines:
        top = [line for line in lines if re.match(r"^[A-Za-z_]+:", line)]
        if top:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(top).split(":")[0] + ": 1\n")
    elif how == "bomb":
        lines.append(BOMB)
    elif how == "recursive":
        lines.append("loop: &loop [1, *loop]\n")
    elif how == "alias":
        lines.insert(0, "common: &common {temperature: 0}\n")
        lines.append("also: *common\n")
    elif how == "deep":
        depth = rng.choice([MAX_DEPTH + 1, 1000, 20_000])
        lines.append("deep: " + "[" * depth + "]" * depth + "\n")
    elif how == "cut" and text:
        return text[: rng.randrange(len(text))].encode("utf-8")
    elif how == "tab" and lines:
        at = rng.randrange(len(lines))
        lines[at] = "\t" + lines[at]
    raw = "".join(lines).encode("utf-8")
    if how == "bytes":
        at = rng.randrange(len(raw) + 1)
        raw = raw[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\x1b"]) + raw[at:]
    return raw


ONE_LINE = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+): (?P<rest>[^\n]+)$")


def _check_and_refuse(kind: str, path: Path) -> None:
    """The spec is valid (exit 0), or one line FILE:LINE: ... (exit 1) and the command
    that would run it refuses it with that line (exit 2)."""
    checked = run_cli(["schema", kind, "--check", str(path)])
    if checked.code == 0:
        spec = load_spec(MODEL[kind], path)
        for name in ("repeats", "concurrency", "seed"):
            value = getattr(spec, name)
            assert isinstance(value, int) and not isinstance(value, bool) and value >= 0
        assert spec.repeats <= 100_000
        return
    assert checked.code == 1, checked
    lines = checked.stderr.splitlines()
    assert len(lines) == 1, checked.stderr
    m = ONE_LINE.match(lines[0])
    assert m is not None and m["file"] == str(path), lines[0]
    refused = run_cli([COMMAND[kind], str(path)])
    assert refused.code == 2, refused
    assert refused.error_lines() == [f"quiver {COMMAND[kind]}: error: {lines[0]}"]


@settings(parent=FUZZ, max_examples=180)
@given(
    kind=st.sampled_from(["spec", "record", "record"]),
    pick=st.integers(0, 2),
    mutations=st.lists(st.sampled_from(["value", "value", "value", "drop", "rename", "extra", "nest"]),
                       max_size=3),
    damage=st.sampled_from(["none", "none", "none", "duplicate", "bomb", "recursive", "alias", "deep", "cut",
                            "tab", "bytes"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_mutated_specs_are_valid_or_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, kind: str, pick: int, mutations: list[str], damage: str, seed: int
) -> None:
    tried("specs")
    rng = random.Random(seed)
    seeds = SEEDS[kind]
    data = yaml.safe_load(seeds[pick % len(seeds)].read_text(encoding="utf-8"))
    for how in mutations:
        data = _mutate_data(data, rng, how)
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_bytes(_damage_text(_dump(data), rng, damage))
    _check_and_refuse(kind, path)


YAML_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
    st.sampled_from(["~", ".nan", "-.inf", "0x1F", "0o17", "1_000", "2024-01-01", "!!binary AAAA", "yes", "<<"]),
)

SPEC_KEYS = st.sampled_from(["pipeline", "llm", "inputs", "repeats", "perturbations", "simulator", "params", "x",
                             "1", "true"])


@settings(parent=FUZZ, max_examples=80)
@given(
    kind=st.sampled_from(["spec", "record"]),
    data=st.recursive(YAML_SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(SPEC_KEYS | st.text(max_size=8), inner, max_size=4), max_leaves=25),
    raw_text=st.booleans(),
)
def test_random_yaml_is_a_valid_spec_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, kind: str, data: Any, raw_text: bool
) -> None:
    tried("specs")
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    text = yaml.safe_dump(data) if not raw_text else "\n".join(
        f"{k}: {v}" for k, v in (data.items() if isinstance(data, dict) else enumerate([data]))
    )
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _check_and_refuse(kind, path)


# --------------------------------------------------------------------------- targeted cases

BASE = "pipeline: p.py:run\nllm: simulator\ninputs: [{q: 1}]\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE + "repeats: 1000000000000\n",
         ":4: repeats: Input should be an integer in [1, 100000], got 1000000000000"),
        (BASE + "repeats: 1" + "0" * 400 + "\n",
         ":4: repeats: Input should be an integer in [1, 100000], got a 401-digit number"),
        (BASE + "repeats: true\n", ":4: repeats: Input should be an integer in [1, 100000], got true"),
        (BASE + 'repeats: "3"\n', ':4: repeats: Input should be an integer in [1, 100000], got "3"'),
        (BASE + "repeats: .nan\n", ":4: repeats: not a finite number"),
        (BASE + "concurrency: .inf\n", ":4: concurrency: not a finite number"),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  params: {temperature: -5}\ninputs: [{q: 1}]\n",
         ":4: llm.params.temperature: Input should be a number in [0, 2], got -5"),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  params: {temperature: hot}\ninputs: [{q: 1}]\n",
         ':4: llm.params.temperature: Input should be a number in [0, 2], got "hot"'),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  params: {max_tokens: 0}\ninputs: [{q: 1}]\n",
         ":4: llm.params.max_tokens: Input should be an integer in [1, 1000000], got 0"),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  timeout_s: 1e9\ninputs: [{q: 1}]\n",
         ":4: llm.timeout_s: Input should be a number in (0, 3600], got 1000000000.0"),
        (BASE + "repeats: 3\nseed: 1\nrepeats: 4\n", ":6: duplicate key 'repeats' (first at line 4)"),
        ("pipeline: p.py:run\nllm:\n  simulator: {}\n  model: a\n  model: b\ninputs: [{q: 1}]\n",
         ":5: llm: duplicate key 'model' (first at line 4)"),
        ("pipelin: p.py:run\nllm: simulator\ninputs: [{q: 1}]\n",
         ":1: pipelin: unknown key 'pipelin' (did you mean 'pipeline'?); valid keys here are: pipeline,"),
        ("pipeline: p.py:run\nllm: {base_url: not a url}\ninputs: [{q: 1}]\n",
         ":2: llm.base_url: 'not a url' is not an http(s) URL"),
        ("pipeline: p.py:run\nllm: {base_url: 'http://h:port/v1'}\ninputs: [{q: 1}]\n",
         ":2: llm.base_url: 'http://h:port/v1' is not a URL"),
        (BASE + "x: " + "[" * 5000 + "]" * 5000 + "\n",
         f":4: not valid YAML: nested more than {MAX_DEPTH} levels deep"),
        (BASE + BOMB, f"at most {MAX_ALIAS_NODES} more are allowed"),
        (BASE + "x: &x [1, *x]\n", ":4: an alias refers to the node that contains it"),
        (BASE + "x: !!int abc\n", ":4: x: cannot read the value 'abc'"),
        (BASE + "x: " + "1" * 5000 + "\n", ":4: x: cannot read the value"),
        (BASE + "? [a, b]\n: 1\n", ":4: a key must be a plain value"),
        ("", ":1: the file is empty"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_nonsense_is_refused_with_the_line_the_field_and_the_range(tmp_path: Path, text: str, expected: str) -> None:
    tried("specs")
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    result = run_cli(["record", str(path)])
    assert result.code == 2, result
    [line] = result.error_lines()
    assert line.startswith(f"quiver record: error: {path}:") and expected in line, line
    assert run_cli(["schema", "record", "--check", str(path)]).code == 1


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    tried("specs")
    path = tmp_path / "spec.yaml"
    path.write_bytes(BASE.encode() + b"name: caf\xe9\n")
    result = run_cli(["record", str(path)])
    assert result.code == 2
    assert result.error_lines() == [f"quiver record: error: {path}:4: not UTF-8 text: byte 0xe9 at column 10; "
                                    "save the file as UTF-8"]


def test_a_misspelt_campaign_key_is_reported_with_the_key_it_meant(tmp_path: Path) -> None:
    """A spec may leave out perturbations (``quiver localize`` needs none): the misspelt
    key is then the one problem, named with the key it meant and the keys there are."""
    tried("specs")
    text = (EXPERIMENTS / "specs" / "support_bot.yaml").read_text().replace("perturbations:", "perturbation:")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    result = run_cli(["run", str(path)])
    assert result.code == 2
    [line] = result.error_lines()
    assert "perturbation: unknown key 'perturbation' (did you mean 'perturbations'?)" in line
    assert "more problem" not in line and line.endswith("gate, attribution")


def test_the_bundled_specs_are_valid_and_their_bounds_are_in_the_schema() -> None:
    for kind, paths in SEEDS.items():
        for path in paths:
            assert run_cli(["schema", kind, "--check", str(path)]).code == 0
    schema = run_cli(["schema", "record"])
    assert '"maximum": 100000' in schema.stdout and '"exclusiveMinimum": 0' in schema.stdout


def test_numbers_in_an_accepted_spec_are_finite_numbers_of_their_type(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + "repeats: 7\nconcurrency: 2\nseed: 3\n", encoding="utf-8")
    spec = load_spec(RecordSpec, path)
    assert (spec.repeats, spec.concurrency, spec.seed) == (7, 2, 3)
    assert all(math.isfinite(v) for v in (spec.llm.timeout_s, spec.llm.retry.max_s))


def test_a_ladder_of_millions_of_steps_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    tried("specs")
    steps = ", ".join(str(i) for i in range(1, 3001))
    text = (EXPERIMENTS / "specs" / "support_bot.yaml").read_text().replace(
        "ladder: {count: [1, 2, 3, 5, 8]}", f"ladder: {{count: [{steps}], seed: [{steps}]}}")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    result = run_cli(["run", str(path)])
    assert result.code == 2
    [line] = result.error_lines()
    assert ": perturbations[5]: 9000000 parameter sets (variants x the product of the ladder's lists); at most " \
           "10000 are allowed" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"q": 1}\n{"q": "caf\xe9"}\n', "in.jsonl:2: not UTF-8 text: byte 0xe9 at column 11"),
        (b'{"q": 1}\n' + b"[" * 100_000 + b"\n", "in.jsonl:2: not valid JSON: nested too deeply"),
        (b'{"q": 1}\n[1]\n', "in.jsonl:2: an input must be a JSON object; got list"),
        (b"\n\n", "in.jsonl: the inputs file holds no inputs"),
    ],
    ids=["not-utf8", "deep", "not-an-object", "empty"],
)
def test_an_inputs_file_that_cannot_be_read_names_its_line(tmp_path: Path, content: bytes, expected: str) -> None:
    tried("specs")
    (tmp_path / "in.jsonl").write_bytes(content)
    path = tmp_path / "spec.yaml"
    path.write_text("pipeline: p.py:run\nllm: simulator\ninputs: in.jsonl\n", encoding="utf-8")
    result = run_cli(["record", str(path)])
    assert result.code == 2
    [line] = result.error_lines()
    assert line.startswith(f"quiver record: error: {tmp_path}/{expected}"), line


def test_an_inline_input_that_is_not_an_object_names_its_line_and_index(tmp_path: Path) -> None:
    tried("specs")
    path = tmp_path / "spec.yaml"
    path.write_text("pipeline: p.py:run\nllm: simulator\ninputs:\n  - {q: 1}\n  - 3\n", encoding="utf-8")
    result = run_cli(["record", str(path)])
    assert result.code == 2
    assert result.error_lines() == [f"quiver record: error: {path}:5: inputs[1]: Input should be a valid "
                                    "dictionary, got 3"]
