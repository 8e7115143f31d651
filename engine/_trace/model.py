"""The trace format, version 1: a public contract.

One :class:`Trace` is one run of a pipeline on one input. It holds the ordered
:class:`NodeCall` records of every node that ran, each with what the replay contract
(QUIVER.md section 12) needs to re-execute it exactly: the model and its sampling
parameters, the prompt template and the assembled messages, the retrieval set, the
tool step, the output and the branch decisions taken there.

On disk a corpus is JSON Lines, one trace a line (``.gz`` accepted); see
:mod:`quiver._trace`. ``quiver schema trace`` prints the JSON Schema of this model,
for other tools and importers that write traces.

Conventions of the format:

* ``occurrence`` numbers the calls of one node within a trace, from 0, in program
  order (depth-first over the call tree), independent of thread or task scheduling.
* ``call_path`` locates a call under its enclosing calls, ``planner#2/search#0``: each
  segment is ``node#k`` with ``k`` counting that node's calls within the enclosing
  call; ``[i]`` segments mark parallel branches opened with ``quiver.bind`` or
  ``quiver.gather``.
* ``iteration`` is the 0-based iteration of the innermost enclosing loop, ``loop`` its
  name; both are ``null`` outside loops.
* ``started_at`` and ``ended_at`` are seconds since the trace started.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SCHEMA_VERSION",
    "CallKind",
    "Message",
    "ModelInfo",
    "PromptInfo",
    "LLMResponse",
    "RetrievalDoc",
    "ToolStep",
    "CallError",
    "NodeCall",
    "CheckResult",
    "JudgeRecord",
    "Outcome",
    "OutcomeStatus",
    "Trace",
    "trace_json_schema",
    "call_graph_problems",
    "printable",
]

SCHEMA_VERSION: Literal[1] = 1
"""The trace format version this engine writes and reads."""

CallKind = Literal["llm", "retrieval", "tool", "transform", "router", "source"]
"""What a node call does: an LLM call, a retrieval, a tool step, a pure transform, a
routing decision, or an external input."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Message(_Model):
    """One chat message as sent to the model."""

    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str
    """The message text, verbatim."""


class ModelInfo(_Model):
    """The model that served an LLM call and its sampling parameters."""

    name: str
    """The model name as requested (``gpt-4o-mini``)."""
    version: str | None = None
    """The version the endpoint reported serving (its ``model`` or fingerprint)."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Sampling parameters: temperature, top_p, seed, max_tokens, response_format."""


class PromptInfo(_Model):
    """The prompt of an LLM call: template identity and the assembled messages."""

    template_id: str | None = None
    """The id the template was registered under with ``quiver.template``."""
    template_hash: str | None = None
    """``sha256:`` of the template's source text (variables not filled in)."""
    assembled: list[Message] = Field(default_factory=list)
    """The messages exactly as sent."""
    fragments: list[str] = Field(default_factory=list)
    """``sha256:`` hashes of the template source and of each filled-in variable."""


class LLMResponse(_Model):
    """What the endpoint answered to an LLM call."""

    content: str
    """The raw text of the first choice."""
    finish_reason: str | None = None
    """``stop``, ``length``, ..."""
    usage: dict[str, int] = Field(default_factory=dict)
    """Token counts: prompt_tokens, completion_tokens, total_tokens."""
    logprobs: list[dict[str, Any]] | None = None
    """Per-token logprobs with their top alternatives, when requested."""
    attempts: int = 1
    """How many HTTP attempts the call took (1 = no retry)."""


class RetrievalDoc(_Model):
    """One retrieved document."""

    doc_id: str
    """The document's id in its store."""
    content_hash: str
    """``sha256:`` of the document text."""
    score: float | None = None
    """The retriever's score, when it gives one."""
    rank: int
    """0-based position in the retrieved list."""


class ToolStep(_Model):
    """One tool invocation."""

    name: str
    """The tool's name."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The arguments it was called with."""
    response: Any = None
    """What it returned."""
    response_hash: str
    """``sha256:`` of the canonical JSON of the response."""


class CallError(_Model):
    """An exception raised inside a node call or a trace."""

    type: str
    """The exception class name."""
    message: str
    """The exception message."""


