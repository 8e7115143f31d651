"""``quiver replay``: the determinism check and one-off perturbation replays.

``quiver replay TRACES --pipeline module:function --check`` replays every trace with
every dimension frozen and no perturbation and reports, per trace that does not
reproduce, its first divergent call and a field diff. With ``--node`` and ``--op`` it
perturbs that node in every trace where it ran and writes the pair results.

A trace file that cannot be opened stops the command (exit 2); a bad line is reported
(``skipped: FILE:LINE: ...``), the other traces are replayed, and the exit is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._errors import QuiverError

from .common import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:
    from quiver._graph import PipelineGraph
    from quiver._trace import Redactor, Trace

__all__ = ["add_parser", "command"]


def add_parser(sub: Any) -> None:
    """Register ``quiver replay``."""
    rep = sub.add_parser(
        "replay",
        help="replay recorded traces: the determinism check, or one node perturbed",
        description=(
            "Re-run the pipeline's own code on recorded traces. --check (the default without "
            "--op) freezes every call and must reproduce each trace exactly; a trace that does "
            "not is reported with its first divergent call and a field diff (exit 1). With "
            "--node and --op, the node's call is perturbed in every trace where it ran, "
            "everything upstream is served from the recording, calls downstream run live, and "
            "the pair results (distances per node, D_iter/D_shape/D_output/D_struct, stratum, "
            "magnitude) are written to --out/pairs.jsonl."
        ),
    )
    rep.add_argument("traces", type=Path, nargs="+", help="trace files (JSONL, .gz accepted)")
    how = rep.add_mutually_exclusive_group(required=True)
    how.add_argument("--pipeline", help="module:function (or path/to/file.py:function) that recorded the traces")
    how.add_argument("--spec", type=Path, help="a recording spec: its pipeline and llm block are used")
    rep.add_argument("--check", action="store_true",
                     help="replay everything frozen, no perturbation (default without --op)")
    rep.add_argument("--node", help="the node to perturb")
    rep.add_argument("--occurrence", type=int, default=0, help="which call of the node (default 0, the first)")
    rep.add_argument("--op", help="the operator: override, bool_flip, categorical_flip, list_edit, numeric_edit, "
                                  "text_edit, prompt_swap, param_change, or a plugged-in one")
    rep.add_argument("--params", default="{}",
                     help="the operator's parameters as JSON, e.g. '{\"set\": {\"sufficient\": true}}'")
    rep.add_argument("--id", help="the perturbation id (default: the operator name)")
    rep.add_argument("--repeats", type=int, default=1, help="replays per trace (different sample keys; default 1)")
    rep.add_argument("--seed", type=int, default=0, help="seed of sample keys and operator randomness (0)")
    rep.add_argument("--live", action="append", default=[], choices=["model", "prompt", "retrieval", "tools"],
                     help="unfreeze a dimension (repeatable)")
    rep.add_argument("--live-node", action="append", default=[], help="run a node live everywhere (repeatable)")
    rep.add_argument("--frozen-node", action="append", default=[],
                     help="serve a node from the recording before the target, whatever its kind (repeatable)")
    rep.add_argument("--graph", type=Path,
                     help="graph YAML (field types and categories); default: the pipeline's declarations")
    rep.add_argument("--base-url", help="an OpenAI-compatible endpoint for live calls (with --pipeline)")
    rep.add_argument("--model", help="default model for --base-url")
    rep.add_argument("--api-key-env", help="environment variable holding the endpoint's key")
    rep.add_argument("--limit", type=int, help="replay only the first N traces")
    rep.add_argument("--concurrency", type=int, default=4, help="replays at once (4)")
    rep.add_argument("--epsilon", type=float, default=0.01, help="distance below which a node is unchanged (0.01)")
    rep.add_argument("--embedder", help="sentence-transformers model name or path (default all-MiniLM-L6-v2)")
    rep.add_argument("--cache", type=Path, help="embedding cache folder")
    rep.add_argument("--out", type=Path,
                     help="output folder: replayed.jsonl and check.json, or pairs.jsonl and summary.json")
    rep.add_argument("--quiet", action="store_true", help="no progress line")
    rep.set_defaults(handler=command)


def _traces(files: list[Path], limit: int | None) -> tuple[list[Trace], int]:
    """The traces to replay and how many bad lines were skipped (each named on stderr)."""
    from quiver._trace import read_corpus

    out, skipped = read_corpus(files, lambda m: print(f"quiver replay: warning: {m}", file=sys.stderr),
                               what="trace to replay")
    return (out[:limit] if limit is not None else out), skipped


@contextlib.contextmanager
def _setup(args: argparse.Namespace) -> Iterator[tuple[Callable[..., Any], Any, Path, Redactor]]:
    """The pipeline function, an LLM client (or None), the folder paths resolve against,
    and the redactor the recording was written through (the spec's, else the built-in
    rules and the value of ``--api-key-env``): replays are compared and written in that form."""
    from quiver._trace import Redactor
    from quiver.replay import LLMClient, load_pipeline

    if args.spec is not None:
        from quiver._yamlspec import load_spec
        from quiver.experiments._config import RecordSpec, open_llm, outcome_runner, spec_redactor

        spec = load_spec(RecordSpec, args.spec)
        base = args.spec.parent
        fn = load_pipeline(spec.pipeline, base)
        outcome = outcome_runner(spec, base, None, spec_file=str(args.spec))
        with open_llm(spec.llm, base, probe=not args.check) as client:  # a check expects to send nothing
            args.outcome = outcome.with_client(client) if outcome is not None else None
            yield fn, client, base, spec_redactor(spec)
        return
    base = Path.cwd()
    fn = load_pipeline(args.pipeline, base)
    from quiver.experiments._config import key_literals

    redactor = Redactor(literals=key_literals(os.environ.get(args.api_key_env) if args.api_key_env else None))
    if args.base_url is None:
        yield fn, None, base, redactor
        return
    from quiver.experiments._config import probe_endpoint

    if not args.check:  # an endpoint that is down stops the command now (exit 2), not trace by trace
        probe_endpoint(args.base_url)
    client = LLMClient(base_url=args.base_url, model=args.model, api_key_env=args.api_key_env)
    try:
        yield fn, client, base, redactor
    finally:
        client.close()


def _graph(args: argparse.Namespace) -> PipelineGraph | None:
    from quiver._graph import load_graph

    if args.graph is not None:
        return load_graph(args.graph)
    from quiver.replay import declared_graph

    graph = declared_graph()
    return graph if graph.nodes else None


def command(args: argparse.Namespace) -> int:
    """Run ``quiver replay``; return the exit code."""
    from quiver.replay import ReplayMode

    if args.op is None and args.node is not None:
        raise QuiverError("--node needs --op: which operator perturbs it (or leave both out for --check)")
    if args.op is not None and (args.node is None or args.check):
        raise QuiverError("--op needs --node and cannot be combined with --check")
    if args.repeats < 1:
        raise QuiverError(f"--repeats must be at least 1; got {args.repeats}")
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as exc:
        raise QuiverError(f"--params is not JSON ({exc.msg} at column {exc.colno}): {args.params}") from None
    if not isinstance(params, dict):
        raise QuiverError(f"--params must be a JSON object; got {args.params}")
    traces, skipped = _traces(args.traces, args.limit)
    overlap = set(args.live_node) & set(args.frozen_node)
    if overlap:
        raise QuiverError(f"node(s) {', '.join(sorted(overlap))} cannot be both --live-node and --frozen-node")
    mode = ReplayMode(live_nodes=tuple(args.live_node), frozen_nodes=tuple(args.frozen_node)).unfreeze(*args.live)
    with _held(args.out), _setup(args) as (fn, client, base, redactor):
        graph = _graph(args)
        if args.op is None:
            code = _check(args, traces, fn, client, mode, graph, redactor)
        else:
            code = _perturb(args, traces, fn, client, mode, graph, base, params, redactor)
    return max(code, EXIT_PROBLEMS) if skipped else code


@contextlib.contextmanager
def _held(out: Path | None) -> Iterator[None]:
    """The ``--out`` folder held while the command runs (:class:`~quiver._outdir.OutputFolder`)."""
    if out is None:
        yield
        return
    from quiver._outdir import OutputFolder, output_errors

    with output_errors(out, "nothing is kept to resume", "run it again"), OutputFolder(out, "replay", flag="--out"):
        yield


def _replay_all(args: argparse.Namespace, jobs: list[tuple[Trace, int]], run: Callable[[Trace, int], Any]) -> list[Any]:
    from concurrent.futures import ThreadPoolExecutor

    from quiver._interrupt import Interrupted
    from quiver._progress import Progress

    progress = Progress("replays", len(jobs), stream=None if args.quiet else sys.stderr)
    pool = ThreadPoolExecutor(max_workers=max(1, args.concurrency))
    try:
        futures = [pool.submit(run, trace, repeat) for trace, repeat in jobs]
        results = []
        for future in futures:
            results.append(future.result())
            progress.advance()
    except KeyboardInterrupt:  # SIGINT/SIGTERM: no new replay; those in flight make no new LLM attempt
        pool.shutdown(wait=False, cancel_futures=True)
        raise Interrupted(f"interrupted: {progress.done:,} of {len(jobs):,} replays done; nothing was written "
                          "(quiver replay writes its files once every replay is done): run it again") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        progress.close()
    return results


def _warn_unaccounted(results: list[Any], what: str) -> None:
    """One line on stderr per (node, endpoint) of the replays' requests the replay
    contract does not account for (:mod:`quiver.replay._capture.wire`)."""
    from quiver.replay._capture import merge_unaccounted, unaccounted_lines

    for line in unaccounted_lines(merge_unaccounted(r.wire for r in results), what):
        print(f"quiver replay: warning: {line}", file=sys.stderr)


def _outcome_line(results: list[Any]) -> str:
    """Whether the replays have the recording's outcomes: how many do, how many the
    recording had none for, and the judges' requests."""
    from quiver._trace import outcome_divergence

    recorded = [r for r in results if r.baseline.outcome is not None]
    same = sum(outcome_divergence(r.baseline.outcome, r.trace.outcome) is None for r in recorded)
    unrecorded = len(results) - len(recorded)
    none = f"; {unrecorded} recorded without one (evaluated now)" if unrecorded else ""
    judged = sum(r.judge_calls for r in results)
    return (f"outcomes: {same} of {len(recorded)} replays have the recording's outcome{none}; "
            f"{judged} judge LLM calls made")


