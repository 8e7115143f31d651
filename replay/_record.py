"""Recording an observational corpus: a pipeline run over inputs x repeats.

Each (input, repeat) runs in its own trace context on a bounded thread pool. A trace
is written the moment it finishes (flushed and fsynced to ``traces.jsonl.partial``), so
a crash loses nothing finished. At the end the corpus is rewritten in input order to
``traces.jsonl`` and the partial file removed. A failing input is recorded as a
``failed`` trace and the others go on. Sample keys are derived up front from (seed,
input_id, repeat), so a trace recorded again is the trace it would have been.

Resuming (``resume=True``) keeps every readable trace of the partial file (or, when the
run finished, of ``traces.jsonl``) and records the rest. A process killed while writing
leaves a torn last line; a resume after that appended behind it, before this module
cut torn lines, left one in the middle. Either way the resume drops every unreadable
line (a warning names it), rewrites the partial file without it before appending, and
records its trace again. Failed traces are kept as they are unless
``retry_failed=True``, which records exactly those again. A finished recording with
nothing to record is left untouched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from quiver._canonical import content_hash
from quiver._errors import OutputError, TraceFormatError
from quiver._interrupt import Interrupted, deadline
from quiver._outcome import pass_rate
from quiver._outdir import LogFile, make_folder, replace, write_bytes, write_text
from quiver._progress import Progress
from quiver._trace import (
    Redactor,
    Trace,
    TraceWriter,
    iter_lines,
    iter_traces,
    parse_line,
    redacted_logs,
    redaction_marks,
    write_traces,
)
from quiver.replay._instrument import TraceBuilder
from quiver.replay._keys import trace_sample_key
from quiver.replay._llm import EndpointDown, LLMClient
from quiver.replay._pipeline import check_pipeline_inputs, run_traced

if TYPE_CHECKING:
    from quiver.replay._outcome import OutcomeRunner

__all__ = ["InputItem", "RecordResult", "record_corpus", "new_run_id"]

log = logging.getLogger("quiver.record")


@dataclass(frozen=True)
class InputItem:
    """One input of a corpus: its group key and the pipeline's keyword arguments."""

    input_id: str
    inputs: dict[str, Any]

    @classmethod
    def from_record(cls, record: dict[str, Any], *, where: str = "") -> InputItem:
        """Read ``{"input_id": ..., "inputs": {...}}`` or a flat object of inputs.

        A flat object's ``input_id`` (or ``id``) key is the group key; without one the
        key is a hash of the inputs, stable across reorderings of the file.
        """
        if not isinstance(record, dict):
            raise ValueError(f"{where}an input must be a JSON object; got {type(record).__name__}")
        data = dict(record)
        input_id = data.pop("input_id", None)
        if input_id is None:
            input_id = data.pop("id", None)
        if "inputs" in data:
            inputs = data.pop("inputs")
            if data:
                raise ValueError(
                    f"{where}an input with an 'inputs' object may only also have 'input_id'; "
                    f"got {', '.join(sorted(data))}"
                )
        else:
            inputs = data
        if not isinstance(inputs, dict):
            raise ValueError(f"{where}'inputs' must be an object of keyword arguments")
        if input_id is None:
            input_id = "in-" + content_hash(inputs).split(":")[1][:12]
        return cls(str(input_id), inputs)