class NodeCall(_Model):
    """One call of one node within a trace."""

    call_id: str
    """Unique within the trace (``c0``, ``c1``, ... in program order)."""
    node: str
    """The node name."""
    occurrence: int = Field(ge=0)
    """0-based count of this node's calls within the trace, in program order."""
    iteration: int | None = Field(default=None, ge=0)
    """0-based iteration of the innermost enclosing loop, ``null`` outside loops."""
    loop: str | None = None
    """Name of the innermost enclosing loop, ``null`` outside loops."""
    call_path: str
    """Location under the enclosing calls, ``planner#2/search#0``."""
    kind: CallKind
    """llm, retrieval, tool, transform, router or source."""
    parents: list[str] = Field(default_factory=list)
    """call_ids of the calls whose outputs this call consumed."""
    input_hash: str | None = None
    """``sha256:`` of the canonical JSON of the call's inputs."""
    output: Any = None
    """The call's output as JSON."""
    decision: dict[str, Any] = Field(default_factory=dict)
    """Branch arms and controller actions taken at this call, by gate name."""
    model: ModelInfo | None = None
    """For LLM calls: the model and its parameters."""
    prompt: PromptInfo | None = None
    """For LLM calls: the template and the assembled messages."""
    response: LLMResponse | None = None
    """For LLM calls: the raw response, usage and logprobs."""
    retrieval: list[RetrievalDoc] | None = None
    """For retrieval calls: the retrieved set."""
    tool: ToolStep | None = None
    """For tool calls: the tool step."""
    tags: dict[str, Any] = Field(default_factory=dict)
    """Free-form annotations (importers keep unmapped attributes here)."""
    started_at: float = 0.0
    """Seconds since the trace started."""
    ended_at: float = 0.0
    """Seconds since the trace started."""
    error: CallError | None = None
    """The exception the call raised, if any."""


OutcomeStatus = Literal["pass", "fail", "error"]
"""A check's or a trace's verdict: ``error`` when a check could not be evaluated (it
raised, or its judge's answer did not read): never a pass."""


class JudgeRecord(_Model):
    """An LLM judge's request and answer, recorded so that a replay whose judged output
    is the recorded one is served the recorded verdict instead of asking again."""

    model: str
    """The judge's model."""
    messages: list[Message]
    """The request's messages (the rubric and what was judged)."""
    content: str | None = None
    """The judge's answer, as it came."""


class CheckResult(_Model):
    """One outcome check on one trace."""

    name: str
    """The check's name (the spec's ``name``, else its kind and place)."""
    status: OutcomeStatus
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    """The check's score in [0, 1]: 1 or 0 for a check that passes or fails outright, the
    score a Python check or a judge gave; null for an error."""
    detail: str | None = None
    """Why it failed or could not be evaluated, in one line."""
    judge: JudgeRecord | None = Field(default=None, exclude_if=lambda v: v is None)
    """For an LLM judge: its request and answer."""
    checks: list[CheckResult] | None = Field(default=None, exclude_if=lambda v: v is None)
    """For an ``all`` or ``any`` group: its checks."""


class Outcome(_Model):
    """Whether a trace's answer is right, by the spec's outcome checks (an additive field
    of the format: traces recorded without checks have none)."""

    status: OutcomeStatus
    """``pass``, ``fail``, or ``error`` (a check raised or could not be read; counted apart,
    never a pass)."""
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    """The mean score of the top-level checks that have one, in [0, 1]."""
    checks: list[CheckResult] = Field(default_factory=list)
    """Each top-level check's result (an ``all``/``any`` group holds its own)."""
    source: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """Where an imported outcome came from (``langfuse score 'accuracy'``, ``tau-bench
    reward``); null for the spec's checks."""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def failed_checks(self) -> list[str]:
        """The names of the checks that failed (nested ones included)."""
        return [c.name for c in _flat(self.checks) if c.status == "fail" and not c.checks]

    def error_checks(self) -> list[str]:
        """The names of the checks that could not be evaluated."""
        return [c.name for c in _flat(self.checks) if c.status == "error" and not c.checks]


def _flat(checks: list[CheckResult]) -> list[CheckResult]:
    out: list[CheckResult] = []
    for c in checks:
        out.append(c)
        out += _flat(c.checks or [])
    return out


