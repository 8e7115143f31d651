"""An import format added from outside the engine: one ``SpanFormat`` subclass, one decorator.

The ``toy-jsonl`` format is defined here only: JSON Lines records ``{"trace", "span",
"parent", "name", "kind", "input", "output"}``, one span each. Registered, it imports
with :func:`quiver.import_traces` and ``quiver import`` into traces with the right calls,
parents and groups; unregistered, it is gone again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import quiver
from quiver import content_hash, load_traces
from quiver._importers import (
    NOTHING,
    Attrs,
    ImportFormatError,
    ImportProblem,
    MappedCall,
    Note,
    SourceSpan,
    SpanFormat,
    import_format,
    registered_formats,
    unregister_format,
)
from quiver._trace import CallKind, ToolStep, Trace

BUILT_IN = ["langfuse", "openinference", "otel-genai"]
_PLACE = ("trace", "span", "parent", "name")
_KINDS: dict[str, CallKind] = {"llm": "llm", "tool": "tool", "retrieval": "retrieval"}


class ToyJsonl(SpanFormat):
    """One JSON object per line: ``{"trace", "span", "parent", "name", "kind", "input", "output"}``."""

    tag_key = "toy"
    unit = "a toy record"

    def record(self, value: Mapping[str, Any], where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
        missing = [key for key in _PLACE[:2] if not value.get(key)]
        if missing:
            problems.append(ImportProblem(where, value.get("span"), f"no {' or '.join(missing)}; record skipped"))
            return []
        return [SourceSpan(
            span_id=str(value["span"]), trace_id=str(value["trace"]),
            parent_id=str(value["parent"]) if value.get("parent") else None,
            name=str(value.get("name") or "span"), kind_label=str(value.get("kind") or ""),
            start_ns=None, end_ns=None, where=where,
            attributes={k: v for k, v in value.items() if k not in _PLACE},
        )]

    def map_call(self, span: SourceSpan, attrs: Attrs, note: Note) -> MappedCall:
        kind = _KINDS.get(str(attrs.get("kind")), "transform")
        given, output = attrs.get("input", NOTHING), attrs.get("output")
        tool = None
        if kind == "tool":
            args = given if isinstance(given, dict) else {"input": given}
            tool = ToolStep(name=span.name, args=args, response=output, response_hash=content_hash(output))
        return MappedCall(kind=kind, input=given, output=output, tool=tool)


@pytest.fixture
def toy_format() -> Iterator[SpanFormat]:
    """``toy-jsonl``, registered for one test and removed after it.

    ``import_format("toy-jsonl")(ToyJsonl)`` is what ``@import_format("toy-jsonl")``
    above the class would do at import time; here it is scoped to each test.
    """
    import_format("toy-jsonl")(ToyJsonl)
    try:
        yield registered_formats()["toy-jsonl"]
    finally:
        unregister_format("toy-jsonl")


def _run(trace: str, question: str, action: str, hits: list[str]) -> list[dict[str, Any]]:
    """One agent run: the agent (root), its planning LLM call and its search tool call."""
    return [
        {"trace": trace, "span": f"{trace}-1", "parent": None, "name": "agent", "kind": "chain",
         "input": {"question": question}, "output": f"answer from {', '.join(hits)}"},
        {"trace": trace, "span": f"{trace}-2", "parent": f"{trace}-1", "name": "plan", "kind": "llm",
         "input": question, "output": {"action": action}},
        {"trace": trace, "span": f"{trace}-3", "parent": f"{trace}-1", "name": "search", "kind": "tool",
         "input": {"query": question}, "output": hits, "cost": 0.002},
    ]


RECORDS = [
    *_run("a1", "where is my refund?", "search", ["refunds.md"]),
    *_run("b1", "reset my password", "search", ["passwords.md"]),
    *_run("a2", "where is my refund?", "answer", ["refunds.md", "billing.md"]),
    *_run("b2", "reset my password", "search", ["passwords.md"]),
]


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def _check_traces(traces: list[Trace]) -> None:
    assert [t.trace_id for t in traces] == ["a1", "b1", "a2", "b2"]
    for t in traces:
        assert [(c.call_id, c.node, c.kind, c.parents, c.call_path) for c in t.calls] == [
            ("c0", "input", "source", [], "input#0"),
            ("c1", "agent", "transform", ["c0"], "agent#0"),
            ("c2", "plan", "llm", ["c1"], "agent#0/plan#0"),
            ("c3", "search", "tool", ["c1"], "agent#0/search#0"),
        ]
    a1, b1, a2, b2 = traces
    assert a1.inputs == a1.calls[0].output == {"question": "where is my refund?"}
    assert a2.calls[2].output == {"action": "answer"} and a2.output == "answer from refunds.md, billing.md"
    search = a1.calls[3]
    assert search.tool is not None
    assert (search.tool.name, search.tool.args) == ("search", {"query": "where is my refund?"})
    assert search.tags["toy"] == {"cost": 0.002}  # what the mapping did not use is kept
    # repeats of one question form one group, numbered in order
    assert a1.input_id == a2.input_id != b1.input_id == b2.input_id
    assert [(t.trace_id, t.repeat) for t in traces] == [("a1", 0), ("b1", 0), ("a2", 1), ("b2", 1)]


# --------------------------------------------------------------------------- the API


def test_the_new_format_is_listed_with_the_built_in_ones(toy_format: SpanFormat) -> None:
    assert list(registered_formats()) == sorted([*BUILT_IN, "toy-jsonl"])
    assert isinstance(toy_format, ToyJsonl) and toy_format.name == "toy-jsonl"


def test_import_traces_reads_the_new_format(toy_format: SpanFormat, export: Path) -> None:
    result = quiver.import_traces("toy-jsonl", [export])
    assert result.ok, [str(p) for p in result.problems]
    assert result.format == "toy-jsonl" and result.spans_read == 12 and result.calls == 12 and result.groups == 2
    _check_traces(result.traces)
    assert result.traces[0].tags["import"]["format"] == "toy-jsonl"
    assert result.summary()["attributes"] == {
        "mapped": {"input": 12, "kind": 12, "output": 12}, "kept_in_tags": {"cost": 4},
    }


def test_problems_of_the_new_format_are_reported_with_their_line(toy_format: SpanFormat, tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps({"name": "orphan"}) + "\n42\n", encoding="utf-8")
    result = quiver.import_traces("toy-jsonl", path)
    assert [str(p) for p in result.problems] == [
        f"{path}:2: no trace or span; record skipped",
        f"{path}:3: not a toy record: a JSON int; skipped",
    ]
    assert len(result.traces) == 1


# --------------------------------------------------------------------------- the registry


def test_the_format_leaves_with_its_registration(export: Path) -> None:
    import_format("toy-jsonl")(ToyJsonl)
    assert "toy-jsonl" in registered_formats()
    assert isinstance(unregister_format("toy-jsonl"), ToyJsonl)
    assert list(registered_formats()) == BUILT_IN
    with pytest.raises(ImportFormatError, match=r"^unknown import format 'toy-jsonl'; the registered formats are "
                                                r"langfuse, openinference, otel-genai \("):
        quiver.import_traces("toy-jsonl", export)


def test_a_taken_name_is_refused(toy_format: SpanFormat) -> None:
    class Other(ToyJsonl):
        pass

    with pytest.raises(ImportFormatError, match=r"^import format name 'toy-jsonl' is already registered by "
                                                r".*\.ToyJsonl; .*Other needs another name"):
        import_format("toy-jsonl")(Other)
    with pytest.raises(ImportFormatError, match="'langfuse' is already registered"):
        import_format("langfuse")(Other)
    with pytest.raises(ImportFormatError, match="'otel-genai' is built in and cannot be unregistered"):
        unregister_format("otel-genai")
    assert import_format("toy-jsonl")(ToyJsonl) is ToyJsonl  # the same class again: a no-op
    assert registered_formats()["toy-jsonl"] is toy_format


def test_an_incomplete_format_is_refused() -> None:
    class NoMapping(SpanFormat):
        def record(self, value: Mapping[str, Any], where: str, problems: list[ImportProblem]) -> list[SourceSpan]:
            return []

    with pytest.raises(ImportFormatError, match=r"NoMapping \('half'\) must implement map_call\(\)"):
        import_format("half")(NoMapping)
    with pytest.raises(ImportFormatError, match="must be a subclass of quiver._importers.SpanFormat"):
        import_format("half")(dict)  # type: ignore[type-var]
    assert "half" not in registered_formats()


# --------------------------------------------------------------------------- entry points

PLUGIN = """
    from quiver._importers import NOTHING, MappedCall, SourceSpan, SpanFormat

    class LineFormat(SpanFormat):
        tag_key = "line"

        def record(self, value, where, problems):
            return [SourceSpan(span_id=None, trace_id=None, parent_id=None, name=value["step"], kind_label="",
                               start_ns=None, end_ns=None, attributes={"output": value.get("output")}, where=where)]

        def map_call(self, span, attrs, note):
            return MappedCall(output=attrs.get("output"))
