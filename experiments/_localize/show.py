"""``quiver show LOCALIZE_DIR TRACE_ID``: one failure's localisation, for the terminal: its
verdict, its steps with their effects, and the failing run beside the replay of its
decisive step's intervention that made it pass (the calls side by side, the first
divergent call and its cause marked, the final output's word diff)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quiver._diff import diff_traces
from quiver._errors import QuiverError
from quiver._interventional import PairRow
from quiver._report import localize_markdown, pair_view, visible
from quiver._sqlite import KeyValueFile
from quiver._trace import Trace, load_traces

from .run import _LAYOUT
from .search import job_key
from .steps import Step

__all__ = ["localize_listing", "localize_view"]


def _data(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "localize.json").read_text(encoding="utf-8")))


def localize_listing(folder: Path) -> str:
    """The failures of a localisation, one a line: trace id, verdict, decisive step."""
    lines = []
    for row in _data(folder)["failures"]:
        d = row.get("decisive")
        lines.append(f"{visible(row['trace_id'])}  {row['verdict']}" + (f": {visible(d['node'])}#{d['occurrence']}"
                                                                          if d else ""))
    return "\n".join(lines) + "\n"


def _baseline(folder: Path, data: dict[str, Any], trace_id: str) -> Trace:
    source = folder / str(data.get("baseline") or "baseline/traces.jsonl")  # an absolute path stays as it is
    found = [t for t in load_traces(source).traces if t.trace_id == trace_id] if source.is_file() else []
    if not found:
        raise QuiverError(f"{folder}: the failing trace {visible(trace_id)[:80]} is not in {source}")
    return found[0]


def localize_view(folder: Path, trace_id: str) -> str:
    """The text ``quiver show`` prints for one failure (see the module docstring).

    Raises:
        QuiverError: The localisation has no such failure, or its traces cannot be found.
    """
    data = _data(folder)
    row = next((r for r in data["failures"] if r["trace_id"] == trace_id), None)
    if row is None:
        raise QuiverError(f"{folder} localised no failing trace {visible(trace_id)[:80]}; `quiver show {folder} "
                          "--list` lists them")
    text = localize_markdown({**data, "failures": [row]}).split("## Failures", 1)[1].strip() + "\n"
    decisive = row.get("decisive")
    if not decisive:
        return text
    step = next(s for s in row["steps"] if s["index"] == decisive["step"])
    key = Step(step["index"], step["node"], step["occurrence"], step["call_path"], step["kind"], step["how"])
    ledger = KeyValueFile(folder / "localize.sqlite", _LAYOUT)
    try:
        n = step["intervention"]["n"] + 20
        held = ledger.get_many([job_key(trace_id, key, "intervention", r) for r in range(n)])
    finally:
        ledger.close()
    passed = [json.loads(str(v)) for v in held.values()]
    passed = [p for p in passed if ((p.get("trace") or {}).get("outcome") or {}).get("status") == "pass"]
    if not passed:
        return text
    baseline = _baseline(folder, data, trace_id)
    replay = Trace.model_validate(passed[0]["trace"])
    diff = diff_traces(baseline, replay)
    pair = PairRow.from_json({"perturbation_id": f"localize:{step['index']}:intervention", "status": "ok",
                              "trace_id": trace_id, "input_id": baseline.input_id, "repeat": 0,
                              "node": step["node"], "occurrence": step["occurrence"], "job_id": replay.trace_id,
                              "D_iter": diff.d_iter, "D_shape": diff.d_shape, "D_struct": diff.d_struct,
                              "D_output": bool(diff.changed_nodes)})
    view = pair_view("the intervention that made the run pass", pair, baseline, replay, [step["node"]])
    return text + "\nThe failing run beside the replay of its decisive step's intervention that passed:\n\n" + \
        view.render()
