"""Pairs one can open: what actually happened in a baseline and its perturbed replay.

For each perturbation of a campaign a handful of pairs is chosen by rule
(:func:`select_examples`), each turned into an :class:`ExamplePair`: the input, the
target's output before and after (the fields that differ), the path of both runs as a
sequence of calls aligned side by side with the first divergent call marked (the
engine's diff, :func:`quiver._diff.diff_traces`, the one ``quiver diff`` prints), each
node's distance, and a word-level diff of the final output.

The rules, per perturbation, in this order (a pair is shown once):

* **typical effective**: among the effective pairs, those whose events (D_shape, D_iter,
  D_struct, D_output) are the commonest combination; of them the one whose d_i is
  nearest the median (the first in job order on a tie);
* **largest cascade**: the effective pair whose downstream nodes moved most (the sum of
  their distances), among those whose path changed (D_shape) when any did: a pair that
  changed values only is never shown as the cascade of a perturbation that changed
  paths, and a perturbation's examples include a path-changing pair whenever it has one;
* **pass to fail**: the first effective pair whose baseline passed its outcome checks and
  whose replay failed them (with outcome checks, when any did);
* **no-op**: the first no-op pair;
* **not applied**: the first pair whose perturbation did not land, if any;
* **failed**: the first failed replay, if any.

A campaign writes its examples to ``examples.json`` (:func:`write_examples`), from which
``report.html`` shows them (``quiver report`` rebuilds the page from it); ``quiver show
RUN_DIR PAIR_ID`` makes the same view of any pair (:func:`find_pair`).
"""

from __future__ import annotations

import difflib
import json
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._canonical import canonical_json
from quiver._errors import QuiverError
from quiver._outdir import write_text

from .markup import visible

if TYPE_CHECKING:
    from quiver._interventional import PairRow
    from quiver._trace import Trace

__all__ = ["EXAMPLES_FILE", "ExamplePair", "Step", "select_examples", "pair_view", "write_examples",
           "load_examples", "find_pair", "pair_rows", "list_pairs", "RULES", "replay_trace_id", "baseline_file",
           "word_diff", "traces_by_id"]

EXAMPLES_FILE = "examples.json"
RULES = ("typical effective", "largest cascade", "pass to fail", "no-op", "not applied", "failed")
VALUE_CHARS = 600
"""The most characters of a value (an input, a field, an output) an example keeps."""
OUTPUT_WORDS = 400
"""The most words of each final output the word-level diff compares."""


@dataclass(frozen=True)
class Step:
    """One call of the aligned paths: in the baseline, the replay or both.

    Attributes:
        call: ``node#occurrence``.
        baseline: What the baseline's call decided (``gate=arm``; empty: no decision),
            None when the call is not in the baseline.
        replay: The same in the replay.
        differs: Whether its outcome (output, decisions, error) differs, or it ran in
            one run only.
        first: Whether it is the first divergent call.
        target: Whether it is the call the perturbation was applied at.
    """

    call: str
    baseline: str | None
    replay: str | None
    differs: bool
    first: bool = False
    target: bool = False


