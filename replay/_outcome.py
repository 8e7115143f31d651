"""Running a spec's outcome checks on the traces a recording or a replay makes.

:class:`OutcomeRunner` gives the core's evaluation (:func:`quiver._outcome.evaluate`)
what it does not do itself: it imports and calls ``python`` checks, embeds the texts of
``similar`` checks with the analysis embedder, and asks ``judge`` checks' questions at
the spec's endpoint.

A judge's request is an LLM call outside the pipeline: it runs in a scratch trace of
its own (its sample key derived from the trace's and the check's name, so a repeated
replay asks the same and another repeat samples anew), is counted on the wire apart from
the pipeline's calls (:attr:`OutcomeRunner.judge_calls`), and is recorded in the trace's
outcome with its answer. A replay whose judge would ask exactly what the recording asked
(the same model and messages: the same output judged) is served the recorded answer
without a request, so a frozen replay sends nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from quiver._errors import PipelineError, SpecError
from quiver._outcome import CheckSpec, Evaluators, InputRef, evaluate, field_value, input_value
from quiver._trace import CheckResult, JudgeRecord, Message, Outcome, Trace

from ._instrument import TraceBuilder, current_builder
from ._keys import derive_sample_key
from ._pipeline import load_pipeline

__all__ = ["OutcomeRunner", "judge_messages"]

_JUDGE_SYSTEM = (
    "You grade one answer of a pipeline against a rubric.\nRubric: {rubric}\n"
    'Reply with JSON only: {{"verdict": "pass" or "fail", "score": a number from 0 to 1, "reason": one sentence}}.'
)


def judge_messages(check: CheckSpec, trace: Trace) -> list[Message]:
    """What a judge check asks: the rubric, the inputs, the judged output and the reference."""
    judge = check.judge
    assert judge is not None
    lines = [f"Inputs: {json.dumps(trace.inputs, sort_keys=True, ensure_ascii=False)}",
             f"Answer: {json.dumps(field_value(trace.output, check.field), sort_keys=True, ensure_ascii=False)}"]
    reference = judge.reference
    if isinstance(reference, Mapping) and set(reference) == {"input"}:
        reference = input_value(trace.inputs, str(reference["input"]))
    elif isinstance(reference, InputRef):
        reference = input_value(trace.inputs, reference.input)
    if reference is not None:
        lines.append(f"Reference answer: {json.dumps(reference, sort_keys=True, ensure_ascii=False)}")
    return [Message(role="system", content=_JUDGE_SYSTEM.format(rubric=judge.rubric)),
            Message(role="user", content="\n".join(lines))]


def _verdict(content: str, threshold: float) -> tuple[bool, float | None, str | None]:
    """A judge's answer read: passed, its score, its reason.

    Raises:
        ValueError: The answer is not the JSON asked for.
    """
    data = json.loads(content)
    if not isinstance(data, dict):
        raise ValueError(f"the judge answered {content[:80]!r}, not a JSON object")
    score = data.get("score")
    reason = data.get("reason") if isinstance(data.get("reason"), str) else None
    if isinstance(score, (int, float)) and not isinstance(score, bool) and 0 <= score <= 1:
        return float(score) >= threshold, float(score), reason
    verdict = str(data.get("verdict", "")).lower()
    if verdict not in ("pass", "fail"):
        raise ValueError(f"the judge answered {content[:80]!r}: no score in [0, 1] and no verdict pass or fail")
    return verdict == "pass", None, reason


class OutcomeRunner:
    """The spec's outcome checks, ready to run on traces.

    Args:
        check: The spec's ``outcome:`` (one check or group).
        base_dir: Where ``python`` checks' files resolve (the spec's folder).
        client: The LLM client of the spec's endpoint (judges); None: judges cannot run.
        default_model: A judge's model when its check names none.
        embedder: The analysis embedder's name (None: all-MiniLM-L6-v2) for ``similar``.
        cache_dir: The embedding cache folder.

    Raises:
        SpecError: A ``python`` check that does not import.
    """

    def __init__(self, check: CheckSpec, *, base_dir: Path | None = None, client: Any = None,
                 default_model: str | None = None, embedder: str | None = None,
                 cache_dir: str | None = None) -> None:
        self.check = check
        self.base_dir = base_dir
        self.client = client
        self.default_model = default_model
        self.embedder = embedder
        self.cache_dir = cache_dir
        self.judge_calls = 0
        """Judge requests the endpoint answered, as the wire counted them."""
        self._lock = threading.Lock()
        self._store: Any = None
        self._functions = {ref: self._load(ref) for ref in _python_refs(check)}

    def _load(self, ref: str) -> Callable[..., Any]:
        try:
            return load_pipeline(ref, self.base_dir)
        except PipelineError as exc:
            raise SpecError(None, None, "outcome", f"python check {ref!r}: "
                            + str(exc).removeprefix(f"pipeline {ref!r}: ")) from None

    def with_client(self, client: Any) -> OutcomeRunner:
        """This runner with its judges asking at ``client``'s endpoint."""
        self.client = client
        return self

    def evaluate(self, trace: Trace, *, sample_key: str | None = None, recorded: Outcome | None = None) -> Outcome:
        """The outcome of ``trace``; a judge whose question ``recorded`` holds with its
        answer is served that answer."""
        served = {r.name: r.judge for r in _flat(recorded.checks if recorded is not None else [])
                  if r.judge is not None}
        evaluators = Evaluators(
            similarity=self._similarity, python=self._python,
            judge=lambda check, name, t: self._judge(check, name, t, sample_key, served.get(name)),
        )
        return evaluate(self.check, trace, evaluators)

    # -- the evaluators --------------------------------------------------------------
    def _python(self, check: CheckSpec, trace: Trace) -> Any:
        fn = self._functions[str(check.python)]
        return fn(trace) if check.takes == "trace" else fn(trace.output, dict(trace.inputs))

    def _similarity(self, a: str, b: str) -> float:
        with self._lock:
            if self._store is None:
                from quiver._distance import EmbeddingStore, make_embedder

                self._store = EmbeddingStore(make_embedder(self.embedder), self.cache_dir)
            return 1.0 - float(self._store.distance(a, b))

    def _judge(self, check: CheckSpec, name: str, trace: Trace, sample_key: str | None,
               recorded: JudgeRecord | None) -> CheckResult:
        judge = check.judge
        assert judge is not None
        model = judge.model or self.default_model
        if not model:
            raise ValueError("the judge has no model: give judge.model or the spec's llm.model")
        messages = judge_messages(check, trace)
        if recorded is not None and recorded.model == model and recorded.messages == messages \
                and recorded.content is not None:
            content = recorded.content
        else:
            content = self._ask(model, messages, judge.temperature, derive_sample_key(sample_key or "",
                                                                                     f"outcome/{name}"))
        record = JudgeRecord(model=model, messages=messages, content=content)
        try:
            passed, score, reason = _verdict(content, check.pass_threshold())
        except ValueError as exc:
            return CheckResult(name=name, status="error", detail=str(exc), judge=record)
        return CheckResult(name=name, status="pass" if passed else "fail", score=score if score is not None
                           else float(passed), detail=None if passed else reason or "the judge said fail",
                           judge=record)

    def _ask(self, model: str, messages: list[Message], temperature: float, key: str) -> str:
        if self.client is None:
            raise RuntimeError("no LLM endpoint for the judge")
        scratch = TraceBuilder(trace_id="outcome", run_id="outcome", pipeline="outcome", input_id="outcome",
                               repeat=0, inputs={}, sample_key=key)
        token = current_builder.set(scratch)
        try:
            answer = self.client.chat(messages=[m.model_dump() for m in messages], model=model,
                                      temperature=temperature, response_format={"type": "json_object"},
                                      name="judge")
        finally:
            current_builder.reset(token)
            with self._lock:
                self.judge_calls += scratch.wire.llm_total
        return str(answer.content)


def _flat(checks: list[CheckResult]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for c in checks:
        out += [c, *_flat(c.checks or [])]
    return out


def _python_refs(check: CheckSpec) -> list[str]:
    refs = [check.python] if check.python else []
    for member in check.members:
        refs += _python_refs(member)
    return refs
