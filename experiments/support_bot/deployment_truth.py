"""What each v2 deployment of the support bot changes, input by input: the known causes.

Run from anywhere::

    python -m quiver.experiments.support_bot.deployment_truth              # a table per deployment
    python -m quiver.experiments.support_bot.deployment_truth retrieval tools   # one deployment, two changes

Every input is recorded once with every model at its argmax (the bundled simulator at
temperature 0 with no backend noise), under the ``v1`` deployment and under the
deployment asked for, with the same sample keys. The two traces of an input are aligned
by call path; the first call, in program order, whose output differs is where the change
surfaces, and what differs in its own recorded context says which dimension it is:

* ``retrieval``: a retrieval call with the same inputs found other documents, or the
  same ids with other content hashes (index drift);
* ``tools``: a tool call with the same arguments answered something else;
* ``prompt``: an LLM call's template hash differs;
* ``model``: an LLM call's model name or reported version differs.

With no backend noise nothing else can differ, so an input whose outputs are all equal is
one the change does not reach (``cause`` None, even when a call's context carries the
change: a re-indexed fragment that is retrieved as before; ``changed_at`` names that
call), and ``reached`` lists the nodes whose outputs differ anywhere in the trace (the
change's downstream, the first node included). With two changes, the cause is the one
whose call's output moves first, not the first whose context differs.
These are what ``quiver diff`` must name and what ``quiver attribute`` must find.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import quiver
from quiver._canonical import canonical_json
from quiver.replay import InputItem, LLMClient, Simulator, SimulatorConfig, record_corpus

from . import pipeline as sb, sim_models as models

__all__ = ["Cause", "deployment_causes", "first_cause", "argmax_traces"]


@dataclass(frozen=True)
class Cause:
    """Where a deployment's change surfaces in one input's trace.

    Attributes:
        input_id: The input.
        cause: The dimension the first divergence must be attributed to (``retrieval``,
            ``tools``, ``prompt`` or ``model``), or None when the change does not reach
            the input.
        node: The node of that first divergent call, or None.
        call_path: Its call path, or None.
        reached: The nodes whose output differs somewhere in the trace, sorted.
        changed_at: The call path of the first call whose own recorded context carries
            a change, whether or not its output moved; None when no context changed.
    """

    input_id: str
    cause: str | None
    node: str | None
    call_path: str | None
    reached: tuple[str, ...]
    changed_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"input_id": self.input_id, "cause": self.cause, "node": self.node,
                "call_path": self.call_path, "reached": list(self.reached), "changed_at": self.changed_at}


def _inputs(records: Sequence[dict[str, Any]] | None) -> list[InputItem]:
    from .derive_truth import load_inputs

    return [InputItem.from_record(r) for r in (records if records is not None else load_inputs())]


def argmax_traces(
    changes: Iterable[str], records: Sequence[dict[str, Any]] | None = None
) -> list[quiver.Trace]:
    """One trace per input with every model at its argmax, the ``changes`` deployed at v2
    (none: the v1 deployment), in input order.

    Args:
        changes: Dimensions at ``v2`` (see :data:`~.pipeline.DEPLOYMENT_DIMENSIONS`).
        records: Input records (default: ``inputs.jsonl``).
    """
    dims = list(changes)
    fn = sb.deployment_pipeline("run_v2_" + "_".join(dims)) if dims else sb.run
    items = _inputs(records)
    with Simulator(SimulatorConfig(models=[models.__name__])) as sim, tempfile.TemporaryDirectory() as tmp:
        client = LLMClient(base_url=sim.url, model=sb.PLANNER_MODEL, api_key="sk-simulator",
                           params={"temperature": 0, "seed": 42})
        try:
            result = record_corpus(fn, pipeline_name="support_bot", inputs=items, repeats=1,
                                   output_dir=Path(tmp), llm=client, concurrency=8, progress_stream=None)
        finally:
            client.close()
        traces: list[quiver.Trace] = quiver.load_traces(result.traces_path).traces
    return traces


def _same(a: Any, b: Any) -> bool:
    return bool(canonical_json(a) == canonical_json(b))


def _own_change(before: Any, after: Any) -> str | None:
    """The dimension whose recorded context differs between two calls at one path."""
    if before.prompt is not None and after.prompt is not None and (
        before.prompt.template_hash != after.prompt.template_hash
    ):
        return "prompt"
    if before.model is not None and after.model is not None and (
        before.model.name != after.model.name or before.model.version != after.model.version
    ):
        return "model"
    if before.kind == "retrieval" and before.input_hash == after.input_hash:
        return "retrieval"
    if before.kind == "tool" and before.input_hash == after.input_hash:
        return "tools"
    return None


def first_cause(before: quiver.Trace, after: quiver.Trace) -> Cause:
    """The known cause of the differences between two argmax traces of one input: the
    first call whose output differs, and the change in its own context (else in the
    context of an earlier call, whose change it inherits)."""
    after_by_path = {c.call_path: c for c in after.calls}
    reached: set[str] = set()
    first: tuple[str | None, str, str] | None = None
    context: tuple[str, str] | None = None
    for call in before.calls:
        other = after_by_path.get(call.call_path)
        moved = other is None or not _same(call.output, other.output)
        own = _own_change(call, other) if other is not None and (moved or _context_differs(call, other)) else None
        if context is None and own is not None:
            context = (own, call.call_path)
        if moved:
            reached.add(call.node)
            if first is None:
                first = (own or (context[0] if context else None), call.node, call.call_path)
    before_paths = {c.call_path for c in before.calls}
    reached |= {c.node for c in after.calls if c.call_path not in before_paths}
    changed_at = context[1] if context else None
    if first is None or first[0] is None:
        return Cause(before.input_id, None, None, None, tuple(sorted(reached)), changed_at)
    return Cause(before.input_id, first[0], first[1], first[2], tuple(sorted(reached)), changed_at)


def _context_differs(before: Any, after: Any) -> bool:
    """A call whose output is the same but whose own context changed (a retrieval set
    with the same ids and other content, a prompt that changed without effect)."""
    return _own_change(before, after) is not None and not (
        _same(before.retrieval, after.retrieval) and _same(before.tool, after.tool)
        and _same(before.prompt, after.prompt) and _same(before.model, after.model)
    )


def deployment_causes(
    changes: Iterable[str], records: Sequence[dict[str, Any]] | None = None,
    baseline: Sequence[quiver.Trace] | None = None,
) -> dict[str, Cause]:
    """Per input id, where the v2 deployment of ``changes`` surfaces (see :class:`Cause`).

    Args:
        changes: Dimensions at ``v2``.
        records: Input records (default: ``inputs.jsonl``).
        baseline: The v1 argmax traces of the same records, when already made.
    """
    before = list(baseline) if baseline is not None else argmax_traces((), records)
    after = {t.input_id: t for t in argmax_traces(changes, records)}
    return {t.input_id: first_cause(t, after[t.input_id]) for t in before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("changes", nargs="*", help="dimensions at v2 (default: each on its own)")
    args = parser.parse_args(argv)
    unknown = [d for d in args.changes if d not in sb.DEPLOYMENT_DIMENSIONS]
    if unknown:
        parser.error(f"unknown dimension {unknown[0]!r}; the dimensions are {', '.join(sb.DEPLOYMENT_DIMENSIONS)}")
    baseline = argmax_traces(())
    deployments = [args.changes] if args.changes else [[d] for d in sb.DEPLOYMENT_DIMENSIONS]
    for changes in deployments:
        causes = deployment_causes(changes, baseline=baseline)
        hit = [c for c in causes.values() if c.changed_at is not None]
        moved = [c for c in causes.values() if c.cause is not None]
        print(f"v2 {'+'.join(changes)}: the change is in the context of {len(hit)} of {len(causes)} inputs "
              f"and moves an output in {len(moved)}")
        for c in hit:
            where = f"{c.cause:9s} at {c.call_path}" if c.cause else f"{'-':9s} at {c.changed_at} (context only)"
            print(f"    {c.input_id:34s} {where}; outputs differ at {', '.join(c.reached) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
