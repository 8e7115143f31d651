"""``quiver record SPEC``: a recording spec resolved into a recording run.

Loads the spec, the pipeline and the inputs; starts the bundled simulator as a
subprocess when the spec names it (and stops it afterwards, whatever happens); builds
the LLM client and the redactor (which also removes the value of the API-key variable);
and records the corpus with :func:`quiver.replay.record_corpus`.

An output folder that already holds a corpus (or an interrupted recording) is never
overwritten: ``--resume`` keeps its traces and records the rest (a finished one is left
as it is), ``--retry-failed`` also records its failed traces again; without either the
command refuses to start. The output folder is held for the whole recording (a second
command on it is refused, naming this one), and must be new, empty or a recording's
(:class:`~quiver._outdir.OutputFolder`); a disk that refuses a write ends the command
in one line, the traces written so far kept for ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .common import EXIT_OK, EXIT_PROBLEMS, checked_override

if TYPE_CHECKING:
    from quiver.experiments._config import RecordSpec
    from quiver.replay import RecordResult

__all__ = ["add_parser", "command", "RecordOverrides", "run_record"]


def add_parser(sub: Any) -> None:
    """Register ``quiver record``."""
    rec = sub.add_parser(
        "record",
        help="run a pipeline over inputs x repeats and write the trace corpus",
        description=(
            "Run the spec's pipeline over its inputs x repeats with bounded concurrency, "
            "retrying LLM calls on 429/5xx/timeouts, and write traces.jsonl, summary.json "
            "and record.log to the output folder. Starts the bundled simulator when the "
            "spec says `llm: simulator`."
        ),
    )
    rec.add_argument("spec", type=Path, help="the YAML spec (see `quiver schema record`)")
    rec.add_argument("--output", help="output folder (overrides the spec's output)")
    rec.add_argument("--repeats", type=int, help="repeats per input (overrides the spec)")
    rec.add_argument("--concurrency", type=int, help="traces at once (overrides the spec)")
    rec.add_argument("--resume", action="store_true",
                     help="keep the traces an earlier run wrote to the output folder and record the rest "
                          "(unreadable lines, such as a line torn by a kill, are recorded again; failed "
                          "traces are kept; a finished recording is left as it is)")
    rec.add_argument("--retry-failed", action="store_true",
                     help="resume, and record the traces recorded as failed again")
    rec.add_argument("--quiet", action="store_true", help="no progress line")

    rec.set_defaults(handler=command)


def command(args: argparse.Namespace) -> int:
    """Run ``quiver record``; return the exit code."""
    from quiver.experiments._config import RecordSpec

    overrides = RecordOverrides(
        output=args.output, repeats=checked_override(RecordSpec, "repeats", args.repeats, "--repeats"),
        concurrency=checked_override(RecordSpec, "concurrency", args.concurrency, "--concurrency"),
        resume=args.resume,
        retry_failed=args.retry_failed,
    )
    from quiver.replay import EndpointDown

    output = f" --output {args.output}" if args.output else ""
    try:
        _, result = run_record(args.spec, overrides, progress_stream=None if args.quiet else sys.stderr)
    except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: the traces finished are in the partial file
        from quiver._interrupt import Interrupted

        said = str(exc) or "interrupted"
        raise Interrupted(f"{said}; continue with: quiver record {args.spec}{output} --resume") from None
    except EndpointDown as exc:
        raise exc.with_note(f"when it answers again, continue with: quiver record {args.spec}{output} --resume") \
            from None
    again = "; `quiver record --retry-failed` records them again"
    if result.already_complete:
        failed = f" ({result.failed} failed{again})" if result.failed else ""
        print(f"already complete: {result.traces} traces in {result.traces_path}{failed}; nothing to do")
        return EXIT_PROBLEMS if result.failed else EXIT_OK
    summary = result.summary()
    retries = ", ".join(f"{k} {v}" for k, v in summary["retries"].items()) or "none"
    retried = f", {result.retried} retried" if args.retry_failed else ""
    print(
        f"recorded {summary['traces']} traces ({summary['ok']} ok, {summary['failed']} failed, "
        f"{summary['resumed']} resumed{retried}) with {summary['calls']} node calls and "
        f"{summary['llm_calls']} LLM calls in {summary['seconds']:.1f}s; retries: {retries}"
    )
    if result.outcome is not None:
        from quiver._outcome import pass_rate_line

        judged = f"; {result.judge_calls} judge LLM calls" if result.judge_calls else ""
        print(f"outcome: {pass_rate_line(result.outcome)}{judged}")
    print(f"corpus: {result.traces_path}\nsummary: {result.summary_path}\nlog: {result.log_path}")
    _warn_unseen_llm_requests(result.traces_path)
    _warn_unaccounted(result.unaccounted, "recording")
    _warn_redacted_reads(result)
    if result.failed:
        for line in _failure_lines(result.traces_path):
            print(f"quiver record: {line}", file=sys.stderr)
        print(f"{result.failed} trace(s) failed; see {result.log_path}{again}", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _failure_lines(traces_path: Path) -> list[str]:
    """One line per kind of failure of the corpus's failed traces, the commonest first:
    how many failed that way, and the first such trace's error (ids, paths and numbers
    of one trace replaced, so that one reason reads the same for every trace)."""
    from collections import Counter

    from quiver import iter_traces
    from quiver.experiments._campaign import failure_reason

    kinds: Counter[str] = Counter()
    first: dict[str, str] = {}
    for trace in iter_traces(traces_path, on_error="skip"):
        if trace.status != "failed":
            continue
        error = f"{trace.error.type}: {trace.error.message}" if trace.error is not None else "no error recorded"
        reason = failure_reason(error)
        kinds[reason] += 1
        text = (error.strip().splitlines() or ["no error recorded"])[0]
        first.setdefault(reason, f"{text[:297]}..." if len(text) > 300 else text)
    return [f"{n:,} trace(s) failed like this: {first[reason]}"
            for reason, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]


def _warn_redacted_reads(result: RecordResult) -> None:
    """One line on stderr when redaction replaced values a replay reads back."""
    if not result.redacted_traces:
        return
    kinds = sorted({kind for _, kind in result.redacted_reads})
    where = ", ".join(f"{kind} in {path} ({n})" for (path, kind), n in sorted(result.redacted_reads.items(),
                                                                              key=lambda kv: -kv[1])[:4])
    switches = {"email": "emails", "bearer": "bearer_tokens", "api_key": "api_keys"}
    keep = ", ".join(f"{switches[k]}: false" for k in kinds if k in switches)
    print(f"quiver record: warning: redaction replaced values a replay reads back in {result.redacted_traces} of "
          f"{result.traces} traces ({where}): a pipeline that reads them gets the replacement on replay and may not "
          f"reproduce; to keep them, " + (f"set `redact: {{{keep}}}`, or " if keep else "")
          + "narrow the `redact:` rules to what the pipeline does not read (README: Redaction)", file=sys.stderr)


def _warn_unaccounted(unaccounted: dict[tuple[str, str], int], what: str) -> None:
    """One line on stderr per (node, endpoint) of requests the replay contract does not account for."""
    from quiver.replay._capture import unaccounted_lines

    for line in unaccounted_lines(unaccounted, what):
        print(f"quiver record: warning: {line}", file=sys.stderr)


def _warn_unseen_llm_requests(traces_path: Path) -> None:
    """One line on stderr naming the llm nodes that recorded no LLM call, if any."""
    from quiver import iter_traces
    from quiver.replay import unseen_llm_nodes, unseen_llm_warning

    line = unseen_llm_warning(unseen_llm_nodes(iter_traces(traces_path, on_error="skip")), "warning")
    if line:
        print(line, file=sys.stderr)


@dataclass(frozen=True)
class RecordOverrides:
    """Command-line values that take precedence over the spec."""

    output: str | None = None
    repeats: int | None = None
    concurrency: int | None = None
    resume: bool = False
    retry_failed: bool = False
    """Resume, and record the failed traces again."""


def run_record(
    spec_path: str | Path,
    overrides: RecordOverrides | None = None,
    *,
    progress_stream: TextIO | None = sys.stderr,
) -> tuple[RecordSpec, RecordResult]:
    """Run ``quiver record SPEC``: returns the spec and what was recorded."""
    from quiver._outdir import OutputFolder, output_errors
    from quiver._yamlspec import load_spec
    from quiver.experiments._config import (
        RecordSpec,
        check_outcome_inputs,
        load_inputs,
        open_llm,
        outcome_runner,
        spec_redactor,
    )
    from quiver.replay import load_pipeline, record_corpus
    from quiver.replay._capture import http_tools

    overrides = overrides or RecordOverrides()
    path = Path(spec_path)
    spec = load_spec(RecordSpec, path)
    base_dir = path.parent
    changes: dict[str, Any] = {
        k: v for k, v in (("output", overrides.output), ("repeats", overrides.repeats),
                          ("concurrency", overrides.concurrency)) if v is not None
    }
    spec = spec.model_copy(update=changes) if changes else spec
    inputs = load_inputs(spec, base_dir, spec_file=str(path))
    check_outcome_inputs(spec, [item.inputs for item in inputs], spec_file=str(path))
    outcome = outcome_runner(spec, base_dir, None, spec_file=str(path))  # a check that does not import: said now
    fn = load_pipeline(spec.pipeline, base_dir)
    function_name: str = getattr(fn, "__name__", "pipeline")  # a callable object may have none
    name = spec.name or function_name
    output_dir = Path(spec.output)
    resume = overrides.resume or overrides.retry_failed
    output = f" --output {overrides.output}" if overrides.output else ""
    again = f"run `quiver record {spec_path}{output} --resume`"
    with output_errors(output_dir, "the traces written so far are kept", again), OutputFolder(output_dir, "record"):
        if not resume:
            _refuse_to_overwrite(output_dir)
        redactor = spec_redactor(spec)
        resolved = json.dumps(redactor.data(spec.model_dump(mode="json")), indent=2) + "\n"
        # a finished recording may be left as it is: its resolved spec is replaced only when it is not
        finished = resume and (output_dir / "traces.jsonl").exists() \
            and not (output_dir / "traces.jsonl.partial").exists()
        if not finished:
            _resolved(output_dir, resolved)
        with open_llm(spec.llm, base_dir) as client, http_tools(spec.tools.http):
            result = record_corpus(
                fn, pipeline_name=name, inputs=inputs, repeats=spec.repeats, output_dir=output_dir,
                llm=client, concurrency=spec.concurrency, redactor=redactor, seed=spec.seed,
                resume=resume, retry_failed=overrides.retry_failed, progress_stream=progress_stream,
                outcome=outcome.with_client(client) if outcome is not None else None,
            )
        if finished and not result.already_complete:
            _resolved(output_dir, resolved)
    return spec, result


def _resolved(output_dir: Path, resolved: str) -> None:
    """The recording's ``spec.resolved.json``, and its folder marked as a recording's."""
    from quiver._outdir import mark_folder, write_text

    write_text(output_dir / "spec.resolved.json", resolved)
    mark_folder(output_dir, "record")


def _refuse_to_overwrite(output_dir: Path) -> None:
    """Raise when ``output_dir`` holds a corpus or an interrupted recording."""
    from quiver._errors import QuiverError

    if (output_dir / "traces.jsonl.partial").exists():
        raise QuiverError(
            f"{output_dir} holds an interrupted recording (traces.jsonl.partial); use --resume to finish it, "
            "or another --output, or delete it"
        )
    if (output_dir / "traces.jsonl").exists():
        raise QuiverError(
            f"{output_dir} already holds a corpus (traces.jsonl); use --resume to keep it (--retry-failed to "
            "record its failed traces again), or another --output, or delete it"
        )
