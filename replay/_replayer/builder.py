"""Frozen replay: re-running a pipeline on a recorded trace, one node perturbed.

The pipeline's own code runs again on the recorded trace's inputs under a
:class:`ReplayBuilder`. Every node call is matched to the recording when it opens: by
its call path, which fixes (node, occurrence) in program order; when the call at that
path has other inputs, by an unclaimed recorded call of the same node with the same
input hash (for pipelines whose order cannot be made deterministic). What happens to
the call then depends on where it lies relative to the *target* (the perturbed call):

* **upstream** (before the target in program order, or in a parallel branch that
  consumes nothing the replay produced live) with inputs hashing to the recorded ones:
  an ``llm``, ``retrieval`` or ``tool`` call whose dimension is frozen is *served*: its
  body does not run, the recorded output, response, retrieval set, tool step and
  decisions stand, and the calls recorded under it are copied. Other calls run their
  code, their LLM calls served from the recording while the model is frozen.
* **the target**: an output operator (override, flips, list and text edits) serves the
  recorded output transformed; an execution operator (prompt swap, parameter change)
  runs the body live with the change in force.
* **downstream** (after the target in program order, or consuming a value the replay
  produced live): the code runs and every LLM call goes to the endpoint with the
  replay's own sample key (QUIVER.md §13: downstream calls never reuse recorded
  responses, so a no-op perturbation measures downstream noise). Retrieval and tool
  calls with recorded inputs are still served while their dimension is frozen: the
  world outside the model is held fixed.
* an **ancestor** of the target (a call enclosing it) runs its code; its own LLM calls
  are served until the target opens and live after.

Dimensions (QUIVER.md §12): ``model`` (LLM responses), ``prompt`` (templates: with the
prompt unfrozen an LLM call is served only when its rendered prompt equals the
recorded one), ``retrieval`` and ``tools``. ``ReplayMode(frozen=...)`` unfreezes them
one at a time; ``live_nodes`` runs chosen nodes live.

**Replay divergence.** A call before the target that is missing, unexpected, or
reached with inputs that do not hash to the recorded ones is a replay divergence: the
call runs live (the replayed result is kept, as Temporal's replayer keeps it) and the
result reports it with a field diff. With every dimension frozen and no target (the
determinism check) every field of every call, and the trace's output, must equal the
recording; with a dimension unfrozen only inputs are compared, and only at calls whose
parents reproduced their recorded outputs (a difference downstream of an unfrozen
dimension is the point of unfreezing it). Timings, call ids and the trace's ids are not
compared.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from quiver._canonical import canonical_json
from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._trace import (
    PERTURBED_TAG,
    Divergence,
    NodeCall,
    Redactor,
    TargetReport,
    Trace,
    call_diff,
    call_names,
    trace_diff,
)
from quiver.perturbations import ExecutionChange, Operator, OperatorContext, OperatorError, TemplateRef
from quiver.replay._instrument import (
    CallRecord,
    Directive,
    Scope,
    Template,
    TraceBuilder,
    current_builder,
    get_template,
    load_template_file,
    template_overrides,
)
from quiver.replay._keys import operator_call_key, operator_seed
from quiver.replay._llm import LLMClient, llm, request_overrides, swapped_messages

from .landing import execution_landing
from .results import _KIND_DIMENSIONS, ReplayError, ReplayMode, Target

__all__ = ["ReplayBuilder", "Region", "recorded_regions", "template_from_ref"]

# --------------------------------------------------------------------------- paths


def _segments(path: str) -> list[str]:
    return path.split("/") if path else []


def _is_within(path: str, outer: str) -> bool:
    """``path`` lies strictly under ``outer``."""
    return path.startswith(outer + "/")


def _parallel(path: str, target: str) -> bool:
    """The two calls sit in different parallel branches of one fan-out."""
    for a, b in zip(_segments(path), _segments(target), strict=False):
        if a != b:
            return a.startswith("[") and b.startswith("[")
    return False


Region = Literal["upstream", "target", "inside", "ancestor", "downstream"]
"""Where a call lies relative to the target (see the module docstring)."""


def _place(path: str, target_path: str, *, is_target: bool, parent_live: bool, before: bool | None,
           target_opened: bool) -> Region:
    """The region of the call at ``path``: ``before`` says whether its recorded
    counterpart precedes the target in program order (None: it has none, and then it
    is downstream once the target has opened)."""
    if is_target:
        return "target"
    if _is_within(path, target_path):
        return "inside"
    if _is_within(target_path, path):
        return "ancestor"
    if parent_live:
        return "downstream"
    if before is None:
        return "downstream" if target_opened else "upstream"
    return "upstream" if before or _parallel(path, target_path) else "downstream"


def recorded_regions(baseline: Trace, target: Target) -> dict[str, Region]:
    """Call id -> region of every call of ``baseline``, as a replay perturbing ``target``
    places the calls it matches when it takes the recorded path (every call reached in
    order, with its recorded inputs and parents). It is what :class:`ReplayBuilder`
    decides, read off the recording, so a plan can say what a replay will run live
    before running it. The source call counts as upstream.

    Raises:
        ReplayError: ``target`` is not in the trace.
    """
    target_call = _find_target(baseline, target)
    index = {c.call_id: i for i, c in enumerate(baseline.calls)}
    out: dict[str, Region] = {}
    for call in baseline.calls:
        if call.kind == "source":
            out[call.call_id] = "upstream"
            continue
        out[call.call_id] = _place(
            call.call_path, target_call.call_path, is_target=call is target_call,
            parent_live=any(out.get(p) in ("target", "inside", "downstream") for p in call.parents),
            before=index[call.call_id] < index[target_call.call_id], target_opened=True,
        )
    return out


# --------------------------------------------------------------------------- builder


class ReplayBuilder(TraceBuilder):
    """A trace builder that matches calls to a recording and decides what each does."""

    def __init__(
        self,
        baseline: Trace,
        *,
        trace_id: str,
        run_id: str,
        sample_key: str,
        mode: ReplayMode,
        target: Target | None = None,
        operator: Operator | None = None,
        graph: PipelineGraph | None = None,
        client: LLMClient | None = None,
        base_dir: Path | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        super().__init__(
            trace_id=trace_id, run_id=run_id, pipeline=baseline.pipeline, input_id=baseline.input_id,
            repeat=baseline.repeat, inputs=baseline.inputs, sample_key=sample_key,
        )
        self.baseline = baseline
        if "http_tools" in baseline.tags:  # the HTTP requests its recording recorded as tools
            self.tags["http_tools"] = baseline.tags["http_tools"]
        self.mode = mode
        self.operator = operator
        self.graph = graph
        self.client = client
        self.base_dir = base_dir
        self.redactor = redactor
        self.served = 0
        self._by_path = {c.call_path: c for c in baseline.calls}
        self._by_id = {c.call_id: c for c in baseline.calls}
        self._index = {c.call_id: i for i, c in enumerate(baseline.calls)}
        self._claimed: dict[str, CallRecord] = {}
        self._live: set[int] = set()
        self._open_ancestors: list[CallRecord] = []
        self._target_call: NodeCall | None = None
        self._target_record: CallRecord | None = None
        self._change: tuple[ExecutionChange, dict[str, Template]] | None = None
        self.target_report: TargetReport | None = None
        self.divergences: list[Divergence] = []
        source = self._calls[0]
        recorded_source = baseline.calls[0] if baseline.calls and baseline.calls[0].kind == "source" else None
        if recorded_source is not None:
            self._claimed[recorded_source.call_id] = source
        if target is not None:
            self._target_call = _find_target(baseline, target)
            self.target_report = TargetReport(
                node=target.node, occurrence=target.occurrence, call_path=self._target_call.call_path,
                operator=operator.describe() if operator is not None else None,
                original=copy.deepcopy(self._target_call.output),
            )

    # -- opening ----------------------------------------------------------------------
    def open_call(self, node: str, kind: Any, scope: Scope, **kwargs: Any) -> CallRecord:
        record = super().open_call(node, kind, scope, **kwargs)
        with self._lock:
            recorded = self._match(record)
            record.replay = self._directive(record, recorded)
        return record

    def _match(self, record: CallRecord) -> NodeCall | None:
        at_path = self._by_path.get(record.call_path)
        if at_path is not None and (at_path.node != record.node or at_path.call_id in self._claimed):
            at_path = None
        if at_path is None or at_path.input_hash != record.input_hash:
            same_inputs = next(
                (
                    c for c in self.baseline.calls
                    if c.node == record.node and c.input_hash == record.input_hash and c.call_id not in self._claimed
                ),
                None,
            )
            at_path = same_inputs or at_path
        if at_path is not None:
            self._claimed[at_path.call_id] = record
        return at_path

    def _region(self, record: CallRecord, recorded: NodeCall | None) -> Region:
        target = self._target_call
        if target is None:
            return "upstream"
        return _place(
            recorded.call_path if recorded is not None else record.call_path, target.call_path,
            is_target=recorded is target, parent_live=any(id(p) in self._live for p in record.parents),
            before=self._index[recorded.call_id] < self._index[target.call_id] if recorded is not None else None,
            target_opened=self._target_record is not None,
        )

    def _directive(self, record: CallRecord, recorded: NodeCall | None) -> Directive:
        region = self._region(record, recorded)
        dims = _KIND_DIMENSIONS.get(record.kind, ())
        live_node = record.node in self.mode.live_nodes
        frozen = not live_node and all(d in self.mode.frozen for d in dims)
        same_inputs = recorded is not None and recorded.input_hash == record.input_hash
        llm_mode = _llm_mode(self.mode, live_node, same_inputs=True)
        if region == "upstream":
            if not same_inputs:
                return Directive("run", recorded, llm=_llm_mode(self.mode, live_node, same_inputs=False))
            resampled = self.mode.resample and record.kind == "llm"
            if (dims and frozen and not resampled) or record.node in self.mode.frozen_nodes:
                return Directive("serve", recorded, skip_body=True, llm=llm_mode)
            return Directive("run", recorded, llm=llm_mode)
        if region == "ancestor":
            self._open_ancestors.append(record)
            return Directive("run", recorded, llm="live" if self._target_record is not None else llm_mode)
        self._live.add(id(record))
        if region == "target":
            return self._target_directive(record, recorded)
        if same_inputs and record.kind in ("retrieval", "tool") and frozen:
            return Directive("serve", recorded, skip_body=True)
        return Directive("run", recorded, llm="live")

    def _target_directive(self, record: CallRecord, recorded: NodeCall | None) -> Directive:
        assert recorded is not None and self.target_report is not None
        self._target_record = record
        self.target_report.reached = True
        for ancestor in self._open_ancestors:
            if ancestor.replay is not None:
                ancestor.replay.llm = "live"
        if self.operator is None:
            return Directive("run", recorded, llm="live")
        if self.operator.mode == "output":
            return Directive("perturb", recorded, skip_body=True)
        change = self.operator.change(self._operator_context(recorded))
        templates = {tid: template_from_ref(tid, ref) for tid, ref in change.templates.items()}
        self._change = (change, templates)
        record.tags[PERTURBED_TAG] = self.operator.describe()  # as an output operator's target is marked
        return Directive("perturb", recorded, context=lambda: self._execution_change(change, templates), llm="live")

    # -- the target -------------------------------------------------------------------
    def _operator_context(self, recorded: NodeCall) -> OperatorContext:
        seed = operator_seed(self.sample_key or "")
        return OperatorContext(
            node=recorded.node,
            spec=self.graph.nodes.get(recorded.node) if self.graph is not None else None,
            output=copy.deepcopy(recorded.output),
            prompt_template=recorded.prompt.template_id if recorded.prompt is not None else None,
            logprobs=recorded.response.logprobs if recorded.response is not None else None,
            rng=random.Random(seed),
            chat=lambda messages, params: self._operator_chat(recorded, messages, params),
            base_dir=self.base_dir,
        )

    def _operator_chat(self, recorded: NodeCall, messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        """An LLM call an operator makes (a paraphrase): outside the trace, counted.

        It runs in a scratch trace whose sample key is derived from the replay's, so a
        repeated replay gets the same paraphrase and another repeat a new one.
        """
        client = self.client or llm()
        request = dict(params)
        if not request.get("model") and recorded.model is not None:
            request["model"] = recorded.model.name
        scratch = TraceBuilder(
            trace_id=f"{self.trace_id}/operator", run_id=self.run_id, pipeline=self.pipeline,
            input_id=self.input_id, repeat=self.repeat, inputs={},
            sample_key=operator_call_key(self.sample_key or "", recorded.call_path),
        )

        def call() -> str:
            current_builder.set(scratch)
            return client.chat(messages=messages, name="operator", **request).content

        content = contextvars.Context().run(call)
        self.wire.add_llm(f"{recorded.node} (operator)", scratch.wire.llm_total)
        return content

    @contextlib.contextmanager
    def _execution_change(self, change: ExecutionChange, templates: dict[str, Template]) -> Iterator[None]:
        with template_overrides(templates), request_overrides(change.params), swapped_messages(change.messages):
            yield

    def _operated(self, recorded: NodeCall) -> Any:
        """The target's recorded output with the replay's output operator applied (the
        recording's, not applied, when the operator cannot apply to it), the target's
        report updated."""
        assert self.operator is not None and self.target_report is not None
        context = self._operator_context(recorded)
        try:
            output = self.operator.apply(copy.deepcopy(recorded.output), context)
        except OperatorError as exc:  # it cannot apply to this output: served as recorded, not applied
            self.target_report.landed, self.target_report.not_landed = False, str(exc)
            return copy.deepcopy(recorded.output)
        self.target_report.landed = True
        if self.operator.binary:
            self.target_report.noop = self.operator.is_noop(recorded.output, output, context)
        return output

    def perturbed_output(self, record: CallRecord) -> Any:
        """The output an output operator gives the target ``record``, for a call that
        serves it through its body instead of skipping it (an agent's turn, whose
        framework reads the model's answer, not the node's output: the integration
        serves the recorded answer edited to say it, :attr:`Directive.answer_edit`).
        The call stays open; the integration closes it with what its body returned and
        says whether that is the perturbed output (:meth:`not_landed`)."""
        assert self.operator is not None
        output = self._operated(record.replay.recorded)
        record.tags[PERTURBED_TAG] = self.operator.describe()
        return output

    def not_landed(self, reason: str) -> None:
        """The perturbation reached its target but not what it changes (``reason``)."""
        if self.target_report is not None:
            self.target_report.landed, self.target_report.not_landed = False, reason

    def serve_call(self, record: CallRecord) -> Any:
        """Close a call from the recording without running its body; return its output."""
        directive = record.replay
        recorded: NodeCall = directive.recorded
        output = self._operated(recorded) if directive.action == "perturb" else copy.deepcopy(recorded.output)
        record.decision = copy.deepcopy(recorded.decision)
        record.model, record.prompt, record.response = recorded.model, recorded.prompt, recorded.response
        record.retrieval, record.tool = recorded.retrieval, recorded.tool
        record.tags = copy.deepcopy(recorded.tags)
        if directive.action == "perturb" and self.operator is not None:
            record.tags[PERTURBED_TAG] = self.operator.describe()
        self._copy_subtree(record, recorded)
        self.close_call(record, output)
        with self._lock:
            self.served += 1
        return copy.deepcopy(record.output)

    def _copy_subtree(self, record: CallRecord, recorded: NodeCall) -> None:
        """Copy the calls recorded under a served call (its body did not make them)."""
        inner = [c for c in self.baseline.calls if _is_within(c.call_path, recorded.call_path)]
        for i, call in enumerate(inner):
            key = (*record.key, i)
            path = record.call_path + call.call_path[len(recorded.call_path):]
            with self._lock:
                parents = [self._claimed[p] for p in call.parents if p in self._claimed]
            copied = CallRecord(
                node=call.node, kind=call.kind, key=key, call_path=path, iteration=call.iteration,
                loop=call.loop, input_hash=call.input_hash, parents=parents, started_at=self.now(),
                scope=Scope(key, path), decision=copy.deepcopy(call.decision), model=call.model,
                prompt=call.prompt, response=call.response, retrieval=call.retrieval, tool=call.tool,
                tags=copy.deepcopy(call.tags), error=call.error,
            )
            copied.replay = Directive("serve", call, skip_body=True)
            with self._lock:
                self._calls.append(copied)
                self._claimed[call.call_id] = copied
                self.served += 1  # served too: its recorded output stands, nothing ran it
                if id(record) in self._live:
                    self._live.add(id(copied))
            self.close_call(copied, copy.deepcopy(call.output))

    def close_call(self, record: CallRecord, output: Any, error: BaseException | None = None) -> None:
        super().close_call(record, output, error)
        if record is self._target_record and self.target_report is not None:
            self.target_report.perturbed = copy.deepcopy(record.output)
        if record in self._open_ancestors:
            with self._lock:
                self._open_ancestors.remove(record)

    # -- comparing --------------------------------------------------------------------
    def finish(self, output: Any = None, error: BaseException | None = None) -> Trace:
        trace = super().finish(output, error)
        self._check_landing(trace)
        trace = self._as_written(trace)
        report = self.target_report
        if self.redactor is not None and report is not None:
            report.original, report.perturbed = self.redactor.data([report.original, report.perturbed])
        self.divergences = self._compare(trace)
        return trace

    def _check_landing(self, trace: Trace) -> None:
        """Whether an execution change reached the target's requests
        (:func:`~quiver.replay._replayer.landing.execution_landing`)."""
        report, record = self.target_report, self._target_record
        if self._change is None or report is None or record is None:
            return
        change, templates = self._change
        reason = execution_landing(trace, record.call_path, change, templates)
        report.landed, report.not_landed = reason is None, reason

    def _as_written(self, trace: Trace) -> Trace:
        """The replayed trace as the run's redactor writes it. The recording was written
        through the same redactor, so a secret the pipeline computes again (an API key in
        a tool's arguments) is compared, and paired, in the form it was recorded in."""
        if self.redactor is None:
            return trace
        data = trace.model_dump(mode="json")
        redacted, _ = self.redactor.encode(data)
        return trace if redacted is data else Trace.model_validate(redacted)

    def _compare(self, trace: Trace) -> list[Divergence]:
        """The replay divergences, in program order (QUIVER.md §12)."""
        target = self._target_call
        replayed_path = {id(r): r.call_path for r in self._calls}
        by_path = {c.call_path: c for c in trace.calls}
        matched_paths = {replayed_path[id(r)] for r in self._claimed.values()}
        alias = {replayed_path[id(r)]: self._by_id[cid] for cid, r in self._claimed.items()}
        calls_by_id = {c.call_id: c for c in trace.calls}
        strict = self.mode.all_frozen
        found: list[tuple[int, Divergence]] = []
        names = (call_names(self.baseline), call_names(trace, alias))

        def in_scope(call: NodeCall) -> bool:
            if target is None:
                return True
            return self._index[call.call_id] < self._index[target.call_id] and not _is_within(
                target.call_path, call.call_path
            )

        for i, call in enumerate(self.baseline.calls):
            if not in_scope(call):
                continue
            record = self._claimed.get(call.call_id)
            if record is None:
                found.append((i, Divergence("missing", call.node, call.occurrence, call.call_path)))
                continue
            replayed = by_path[replayed_path[id(record)]]
            if replayed.input_hash != call.input_hash and _parents_reproduced(replayed, calls_by_id, alias):
                found.append((i, Divergence(
                    "inputs", call.node, call.occurrence, call.call_path,
                    call_diff(call, self.baseline, replayed, trace, alias, names=names),
                )))
            elif strict:
                diff = call_diff(call, self.baseline, replayed, trace, alias, names=names)
                if diff:
                    reason: Literal["inputs", "fields"] = (
                        "inputs" if replayed.input_hash != call.input_hash else "fields"
                    )
                    found.append((i, Divergence(reason, call.node, call.occurrence, call.call_path, diff)))
        target_key = self._target_record.key if self._target_record is not None else None
        for position, r in enumerate(sorted(self._calls, key=lambda r: r.key)):
            if r.call_path in matched_paths or r.kind == "source":
                continue
            if target is not None and (
                target_key is None or r.key > target_key or _parallel(r.call_path, target.call_path)
            ):
                continue
            call = by_path[r.call_path]
            found.append((position, Divergence("unexpected", call.node, call.occurrence, call.call_path)))
        if target is not None and self._target_record is None:
            missing = Divergence("missing", target.node, target.occurrence, target.call_path)
            found.append((self._index[target.call_id], missing))
        if target is None and strict:
            diff = trace_diff(self.baseline, trace)
            if diff:
                found.append((len(self.baseline.calls), Divergence("trace", "(trace)", None, "", diff)))
        found.sort(key=lambda item: item[0])
        return [d for _, d in found]


def _llm_mode(mode: ReplayMode, live_node: bool, *, same_inputs: bool) -> str:
    """What the LLM calls of a call before the target do (``Directive.llm``): ``serve``
    the recorded response, ``serve_if_same`` when the request equals the recorded one,
    go ``live`` with today's request, or, under ``mode.resample``, go live with the
    recorded request (``resend``), the recorded model and today's prompt
    (``resend_model``) or the recorded messages and today's model (``resend_prompt``)."""
    model = not live_node and "model" in mode.frozen
    prompt = not live_node and same_inputs and "prompt" in mode.frozen
    if not mode.resample:
        return "live" if not same_inputs or not model else "serve" if prompt else "serve_if_same"
    if model:
        return "resend" if prompt else "resend_model"
    return "resend_prompt" if prompt else "live"


def _parents_reproduced(replayed: NodeCall, calls: dict[str, NodeCall], alias: dict[str, NodeCall]) -> bool:
    """Every parent of a replayed call gave the output of the recorded call it was
    matched to (``alias``: replayed call path -> recorded call)."""
    for pid in replayed.parents:
        recorded = alias.get(calls[pid].call_path)
        if recorded is None or canonical_json(recorded.output) != canonical_json(calls[pid].output):
            return False
    return True


def _find_target(trace: Trace, target: Target) -> NodeCall:
    for call in trace.calls:
        if call.node == target.node and call.occurrence == target.occurrence:
            return call
    ran = sorted({c.node for c in trace.calls if c.kind != "source"})
    count = sum(c.node == target.node for c in trace.calls)
    raise ReplayError(
        f"trace {trace.trace_id} has no call {target.node}#{target.occurrence} to perturb: "
        + (f"{target.node} ran {count} time(s)" if count else f"the nodes that ran are {', '.join(ran) or 'none'}")
    )


def template_from_ref(template_id: str, ref: TemplateRef) -> Template:
    """The template that stands in for ``template_id``: the file's, or the registered one's."""
    try:
        messages = load_template_file(ref.path) if ref.path is not None else get_template(ref.ref).messages
    except QuiverError as exc:
        raise ReplayError(f"replacement {ref.ref!r} for template {template_id!r}: {exc}") from None
    return Template(template_id, messages)
