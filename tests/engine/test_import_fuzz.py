"""``quiver import`` on broken span files: never a traceback, never a hang.

Every case starts from a real export in ``tests/data/traces`` (see its NOTICE.md),
mutates it (values of the wrong type, huge, not finite or nested thousands deep; keys
dropped or renamed; records repeated; parent links pointing anywhere, at themselves or
round in a cycle), writes it as JSON, JSON Lines or gzip, then maybe cuts it short or
puts bytes that are not UTF-8 into it, and imports it with the command a user runs.
The contract (``tests/fuzzing.py``): no traceback, no hang, and exit 0 (imported), 1
(imported what could be read, every problem reported on stderr) or 2 (one error line).

Large trees are imported in a few seconds: a 5,000-span parent chain and a 3,000-span
parent cycle with no root (the cycle reported with its span ids, rooted at one span).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"

SEEDS: dict[str, list[Path]] = {
    "openinference": [
        DATA / "openinference" / "openinference_client_span_tool_calls.json",
        DATA / "openinference" / "vercel-v6-all-spans.json",
        DATA / "retrieval" / "retriever_span.json",
    ],
    "otel-genai": [
        DATA / "openinference" / "otel_genai_client_span_tool_calls.json",
        DATA / "openinference" / "otel_genai_tool_execution_span.json",
        DATA / "openinference" / "vercel-v6-all-spans.json",
    ],
    "langfuse": [
        DATA / "langfuse" / "pydantic-ai-2025-06-06.trace.json",
        DATA / "langfuse" / "vercel-aisdk-2025-11-17.trace.json",
        DATA / "langfuse" / "microsoft-agent-2025-12-17.trace.json",
    ],
}

DEEP = 5_000
"""Nesting that Python's json module cannot parse (it raises RecursionError)."""

DEEP_MARK = "<deep>"
"""Stands for a value nested :data:`DEEP` levels (json.dumps cannot write one): put in
the written text in its place."""

DEEP_TEXT = "[" * DEEP + "{}" + "]" * DEEP