@dataclass(frozen=True)
class ExamplePair:
    """A pair as a reader opens it (see the module docstring)."""

    pair_id: str
    perturbation: str
    rule: str
    status: str
    stratum: str | None
    input_id: str
    inputs: str
    baseline_trace: str
    replay_trace: str | None
    target: str
    changed: tuple[tuple[str, str, str], ...]
    magnitude: float | None
    steps: tuple[Step, ...]
    first: str | None
    cause: str | None
    events: Mapping[str, Any]
    distances: tuple[tuple[str, float | None], ...]
    output_diff: tuple[tuple[str, str], ...]
    error: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExamplePair:
        """The example as :meth:`to_json` writes it.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such an example.
        """
        d = dict(data)
        d["changed"] = tuple((str(f), str(a), str(b)) for f, a, b in d["changed"])
        d["steps"] = tuple(Step(**s) for s in d["steps"])
        d["distances"] = tuple((str(n), None if v is None else float(v)) for n, v in d["distances"])
        d["output_diff"] = tuple((str(op), str(w)) for op, w in d["output_diff"])
        return cls(**d)

    def headline(self) -> str:
        """One line: what happened in the pair."""
        if self.status == "failed":
            return f"the replay failed: {self.error or 'no error recorded'}"
        if self.stratum == "not_applied":
            return f"the perturbation was not applied: {self.note or 'no reason recorded'}"
        moved = [name for name, key in (("path", "D_shape"), ("call counts", "D_iter"), ("nodes run", "D_struct"))
                 if self.events.get(key)]
        out = "final output changed" if self.output_changed else "final output identical"
        where = f"first divergent call {self.first}" if self.first else "no call diverged"
        return f"{where}; {', '.join(moved) + ' changed; ' if moved else ''}{out}"

    @property
    def output_changed(self) -> bool:
        """Whether the final outputs differ (as far as the word diff compares them)."""
        return any(op != "=" for op, _ in self.output_diff)

    def render(self) -> str:
        """The pair for the terminal."""
        from .examples_text import render_text

        return render_text(self)


# --------------------------------------------------------------------------- rules


def _events(row: PairRow) -> tuple[bool, bool, bool, bool]:
    return row.d_shape, row.d_iter > 0, row.d_struct, row.d_output


def _cascade(row: PairRow, downstream: Sequence[str]) -> float:
    return sum(v for n in downstream if (v := row.d.get(n)) is not None)


def select_examples(rows: Sequence[PairRow], downstream: Mapping[str, Sequence[str]]) -> list[tuple[str, PairRow]]:
    """``(rule, row)`` for each perturbation of ``downstream`` (id -> its downstream
    nodes), by the module's rules, in the perturbations' order."""
    by: dict[str, list[PairRow]] = {pid: [] for pid in downstream}
    for row in rows:
        if row.perturbation_id in by:
            by[row.perturbation_id].append(row)
    out: list[tuple[str, PairRow]] = []
    for pid, mine in by.items():
        out += _chosen(mine, downstream[pid])
    return out


def _chosen(rows: Sequence[PairRow], downstream: Sequence[str]) -> list[tuple[str, PairRow]]:
    ok = [r for r in rows if r.status == "ok"]
    effective = [r for r in ok if r.stratum == "effective"]
    picks: list[tuple[str, PairRow | None]] = []
    if effective:
        common, _ = Counter(_events(r) for r in effective).most_common(1)[0]
        usual = [r for r in effective if _events(r) == common]
        mags = [r.magnitude for r in usual if r.magnitude is not None]
        mid = statistics.median(mags) if mags else 0.0
        picks.append(("typical effective", min(usual, key=lambda r: abs((r.magnitude or 0.0) - mid))))
        moved = [r for r in effective if r.d_shape]
        picks.append(("largest cascade", max(moved or effective, key=lambda r: _cascade(r, downstream))))
        broke = [r for r in effective if (r.outcome or {}).get("baseline") == "pass" and r.replay_passed is False]
        picks.append(("pass to fail", broke[0] if broke else None))
    picks.append(("no-op", next((r for r in ok if r.stratum == "noop"), None)))
    picks.append(("not applied", next((r for r in ok if r.stratum == "not_applied"), None)))
    picks.append(("failed", next((r for r in rows if r.status == "failed"), None)))
    seen: set[str | None] = set()
    out = []
    for rule, row in picks:
        if row is not None and row.job_id not in seen:
            seen.add(row.job_id)
            out.append((rule, row))
    return out


# --------------------------------------------------------------------------- a view of a pair