def _counts(results: list[Any]) -> str:
    """What the replays did: node calls replayed (the pipeline's inputs left out), those
    served from the recording without running (nested calls included), LLM answers taken
    from the recording and LLM calls made."""
    calls = sum(1 for r in results for c in r.trace.calls if c.kind != "source")
    served = sum(r.served_calls for r in results)
    live = sum(r.total_llm_calls for r in results)
    answers = sum(1 for r in results for c in r.trace.calls if c.model is not None and c.response is not None)
    return (f"{calls:,} node calls replayed, {served:,} of them served from the recording (nested calls included) "
            f"and {calls - served:,} run again; {max(answers - live, 0):,} LLM answers from the recording, "
            f"{live:,} LLM calls made")


def _check(
    args: argparse.Namespace, traces: list[Trace], fn: Callable[..., Any], client: Any, mode: Any,
    graph: PipelineGraph | None, redactor: Redactor,
) -> int:
    from quiver._outdir import mark_folder, write_text
    from quiver._trace import TraceWriter
    from quiver.replay import Replayer

    outcome = getattr(args, "outcome", None)
    replayer = Replayer(fn, mode=mode, client=client, graph=graph, seed=args.seed, redactor=redactor,
                        outcome=outcome)
    results = _replay_all(args, [(t, 0) for t in traces], lambda t, r: replayer.replay(t))
    diverged = [r for r in results if not r.reproduced]
    for r in diverged:
        first = r.first_divergence
        print(f"{r.baseline.trace_id}: {first.message()}")
        for d in first.diff[:10]:
            print(f"    {d.path}: recorded {json.dumps(d.recorded)[:160]} | replayed {json.dumps(d.replayed)[:160]}")
        if len(r.divergences) > 1:
            print(f"    ... and {len(r.divergences) - 1} more divergent call(s)")
    what = "every dimension frozen" if mode.all_frozen else f"frozen: {', '.join(mode.frozen) or 'nothing'}"
    print(f"{len(results) - len(diverged)} of {len(results)} traces reproduce exactly ({what}): {_counts(results)}")
    if outcome is not None:
        print(_outcome_line(results))
    _warn_unaccounted(results, "replays")
    if args.out is not None:
        mark_folder(args.out, "replay")
        with TraceWriter(args.out / "replayed.jsonl", redactor=redactor) as writer:
            for r in results:
                writer.write(r.trace)
        report = {
            "traces": len(results), "reproduced": len(results) - len(diverged),
            "mode": mode.model_dump(mode="json"),
            "diverged": [
                {"trace_id": r.baseline.trace_id, "divergences": [d.to_json() for d in r.divergences]}
                for r in diverged
            ],
        }
        write_text(args.out / "check.json", json.dumps(report, indent=2) + "\n")
        print(f"replayed traces: {args.out / 'replayed.jsonl'}\nreport: {args.out / 'check.json'}")
    return EXIT_PROBLEMS if diverged else EXIT_OK


