"""Fuzz: damaged trace files through ``quiver validate``, ``quiver analyze`` and
``quiver replay --check``.

The traces are the recorder's own (the quickstart pipeline, two tickets, two repeats),
then damaged: bytes flipped, the file cut, bytes that are not UTF-8, JSON nested past any
stack, NaN, huge integers, lone surrogates, fields of the wrong type or missing or
unknown, calls whose parents are the call itself, no call, or a cycle, call ids used
twice, and ``.gz`` files that are not gzip, truncated or corrupt.

The contract, for every case: no traceback and no hang (:func:`fuzzing.run_cli`);
``validate`` names every bad line as ``FILE:LINE: ...`` and counts the others as valid;
``analyze`` and ``replay --check`` warn once per bad line with that same message
(``quiver CMD: warning: FILE:LINE: ...; the line is skipped``), work on the rest and exit
1, or exit 2 with one line naming the file and its first bad line when no line reads.
Where the damage is known to spoil a line (not UTF-8, a parent cycle, ...), the message
must say so on that line. Analysis uses a hashing embedder, so no model is loaded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzing import FUZZ, CliResult, run_cli, tried
from hypothesis import given, settings, strategies as st

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "experiments" / "quickstart"
PIPELINE = f"{QUICKSTART / 'pipeline.py'}:run"
SUITE = "trace files"


# --------------------------------------------------------------------------- the corpus


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trace-fuzz")


@pytest.fixture(scope="module")
def lines(workdir: Path) -> list[bytes]:
    """The recorder's lines: the quickstart pipeline on two tickets, two repeats each."""
    tickets = (QUICKSTART / "inputs.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    (workdir / "inputs.jsonl").write_text("\n".join(tickets) + "\n", encoding="utf-8")
    spec = workdir / "record.yaml"
    spec.write_text(
        f"pipeline: {PIPELINE}\nllm:\n  simulator:\n    models: [{QUICKSTART / 'sim_models.py'}]\n"
        "  model: quickstart-classify\ninputs: inputs.jsonl\nrepeats: 2\nseed: 5\n",
        encoding="utf-8",
    )
    result = run_cli(["record", str(spec), "--output", str(workdir / "corpus"), "--quiet"], seconds=120)
    assert result.code == 0, result.stderr
    return (workdir / "corpus" / "traces.jsonl").read_bytes().splitlines(keepends=True)


@pytest.fixture(scope="module")
def hashing_embedder() -> Iterator[None]:
    """``quiver analyze`` embeds texts with a hash instead of a model."""
    import quiver._observational.profile as profile
    from quiver._distance.embed import FunctionEmbedder

    def vectors(texts: list[str]) -> Any:
        digests = [hashlib.sha256(t.encode("utf-8", "replace")).digest()[:16] for t in texts]
        return np.array([list(d) for d in digests], dtype=float).reshape(len(texts), 16)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profile, "make_embedder", lambda spec: FunctionEmbedder(vectors, name="fuzz-sha256"))
        yield


# --------------------------------------------------------------------------- the cases


