"""``quiver import`` on span files written by the real instrumentors and exporters
(``tests/data/spans``, written by ``tests/data/spans/generate.py`` against the simulator).

* Reconciliation, every file: the spans in the file by kind equal the calls imported by
  kind (an LLM span is an llm call, or folded into the framework node that is one; a
  tool span a tool call; a retriever span a retrieval call), the reconciliation says
  so, every LLM call has its messages and its response text, nothing is a problem.
* ``quiver diff``, one file per producer: one reply's text changed in the file is found
  as that call's divergence.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from fuzzing import run_cli

import quiver
from quiver import NodeCall, Trace

SPANS = Path(__file__).resolve().parents[1] / "data" / "spans"
FILES = sorted(p for p in SPANS.rglob("*") if p.suffix in (".json", ".jsonl", ".pb") and p.parent != SPANS)
PRODUCERS = sorted({p.parent.name for p in FILES})
CALL_KINDS = {"llm": "llm", "tool": "tool", "retriever": "retrieval"}
NO_TOKEN_COUNTS = {"openinference-dspy"}
"""Producers whose spans record no token counts (DSPy's LM spans)."""


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_the_fixture_set_covers_eight_producers() -> None:
    assert len(FILES) >= 25 and len(PRODUCERS) >= 8, (len(FILES), PRODUCERS)
    assert {p.suffix for p in FILES} == {".json", ".jsonl", ".pb"}


@pytest.fixture(scope="module")
def imported() -> dict[Path, quiver.ImportResult]:
    return {path: quiver.import_traces("auto", path) for path in FILES}


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_spans_by_kind_are_calls_by_kind(path: Path, imported: dict[Path, quiver.ImportResult]) -> None:
    result = imported[path]
    assert result.problems == [], result.problems
    rec = result.reconciliation.to_json()
    calls = Counter(c.kind for t in result.traces for c in t.calls[1:])
    for kind, call_kind in CALL_KINDS.items():
        became = rec["became"].get(kind, {})
        assert sum(became.values()) == rec["spans"][kind], (kind, rec)
        assert set(became) <= {call_kind, f"folded:{call_kind}"}, (kind, became)
        # a framework node is a call of the kind of what ran in it (LangGraph's retrieve node: a retrieval call)
        from_chains = rec["became"].get("chain", {}).get(call_kind, 0) - became.get(f"folded:{call_kind}", 0)
        assert calls[call_kind] == rec["spans"][kind] + max(from_chains, 0), (kind, rec, calls)
    assert rec["spans"]["llm"] > 0 and sum(rec["spans"].values()) + rec["merged"] == rec["records"] == \
        result.spans_read
    assert rec["dropped"] == {}
    line = result.reconciliation.line()
    assert f"{rec['spans']['llm']} LLM -> " in line and line.endswith("0 dropped")


@pytest.mark.parametrize("path", FILES, ids=_name)
def test_every_llm_call_has_its_messages_and_response_text(path: Path,
                                                           imported: dict[Path, quiver.ImportResult]) -> None:
    for trace in imported[path].traces:
        for call in trace.calls[1:]:
            if call.kind != "llm":
                continue
            wrapper = not (call.prompt and call.prompt.assembled)
            if wrapper:  # an LLM span around another (LlamaIndex's predict): the messages are its inner call's
                assert any(c.kind == "llm" and c.prompt and c.prompt.assembled and
                           c.call_path.startswith(call.call_path + "/") for c in trace.calls), call.call_path
            assert call.response is not None and call.response.content.strip(), (call.node, call.call_id)
            assert call.response.usage or wrapper or path.parent.name in NO_TOKEN_COUNTS, (call.node, call.call_id)
            assert call.model is not None and call.model.name
            assert call.output not in (None, "", {}, [])


# --------------------------------------------------------------------------- quiver diff per producer


def _target(trace: Trace) -> tuple[NodeCall, str] | None:
    """The last LLM call with a text reply, and a word of it its prompt does not hold."""
    for call in reversed(trace.calls):
        if call.kind != "llm" or call.response is None or call.prompt is None:
            continue
        prompt = " ".join(m.content for m in call.prompt.assembled)
        words = [w for w in re.findall(r"[A-Za-z]{5,}", call.response.content) if w not in prompt]
        if words:
            return call, max(words, key=len)
    return None


def _diff_file(producer: str) -> Path:
    candidates = [p for p in FILES if p.parent.name == producer]
    return next((p for p in candidates if p.suffix != ".pb"), candidates[0])


@pytest.mark.parametrize("producer", PRODUCERS)
def test_a_changed_reply_is_found_as_that_calls_divergence(producer: str, tmp_path: Path,
                                                          imported: dict[Path, quiver.ImportResult]) -> None:
    path = _diff_file(producer)
    trace, (call, word) = next((t, found) for t in imported[path].traces if (found := _target(t)))
    changed = tmp_path / path.name
    changed.write_text(path.read_text(encoding="utf-8").replace(word, word.upper()), encoding="utf-8")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for source, out in ((path, a), (changed, b)):
        result = run_cli(["import", "auto", str(source), "--out", str(out)])
        assert result.code == 0, result.stderr
    diff = run_cli(["diff", f"{a}:{trace.trace_id}", f"{b}:{trace.trace_id}", "--json"])
    assert diff.code == 0, diff.stderr
    first = json.loads(diff.stdout)["first_divergence"]
    assert first is not None, f"{path}: changing {word!r} in {call.node}#{call.occurrence} found no divergence"
    assert (first["node"], first["occurrence"]) == (call.node, call.occurrence), first
    assert first["cause"] == "sampling" and "output" in first["what"]
