"""Replay fidelity, checked before a run spends anything (``fidelity:`` of a spec).

``quiver run``, ``quiver gate`` and ``quiver attribute`` measure what replays do; a
baseline that does not replay exactly with every dimension frozen would make them
measure replay errors instead. So before the first perturbed replay a seeded sample of
the baseline (``per_group`` traces from each of at most ``groups`` input groups) is
replayed frozen, as ``quiver replay --check`` does; when fewer than ``threshold`` of the
sampled traces reproduce, the command stops (exit 2) with one line naming the first
divergent call and its likely cause:

* **redaction**: the recording holds values redaction replaced (``[REDACTED:email]`` in
  the inputs, a tool's response), which the pipeline reads back redacted on replay;
* **an uncaptured client**: the divergent node sent requests the replay contract does
  not account for (an LLM API the engine does not record, HTTP from a node whose output
  is not served), or is an ``llm`` node that recorded no LLM call;
* otherwise **code that is not deterministic** (a clock, a random number, set order,
  state kept between calls) or state outside the trace.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Redactor, Trace, read_back_marks
from quiver.replay import LLMClient, Replayer, ReplayMode, ReplayResult, unseen_llm_calls

__all__ = ["FidelityError", "sample_for_fidelity", "check_fidelity", "divergence_cause"]


class FidelityError(QuiverError):
    """The baseline does not replay exactly with every dimension frozen: the run stops
    before it spends anything (the message names the first divergence and its cause)."""


def sample_for_fidelity(traces: Sequence[Trace], per_group: int, groups: int | None, seed: int) -> list[Trace]:
    """``per_group`` ok traces from each of at most ``groups`` input groups, drawn with
    ``seed`` (the same sample on every run of the same spec), in corpus order."""
    by_group: dict[str, list[int]] = {}
    for i, trace in enumerate(traces):
        if trace.status == "ok":
            by_group.setdefault(trace.input_id, []).append(i)
    rng = random.Random(seed)
    chosen_groups = sorted(by_group)
    if groups is not None and len(chosen_groups) > groups:
        chosen_groups = sorted(rng.sample(chosen_groups, groups))
    picked = [i for g in chosen_groups for i in rng.sample(by_group[g], min(per_group, len(by_group[g])))]
    return [traces[i] for i in sorted(picked)]


def check_fidelity(
    traces: Sequence[Trace], pipeline: Callable[..., Any], client: LLMClient | None, *, per_group: int,
    groups: int | None, threshold: float, seed: int, redactor: Redactor | None, base_dir: Path | None,
    where: str, concurrency: int = 4,
) -> list[ReplayResult]:
    """Replay the sample frozen; return the replays, or raise when too few reproduce.

    Raises:
        FidelityError: Fewer than ``threshold`` of the sampled traces reproduce; the
            message (prefixed by ``where``, the spec) says which call diverged first and why.
    """
    sample = sample_for_fidelity(traces, per_group, groups, seed)
    if not sample:
        return []
    replayer = Replayer(pipeline, mode=ReplayMode(), client=client, redactor=redactor, base_dir=base_dir,
                        run_id="fidelity")
    results = replayer.replay_many(sample, concurrency=concurrency, perturbation_id="fidelity")
    diverged = [r for r in results if not r.reproduced]
    if len(results) - len(diverged) >= threshold * len(results) - 1e-9:
        return results
    first = diverged[0]
    divergence = first.first_divergence
    assert divergence is not None
    raise FidelityError(
        f"{where}: the baseline does not replay exactly, so the run would measure replay errors: "
        f"{len(diverged)} of {len(results)} sampled traces diverge with every dimension frozen (fidelity.threshold "
        f"{threshold:g}); the first, {first.baseline.trace_id}: {divergence.message()}; likely cause: "
        f"{divergence_cause(first, redactor)}"
    )


def divergence_cause(result: ReplayResult, redactor: Redactor | None) -> str:
    """Why a frozen replay diverged, as far as the recording and the wire tell."""
    error = result.trace.error
    if result.trace.status == "failed" and error is not None:
        return (f"the pipeline raised {error.type}: {error.message.splitlines()[0][:300] if error.message else ''} "
                "on a trace it ran to the end when recorded")
    redacted = read_back_marks(result.baseline, redactor.config.replacement if redactor is not None
                               else DEFAULT_REPLACEMENT)
    if redacted:
        kinds = sorted({kind for _, kind in redacted})
        paths = ", ".join(sorted({path for path, _ in redacted})[:4])
        switches = ", ".join(f"{_SWITCH[k]}: false" for k in kinds if k in _SWITCH)
        keep = f"`redact: {{{switches}}}`, " if switches else ""
        return (f"the recording holds values redaction replaced ({', '.join(kinds)} in {paths}), which the pipeline "
                f"reads back redacted on replay; record again keeping them: {keep}a narrower `redact:` rule "
                "(patterns, fields) that leaves what the pipeline reads, or inputs without them (see the README's "
                "Redaction section)")
    node = result.first_divergence.node if result.first_divergence is not None else ""
    sent = sorted({row["endpoint"] for row in (result.wire or {}).get("unaccounted") or [] if row["node"] == node})
    if sent:
        return (f"node {node!r} sent requests the replay contract does not account for ({', '.join(sent[:3])}): "
                "they are not recorded, so a replay sends them again instead of serving them")
    if node in {c.node for c in unseen_llm_calls(result.baseline)}:
        return (f"node {node!r} is an llm node that recorded no LLM call: its requests go through a client the "
                "engine does not see, so a replay sends them again")
    return (f"node {node!r} gave another result with everything it reads served from the recording: code that is "
            "not deterministic (a clock, a random number, the order of a set, state kept between calls) or that "
            "reads state outside the trace (a file, a database, an environment variable)")


DEFAULT_REPLACEMENT = "[REDACTED:{kind}]"

_SWITCH = {"email": "emails", "bearer": "bearer_tokens", "api_key": "api_keys"}
"""The ``redact:`` switch that keeps values of a built-in kind."""