BAD_VALUES: list[Any] = [
    None, "", 0, -1, 10**30, -(10**30), 1e308, float("nan"), float("inf"), float("-inf"), True, False,
    "not a time", "0x", "9999-99-99T99:99:99Z", "2024-02-30T00:00:00Z", [], {}, [1, [2, [3]]],
    {"a": {"b": None}}, "\x00\ud7ff\ufffd", "é" * 50, "[" * DEEP, "{\"a\":" * DEEP, "[[1], {\"x\": [2]}]",
    {"stringValue": 5}, {"intValue": "x"}, {"doubleValue": "nan"}, {"arrayValue": [1]},
    {"kvlistValue": {"values": [1, {"key": None}]}}, [10**20, 5], ["a", "b"],
]
"""Values every field gets in turn: wrong types, huge, not finite, nested too deep."""


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _paths(value: Any) -> list[tuple[Any, ...]]:
    """Every place in ``value`` (keys of mappings, indices of lists) less than 30 levels
    down, parents first."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        node, prefix = stack.pop(0)
        if prefix:
            out.append(prefix)
        if len(prefix) >= 30:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((item, (*prefix, key)) for key, item in items)
    return out


def _parent_and_key(doc: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    node = doc
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


def _ids(doc: Any) -> list[str]:
    """The span and observation ids in a document, for parent links that point at them."""
    found = []
    for path in _paths(doc):
        if path[-1] in ("spanId", "span_id", "id") and isinstance(_parent_and_key(doc, path)[0][path[-1]], str):
            found.append(_parent_and_key(doc, path)[0][path[-1]])
    return found or ["s1"]


PARENT_KEYS = ("parent_id", "parentSpanId", "parentObservationId", "parentId")


def _mutate(doc: Any, rng: random.Random, how: str) -> Any:
    """One mutation of ``doc`` (in place where it can; returns the document)."""
    paths = _paths(doc)
    if not paths:
        return rng.choice(BAD_VALUES)
    path = rng.choice(paths)
    parent, key = _parent_and_key(doc, path)
    if how == "value":
        parent[key] = copy.deepcopy(rng.choice(BAD_VALUES))
    elif how == "deep":
        parent[key] = rng.choice([_nested(50), _nested(101), _nested(400), DEEP_MARK])
    elif how == "drop":
        del parent[key]
    elif how == "rename" and isinstance(parent, dict):
        parent[key + "_" if isinstance(key, str) else str(key)] = parent.pop(key)
    elif how == "repeat" and isinstance(parent, list):
        parent.insert(rng.randrange(len(parent) + 1), copy.copy(parent[key]))
    elif how == "link":
        ids = _ids(doc)
        targets = [p for p in paths if isinstance(p[-1], str) and p[-1] in PARENT_KEYS] or [path]
        parent, key = _parent_and_key(doc, rng.choice(targets))
        if isinstance(parent, dict):
            parent[key] = rng.choice([*ids, "missing", None])
    elif how == "loop":
        for target in [p for p in paths if isinstance(p[-1], str) and p[-1] in ("spanId", "span_id", "id")]:
            owner, _ = _parent_and_key(doc, target)
            if isinstance(owner, dict) and isinstance(owner.get(target[-1]), str):
                for parent_key in PARENT_KEYS:
                    if parent_key in owner or rng.random() < 0.3:
                        owner[parent_key] = owner[target[-1]]  # the span is its own parent
    return doc


def _text(doc: Any, layout: str) -> str:
    if layout == "jsonl" and isinstance(doc, list):
        text = "\n".join(json.dumps(item) for item in doc) + "\n"
    else:
        text = json.dumps(doc, indent=1 if layout == "indented" else None)
    return text.replace(json.dumps(DEEP_MARK), DEEP_TEXT)


def _damage(raw: bytes, rng: random.Random, how: str) -> bytes:
    if how == "cut" and raw:
        return raw[: rng.randrange(len(raw))]
    if how == "bytes" and raw:
        at = rng.randrange(len(raw))
        return raw[:at] + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\x00", b"\xed\xa0\x80", b"\x80" * 3]) + raw[at:]
    if how == "bom":
        return b"\xef\xbb\xbf" + raw
    return raw


def _check(result: Any, path: Path) -> None:
    assert result.code in (0, 1, 2), result
    if result.code == 1:
        problems = [line for line in result.stderr.splitlines() if line and not line.endswith("was imported")]
        assert problems, f"exit 1 with no problem reported:\n{result.stderr}"
    if result.code == 0:
        assert "imported" in result.stdout


MUTATIONS = st.lists(st.sampled_from(["value", "value", "value", "deep", "drop", "rename", "repeat", "link", "loop"]),
                     min_size=1, max_size=4)


@settings(parent=FUZZ, max_examples=240)
@given(
    fmt=st.sampled_from(sorted(SEEDS)),
    pick=st.integers(0, 2),
    mutations=MUTATIONS,
    layout=st.sampled_from(["json", "jsonl", "indented", "gzip"]),
    damage=st.sampled_from(["none", "none", "none", "cut", "bytes", "bom"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_mutated_span_files_import_or_are_reported_without_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, fmt: str, pick: int, mutations: list[str], layout: str,
    damage: str, seed: int,
) -> None:
    tried("span files")
    rng = random.Random(seed)
    doc = json.loads(SEEDS[fmt][pick].read_text(encoding="utf-8"))
    if fmt == "openinference" and pick == 0:
        doc = [{"name": "llm", "context": {"trace_id": "t1", "span_id": "s1"}, "parent_id": None,
                "attributes": doc}, {"name": "tool", "context": {"trace_id": "t1", "span_id": "s2"},
                                     "parent_id": "s1", "attributes": {"input.value": "{\"q\": 1}"}}]
    for how in mutations:
        doc = _mutate(doc, rng, how)
    folder = tmp_path_factory.mktemp("spans")
    raw = _damage(_text(doc, "jsonl" if layout == "gzip" else layout).encode("utf-8", "surrogatepass"), rng, damage)
    path = folder / ("spans.json.gz" if layout == "gzip" else f"spans.{'jsonl' if layout == 'jsonl' else 'json'}")
    path.write_bytes(gzip.compress(raw, mtime=0) if layout == "gzip" else raw)
    result = run_cli(["import", fmt, str(path), "--out", str(folder / "out.jsonl"), "--summary",
                      str(folder / "summary.json")])
    _check(result, path)


# --------------------------------------------------------------------------- targeted cases


def _openinference_span(i: int, parent: str | None, **attributes: Any) -> dict[str, Any]:
    return {"name": "step", "context": {"trace_id": "t1", "span_id": f"s{i}"}, "parent_id": parent,
            "start_time": f"2024-01-01T00:00:{i % 60:02d}Z", "end_time": f"2024-01-01T00:01:{i % 60:02d}Z",
            "attributes": {"openinference.span.kind": "CHAIN", "input.value": json.dumps({"i": i}), **attributes}}


def _langfuse_export(parents: list[str | None]) -> dict[str, Any]:
    observations = [{"id": f"o{i}", "traceId": "t1", "parentObservationId": parent, "type": "SPAN",
                     "name": "step", "startTime": f"2024-01-01T00:00:{i % 60:02d}.000Z", "input": {"i": i}}
                    for i, parent in enumerate(parents)]
    return {"trace": {"id": "t1", "name": "chain", "input": {"q": 1}}, "observations": observations}


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


CHAIN = 5_000
CYCLE = 3_000


@pytest.mark.parametrize("fmt", ["openinference", "langfuse"])
def test_a_five_thousand_span_parent_chain_imports_in_seconds(tmp_path: Path, fmt: str) -> None:
    tried("span files")
    if fmt == "openinference":
        path = _write_jsonl(tmp_path / "chain.jsonl",
                            [_openinference_span(i, f"s{i - 1}" if i else None) for i in range(CHAIN)])
    else:
        path = tmp_path / "chain.json"
        path.write_text(json.dumps(_langfuse_export([f"o{i - 1}" if i else None for i in range(CHAIN)])))
    result = run_cli(["import", fmt, str(path), "--out", str(tmp_path / "out.jsonl")], seconds=15)
    assert result.code == 0, result.stderr
    assert f"with {CHAIN} node call(s)" in result.stdout


@pytest.mark.parametrize("with_trace_id", [True, False])
def test_a_three_thousand_span_cycle_with_no_root_is_rooted_at_one_span_and_reported(
    tmp_path: Path, with_trace_id: bool
) -> None:
    tried("span files")
    spans = [_openinference_span(i, f"s{(i - 1) % CYCLE}") for i in range(CYCLE)]
    if not with_trace_id:  # spans grouped into a trace through their parent links alone
        for span in spans:
            del span["context"]["trace_id"]
    path = _write_jsonl(tmp_path / "cycle.jsonl", spans)
    result = run_cli(["import", "openinference", str(path), "--out", str(tmp_path / "out.jsonl")], seconds=15)
    assert result.code == 1
    assert f"into 1 trace(s) (1 input group(s)) with {CYCLE} node call(s)" in result.stdout
    [cycle] = [line for line in result.stderr.splitlines() if "cycle" in line]
    # rooted at the span that started first (then by span id): s0 and s60, s120, ... share the
    # first second; "s0" sorts first; the cycle is named from there along the parent links
    assert f"span s0: parent links form a cycle of {CYCLE} span(s) (s0 -> s{CYCLE - 1} -> s{CYCLE - 2}" in cycle
    assert "more) -> s0); imported as a root-level call" in cycle
    trace = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert trace["calls"][1]["parents"] == ["c0"] and trace["calls"][1]["output"] is None


def test_input_values_nested_too_deep_for_json_are_imported_as_text(tmp_path: Path) -> None:
    tried("span files")
    deep = "[" * DEEP + "]" * DEEP
    spans = [_openinference_span(0, None, **{"input.value": deep}),
             _openinference_span(1, "s0", **{"input.value": deep, "input.mime_type": "application/json"}),
             _openinference_span(2, "s0", **{"output.value": "{\"a\":" * DEEP})]
    path = _write_jsonl(tmp_path / "deep.jsonl", spans)
    result = run_cli(["import", "openinference", str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.code == 1, result.stderr
    assert "span s1: input.value is nested more than" in result.stderr
    calls = json.loads((tmp_path / "out.jsonl").read_text())["calls"]
    assert calls[1]["tags"] == {} or isinstance(calls[1]["input_hash"], str)


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_a_record_nested_too_deep_is_a_problem_and_the_others_import(tmp_path: Path, layout: str) -> None:
    tried("span files")
    good = _openinference_span(0, None)
    bad = _openinference_span(1, None, deep=_nested(DEEP // 10))
    if layout == "json":
        text = "[" + json.dumps(good) + ", " + "[" * DEEP + "]" * DEEP + "]"
    else:
        text = json.dumps(good) + "\n" + "[" * DEEP + "]" * DEEP + "\n" + json.dumps(bad) + "\n"
    path = tmp_path / f"deep.{layout}"
    path.write_text(text, encoding="utf-8")
    result = run_cli(["import", "openinference", str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.code == 1, result.stderr
    assert "nested more than" in result.stderr
    assert "imported 1 span(s)" in result.stdout


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:10] + b"\xff\xfe" + raw[10:],
        lambda raw: gzip.compress(raw)[:-12] + b"\x00" * 12,
        lambda raw: b"\x1f\x8b" + raw,
    ],
    ids=["not-utf8", "corrupt-gzip", "gzip-magic-only"],
)
def test_a_file_that_cannot_be_read_is_one_problem(tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
    tried("span files")
    raw = _write_jsonl(tmp_path / "ok.jsonl", [_openinference_span(0, None)]).read_bytes()
    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(damage(raw))
    result = run_cli(["import", "openinference", str(path), "--out", str(tmp_path / "out.jsonl")])
    assert result.code == 1
    assert f"{path}: " in result.stderr and "file skipped" in result.stderr


@pytest.mark.parametrize("where", ["out", "summary"])
def test_an_output_that_cannot_be_written_is_one_error_line(tmp_path: Path, where: str) -> None:
    tried("span files")
    spans = _write_jsonl(tmp_path / "spans.jsonl", [_openinference_span(0, None)])
    folder = tmp_path / "a-folder"
    folder.mkdir()
    out = folder if where == "out" else tmp_path / "out.jsonl"
    argv = ["import", "openinference", str(spans), "--out", str(out)]
    if where == "summary":
        argv += ["--summary", str(folder)]
    result = run_cli(argv)
    assert result.code == 2
    assert result.error_lines() == [f"quiver import: error: cannot write {folder}: Is a directory; "
                                    "give a file in a folder you can write to"]