class Trace(_Model):
    """One run of a pipeline on one input."""

    schema_version: Literal[1] = SCHEMA_VERSION
    """The trace format version (1)."""
    trace_id: str
    """Unique id of this trace."""
    run_id: str
    """Id of the recording run or campaign that produced it."""
    pipeline: str
    """The pipeline's name."""
    input_id: str
    """The same-input group key: traces with equal input_id ran on the same input."""
    repeat: int = Field(default=0, ge=0)
    """0-based repeat index within the input group."""
    inputs: dict[str, Any] = Field(default_factory=dict)
    """The pipeline's inputs."""
    calls: list[NodeCall] = Field(default_factory=list)
    """Node calls in program order."""
    output: Any = None
    """The pipeline's final output."""
    status: Literal["ok", "failed"] = "ok"
    """``failed`` when the pipeline raised; its calls up to the failure are kept."""
    error: CallError | None = None
    """The exception that failed the trace."""
    tags: dict[str, Any] = Field(default_factory=dict)
    """Free-form annotations: retry counts, loop bounds, importer notes."""
    outcome: Outcome | None = Field(default=None, exclude_if=lambda v: v is None)
    """Whether the answer is right, by the spec's outcome checks (or the source's own
    verdict, for an imported trace); absent when no check was given."""


def trace_json_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of the v1 trace format."""
    schema = Trace.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://quiver-engine.dev/schema/trace-v1.json",
        **schema,
    }


def printable(value: str, limit: int = 60) -> str:
    """``value`` for a one-line message: control and line-breaking characters escaped,
    cut at ``limit`` characters."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in value[:limit])
    return shown + ("..." if len(value) > limit else "")


def call_graph_problems(trace: Trace) -> list[tuple[str, str]]:
    """What makes the calls of ``trace`` not a graph, as ``(field, reason)`` pairs in
    the order of the calls: a call id used twice, a parent that is the call itself or
    no call of the trace, and parents that form a cycle. Empty for a sound trace.

    The schema checks each call on its own; this checks them together. Every trace
    the recorder writes is sound: a call's parents are calls that ended before it began.
    """
    problems: list[tuple[str, str]] = []
    index: dict[str, int] = {}
    for i, call in enumerate(trace.calls):
        if call.call_id in index:
            problems.append((f"calls[{i}].call_id", f"duplicate of calls[{index[call.call_id]}] "
                             f"('{printable(call.call_id)}'); call ids are unique within a trace"))
        else:
            index[call.call_id] = i
    edges: dict[int, list[int]] = {}
    forward = False  # a parent later in the list: only then can there be a cycle
    for i, call in enumerate(trace.calls):
        for j, parent in enumerate(call.parents):
            if parent == call.call_id:
                problems.append((f"calls[{i}].parents[{j}]", f"call '{printable(parent)}' is its own parent"))
            elif parent not in index:
                problems.append((f"calls[{i}].parents[{j}]", f"unknown call id '{printable(parent)}'; "
                                 "a parent is the call_id of another call of the trace"))
            elif index[call.call_id] == i:
                edges.setdefault(i, []).append(index[parent])
                forward = forward or index[parent] > i
    cycle = _first_cycle(edges, len(trace.calls)) if forward else []
    if cycle:
        path = " -> ".join(printable(trace.calls[k].call_id, 20) for k in cycle[:12])
        if len(cycle) > 12:
            path += f" -> ... ({len(cycle) - 1} calls)"
        problems.append((f"calls[{cycle[0]}]", f"parent cycle {path}; a call's parents must have ended before it"))
    return problems


def _first_cycle(edges: dict[int, list[int]], n: int) -> list[int]:
    """The first cycle of ``edges`` (call -> its parents), as call indexes from its
    lowest index round to itself again; empty when there is none. Iterative: a trace
    may have any number of calls."""
    state = [0] * n  # 0 unseen, 1 on the current path, 2 done
    for start in range(n):
        if state[start]:
            continue
        path = [start]
        state[start] = 1
        pending = [iter(edges.get(start, ()))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                pending.pop()
            elif state[nxt] == 1:
                loop = path[path.index(nxt):]
                low = loop.index(min(loop))
                loop = loop[low:] + loop[:low]
                return [*loop, loop[0]]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                pending.append(iter(edges.get(nxt, ())))
    return []
