"""Recording an observational corpus: a pipeline run over inputs x repeats.

Each (input, repeat) runs in its own trace context on a bounded thread pool. A trace
is written the moment it finishes (flushed and fsynced to ``traces.jsonl.partial``), so
a crash loses nothing finished; ``resume=True`` skips what the partial file holds. At
the end the corpus is rewritten in input order to ``traces.jsonl`` and the partial file
removed. A failing input is recorded as a ``failed`` trace and the others go on.
Sample keys are derived up front from (seed, input_id, repeat).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from quiver._canonical import content_hash
from quiver._progress import Progress
from quiver._trace import RedactingFilter, Redactor, Trace, TraceWriter, iter_traces, write_traces
from quiver.replay._instrument import TraceBuilder
from quiver.replay._keys import trace_sample_key
from quiver.replay._llm import LLMClient
from quiver.replay._pipeline import check_pipeline_inputs, run_traced

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
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The summary written to ``summary.json``."""
        return {
            "run_id": self.run_id,
            "traces": self.traces,
            "ok": self.traces - self.failed,
            "failed": self.failed,
            "resumed": self.resumed,
            "calls": self.calls,
            "llm_calls": self.llm_calls,
            "retries": dict(sorted(self.retries.items())),
            "seconds": round(self.seconds, 3),
            "traces_path": str(self.traces_path),
        }


def new_run_id() -> str:
    """A fresh run id: UTC time and a random suffix."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def _run_one(
    fn: Callable[..., Any],
    pipeline_name: str,
    run_id: str,
    item: InputItem,
    repeat: int,
    seed: int,
    client: LLMClient | None,
) -> Trace:
    builder = TraceBuilder(
        trace_id=f"{run_id}/{item.input_id}/{repeat}", run_id=run_id, pipeline=pipeline_name,
        input_id=item.input_id, repeat=repeat, inputs=item.inputs,
        sample_key=trace_sample_key(seed, item.input_id, repeat),
    )

    return run_traced(builder, fn, item.inputs, client, log=log)


@contextlib.contextmanager
def _redacted_logging(path: Path, redactor: Redactor) -> Iterator[None]:
    """Log the run to ``path``; redact every record on every handler meanwhile."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    redacting = RedactingFilter(redactor)
    logger = logging.getLogger("quiver")
    others = list(logging.getLogger().handlers) + list(logger.handlers)
    for h in others:
        h.addFilter(redacting)
    handler.addFilter(redacting)
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
        for h in others:
            h.removeFilter(redacting)
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
    progress_stream: TextIO | None = sys.stderr,
) -> RecordResult:
    """Run ``fn`` over ``inputs`` x ``repeats`` and write the corpus to ``output_dir``.

    Writes ``traces.jsonl`` (in input order, then repeat), ``summary.json`` and
    ``record.log``; everything passes through ``redactor`` before it is written.
    """
    t0 = time.monotonic()
    redactor = redactor or Redactor()
    output_dir.mkdir(parents=True, exist_ok=True)
    final_path, partial_path = output_dir / "traces.jsonl", output_dir / "traces.jsonl.partial"
    with _redacted_logging(output_dir / "record.log", redactor):
        if inputs:
            check_pipeline_inputs(fn, inputs[0].inputs)
        done, run_id = _resumed(partial_path, resume, run_id)
        jobs = [
            (item, r) for item in inputs for r in range(repeats) if (item.input_id, r) not in done
        ]
        log.info("recording %d traces (%d resumed) with concurrency %d", len(jobs), len(done), concurrency)
        progress = Progress("record", len(jobs) + len(done), stream=progress_stream)
        progress.done = len(done)
        retries_before = Counter(llm.stats) if llm is not None else Counter()
        _execute(
            fn, pipeline_name, run_id, jobs, seed, llm, concurrency, partial_path, redactor, progress, resume
        )
        progress.close()
        order = {key: i for i, key in enumerate((item.input_id, r) for item in inputs for r in range(repeats))}
        traces = sorted(iter_traces(partial_path), key=lambda t: order.get((t.input_id, t.repeat), len(order)))
        tmp = output_dir / "traces.jsonl.tmp"
        write_traces(tmp, traces)
        os.replace(tmp, final_path)
        partial_path.unlink()
        stats = (Counter(llm.stats) - retries_before) if llm is not None else Counter()
        result = RecordResult(
            run_id=run_id, traces_path=final_path, summary_path=output_dir / "summary.json",
            log_path=output_dir / "record.log", traces=len(traces),
            failed=sum(t.status == "failed" for t in traces),
            resumed=len(done), calls=sum(len(t.calls) for t in traces),
            retries={k.removeprefix("retry_"): v for k, v in stats.items() if k.startswith("retry_")},
            llm_calls=stats.get("calls", 0), seconds=time.monotonic() - t0,
        )
        result.summary_path.write_text(json.dumps(redactor.data(result.summary()), indent=2) + "\n")
        log.info("recorded %s", json.dumps(result.summary()))
        return result


def _resumed(partial: Path, resume: bool, run_id: str | None) -> tuple[set[tuple[str, int]], str]:
    if not resume or not partial.exists():
        return set(), run_id or new_run_id()
    done: set[tuple[str, int]] = set()
    found_run = None
    for trace in iter_traces(partial, on_error="skip"):
        done.add((trace.input_id, trace.repeat))
        found_run = found_run or trace.run_id
    return done, run_id or found_run or new_run_id()


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
) -> None:
    lock = threading.Lock()
    with TraceWriter(partial_path, redactor=redactor, append=append, fsync=True) as writer:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="quiver-record") as pool:
            futures = [
                pool.submit(_run_one, fn, pipeline_name, run_id, item, r, seed, llm) for item, r in jobs
            ]
            for future in as_completed(futures):
                trace = future.result()
                with lock:
                    writer.write(trace)
                retries = sum(trace.tags.get("retries", {}).values())
                progress.advance(1, retries=retries, failed=int(trace.status == "failed"))