def _perturb(
    args: argparse.Namespace, traces: list[Trace], fn: Callable[..., Any], client: Any, mode: Any,
    graph: PipelineGraph | None, base: Path, params: dict[str, Any], redactor: Redactor,
) -> int:
    from quiver._interventional import pair_results
    from quiver._outdir import mark_folder, write_text
    from quiver.perturbations import make_operator
    from quiver.replay import Replayer, Target, sample_ids

    if client is None:
        raise QuiverError(
            "a perturbation replay runs downstream calls live: give --spec (its llm block) or --base-url"
        )
    operator = make_operator(args.op, params)
    target = Target(args.node, args.occurrence)
    eligible = [t for t in traces if any(c.node == target.node and c.occurrence == target.occurrence for c in t.calls)]
    skipped = len(traces) - len(eligible)
    if not eligible:
        raise QuiverError(
            f"no trace has a call {target.node}#{target.occurrence} to perturb ({len(traces)} trace(s) read)"
        )
    jobs = [(t, r) for t in eligible for r in range(args.repeats)]
    keyed = sample_ids(traces)
    replayer = Replayer(fn, mode=mode, client=client, graph=graph, base_dir=base, seed=args.seed, redactor=redactor)
    results = _replay_all(
        args, jobs,
        lambda t, r: replayer.replay(t, target=target, operator=operator, perturbation_id=args.id, repeat=r,
                                     sample_id=keyed[t.trace_id]),
    )
    pairs = pair_results(results, graph, epsilon=args.epsilon, embedder=args.embedder, cache_dir=args.cache)
    strata = Counter(p.stratum for p in pairs if p.status != "failed")
    status = Counter(p.status for p in pairs)
    effective = [p for p in pairs if p.stratum == "effective"]
    calls = Counter[str]()
    for r in results:
        calls.update(r.llm_calls)
    from quiver.replay._capture import merge_unaccounted, unaccounted_json

    unaccounted = merge_unaccounted(r.wire for r in results)
    not_landed = Counter(r.target.not_landed for r in results if r.target is not None and r.target.landed is False)
    summary = {
        "node": target.node, "occurrence": target.occurrence, **operator.describe(),
        "traces": len(eligible), "skipped_without_target": skipped, "repeats": args.repeats,
        "pairs": len(pairs), "status": dict(status),
        "effective": strata.get("effective", 0), "noop": strata.get("noop", 0),
        "effective_D_shape": sum(p.d_shape for p in effective),
        "effective_D_iter": sum(p.d_iter > 0 for p in effective),
        "not_applied": strata.get("not_applied", 0),
        "not_applied_reasons": dict(not_landed.most_common()),
        "llm_calls": dict(sorted(calls.items())),
        "llm_calls_per_pair": round(sum(calls.values()) / max(len(pairs), 1), 3),
        "unaccounted_requests": unaccounted_json(unaccounted),
    }
    print(
        f"{len(pairs)} pair(s) on {len(eligible)} trace(s) ({skipped} without {target.node}#{target.occurrence}): "
        f"{summary['effective']} effective, {summary['noop']} no-op, {status.get('failed', 0)} failed, "
        f"{status.get('diverged', 0)} diverged; D_shape > 0 in {summary['effective_D_shape']} of "
        f"{len(effective)} effective pair(s); {summary['llm_calls_per_pair']} LLM calls per pair"
    )
    _warn_unaccounted(results, "replays")
    if not_landed:
        reason, _ = not_landed.most_common(1)[0]
        print(f"quiver replay: {args.op} on {target.node}: {sum(not_landed.values())} of {len(results)} replays not "
              f"applied (counted in no stratum): {reason}", file=sys.stderr)
    if args.out is not None:
        mark_folder(args.out, "replay")
        write_text(args.out / "pairs.jsonl", "".join(redactor.encode(p.to_json())[1] + "\n" for p in pairs))
        write_text(args.out / "summary.json", json.dumps(summary, indent=2) + "\n")
        print(f"pairs: {args.out / 'pairs.jsonl'}\nsummary: {args.out / 'summary.json'}")
    return EXIT_PROBLEMS if status.get("failed") or status.get("diverged") or not_landed else EXIT_OK