@dataclass
class RecordResult:
    """What a recording run produced."""

    run_id: str
    traces_path: Path
    summary_path: Path
    log_path: Path
    traces: int
    failed: int
    resumed: int
    calls: int
    retries: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0
    """LLM requests the traces sent that the endpoint answered, whatever the status (a
    retried attempt, a refused request included), as the wire counted them: the engine
    client's, those captured at the transport (a plain ``openai`` client, LangChain, DSPy)
    and those of LLM APIs the engine does not record."""
    seconds: float = 0.0
    retried: int = 0
    """Failed traces of an earlier run recorded again (``retry_failed``)."""
    dropped_lines: int = 0
    """Unreadable lines of the earlier run's file (a torn last line) dropped on resume;
    their traces were recorded again."""
    already_complete: bool = False
    """A resume found a finished recording with nothing to record and left it as it was."""
    http_requests: int = 0
    """Other HTTP requests the traces sent that were answered."""
    unanswered: int = 0
    """Requests (LLM or other) that got no answer: refused, reset or timed out."""
    redacted_traces: int = 0
    """Traces written with values redaction replaced in what a replay reads back (inputs,
    tool responses, retrieved documents): a pipeline that reads them may not reproduce."""
    redacted_reads: dict[tuple[str, str], int] = field(default_factory=dict)
    """Those values by (path, kind): traces holding each."""
    unaccounted: dict[tuple[str, str], int] = field(default_factory=dict)
    """Requests the replay contract does not account for, by (node, endpoint): LLM APIs the
    engine does not record, HTTP from nodes whose output a replay does not serve
    (:mod:`quiver.replay._capture.wire`)."""
    judge_calls: int = 0
    """LLM requests the outcome checks' judges sent this run (apart from the pipeline's)."""
    outcome: dict[str, Any] | None = None
    """The corpus's pass rate with its interval and counts
    (:func:`quiver._outcome.pass_rate`); None without outcome checks."""

    def summary(self) -> dict[str, Any]:
        """The summary written to ``summary.json``."""
        return {
            "run_id": self.run_id,
            "traces": self.traces,
            "ok": self.traces - self.failed,
            "failed": self.failed,
            "resumed": self.resumed,
            "retried": self.retried,
            "dropped_lines": self.dropped_lines,
            "calls": self.calls,
            "llm_calls": self.llm_calls,
            "http_requests": self.http_requests,
            "unanswered_requests": self.unanswered,
            "unaccounted_requests": [{"node": n, "endpoint": e, "requests": k}
                                     for (n, e), k in sorted(self.unaccounted.items())],
            "redacted_reads": {"traces": self.redacted_traces,
                               "values": [{"path": p, "kind": k, "traces": n}
                                          for (p, k), n in sorted(self.redacted_reads.items())]},
            "retries": dict(sorted(self.retries.items())),
            "seconds": round(self.seconds, 3),
            "traces_path": str(self.traces_path),
            **({"judge_calls": self.judge_calls, "outcome": self.outcome} if self.outcome is not None else {}),
        }


def new_run_id() -> str:
    """A fresh run id: UTC time and a random suffix."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


class _Tally:
    """The LLM calls the traces of one run made, counted by their builders: the engine
    client's and the captured ones (a plain ``openai`` client, LangChain, DSPy) alike."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.llm_calls = 0
        self.http = 0
        self.unanswered = 0
        self.unaccounted: Counter[tuple[str, str]] = Counter()
        self.redacted_traces = 0
        self.redacted_reads: Counter[tuple[str, str]] = Counter()

    def read_back(self, trace: Trace, redactor: Redactor) -> None:
        """Count where redaction will replace what a replay of ``trace`` reads back (its
        inputs, tool responses, retrieved documents), as it is written."""
        read = {"inputs": trace.inputs, "calls": [
            {"node": c.node, "tool": c.tool.response if c.tool is not None else None,
             "retrieval": [d.model_dump(mode="json") for d in c.retrieval or []]} for c in trace.calls]}
        data, _ = redactor.encode(read)
        if data is read:  # nothing in it for redaction to replace
            return
        replacement = redactor.config.replacement
        marks = redaction_marks(data["inputs"], "inputs", replacement)
        for call in data["calls"]:
            marks += redaction_marks(call["tool"], f"{call['node']}.tool.response", replacement)
            marks += redaction_marks(call["retrieval"], f"{call['node']}.retrieval", replacement)
        if marks:
            with self._lock:
                self.redacted_traces += 1
                self.redacted_reads.update(set(marks))

    def add(self, builder: TraceBuilder) -> None:
        with builder._lock:
            calls = sum(builder.llm_calls.values())
        wire = builder.wire
        with self._lock:
            self.llm_calls += calls
            self.http += sum(wire.http.values())
            self.unanswered += sum(wire.unanswered.values())
            self.unaccounted.update(wire.unaccounted)


