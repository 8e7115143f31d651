"""What a campaign's replays are made with, so that a resume never reuses stale ones.

A job id names a perturbation, a step, a trace and a repeat; it does not say what the
perturbation did. Each perturbation (and each control) therefore has an *identity*, kept
in the ledger beside its replays: the operator, its node and its resolved parameters
(every step, defaults filled in), the SHA-256 of every file those parameters name (a
``prompt_swap`` variant, a template), the pipeline function and the SHA-256 of its
module's source file (when it has one), and what the whole campaign's replays share:
the seed, the model and its parameters, the endpoint (or the simulator's settings
other than its injected faults, which are drawn apart from content) and what the
replays hold frozen. An adaptive ladder's identity also holds its settings (range,
resolution, budget, levels and replays per round): they lay out its rounds.

On resume, a perturbation whose identity differs from the one its replays were made
with is refused (:func:`check_identities`): one line naming it and what changed, and
the way out. A perturbation with no replays in the ledger yet simply takes its new
identity. A ledger written before identities were kept (none stored) resumes: its
replays are taken as made with the spec and code as they are now, which a warning
says, and the identities are recorded from then on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Redactor, Trace
from quiver.experiments._config import CampaignSpec
from quiver.perturbations import make_operator

from .jobs import controls, distinct
from .ledger import Ledger

__all__ = ["campaign_identities", "check_identities", "file_digest", "pipeline_identity", "stored_identity"]

log = logging.getLogger("quiver.campaign")


def file_digest(path: Path) -> str | None:
    """The SHA-256 of a file's bytes (None when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def pipeline_identity(fn: Callable[..., Any]) -> dict[str, Any]:
    """The pipeline function's name and the SHA-256 of its module's source file (None
    when it has none: a built-in, a callable made at run time)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    source: str | None = None
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        source = getattr(module, "__file__", None)
    digest = file_digest(Path(source)) if source else None
    return {"function": name, "source": source, "source_sha256": digest}


def _files(value: Any, base_dir: Path, found: dict[str, str]) -> None:
    """Every string in ``value`` that names an existing file (absolute, or relative to
    ``base_dir``), with the SHA-256 of its contents."""
    if isinstance(value, Mapping):
        for v in value.values():
            _files(v, base_dir, found)
    elif isinstance(value, list | tuple):
        for v in value:
            _files(v, base_dir, found)
    elif isinstance(value, str) and value.strip() and len(value) < 4096 and "\n" not in value and "\0" not in value:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            is_file = path.is_file()
        except OSError:
            is_file = False
        if is_file:
            digest = file_digest(path)
            if digest is not None:
                found[value] = digest


def _resolved(op: str, params: dict[str, Any]) -> dict[str, Any]:
    """An operator's parameters as it reads them: validated, defaults filled in."""
    built = make_operator(op, params)
    model = getattr(built, "params", None)
    dump = getattr(model, "model_dump", None)
    return dict(dump(mode="json")) if callable(dump) else dict(params)


def _shared(spec: CampaignSpec, fn: Callable[..., Any]) -> dict[str, Any]:
    llm = spec.llm
    sim = llm.simulator
    replay = spec.replay
    return {
        "pipeline": pipeline_identity(fn),
        "seed": spec.seed,
        "llm": {
            "model": llm.model, "params": llm.params, "base_url": llm.base_url,
            "simulator": None if sim is None else {"models": sim.models, "nondeterminism": sim.nondeterminism},
        },
        "replay": {"frozen": sorted(replay.frozen), "live_nodes": sorted(replay.live_nodes),
                   "frozen_nodes": sorted(replay.frozen_nodes), "downstream": replay.downstream},
    }


def campaign_identities(spec: CampaignSpec, base_dir: Path, fn: Callable[..., Any],
                        traces: Sequence[Trace]) -> dict[str, dict[str, Any]]:
    """The identity of every perturbation and control of the campaign, by the id its
    job ids begin with. JSON-ready, keys sorted when stored."""
    shared = _shared(spec, fn)
    out: dict[str, dict[str, Any]] = {}
    for p in spec.perturbations:
        steps = [_resolved(p.op, step) for step in p.steps()]
        files: dict[str, str] = {}
        _files(steps, base_dir, files)
        out[p.id] = {"op": p.op, "node": p.node, "occurrence": p.occurrence, "params": steps, "files": files,
                     **shared}
        if p.adaptive is not None:  # its rounds are laid out by these settings (only then: older identities hold)
            out[p.id]["adaptive"] = dataclasses.asdict(p.adaptive_settings())
    for control in distinct(controls(spec, traces)):
        out[control.id] = {"op": control.op, "node": control.node, "occurrence": control.occurrence,
                           "kind": control.kind, **shared}
    return out


