"""Running replays: a :class:`Replayer` holds what every replay of a run shares (the
pipeline, the client, the graph, what is frozen, the seed), and each call of
:meth:`Replayer.replay` says what one replay perturbs. :func:`replay_trace` is the
one-off form of the two."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from typing_extensions import Unpack

from quiver._graph import PipelineGraph
from quiver._trace import Redactor, Trace, outcome_divergence
from quiver.perturbations import Operator, OperatorError, resolve_template_ref
from quiver.replay._keys import replay_identity, replay_sample_key
from quiver.replay._llm import LLMClient
from quiver.replay._pipeline import run_traced

if TYPE_CHECKING:
    from quiver.replay._outcome import OutcomeRunner

from .builder import ReplayBuilder, template_from_ref
from .results import ReplayError, ReplayMode, ReplayResult, Target

__all__ = ["Replayer", "ReplayerSettings", "replay_trace", "replay_many"]

log = logging.getLogger("quiver.replay")


class ReplayerSettings(TypedDict, total=False):
    """The keyword arguments of :class:`Replayer` (and of :func:`replay_trace`)."""

    mode: ReplayMode | None
    client: LLMClient | None
    graph: PipelineGraph | None
    base_dir: Path | None
    run_id: str
    seed: int
    outcome: OutcomeRunner | None


class Replayer:
    """Replays recorded traces of one pipeline.

    Args:
        pipeline: The pipeline function that recorded the traces (called with a trace's
            inputs).
        mode: What is frozen (default: every dimension).
        client: The LLM client for live calls (default: the configured one).
        graph: Field types and categories, for operators that need them.
        base_dir: Where relative template paths resolve (an operator's, a template change's).
        run_id: The replays' run id.
        seed: The campaign seed: every replay's sample key derives from it.
        redactor: The redactor the recording was written through. The replay's result
            (its trace and the target's outputs) is redacted the same way, and compared
            with the recording in that form: secrets the pipeline computes again
            reproduce, and nothing the result holds needs redacting again.
        outcome: The spec's outcome checks: every replay carries its outcome (a judge
            asking what the recording asked is served its recorded answer), and a replay
            with every dimension frozen whose outcome is not the recording's diverges.
    """

    def __init__(
        self,
        pipeline: Callable[..., Any],
        *,
        mode: ReplayMode | None = None,
        client: LLMClient | None = None,
        graph: PipelineGraph | None = None,
        base_dir: Path | None = None,
        run_id: str = "replay",
        seed: int = 0,
        redactor: Redactor | None = None,
        outcome: OutcomeRunner | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.outcome = outcome
        self.mode = mode or ReplayMode()
        self.client = client
        self.graph = graph
        self.base_dir = base_dir
        self.run_id = run_id
        self.seed = seed
        self.redactor = redactor

    def replay(
        self,
        baseline: Trace,
        *,
        target: Target | None = None,
        operator: Operator | None = None,
        perturbation_id: str | None = None,
        repeat: int = 0,
        templates: Mapping[str, str] | None = None,
        sample_id: str | None = None,
    ) -> ReplayResult:
        """Replay one recorded trace, with ``operator`` applied at ``target`` if given.

        Args:
            baseline: The recorded trace.
            target: The call to perturb; None replays everything frozen (the determinism
                check when the mode freezes every dimension).
            operator: The perturbation (see :mod:`quiver.perturbations`); None with a
                target runs the target live unchanged.
            perturbation_id: Names the perturbation in sample keys and the trace id
                (default: the operator's name, or ``check``).
            repeat: The repeat of this (trace, perturbation): a different sample key.
            templates: Template id -> replacement (a template file, relative to
                ``base_dir``, or a registered id; see
                :func:`~quiver.perturbations.resolve_template_ref`), in force for the
                whole replay: every live call that renders one of these templates renders
                its replacement (a template change deployed: the target and its later
                occurrences). Calls served from the recording are not rendered, so what
                lies upstream of the target is unaffected.
            sample_id: What the replay's sample key derives from (default:
                :func:`~quiver.replay.replay_identity` of ``baseline``).

        Raises:
            ReplayError: ``target`` is not in the trace, an operator was given without
                one, or a template replacement does not exist.
        """
        if operator is not None and target is None:
            raise ReplayError(f"operator {operator.name!r} needs a target node to perturb")
        pid = perturbation_id or (operator.name if operator is not None else "check")
        builder = ReplayBuilder(
            baseline, trace_id=f"{baseline.trace_id}~{pid}/{repeat}", run_id=self.run_id,
            sample_key=replay_sample_key(self.seed, sample_id or replay_identity(baseline), pid, repeat),
            mode=self.mode, target=target, operator=operator, graph=self.graph, client=self.client,
            base_dir=self.base_dir, redactor=self.redactor,
        )
        t0 = time.perf_counter()
        trace = run_traced(
            builder, self.pipeline, baseline.inputs, self.client, log=log,
            response_cache=self.mode.downstream == "cached", templates=self._replacements(templates),
        )
        divergences, judged = builder.divergences, 0
        if self.outcome is not None:
            before = self.outcome.judge_calls
            outcome = self.outcome.evaluate(trace, sample_key=builder.sample_key, recorded=baseline.outcome)
            judged = self.outcome.judge_calls - before
            trace = trace.model_copy(update={"outcome": outcome})
            differs = outcome_divergence(baseline.outcome, outcome) if baseline.outcome is not None else None
            if target is None and self.mode.all_frozen and differs is not None:
                divergences = [*divergences, differs]
        return ReplayResult(
            baseline=baseline, trace=trace, perturbation_id=pid, repeat=repeat,
            divergences=divergences, target=builder.target_report, judge_calls=judged,
            llm_calls=dict(sorted(builder.llm_calls.items())), served_calls=builder.served,
            seconds=round(time.perf_counter() - t0, 6), llm_tokens=builder.llm_tokens,
            retries=dict(sorted(builder.retries.items())), wire=builder.wire.to_json(),
        )

    def _replacements(self, templates: Mapping[str, str] | None) -> dict[str, Any]:
        out = {}
        for tid, ref in (templates or {}).items():
            try:
                resolved = resolve_template_ref(ref, self.base_dir)
            except OperatorError as exc:
                raise ReplayError(f"replacement {ref!r} for template {tid!r}: {exc}") from None
            out[tid] = template_from_ref(tid, resolved)
        return out

    def replay_many(
        self,
        baselines: Sequence[Trace],
        *,
        concurrency: int = 4,
        progress: Callable[[int, int], None] | None = None,
        **request: Any,
    ) -> list[ReplayResult]:
        """:meth:`replay` of every trace on a thread pool (``request`` as for
        :meth:`replay`), results in input order."""
        results: list[ReplayResult | None] = [None] * len(baselines)
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = {pool.submit(self.replay, t, **request): i for i, t in enumerate(baselines)}
            for done, future in enumerate(as_completed(futures), start=1):
                results[futures[future]] = future.result()
                if progress is not None:
                    progress(done, len(baselines))
        return [r for r in results if r is not None]


def replay_trace(
    baseline: Trace,
    pipeline: Callable[..., Any],
    *,
    target: Target | None = None,
    operator: Operator | None = None,
    perturbation_id: str | None = None,
    repeat: int = 0,
    **settings: Unpack[ReplayerSettings],
) -> ReplayResult:
    """Replay one recorded trace: ``Replayer(pipeline, **settings).replay(baseline, ...)``.

    ``settings`` are :class:`Replayer`'s (``mode``, ``client``, ``graph``, ``base_dir``,
    ``run_id``, ``seed``); the rest are :meth:`Replayer.replay`'s.
    """
    return Replayer(pipeline, **settings).replay(
        baseline, target=target, operator=operator, perturbation_id=perturbation_id, repeat=repeat,
    )


def replay_many(
    baselines: Sequence[Trace],
    pipeline: Callable[..., Any],
    *,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
    target: Target | None = None,
    operator: Operator | None = None,
    perturbation_id: str | None = None,
    repeat: int = 0,
    **settings: Unpack[ReplayerSettings],
) -> list[ReplayResult]:
    """:func:`replay_trace` over several traces on a thread pool, results in input order."""
    return Replayer(pipeline, **settings).replay_many(
        baselines, concurrency=concurrency, progress=progress, target=target, operator=operator,
        perturbation_id=perturbation_id, repeat=repeat,
    )