def _run_one(
    fn: Callable[..., Any],
    pipeline_name: str,
    run_id: str,
    item: InputItem,
    repeat: int,
    seed: int,
    client: LLMClient | None,
    tally: _Tally,
    outcome: OutcomeRunner | None = None,
) -> Trace:
    builder = TraceBuilder(
        trace_id=f"{run_id}/{item.input_id}/{repeat}", run_id=run_id, pipeline=pipeline_name,
        input_id=item.input_id, repeat=repeat, inputs=item.inputs,
        sample_key=trace_sample_key(seed, item.input_id, repeat),
    )
    try:
        trace = run_traced(builder, fn, item.inputs, client, log=log)
    finally:
        tally.add(builder)
    if outcome is None:
        return trace
    return trace.model_copy(update={"outcome": outcome.evaluate(trace, sample_key=builder.sample_key)})


@contextlib.contextmanager
def _redacted_logging(path: Path, redactor: Redactor) -> Iterator[None]:
    """Log the run to ``path``; every record, on every handler, is redacted by
    ``redactor`` meanwhile (:func:`~quiver._trace.redact_output.redacted_logs`)."""
    handler = LogFile(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("quiver")
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with redacted_logs(redactor):
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
        handler.close()


def record_corpus(
    fn: Callable[..., Any],
    *,
    pipeline_name: str,
    inputs: Sequence[InputItem],
    repeats: int,
    output_dir: Path,
    llm: LLMClient | None = None,
    concurrency: int = 4,
    redactor: Redactor | None = None,
    seed: int = 0,
    run_id: str | None = None,
    resume: bool = False,
    retry_failed: bool = False,
    progress_stream: TextIO | None = sys.stderr,
    outcome: OutcomeRunner | None = None,
) -> RecordResult:
    """Run ``fn`` over ``inputs`` x ``repeats`` and write the corpus to ``output_dir``.

    Writes ``traces.jsonl`` (in input order, then repeat), ``summary.json`` and
    ``record.log``; everything passes through ``redactor`` before it is written.

    Args:
        resume: Keep the readable traces of an earlier run in ``output_dir`` (its
            partial file, else its finished ``traces.jsonl``) and record the rest;
            unreadable lines are dropped with a warning and their traces recorded again.
            A finished recording with nothing left to record is not touched
            (:attr:`RecordResult.already_complete`). Without ``resume`` an earlier
            run's files are overwritten.
        retry_failed: Resume, and record the traces kept as ``failed`` again.
        outcome: The spec's outcome checks: every trace recorded carries its outcome,
            and the result its pass rate (judges' requests counted apart).
    """
    t0 = time.monotonic()
    redactor = redactor or Redactor()
    make_folder(output_dir)
    final_path, partial_path = output_dir / "traces.jsonl", output_dir / "traces.jsonl.partial"
    order = {key: i for i, key in enumerate((item.input_id, r) for item in inputs for r in range(repeats))}
    with _redacted_logging(output_dir / "record.log", redactor):
        if inputs:
            check_pipeline_inputs(fn, inputs[0].inputs)
        kept = _Kept()
        if resume or retry_failed:
            kept = _take_over(final_path, partial_path, set(order), retry_failed)
            if kept.complete:
                return _already_complete(kept, final_path, output_dir, t0)
        run_id = run_id or kept.run_id or new_run_id()
        jobs = [(item, r) for item in inputs for r in range(repeats) if (item.input_id, r) not in kept.done]
        log.info("recording %d traces (%d resumed) with concurrency %d", len(jobs), len(kept.done), concurrency)
        progress = Progress("record", len(jobs) + len(kept.done), stream=progress_stream, resumed=len(kept.done))
        retries_before = Counter(llm.stats) if llm is not None else Counter()
        tally = _Tally()
        try:
            _execute(
                fn, pipeline_name, run_id, jobs, seed, llm, concurrency, partial_path, redactor, progress,
                resume or retry_failed, tally, outcome,
            )
        except KeyboardInterrupt:
            written = sum(1 for _, raw in iter_lines(partial_path) if raw.strip())
            raise Interrupted(
                f"interrupted: {written:,} of {progress.total:,} traces written to {partial_path}"
            ) from None
        except EndpointDown as exc:  # the traces it cut short are not written: a resume records them
            written = sum(1 for _, raw in iter_lines(partial_path) if raw.strip())
            raise exc.with_note(f"{written:,} of {progress.total:,} traces written to {partial_path}, none "
                                "recorded as failed because of it") from None
        finally:
            progress.close()
        traces = sorted(iter_traces(partial_path), key=lambda t: order.get((t.input_id, t.repeat), len(order)))
        tmp = output_dir / "traces.jsonl.tmp"
        write_traces(tmp, traces)
        replace(tmp, final_path)
        partial_path.unlink()
        partial_path.with_name(partial_path.name + ".tmp").unlink(missing_ok=True)  # left by a kill in _rewrite
        stats = (Counter(llm.stats) - retries_before) if llm is not None else Counter()
        result = RecordResult(
            run_id=run_id, traces_path=final_path, summary_path=output_dir / "summary.json",
            log_path=output_dir / "record.log", traces=len(traces),
            failed=sum(t.status == "failed" for t in traces),
            resumed=len(kept.done), calls=sum(len(t.calls) for t in traces),
            retries={k.removeprefix("retry_"): v for k, v in stats.items() if k.startswith("retry_")},
            llm_calls=tally.llm_calls, http_requests=tally.http, unanswered=tally.unanswered,
            unaccounted=dict(tally.unaccounted), redacted_traces=tally.redacted_traces,
            redacted_reads=dict(tally.redacted_reads),
            seconds=time.monotonic() - t0,
            retried=kept.retried, dropped_lines=kept.dropped,
            judge_calls=outcome.judge_calls if outcome is not None else 0,
            outcome=pass_rate(traces, seed=seed),
        )
        write_text(result.summary_path, json.dumps(redactor.data(result.summary()), indent=2) + "\n")
        log.info("recorded %s", json.dumps(result.summary()))
        return result


@dataclass
class _Kept:
    """What a resume keeps of an earlier run's file."""

    done: set[tuple[str, int]] = field(default_factory=set)
    """The (input_id, repeat) of every trace kept."""
    run_id: str | None = None
    """The earlier run's id (of its first trace kept)."""
    traces: int = 0
    calls: int = 0
    failed: int = 0
    """Failed traces kept as they are."""
    retried: int = 0
    """Failed traces dropped, to be recorded again."""
    dropped: int = 0
    """Unreadable lines dropped."""
    complete: bool = False
    """The file was a finished ``traces.jsonl`` with nothing to record: left as it is."""


def _take_over(final: Path, partial: Path, wanted: set[tuple[str, int]], retry_failed: bool) -> _Kept:
    """Read what an earlier run left in the folder and make the partial file hold
    exactly the traces kept, each on a line of its own, ready to be appended to."""
    source = partial if partial.exists() else final if final.exists() else None
    kept = _Kept()
    if source is None:
        return kept
    lines: list[bytes] = []
    first_line: dict[tuple[str, int], int] = {}
    clean = True  # the file holds exactly the lines kept, the last one ended
    for lineno, raw in iter_lines(source):
        if not raw.strip():
            continue
        trace = _readable(raw, source, lineno)
        clean = clean and trace is not None and raw.endswith(b"\n")
        if trace is None:
            kept.dropped += 1
            continue
        key = (trace.input_id, trace.repeat)
        if key in first_line:
            log.warning("%s:%d: a second trace of input %r repeat %d (the first is on line %d); dropped",
                        source, lineno, trace.input_id, trace.repeat, first_line[key])
            clean = False
            continue
        first_line[key] = lineno
        if trace.status == "failed" and retry_failed:
            kept.retried += 1
            clean = False
            continue
        kept.done.add(key)
        kept.run_id = kept.run_id or trace.run_id
        kept.traces += 1
        kept.calls += len(trace.calls)
        kept.failed += trace.status == "failed"
        lines.append(raw if raw.endswith(b"\n") else raw + b"\n")
    if source == final and clean and wanted <= kept.done:
        kept.complete = True
        return kept
    if source == final or not clean:
        _rewrite(partial, lines)
    log.info("resuming from %s: %d trace(s) kept (%d failed), %d failed trace(s) to record again, "
             "%d unreadable line(s) dropped", source, kept.traces, kept.failed, kept.retried, kept.dropped)
    return kept


def _readable(raw: bytes, source: Path, lineno: int) -> Trace | None:
    """The trace on a line of an earlier run's file, or None (with a warning saying
    why the line is dropped and that its trace is recorded again)."""
    try:
        return parse_line(raw, str(source), lineno)
    except TraceFormatError as exc:
        if not raw.endswith(b"\n"):
            log.warning("%s:%d: the last line is torn (%d bytes and no newline: the run was killed, or its disk "
                        "filled, while writing it); cut, and its trace is recorded again", source, lineno, len(raw))
        else:
            log.warning("%s; the line is dropped, and the trace it held is recorded again", exc)
        return None


def _rewrite(path: Path, lines: list[bytes]) -> None:
    """Replace ``path`` with ``lines``, durably: a kill leaves the old file or the new one."""
    write_bytes(path, b"".join(lines), fsync=True)


def _already_complete(kept: _Kept, final: Path, output_dir: Path, t0: float) -> RecordResult:
    log.info("already complete: %d traces in %s (%d failed); nothing to do", kept.traces, final, kept.failed)
    return RecordResult(
        run_id=kept.run_id or "", traces_path=final, summary_path=output_dir / "summary.json",
        log_path=output_dir / "record.log", traces=kept.traces, failed=kept.failed, resumed=kept.traces,
        calls=kept.calls, seconds=time.monotonic() - t0, already_complete=True,
    )


def _execute(
    fn: Callable[..., Any],
    pipeline_name: str,
    run_id: str,
    jobs: list[tuple[InputItem, int]],
    seed: int,
    llm: LLMClient | None,
    concurrency: int,
    partial_path: Path,
    redactor: Redactor,
    progress: Progress,
    append: bool,
    tally: _Tally,
    outcome: OutcomeRunner | None = None,
) -> None:
    """Record ``jobs`` on ``concurrency`` threads, writing each trace as it finishes.

    Interrupted (SIGINT/SIGTERM: :mod:`quiver._interrupt`), no new trace starts; those in
    flight finish (their LLM calls make no new attempt, so a trace that needs one more is
    cut short and not written) or are abandoned at the deadline; the threads are daemons,
    so an abandoned one does not hold the exit; then the interrupt goes on up. A trace cut
    short by an LLM endpoint that stopped answering (:class:`EndpointDown`) stops the
    recording the same way, and is not written: a resume records it.
    """
    todo = deque(jobs)
    finished: queue.SimpleQueue[Trace | BaseException | None] = queue.SimpleQueue()
    closed = threading.Event()

    def slot() -> None:
        try:
            while not closed.is_set():
                try:
                    item, repeat = todo.popleft()
                except IndexError:
                    return
                try:
                    result: Trace | BaseException = _run_one(fn, pipeline_name, run_id, item, repeat, seed, llm, tally,
                                                       outcome)
                except BaseException as exc:  # raised again in the writing thread
                    result = exc
                finished.put(result)
        finally:
            finished.put(None)

    threads = [threading.Thread(target=slot, name=f"quiver-record-{i}", daemon=True)
               for i in range(min(max(1, concurrency), len(jobs)))]
    running = 0
    with TraceWriter(partial_path, redactor=redactor, append=append, fsync=True) as writer:

        def write(trace: Trace) -> None:
            tally.read_back(trace, redactor)
            writer.write(trace)
            retries = sum(trace.tags.get("retries", {}).values())
            progress.advance(1, retries=retries, failed=int(trace.status == "failed"))

        try:
            for thread in threads:
                thread.start()
                running += 1
            while running:
                result = finished.get()  # (the first Ctrl-C raises KeyboardInterrupt here)
                if result is None:
                    running -= 1
                elif isinstance(result, BaseException):
                    raise result
                else:
                    write(result)
        except (KeyboardInterrupt, EndpointDown):
            # no new trace; those in flight finish (an interrupted or down endpoint's calls make no new
            # attempt) or are abandoned at the deadline; what finishes whole is written
            closed.set()
            _in_flight(finished, running, write)
            raise
        except OutputError:
            # the disk refused the file: no new trace; those in flight finish while the endpoint still
            # answers (or are abandoned at the deadline), unwritten: a resume records them
            closed.set()
            _in_flight(finished, running, None)
            raise
        finally:
            closed.set()


def _in_flight(finished: queue.SimpleQueue[Trace | BaseException | None], running: int,
               write: Callable[[Trace], None] | None) -> None:
    """Wait for the ``running`` recording threads to end, until the interrupt deadline,
    writing each trace they finish with ``write`` (None: dropping it)."""
    until = deadline()
    while running:
        try:
            result = finished.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            return
        if result is None:
            running -= 1
        elif isinstance(result, Trace) and write is not None:
            write(result)