def stored_identity(identity: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """An identity as the ledger keeps it: redacted like everything the run writes (a
    param may hold a secret), with the SHA-256 of the whole identity before redaction
    (``digest``), so that a change inside a redacted value is still a change."""
    digest = hashlib.sha256(json.dumps(_normal(identity), sort_keys=True).encode("utf-8")).hexdigest()
    return {**redactor.data(identity), "digest": digest}


def _normal(value: Any) -> Any:
    """``value`` as it reads back from the ledger (JSON, keys sorted), without where the
    pipeline's source file is (a moved checkout is the same code)."""
    value = json.loads(json.dumps(value, sort_keys=True))
    if isinstance(value, dict) and isinstance(value.get("pipeline"), dict):
        value["pipeline"].pop("source", None)
    return value


def _difference(old: Any, new: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first place two identities differ: ``(path, old, new)``."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                return (f"{path}.{key}".lstrip("."), old.get(key), new.get(key))
            found = _difference(old[key], new[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            found = _difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if old == new else (path.lstrip("."), old, new)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


def describe_change(old: dict[str, Any], new: dict[str, Any], source: str | None = None) -> str:
    """What changed between two identities, in words (``source``: the pipeline's file)."""
    visible = {k: v for k, v in old.items() if k != "digest"}, {k: v for k, v in new.items() if k != "digest"}
    found = _difference(_normal(visible[0]), _normal(visible[1])) or _difference(_normal(old), _normal(new))
    if found is None:
        return "nothing"
    path, before, after = found
    if path.startswith("files"):
        ref = path[len("files."):] if path.startswith("files.") else ""
        if ref and before is not None and after is not None:
            return f"the contents of {ref} changed"
        if ref:
            return f"it reads {ref} now" if before is None else f"it no longer reads {ref}"
        return f"the files it reads changed ({_short(before)} -> {_short(after)})"
    if path == "digest":
        return "a value of its parameters that the run redacts changed"
    if path == "pipeline.source_sha256":
        return f"the pipeline's source file {source or '(unknown)'} changed"
    return f"{path}: {_short(before)} -> {_short(after)}"


def check_identities(ledger: Ledger, identities: dict[str, dict[str, Any]], done: Iterable[str],
                     spec_path: Path) -> None:
    """Refuse a resume that would reuse replays made with other parameters, files or
    code; record the identities of perturbations with no replays yet.

    Raises:
        QuiverError: One line naming the perturbation, what changed, and the way out.
    """
    held: dict[str, int] = {}
    for job_id in done:
        group = job_id.split("/", 1)[0]
        held[group] = held.get(group, 0) + 1
    stored = ledger.identities()
    if not stored and held:
        log.warning("%s was written before the ledger kept what each perturbation's replays were made with: "
                    "its replays are taken as made with the spec and code as they are now", ledger.path)
    changed = []
    for pid, identity in identities.items():
        old = stored.get(pid)
        if old is not None and held.get(pid) and _normal(old) != _normal(identity):
            changed.append((pid, old, identity))
    if changed:
        pid, old, new = changed[0]
        what = "control" if pid.startswith("control.") else "perturbation"
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        change = describe_change(old, new, new["pipeline"].get("source"))
        raise QuiverError(
            f"{ledger.path}: {what} {pid!r}{more} changed since its {held[pid]} replay(s) in this ledger were made: "
            f"{change}; resuming would reuse them stale: run the campaign into another output folder "
            f"(--output DIR), or move {ledger.path} aside and run `quiver run {spec_path} --resume` to replay "
            "it all again"
        )
    ledger.set_identities((pid, identity) for pid, identity in identities.items()
                          if _normal(stored.get(pid)) != _normal(identity))