def _short(value: Any, limit: int = VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    text = visible(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _key(call: Any) -> str:
    return f"{call.node}#{call.occurrence}"


def _decided(call: Any) -> str:
    return ", ".join(f"{g}={_short(a, 40)}" for g, a in sorted(call.decision.items())) if call.decision else ""


def _outcome(call: Any) -> str:
    return canonical_json([call.output, call.decision, call.error.model_dump() if call.error else None])


def _steps(baseline: Trace, replay: Trace, first: str | None, target: str) -> tuple[Step, ...]:
    """The two runs' calls (the source left out) aligned: common calls in step, the
    others where they ran."""
    a = [c for c in baseline.calls if c.kind != "source"]
    b = [c for c in replay.calls if c.kind != "source"]
    matcher = difflib.SequenceMatcher(None, [_key(c) for c in a], [_key(c) for c in b], autojunk=False)
    out: list[Step] = []
    for op, i0, i1, j0, j1 in matcher.get_opcodes():
        if op == "equal":
            out += [Step(_key(x), _decided(x), _decided(y), _outcome(x) != _outcome(y), _key(x) == first,
                         _key(x) == target) for x, y in zip(a[i0:i1], b[j0:j1], strict=True)]
            continue
        out += [Step(_key(x), _decided(x), None, True, _key(x) == first, _key(x) == target) for x in a[i0:i1]]
        out += [Step(_key(y), None, _decided(y), True, _key(y) == first, _key(y) == target) for y in b[j0:j1]]
    return tuple(out)


def _target_call(trace: Trace, node: str | None, occurrence: int | None) -> Any:
    return next((c for c in trace.calls if c.node == node and c.occurrence == (occurrence or 0)), None)


def _changed(before: Any, after: Any) -> tuple[tuple[str, str, str], ...]:
    """The target's fields that differ (``output`` for a value that is not an object)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        keys = list(dict.fromkeys([*before, *after]))
        return tuple((str(k), _short(before.get(k, "—")), _short(after.get(k, "—"))) for k in keys
                     if canonical_json(before.get(k)) != canonical_json(after.get(k)))
    if canonical_json(before) == canonical_json(after):
        return ()
    return (("output", _short(before), _short(after)),)


_WORD = re.compile(r"\S+")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def word_diff(before: Any, after: Any) -> tuple[tuple[str, str], ...]:
    """A word-level diff of two values (JSON written out for objects): ``(op, words)``
    with ``op`` one of ``=``, ``-`` (only before), ``+`` (only after); at most
    :data:`OUTPUT_WORDS` words of each."""
    a, b = ([visible(w) for w in _WORD.findall(_text(x))[:OUTPUT_WORDS]] for x in (before, after))
    out: list[tuple[str, str]] = []
    for op, i0, i1, j0, j1 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("=", " ".join(a[i0:i1])))
            continue
        if i1 > i0:
            out.append(("-", " ".join(a[i0:i1])))
        if j1 > j0:
            out.append(("+", " ".join(b[j0:j1])))
    return tuple(out)


def pair_view(rule: str, row: PairRow, baseline: Trace, replay: Trace | None,
              nodes: Sequence[str], note: str | None = None) -> ExamplePair:
    """The :class:`ExamplePair` of ``row`` (``replay``: None for a failed replay), its
    distances listed for ``nodes`` (the target and its downstream nodes) in that order."""
    from quiver._diff import diff_traces

    first = cause = None
    steps: tuple[Step, ...] = ()
    changed: tuple[tuple[str, str, str], ...] = ()
    output: tuple[tuple[str, str], ...] = ()
    if replay is not None:
        diff = diff_traces(baseline, replay)
        if diff.first is not None:
            first, cause = f"{diff.first.node}#{diff.first.occurrence}", diff.first.summary()
        steps = _steps(baseline, replay, first, f"{row.node}#{row.occurrence or 0}")
        a, b = (_target_call(t, row.node, row.occurrence) for t in (baseline, replay))
        changed = _changed(a.output if a else None, b.output if b else None)
        output = word_diff(baseline.output, replay.output)
    return ExamplePair(
        pair_id=str(row.job_id), perturbation=row.perturbation_id, rule=rule, status=row.status,
        stratum=row.stratum, input_id=baseline.input_id, inputs=_short(baseline.inputs),
        baseline_trace=baseline.trace_id, replay_trace=None if replay is None else replay.trace_id,
        target=f"{row.node}#{row.occurrence or 0}", changed=changed, magnitude=row.magnitude, steps=steps,
        first=first, cause=cause,
        events={"D_shape": row.d_shape, "D_iter": row.d_iter, "D_struct": row.d_struct, "D_output": row.d_output},
        distances=tuple((n, row.d.get(n)) for n in nodes if n in row.d), output_diff=output,
        error=None if row.error is None else _short(row.error, 300), note=note)


def replay_trace_id(row: PairRow) -> str:
    """The id of the replay trace of ``row`` in ``replays.jsonl``."""
    return f"{row.trace_id}~{row.replay_id}/{row.repeat}"


def traces_by_id(path: Path, ids: Iterable[str]) -> dict[str, Trace]:
    """The traces of ``path`` whose ids are in ``ids`` (each line's head is looked at
    before it is read)."""
    from quiver._trace import iter_lines, parse_line

    wanted = {json.dumps(i, ensure_ascii=False).encode("utf-8"): i for i in ids}
    found: dict[str, Trace] = {}
    if not wanted or not path.is_file():
        return found
    for lineno, line in iter_lines(path):
        if any(w in line[:2000] for w in wanted):
            try:
                trace = parse_line(line, str(path), lineno)
            except QuiverError:  # a damaged line: its pair is shown without it
                continue
            if trace.trace_id in wanted.values():
                found[trace.trace_id] = trace
                if len(found) == len(wanted):
                    break
    return found


# --------------------------------------------------------------------------- a campaign's examples


def write_examples(out: Path, rows: Sequence[PairRow], baseline: Sequence[Trace], campaign: Mapping[str, Any],
                   baseline_path: Path, not_applied: Mapping[str, str] | None = None) -> Path:
    """Choose the examples of a finished campaign, read their replays from
    ``out/replays.jsonl``, and write ``out/examples.json``.

    Args:
        out: The campaign's folder.
        rows: Its pair rows.
        baseline: Its baseline traces.
        campaign: Its ``campaign.json`` (the perturbations' downstream nodes).
        baseline_path: Where the baseline traces are (``quiver show`` reads them).
        not_applied: Perturbation id -> the commonest reason its replays did not land.
    """
    downstream = _downstream(campaign)
    chosen = select_examples(rows, downstream)
    replays = traces_by_id(out / "replays.jsonl", [replay_trace_id(r) for _, r in chosen if r.status != "failed"])
    by_id = {t.trace_id: t for t in baseline}
    views = []
    for rule, row in chosen:
        base = by_id.get(str(row.trace_id))
        if base is None:
            continue
        note = (not_applied or {}).get(row.perturbation_id) if row.stratum == "not_applied" else None
        views.append(pair_view(rule, row, base, replays.get(replay_trace_id(row)),
                               [str(row.node), *downstream[row.perturbation_id]], note).to_json())
    data = {"baseline": str(baseline_path.resolve()), "rules": list(RULES), "pairs": views}
    return write_text(out / EXAMPLES_FILE, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _downstream(campaign: Mapping[str, Any]) -> dict[str, list[str]]:
    return {str(p["id"]): [str(n) for n in p.get("downstream") or []] for p in campaign.get("perturbations") or []
            if isinstance(p, Mapping)}


def load_examples(folder: Path) -> list[ExamplePair] | None:
    """The examples of ``folder/examples.json`` (None when there is none).

    Raises:
        QuiverError: The file is there and is not an examples file.
    """
    path = folder / EXAMPLES_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [ExamplePair.from_json(p) for p in data["pairs"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QuiverError(f"{path}: not an examples file ({type(exc).__name__}); `quiver run --resume` of a "
                          "finished campaign does not write it again: delete it and run `quiver report`") from None


# --------------------------------------------------------------------------- quiver show


def _pair_lines(folder: Path) -> list[str]:
    path = folder / "pairs.jsonl"
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise QuiverError(f"{path}: cannot be read ({exc.strerror or exc}); give the folder of a finished "
                          "`quiver run`") from None


def pair_rows(folder: Path, job_id: str | None = None) -> list[PairRow]:
    """The rows of ``folder/pairs.jsonl`` (only the one of ``job_id`` when given: the
    other lines are not read).

    Raises:
        QuiverError: The folder has no readable ``pairs.jsonl``, or a line read is not a row.
    """
    from quiver._interventional import PairRow

    path = folder / "pairs.jsonl"
    key = None if job_id is None else f'"job_id": {json.dumps(job_id)}'
    rows = []
    for i, line in enumerate(_pair_lines(folder), 1):
        if key is not None and key not in line:
            continue
        try:
            rows.append(PairRow.from_json(json.loads(line), where=f"{path}:{i}"))
        except ValueError as exc:
            raise QuiverError(f"{path}:{i}: not a pair row ({exc})") from None
    return [r for r in rows if job_id is None or r.job_id == job_id]


def baseline_file(folder: Path) -> Path:
    """Where the baseline traces of the campaign in ``folder`` are: the path its
    ``examples.json`` names, else its ``baseline/traces.jsonl``."""
    try:
        named = Path(json.loads((folder / EXAMPLES_FILE).read_text(encoding="utf-8"))["baseline"])
        if named.is_file():
            return named
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return folder / "baseline" / "traces.jsonl"


def find_pair(folder: Path, pair_id: str) -> ExamplePair:
    """The view of the pair ``pair_id`` (a job id of ``pairs.jsonl``) of the campaign in ``folder``.

    Raises:
        QuiverError: No such pair, or its traces cannot be found.
    """
    rows = pair_rows(folder, pair_id)
    if not rows:
        raise QuiverError(f"{folder / 'pairs.jsonl'} has no pair '{visible(pair_id)[:200]}' "
                          f"({len(_pair_lines(folder)):,} pairs); `quiver show {folder} --list` lists their ids")
    row = rows[0]
    source = baseline_file(folder)
    base = traces_by_id(source, [str(row.trace_id)]).get(str(row.trace_id))
    if base is None:
        raise QuiverError(f"{source}: holds no baseline trace '{visible(str(row.trace_id))[:200]}' of pair "
                          f"'{visible(pair_id)[:200]}'")
    replay = None
    if row.status != "failed":
        replay = traces_by_id(folder / "replays.jsonl", [replay_trace_id(row)]).get(replay_trace_id(row))
        if replay is None:
            raise QuiverError(f"{folder / 'replays.jsonl'}: holds no replay '{visible(replay_trace_id(row))[:200]}'")
    downstream = _downstream(_campaign(folder))
    nodes = [str(row.node), *downstream.get(row.perturbation_id, [n for n in row.d if n != row.node])]
    return pair_view("asked for", row, base, replay, nodes)


def _campaign(folder: Path) -> Mapping[str, Any]:
    try:
        data = json.loads((folder / "campaign.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, Mapping) else {}


def list_pairs(folder: Path) -> dict[str, dict[str, list[str]]]:
    """Perturbation (or control) id -> stratum (``failed`` for a failed replay,
    ``control`` for a control's) -> pair ids, in job order, of ``folder/pairs.jsonl``.

    Raises:
        QuiverError: The folder has no readable ``pairs.jsonl``, or a line is not a row.
    """
    out: dict[str, dict[str, list[str]]] = {}
    path = folder / "pairs.jsonl"
    for i, line in enumerate(_pair_lines(folder), 1):
        try:
            r = json.loads(line)
            pid, status, stratum, job = (str(r["perturbation_id"]), r.get("status"), r.get("stratum"),
                                         str(r["job_id"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise QuiverError(f"{path}:{i}: not a pair row of a campaign ({type(exc).__name__}: {exc})") from None
        kind = "failed" if status == "failed" else str(stratum or "control")
        out.setdefault(pid, {}).setdefault(kind, []).append(job)
    return out