@dataclass
class Case:
    """A damaged file and what is known of it."""

    what: str
    data: bytes
    suffix: str = ".jsonl"
    bad: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Lines known to be bad, each with the words one of which its message must hold."""
    clean: bool = False
    """Known to hold only valid lines."""


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
NOT_UTF8 = [b"\xff", b"\x80", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82", b"\xfe\xfe"]


def paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into JSON data, the root's children first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield (*path, k)
        yield from paths(v, (*path, k))


def parent_of(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        obj = obj[part]
    return obj


def dumps(trace: dict[str, Any]) -> bytes:
    return json.dumps(trace, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def pick_line(draw: Any, lines: list[bytes]) -> tuple[int, dict[str, Any]]:
    i = draw(st.integers(0, len(lines) - 1))
    return i, json.loads(lines[i])


def with_line(lines: list[bytes], i: int, new: bytes) -> bytes:
    return b"".join(lines[:i] + [new] + lines[i + 1:])


def flipped(draw: Any, lines: list[bytes]) -> Case:
    data = bytearray(b"".join(lines))
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return Case("bytes flipped", bytes(data))


def truncated(draw: Any, lines: list[bytes]) -> Case:
    data = b"".join(lines)
    cut = draw(st.integers(0, len(data)))
    start = data.rfind(b"\n", 0, cut) + 1
    number = data.count(b"\n", 0, start) + 1
    piece = data[start:cut]
    spoilt = bool(piece) and piece + b"\n" not in lines
    return Case("cut", data[:cut], bad={number: ("not valid JSON", "not UTF-8")} if spoilt else {})


def not_utf8(draw: Any, lines: list[bytes]) -> Case:
    i = draw(st.integers(0, len(lines) - 1))
    at = draw(st.integers(0, len(lines[i]) - 1))
    line = lines[i][:at] + draw(st.sampled_from(NOT_UTF8)) + lines[i][at:]
    return Case("not UTF-8", with_line(lines, i, line), bad={i + 1: ("not UTF-8",)})


def nested(draw: Any, lines: list[bytes]) -> Case:
    i, trace = pick_line(draw, lines)
    depth = draw(st.sampled_from([1, 50, 196, 197, 198, 199, 250, 990, 1000, 5000, 100_000]))
    if draw(st.booleans()):  # the whole line
        line = b"[" * depth + b"]" * depth + b"\n"
        return Case("nested line", with_line(lines, i, line), bad={i + 1: ("nested deeper", "expected a JSON object")})
    j = draw(st.integers(0, len(trace["calls"]) - 1))
    trace["calls"][j]["output"] = "\x00DEEP"
    line = dumps(trace).replace(b'"\\u0000DEEP"', b'{"a":' * depth + b"1" + b"}" * depth)
    # calls[j].output sits three levels down; its objects may go 197 deeper
    return Case("nested output", with_line(lines, i, line),
                bad={i + 1: ("nested deeper",)} if depth > 197 else {}, clean=depth <= 197)


def wrong_value(draw: Any, lines: list[bytes]) -> Case:
    i, trace = pick_line(draw, lines)
    where = draw(st.sampled_from(list(paths(trace))))
    holder = parent_of(trace, where)
    how = draw(st.sampled_from(["set", "delete", "add"]))
    if how == "delete":
        del holder[where[-1]]
    elif how == "add" and isinstance(holder, dict):
        holder[draw(st.text(min_size=1, max_size=8))] = draw(JSON_VALUES)
    else:
        holder[where[-1]] = draw(JSON_VALUES)
    return Case(f"field {how}", with_line(lines, i, dumps(trace)))


def broken_graph(draw: Any, lines: list[bytes]) -> Case:
    i, trace = pick_line(draw, lines)
    calls = trace["calls"]
    j, k = sorted(draw(st.lists(st.integers(0, len(calls) - 1), min_size=2, max_size=2, unique=True)))
    how = draw(st.sampled_from(["self", "unknown", "cycle", "duplicate"]))
    if how == "self":
        calls[k]["parents"].append(calls[k]["call_id"])
        expected = f"calls[{k}].parents[{len(calls[k]['parents']) - 1}]: call '{calls[k]['call_id']}' is its own parent"
    elif how == "unknown":
        ids = {c["call_id"] for c in calls}
        ghost = draw(st.text(min_size=1, max_size=10).filter(lambda s: s not in ids))
        calls[k]["parents"].append(ghost)
        expected = f"calls[{k}].parents[{len(calls[k]['parents']) - 1}]: unknown call id"
    elif how == "cycle":
        calls[j]["parents"].append(calls[k]["call_id"])
        calls[k]["parents"].append(calls[j]["call_id"])
        expected = ": parent cycle "
    else:
        calls[k]["call_id"] = calls[j]["call_id"]
        expected = f"calls[{k}].call_id: duplicate of calls[{j}]"
    return Case(f"parents: {how}", with_line(lines, i, dumps(trace)), bad={i + 1: (expected,)})


def json_edge(draw: Any, lines: list[bytes]) -> Case:
    i, trace = pick_line(draw, lines)
    how = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "huge int", "surrogate", "not an object",
                                "BOM", "CRLF", "blank lines", "empty"]))
    if how in ("BOM", "CRLF", "blank lines", "empty"):
        data = {"BOM": b"\xef\xbb\xbf" + b"".join(lines),
                "CRLF": b"".join(line.replace(b"\n", b"\r\n") for line in lines),
                "blank lines": b"\n \n".join(lines) + b"\n\n",
                "empty": b""}[how]
        return Case(how, data, clean=True)
    if how == "not an object":
        line = json.dumps(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))).encode() + b"\n"
        return Case(how, with_line(lines, i, line), bad={i + 1: ("expected a JSON object",)})
    where = draw(st.sampled_from(list(paths(trace))))
    parent_of(trace, where)[where[-1]] = "\x00HERE"
    literal = {"NaN": b"NaN", "Infinity": b"Infinity", "-Infinity": b"-Infinity", "huge int": b"7" * 5000,
               "surrogate": b'"a\\ud800b"'}[how]
    words = {"huge int": ("more than 4300 digits",), "surrogate": ("lone UTF-16 surrogate",)}
    line = dumps(trace).replace(b'"\\u0000HERE"', literal)
    return Case(how, with_line(lines, i, line), bad={i + 1: words.get(how, ("is not a JSON number",))})


LINE_DAMAGE: list[Callable[[Any, list[bytes]], Case]] = [
    wrong_value, broken_graph, nested, json_edge, not_utf8, truncated, flipped,  # hypothesis favours the first
]


@st.composite
def damaged_lines(draw: Any, lines: list[bytes]) -> Case:
    return draw(st.sampled_from(LINE_DAMAGE))(draw, lines)


@st.composite
def damaged_gzip(draw: Any, lines: list[bytes]) -> Case:
    inner = draw(st.sampled_from([None, *LINE_DAMAGE]))
    case = inner(draw, lines) if inner else Case("intact", b"".join(lines), clean=True)
    packed = gzip.compress(case.data, mtime=0)
    how = draw(st.sampled_from(["whole", "cut", "flipped", "trailing bytes", "plain named .gz", "gzip named .jsonl"]))
    if how == "whole":
        return Case(f"gz of {case.what}", packed, ".jsonl.gz", case.bad, case.clean)
    if how == "cut":
        return Case(f"gz cut, of {case.what}", packed[: draw(st.integers(0, len(packed) - 1))], ".jsonl.gz")
    if how == "flipped":
        data = bytearray(packed)
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return Case(f"gz flipped, of {case.what}", bytes(data), ".jsonl.gz")
    if how == "trailing bytes":
        return Case(f"gz with trailing bytes, of {case.what}", packed + draw(st.binary(min_size=1, max_size=20)),
                    ".jsonl.gz")
    if how == "plain named .gz":
        return Case("plain named .gz", case.data, ".jsonl.gz",
                    bad={1: ("not a gzip file",)} if case.data else {}, clean=not case.data)
    return Case("gzip named .jsonl", packed, ".jsonl", bad={1: ("gzip-compressed data in a file not named .gz",)})


# --------------------------------------------------------------------------- the checks


def check_validate(path: Path, case: Case) -> tuple[list[str], int]:
    """Run ``quiver validate``; return its messages (in line order) and the valid count."""
    result = run_cli(["validate", str(path)])
    messages = result.stderr.splitlines()
    where = re.compile(re.escape(str(path)) + r":(\d+): \S")
    numbers = []
    for message in messages:
        found = where.match(message)
        assert found, f"{case.what}: not FILE:LINE: REASON: {message!r}"
        numbers.append(int(found.group(1)))
    assert numbers == sorted(set(numbers)), f"{case.what}: lines out of order or twice: {numbers}"
    summary = re.fullmatch(re.escape(str(path)) + r": (\d+) trace\(s\) valid, (\d+) line\(s\) bad\n", result.stdout)
    assert summary, f"{case.what}: {result.stdout!r}"
    valid, bad = int(summary.group(1)), int(summary.group(2))
    assert bad == len(messages) and result.code == (1 if bad else 0), (case.what, result)
    if case.suffix == ".jsonl" and not case.data.startswith(b"\x1f\x8b"):  # every line read: valid or reported
        assert valid + bad == sum(1 for line in case.data.split(b"\n") if line.strip()), case.what
    if case.clean:
        assert not messages, f"{case.what}: {messages}"
    for number, words in case.bad.items():
        line = next((m for n, m in zip(numbers, messages, strict=True) if n == number), None)
        assert line is not None, f"{case.what}: line {number} not reported; reported: {messages}"
        assert any(w in line for w in words), f"{case.what}: line {number}: {line!r} says none of {words}"
    return messages, valid


def _warnings(result: CliResult, command: str) -> list[str]:
    """The bad lines a command skipped, as it named them (one warning each)."""
    prefix, suffix = f"quiver {command}: warning: ", "; the line is skipped"
    found = [line for line in result.stderr.splitlines() if line.startswith(prefix)]
    assert all(line.endswith(suffix) for line in found), result
    return [line.removeprefix(prefix).removesuffix(suffix) for line in found]


def _nothing_reads(result: CliResult, command: str, path: Path, messages: list[str], what: str) -> None:
    """Every line bad: the warnings, then exit 2 naming the file and the first bad line."""
    error = (f"no {what} in {path}: {len(messages)} bad line(s), none that reads (the first: {messages[0]})"
             if messages else f"trace file {path} holds no trace; record a corpus into it with `quiver record`")
    assert result.code == 2 and result.error_lines() == [f"quiver {command}: error: {error}"], result


def check_analyze(path: Path, out: Path, messages: list[str], valid: int) -> None:
    result = run_cli(["analyze", str(path), "--out", str(out / "analysis"), "--cache", str(out / "cache"),
                      "--resamples", "20", "--no-plots", "--quiet"])
    assert _warnings(result, "analyze") == messages, result
    if not valid:
        _nothing_reads(result, "analyze", path, messages, "trace")
    elif messages:  # done with problems; or it could not run on the traces left (too few to pair, ...)
        assert result.code == 1 or (result.code == 2 and len(result.error_lines()) == 1), result
    else:
        assert result.code in (0, 2), result
        assert result.code == 0 or len(result.error_lines()) == 1, result


def check_replay(path: Path, messages: list[str], valid: int) -> None:
    result = run_cli(["replay", str(path), "--pipeline", PIPELINE, "--check", "--quiet"])
    assert _warnings(result, "replay") == messages, result
    if not valid:
        _nothing_reads(result, "replay", path, messages, "trace to replay")
        return
    assert f"of {valid} traces reproduce exactly" in result.stdout, result
    assert result.code == 1 if messages else result.code in (0, 1), result


def run_case(case: Case, workdir: Path) -> None:
    tried(SUITE)
    path = workdir / f"case{case.suffix}"
    path.write_bytes(case.data)
    messages, valid = check_validate(path, case)
    check_analyze(path, workdir, messages, valid)
    check_replay(path, messages, valid)


@settings(parent=FUZZ, max_examples=200)
@given(data=st.data())
def test_damaged_trace_lines_cost_only_themselves(
    data: st.DataObject, lines: list[bytes], workdir: Path, hashing_embedder: None
) -> None:
    run_case(data.draw(damaged_lines(lines)), workdir)


@settings(parent=FUZZ, max_examples=100)
@given(data=st.data())
def test_damaged_gzip_files_give_the_lines_before_the_damage_and_one_error(
    data: st.DataObject, lines: list[bytes], workdir: Path, hashing_embedder: None
) -> None:
    run_case(data.draw(damaged_gzip(lines)), workdir)


# --------------------------------------------------------------------------- the paths


def commands(path: Path, workdir: Path) -> dict[str, CliResult]:
    return {
        "validate": run_cli(["validate", str(path)]),
        "analyze": run_cli(["analyze", str(path), "--out", str(workdir / "analysis"), "--quiet"]),
        "replay": run_cli(["replay", str(path), "--pipeline", PIPELINE, "--check", "--quiet"]),
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [("missing.jsonl", "trace file {path} does not exist"),
     ("folder.jsonl", "{path} is a folder, not a trace file; give the .jsonl (or .jsonl.gz) file inside it")],
)
def test_a_trace_file_that_cannot_be_opened_is_one_line(name: str, expected: str, workdir: Path) -> None:
    path = workdir / name
    if name.startswith("folder"):
        path.mkdir(exist_ok=True)
    message = expected.format(path=path)
    for command, result in commands(path, workdir).items():
        tried(SUITE)
        if command == "validate":  # it goes on with the other files, and exits 1
            assert result.code == 1 and result.stderr == message + "\n" and result.stdout == ""
        else:
            assert result.code == 2 and result.stderr == f"quiver {command}: error: {message}\n", result
            assert result.stdout == ""


def test_the_messages_of_calls_that_are_not_a_graph(lines: list[bytes], workdir: Path) -> None:
    """One damage a line, each named by its field; a line can be valid again only whole."""
    damaged = []
    for change in ("unknown", "self", "cycle", "duplicate"):
        trace = json.loads(lines[0])
        calls = trace["calls"]
        assert [c["call_id"] for c in calls[:5]] == ["c0", "c1", "c2", "c3", "c4"]
        assert calls[4]["parents"] == ["c2", "c3"] and calls[2]["parents"] == ["c1"]  # route <- classify <- normalize
        if change == "unknown":
            calls[3]["parents"] = ["x"]
        elif change == "self":
            calls[3]["parents"].append("c3")
        elif change == "cycle":
            calls[2]["parents"].append("c4")
        else:
            calls[-1]["call_id"] = "c0"  # the last call: no call names it, nor has it c0 as a parent
        damaged.append(dumps(trace))
    path = workdir / "graph.jsonl"
    path.write_bytes(b"".join(damaged) + lines[0])
    last = len(json.loads(lines[0])["calls"]) - 1

    result = run_cli(["validate", str(path)])

    assert result.code == 1 and result.stdout == f"{path}: 1 trace(s) valid, 4 line(s) bad\n"
    assert result.stderr.splitlines() == [
        f"{path}:1: calls[3].parents[0]: unknown call id 'x'; a parent is the call_id of another call of the trace",
        f"{path}:2: calls[3].parents[1]: call 'c3' is its own parent",
        f"{path}:3: calls[2]: parent cycle c2 -> c4 -> c2; a call's parents must have ended before it",
        f"{path}:4: calls[{last}].call_id: duplicate of calls[0] ('c0'); call ids are unique within a trace",
    ]


@pytest.mark.parametrize("name", ["missing-golden.jsonl", "golden-folder"])
def test_a_golden_file_that_cannot_be_opened_is_one_line(name: str, lines: list[bytes], workdir: Path) -> None:
    corpus = workdir / "corpus" / "traces.jsonl"
    golden = workdir / name
    if name.endswith("folder"):
        golden.mkdir(exist_ok=True)
    result = run_cli(["analyze", str(corpus), "--out", str(workdir / "analysis"), "--golden", str(golden), "--quiet"])
    what = "is a folder" if name.endswith("folder") else "does not exist"
    assert result.code == 2 and result.stderr == (
        f"quiver analyze: error: golden file {golden} {what}; give a JSONL file of {{input_id, node, output}} lines\n"
    )
