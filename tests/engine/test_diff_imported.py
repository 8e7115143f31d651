"""``quiver diff`` on the bundled span exports (tests/data/traces, and the originals in
../shared/data/traces when that folder is there).

* A raw export given to ``quiver diff`` or ``quiver compare`` is refused in one line that
  names the ``quiver import`` to run first (exit 2).
* Every export is imported with each format that reads it; every imported trace diffed
  with itself has no divergence, and the corpus form either tabulates or says in one
  line why there is no same-input pair (exit 2).
* Fuzz: one recorded dimension of one call of an imported trace is changed (its output,
  model version or parameter, template hash, tool response, a retrieved document's
  content, the call dropped, or a parent's model changed with the call's inputs), and
  ``quiver diff A B --json`` names the call and the cause the change implies, from the
  context the importer kept. Never a traceback.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, run_cli, tried
from hypothesis import given, settings, strategies as st

from quiver import NodeCall, Trace, load_traces, write_traces

TESTS = Path(__file__).parents[1]
FOLDERS = [TESTS / "data" / "traces", TESTS.parents[1] / "shared" / "data" / "traces"]


def _distinct(paths: list[Path]) -> list[Path]:
    """The first of each file's copies (the project keeps copies of some shared files)."""
    seen: dict[str, Path] = {}
    for path in paths:
        seen.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    return sorted(seen.values())


EXPORTS = _distinct([p for folder in FOLDERS if folder.is_dir() for p in sorted(folder.rglob("*.json"))])
FORMATS = ("langfuse", "openinference", "otel-genai")