"""


def test_a_third_party_format_comes_in_through_its_entry_point(
    plugins: Callable[[str, str, str], None], tmp_path: Path
) -> None:
    plugins("line_format", PLUGIN, "[quiver.importers]\nline = line_format:LineFormat\n")
    result = quiver.import_traces("line", [{"step": "parse", "output": 1}, {"step": "parse", "output": 2}])
    assert result.format == "line" and [t.calls[1].output for t in result.traces] == [1, 2]
    assert type(registered_formats()["line"]).__module__ == "line_format"


def test_a_broken_format_entry_point_is_reported_and_hides_nothing(plugins: Callable[[str, str, str], None]) -> None:
    plugins("line_format", PLUGIN, "[quiver.importers]\nline = line_format:LineFormat\nbroken = nowhere:Format\n")
    assert list(registered_formats()) == sorted([*BUILT_IN, "line"])
    with pytest.raises(ImportFormatError, match=r"^import format 'broken' could not be loaded from entry point "
                                                r"'broken = nowhere:Format': ModuleNotFoundError"):
        quiver.import_traces("broken", [])


# --------------------------------------------------------------------------- the command line


def test_quiver_import_reads_the_new_format(toy_format: SpanFormat, export: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from quiver.experiments._cli import main

    out = tmp_path / "corpus.jsonl"
    assert main(["import", "toy-jsonl", str(export), "--out", str(out)]) == 0
    assert "into 4 trace(s) (2 input group(s)) with 12 node call(s)" in capsys.readouterr().out
    _check_traces(load_traces(out).traces)
