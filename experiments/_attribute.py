"""Interventional attribution (DESIGN.md "Attribution and deployments").

Every recorded trace is replayed against the *current* pipeline, index, tools and
endpoint under these conditions, ``R`` repeats each:

* ``frozen``: every dimension frozen; the trace must reproduce (a trace that does not
  is reported and left out of the rates);
* ``sampling``: every LLM call sent to the endpoint again *as recorded* (its assembled
  messages, model name and parameters) with a new sample key, every other dimension
  frozen: what the model's own variability does (``ReplayMode.resample``);
* ``retrieval``, ``tools``: sampling, with that dimension live as well (retrieval and
  tool calls run their code against today's index and tools);
* ``prompt``: sampling, with each LLM call's prompt rendered from today's templates
  (the recorded model name and parameters kept);
* ``model``: sampling, with today's model name and parameters (the recorded messages
  kept).

Repeat ``r`` of every condition uses the same sample key, and the replays go through a
response cache keyed by (request, sample key) that lives for the run: a call whose
request a live dimension leaves as it was gets the response it got under ``sampling``
without asking the endpoint again, so a dimension's condition pays only for the calls
it changes (the dimension's downstream), and where it changes nothing its replays are
those of ``sampling``, call for call. A node *diverges*
in a replay when what its calls produced (in program order: outputs, decisions and the
tool calls their model answered with, a handoff of an agent SDK included) or their
number differ from the recording. Per node and condition the divergence rate is a mean over replays, with a
95% group-bootstrap interval over inputs; the increment of a dimension is the paired
difference of its rate over ``sampling``'s, with the same interval.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from quiver._diff import answer_view
from quiver._errors import QuiverError
from quiver._outdir import make_folder, write_text
from quiver._progress import Progress
from quiver._stats import Estimate, GroupBootstrap
from quiver._trace import Trace
from quiver.replay import LLMClient, Replayer, ReplayMode, ResponseCache, llm

if TYPE_CHECKING:
    from quiver.experiments._config import CampaignSpec

__all__ = [
    "CONDITIONS", "DIMENSION_CONDITIONS", "Attribution", "attribute", "campaign_attribution", "write_attribution",
]

DIMENSION_CONDITIONS = ("retrieval", "tools", "prompt", "model")
"""The dimensions unfrozen one at a time on top of sampling."""
CONDITIONS = ("frozen", "sampling", *DIMENSION_CONDITIONS)
"""The replay conditions, in the order they run."""

_SAMPLING = ReplayMode(resample=True, downstream="cached")
_MODES = {
    "frozen": ReplayMode(),
    "sampling": _SAMPLING,
    "retrieval": _SAMPLING.unfreeze("retrieval"),
    "tools": _SAMPLING.unfreeze("tools"),
    "prompt": _SAMPLING.unfreeze("prompt"),
    "model": _SAMPLING.unfreeze("model"),
}


@dataclass
class Attribution:
    """What :func:`attribute` found.

    Attributes:
        nodes: The nodes of the recorded traces, in order of first appearance.
        dimensions: The dimensions unfrozen in turn, in :data:`DIMENSION_CONDITIONS` order.
        rates: condition -> node -> divergence rate (replays where the node diverged).
        increments: dimension -> node -> rate over ``sampling``'s, paired by replay.
        reproduced: Traces that reproduced with every dimension frozen.
        not_reproduced: Ids of the traces that did not (left out of the rates).
        repeats: R.
        llm_calls: condition -> LLM requests the endpoint answered (not those the
            run's response cache answered).
        served_calls: condition -> calls served from the recording.
    """

    nodes: list[str]
    dimensions: list[str]
    rates: dict[str, dict[str, Estimate]]
    increments: dict[str, dict[str, Estimate]]
    reproduced: int
    not_reproduced: list[str]
    repeats: int
    llm_calls: dict[str, int] = field(default_factory=dict)
    served_calls: dict[str, int] = field(default_factory=dict)

    @property
    def conditions(self) -> list[str]:
        """The conditions run, in order."""
        return ["frozen", "sampling", *self.dimensions]

    def to_json(self) -> dict[str, Any]:
        return {
            "conditions": self.conditions, "repeats": self.repeats, "reproduced": self.reproduced,
            "not_reproduced": self.not_reproduced, "llm_calls": self.llm_calls, "served_calls": self.served_calls,
            "nodes": {
                node: {
                    "rates": {c: self.rates[c][node].as_dict("rate") for c in self.conditions},
                    "increments": {d: self.increments[d][node].as_dict("increment") for d in self.dimensions},
                }
                for node in self.nodes
            },
        }


def _outputs(trace: Trace) -> dict[str, list[str]]:
    """node -> what each of its calls produced, in program order: output, decisions and
    the tool calls its model answered with (:func:`quiver._diff.answer_view`)."""
    out: dict[str, list[str]] = {}
    for call in trace.calls:
        if call.kind != "source":
            out.setdefault(call.node, []).append(answer_view(call))
    return out


def _diverged(baseline: Trace, replayed: Trace, nodes: Sequence[str]) -> list[bool]:
    before, after = _outputs(baseline), _outputs(replayed)
    return [before.get(n, []) != after.get(n, []) for n in nodes]


def attribute(
    traces: Sequence[Trace],
    pipeline: Callable[..., Any],
    *,
    client: LLMClient | None = None,
    repeats: int = 3,
    dimensions: Sequence[str] = DIMENSION_CONDITIONS,
    seed: int = 0,
    concurrency: int = 4,
    resamples: int = 1000,
    progress: Callable[[str], None] | None = None,
    progress_stream: TextIO | None = None,
    threshold: float = 0.0,
    where: str = "attribute",
) -> Attribution:
    """Replay ``traces`` under ``frozen``, ``sampling`` and each of ``dimensions`` live in
    turn, and attribute each node's divergence (see the module docstring).

    Args:
        traces: Recorded traces (failed ones are skipped).
        pipeline: The pipeline as deployed now (the spec's).
        client: The LLM client for live calls (default: the configured one); its
            endpoint settings are used with a response cache of the run's own.
        repeats: R, replays per trace and live condition.
        dimensions: Which of :data:`DIMENSION_CONDITIONS` to unfreeze (default: all).
        seed: Seeds the replays' sample keys and the bootstrap.
        concurrency: Replays at once.
        resamples: Bootstrap resamples.
        progress: Called with a condition's name when its replays are done.
        progress_stream: Where a progress line of the replays goes (None: nowhere).
        threshold: The share of the traces that must reproduce frozen (a spec's
            ``fidelity.threshold``); below it, nothing else is replayed.
        where: Names the spec in that error.

    Raises:
        QuiverError: A dimension that is not one of :data:`DIMENSION_CONDITIONS`, or
            ``repeats`` below 1.
        FidelityError: Fewer than ``threshold`` of the traces reproduce frozen: the
            message names the first divergence and its likely cause.
    """
    dims = _checked_dimensions(dimensions)
    if repeats < 1:
        raise QuiverError(f"attribute: repeats must be at least 1; got {repeats}")
    usable = [t for t in traces if t.status == "ok"]
    nodes = list(dict.fromkeys(c.node for t in usable for c in t.calls if c.kind != "source"))
    llm_calls: dict[str, int] = {}
    served: dict[str, int] = {}
    bar = Progress("attribution replays", len(usable) * (1 + (1 + len(dims)) * repeats), stream=progress_stream)
    with _cached_client(client or llm()) as cached, contextlib.closing(bar):

        def run(condition: str, repeat: int, baselines: Sequence[Trace]) -> list[Any]:
            replayer = Replayer(pipeline, mode=_MODES[condition], client=cached, seed=seed, run_id="attribute")
            results = replayer.replay_many(baselines, concurrency=concurrency, perturbation_id="attribute",
                                           repeat=repeat, progress=lambda done, total: bar.advance(1))
            llm_calls[condition] = llm_calls.get(condition, 0) + sum(r.total_llm_calls for r in results)
            served[condition] = served.get(condition, 0) + sum(r.served_calls for r in results)
            return results

        frozen = run("frozen", 0, usable)
        if progress is not None:
            progress("frozen")
        _check_frozen(frozen, threshold, where)
        kept = [r.baseline for r in frozen if r.reproduced]
        bar.total = len(usable) + len(kept) * (1 + len(dims)) * repeats  # those that did not reproduce are left out
        events = {"frozen": _events([r for r in frozen if r.reproduced], nodes)}
        for condition in ("sampling", *dims):
            events[condition] = _events([r for repeat in range(repeats) for r in run(condition, repeat, kept)], nodes)
            if progress is not None:
                progress(condition)
    missing = [r.baseline.trace_id for r in frozen if not r.reproduced]
    rates, increments = _estimates(kept, nodes, events, dims, repeats, seed, resamples)
    return Attribution(nodes, list(dims), rates, increments, len(kept), missing, repeats, llm_calls, served)


def _check_frozen(frozen: Sequence[Any], threshold: float, where: str) -> None:
    """Raise when fewer than ``threshold`` of the frozen replays reproduce."""
    from quiver.experiments._campaign import FidelityError, divergence_cause

    diverged = [r for r in frozen if not r.reproduced]
    if not frozen or len(frozen) - len(diverged) >= threshold * len(frozen) - 1e-9:
        return
    first = diverged[0]
    raise FidelityError(
        f"{where}: the traces do not replay exactly, so the attribution would measure replay errors: "
        f"{len(diverged)} of {len(frozen)} diverge with every dimension frozen (fidelity.threshold {threshold:g}); "
        f"the first, {first.baseline.trace_id}: {first.first_divergence.message()}; likely cause: "
        f"{divergence_cause(first, None)}"
    )


def _checked_dimensions(dimensions: Sequence[str]) -> tuple[str, ...]:
    for dim in dimensions:
        if dim not in DIMENSION_CONDITIONS:
            raise QuiverError(
                f"attribute: {dim!r} is not a dimension; give some of {', '.join(DIMENSION_CONDITIONS)}"
            )
    return tuple(d for d in DIMENSION_CONDITIONS if d in dimensions)


@contextlib.contextmanager
def _cached_client(client: LLMClient) -> Iterator[LLMClient]:
    """A client for ``client``'s endpoint whose response cache lives for one run."""
    with tempfile.TemporaryDirectory(prefix="quiver-attribute-") as folder:
        cache = ResponseCache(folder)
        cached = LLMClient(
            base_url=client.base_url, model=client.model, api_key=client.api_key, timeout_s=client.timeout_s,
            retry=client.retry, params=client.params, cache=cache,
        )
        try:
            yield cached
        finally:
            cached.close()
            cache.close()


def _events(results: Sequence[Any], nodes: Sequence[str]) -> np.ndarray:
    """Replays x nodes: 1 where the node's outputs differ from the recording."""
    rows = [_diverged(r.baseline, r.trace, nodes) for r in results]
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(nodes))


def _estimates(
    kept: Sequence[Trace], nodes: Sequence[str], events: dict[str, np.ndarray], dims: Sequence[str],
    repeats: int, seed: int, resamples: int,
) -> tuple[dict[str, dict[str, Estimate]], dict[str, dict[str, Estimate]]]:
    """Per condition and node the rate, per dimension and node the paired increment over
    sampling, with group-bootstrap intervals over inputs (empty when nothing reproduced)."""
    if not kept:
        empty = {n: Estimate.empty() for n in nodes}
        return {c: dict(empty) for c in events}, {d: dict(empty) for d in dims}
    groups = {g: i for i, g in enumerate(dict.fromkeys(t.input_id for t in kept))}
    unit_groups = np.array([groups[t.input_id] for t in kept] * repeats, dtype=np.int64)
    boot = GroupBootstrap(unit_groups, len(groups), resamples=resamples, seed=seed)
    frozen_boot = GroupBootstrap(unit_groups[: len(kept)], len(groups), resamples=resamples, seed=seed)
    rates = {
        c: {n: (frozen_boot if c == "frozen" else boot).rate(events[c][:, j]) for j, n in enumerate(nodes)}
        for c in events
    }
    increments = {
        d: {n: boot.mean(events[d][:, j] - events["sampling"][:, j]) for j, n in enumerate(nodes)}
        for d in dims
    }
    return rates, increments


def _fmt(e: Estimate) -> str:
    if e.value is None:
        return "n/a"
    ci = f" [{e.ci[0]:+.3f}, {e.ci[1]:+.3f}]" if e.ci else ""
    return f"{e.value:+.3f}{ci}"


def _rate(e: Estimate) -> str:
    return "n/a" if e.value is None else f"{e.value:.3f}"


def write_attribution(result: Attribution, out: Path) -> tuple[Path, Path]:
    """Write ``attribution.json`` and ``attribution.md`` to ``out``; return their paths."""
    make_folder(out)
    js = write_text(out / "attribution.json", json.dumps(result.to_json(), indent=2) + "\n")
    from quiver._report import md_table, md_text

    live = result.conditions[1:]
    from quiver._report import attribution_findings, findings_markdown

    lines = [
        "# Divergence attribution", "",
        *findings_markdown(attribution_findings(result.to_json())),
        f"{result.reproduced} traces reproduced with every dimension frozen"
        + (f"; {len(result.not_reproduced)} did not and are left out" if result.not_reproduced else "")
        + f". {result.repeats} repeat(s) per live condition. Rates are the share of replays where the node's "
        "outputs differ from the recording; increments are over sampling alone, with 95% group-bootstrap "
        "intervals over inputs.", "",
    ]
    headers = ["node", *(f"rate {c}" for c in live), *(f"+{d}" for d in result.dimensions)]
    rows = [[md_text(node), *(_rate(result.rates[c][node]) for c in live),
             *(_fmt(result.increments[d][node]) for d in result.dimensions)] for node in result.nodes]
    lines += md_table(headers, rows, "l" * len(headers))
    lines += [
        "", "LLM requests the endpoint answered, by condition (a dimension's condition pays only for the "
        "calls it changes; the others get sampling's responses from the run's cache): "
        + ", ".join(f"{c} {result.llm_calls.get(c, 0)}" for c in result.conditions) + ".",
    ]
    return js, write_text(out / "attribution.md", "\n".join(lines) + "\n")


def campaign_attribution(
    spec: CampaignSpec, pipeline: Callable[..., Any], client: LLMClient, traces: Sequence[Trace], out: Path,
    stream: TextIO | None = None,
) -> tuple[Path, Path] | None:
    """The campaign spec's ``attribution:`` block, run over its baseline ``traces`` after
    the campaign: :func:`attribute` with the block's dimensions and repeats (on at most
    ``traces`` of them, a sample seeded by the spec's seed), written to
    ``out/attribution``. None when the spec has no such block."""
    block = spec.attribution
    if block is None:
        return None
    usable = [t for t in traces if t.status == "ok"]
    if block.traces is not None and block.traces < len(usable):
        picked = np.random.default_rng(spec.seed).choice(len(usable), size=block.traces, replace=False)
        usable = [usable[i] for i in sorted(picked)]
    result = attribute(
        usable, pipeline, client=client, repeats=block.repeats, dimensions=block.dimensions, seed=spec.seed,
        concurrency=spec.executor.concurrency, resamples=spec.analysis.resamples, progress_stream=stream,
        threshold=spec.fidelity.threshold, where=f"{spec.name or 'campaign'} attribution",
    )
    return write_attribution(result, out / "attribution")