def _name(path: Path) -> str:
    return f"{path.parent.parent.parent.name}/{path.parent.name}/{path.name}"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``export name:format`` -> the corpus ``quiver import`` wrote, for every format that read traces."""
    root = tmp_path_factory.mktemp("imported")
    out = {}
    for i, export in enumerate(EXPORTS):
        for fmt in FORMATS:
            corpus = root / f"{i}-{fmt}.jsonl"
            result = run_cli(["import", fmt, str(export), "--out", str(corpus)])
            if result.code in (0, 1) and corpus.is_file() and load_traces(corpus).traces:
                out[f"{_name(export)}:{fmt}"] = corpus
    return out


def test_every_bundled_export_is_read_by_some_format(imported: dict[str, Path]) -> None:
    assert len(EXPORTS) >= 15
    read = {key.rsplit(":", 1)[0] for key in imported}
    # a DSPy program's saved state is no span file: every format refuses it
    assert read == {_name(p) for p in EXPORTS if p.name != "dspy_program.json"}


@pytest.mark.parametrize("export", EXPORTS, ids=_name)
def test_a_raw_export_is_refused_in_one_line_naming_the_import(export: Path, tmp_path: Path) -> None:
    for argv in (["diff", str(export), str(export)], ["diff", str(export)],
                 ["compare", str(export), str(export), "--out", str(tmp_path)]):
        result = run_cli(argv)
        assert result.code == 2, argv
        (line,) = result.error_lines()
        assert "not a trace corpus" in line and f"quiver import langfuse|openinference|otel-genai {export}" in line


def test_every_imported_trace_diffs_with_itself_and_the_corpus_form_runs(imported: dict[str, Path]) -> None:
    for key, corpus in imported.items():
        traces = load_traces(corpus).traces
        for t in traces:
            result = run_cli(["diff", f"{corpus}:{t.trace_id}", f"{corpus}:{t.trace_id}", "--json"])
            assert result.code == 0, (key, result.stderr)
            data = json.loads(result.stdout)
            assert data["first_divergence"] is None and data["same_input"] and data["D_iter"] == 0, key
        table = run_cli(["diff", str(corpus), "--resamples", "50"])
        if table.code == 2:
            assert "no same-input pair" in table.error_lines()[0], (key, table.stderr)
        else:
            assert table.code == 0 and "## First divergence" in table.stdout, key


# --------------------------------------------------------------------------- fuzz


def _ancestors(trace: Trace, call: NodeCall) -> set[str]:
    by_id = {c.call_id: c for c in trace.calls}
    seen: set[str] = set()
    todo = list(call.parents)
    while todo:
        p = todo.pop()
        if p in by_id and p not in seen:
            seen.add(p)
            todo += by_id[p].parents
    return seen


def _nested(trace: Trace, call: NodeCall) -> bool:
    """Another call runs inside this one (its output would change with theirs)."""
    return any(c.call_path.startswith(call.call_path + "/") for c in trace.calls)


Mutation = Callable[[Trace, NodeCall, NodeCall], str | None]
"""(the copy, the call in the original, the same call in the copy) -> the expected cause, None when
the mutation does not apply to the call."""


def _output(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    b.output = {"changed": a.output}
    return "sampling" if a.kind == "llm" and (a.model or a.prompt) else "unexplained"


def _model_version(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if b.model is None:
        return None
    b.model.version = f"{a.model.version if a.model else ''}-next"
    b.output = {"changed": a.output}
    return "model"


def _model_param(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if b.model is None:
        return None
    b.model.params = {**b.model.params, "temperature": 1.7}
    b.output = {"changed": a.output}
    return "model"


def _template(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if b.prompt is None:
        return None
    b.prompt.template_hash = "sha256:" + "e" * 64
    b.output = {"changed": a.output}
    return "prompt"


def _tool_response(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if b.tool is None:
        return None
    b.tool.response_hash = "sha256:" + "f" * 64
    b.output = {"changed": a.output}
    return "tool"


def _document(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if not b.retrieval:
        return None
    b.retrieval[0].content_hash = "sha256:" + "d" * 64
    b.output = {"changed": a.output}
    return "retrieval"


def _dropped(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    if a.kind == "source" or _nested(t, a) or any(a.call_id in c.parents for c in t.calls):
        return None
    t.calls.remove(b)
    return "unexplained"


def _inherited(t: Trace, a: NodeCall, b: NodeCall) -> str | None:
    """A parent's model changed with the same output; this call's inputs and output differ:
    the model change of that parent, inherited."""
    by_id = {c.call_id: c for c in t.calls}
    upstream = [by_id[p] for p in sorted(_ancestors(t, b)) if p in by_id and by_id[p].model is not None]
    if not upstream or a.input_hash is None:  # no recorded inputs to differ: nothing to inherit through
        return None
    upstream[0].model.version = "inherited-next"  # type: ignore[union-attr]
    b.input_hash = "sha256:" + "a" * 64
    b.output = {"changed": a.output}
    return "model"


MUTATIONS: dict[str, Mutation] = {
    "output": _output, "model version": _model_version, "model param": _model_param, "template": _template,
    "tool response": _tool_response, "document": _document, "dropped": _dropped, "inherited": _inherited,
}


def _mutated(a: Trace, how: str, start: int) -> tuple[Trace, NodeCall, str] | None:
    """A copy of ``a`` with the mutation applied to the first call from ``start`` on that it
    applies to, among the calls nothing runs inside (the first divergence is the innermost
    divergent call); None when it applies to none."""
    leaves = [c for c in a.calls if not _nested(a, c) and c.kind != "source"]
    for k in range(len(leaves)):
        target = leaves[(start + k) % len(leaves)]
        b = a.model_copy(deep=True)
        expected = MUTATIONS[how](b, target, next(c for c in b.calls if c.call_id == target.call_id))
        if expected is not None:
            return b, target, expected
    return None


@pytest.fixture(scope="module")
def candidates(imported: dict[str, Path]) -> dict[str, list[Trace]]:
    """Per mutation, the imported traces it applies to (every one applies to some)."""
    traces = [t for key in sorted(imported) for t in load_traces(imported[key]).traces]
    out = {how: [t for t in traces if _mutated(t, how, 0) is not None] for how in MUTATIONS}
    assert all(out.values()), {how: len(ts) for how, ts in out.items()}
    return out


@settings(parent=FUZZ, max_examples=300)
@given(pick=st.integers(0, 255), call=st.integers(0, 63), how=st.sampled_from(sorted(MUTATIONS)))
def test_diff_names_the_call_and_cause_of_one_recorded_change(
    candidates: dict[str, list[Trace]], tmp_path_factory: pytest.TempPathFactory, pick: int, call: int, how: str,
) -> None:
    tried("diff imported")
    a = candidates[how][pick % len(candidates[how])]
    mutated = _mutated(a, how, call)
    assert mutated is not None
    b, target, expected = mutated
    folder = tmp_path_factory.mktemp("pair")
    write_traces(folder / "a.jsonl", [a])
    write_traces(folder / "b.jsonl", [b])
    result = run_cli(["diff", str(folder / "a.jsonl"), str(folder / "b.jsonl"), "--json"])
    assert result.code == 0, result.stderr
    first: dict[str, Any] = json.loads(result.stdout)["first_divergence"]
    assert first is not None, how
    assert (first["node"], first["occurrence"]) == (target.node, target.occurrence), (how, first["summary"])
    assert first["cause"] == expected, (how, target.kind, first["summary"])
    assert first["inherited"] == (how == "inherited"), first["summary"]
    text = run_cli(["diff", str(folder / "a.jsonl"), str(folder / "b.jsonl")])
    assert text.code == 0 and f"cause: {expected}" in text.stdout
