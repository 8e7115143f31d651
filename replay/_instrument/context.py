"""The recording state of one trace, carried in context variables.

A :class:`TraceBuilder` collects the node calls of one trace while the pipeline runs.
Context variables make it follow the pipeline into asyncio tasks (which copy the
context when they are created) and into threads started through ``quiver.bind`` or
``quiver.ThreadPoolExecutor``.

Identity does not depend on scheduling. Every call and every parallel branch takes a
sequence number from its enclosing *scope* (the enclosing call, a branch, or the trace
root) at the moment it is created, which is program order: a decorated function takes
it when it is called, before its body (and before the first ``await`` of an async
node) runs; a branch takes it when it is bound. A call's sort key is the tuple of these
numbers from the root, so sorting by it gives the depth-first program order whatever
the interleaving was. ``occurrence`` and ``call_id`` are assigned from that order when
the trace is finished.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quiver._canonical import content_hash, to_jsonable

from .wire import Wire

if TYPE_CHECKING:  # the trace model loads when a trace is finished
    from quiver._trace import (
        CallError,
        CallKind,
        LLMResponse,
        ModelInfo,
        NodeCall,
        PromptInfo,
        RetrievalDoc,
        ToolStep,
        Trace,
    )

__all__ = [
    "Scope",
    "CallRecord",
    "Directive",
    "TraceBuilder",
    "current_builder",
    "current_scope",
    "current_call",
    "current_loop",
    "active_recordings",
    "capture_enabled",
    "on_recording",
]

INPUT_NODE = "input"
"""Name of the source call that carries a trace's inputs (call ``c0``)."""


class Scope:
    """Hands out sequence numbers and call-path segments in program order."""

    def __init__(self, key: tuple[int, ...], path: str) -> None:
        self.key = key
        self.path = path
        self._lock = threading.Lock()
        self._seq = 0
        self._node_counts: Counter[str] = Counter()
        self._branches = 0

    def allocate(self, node: str) -> tuple[tuple[int, ...], str]:
        """Reserve the next slot for a call of ``node``: (sort key, call path)."""
        with self._lock:
            key = (*self.key, self._seq)
            self._seq += 1
            k = self._node_counts[node]
            self._node_counts[node] += 1
        segment = f"{node}#{k}"
        return key, f"{self.path}/{segment}" if self.path else segment

    def branch(self) -> Scope:
        """Open a parallel branch: a child scope whose slot is taken now."""
        with self._lock:
            key = (*self.key, self._seq)
            self._seq += 1
            i = self._branches
            self._branches += 1
        segment = f"[{i}]"
        return Scope(key, f"{self.path}/{segment}" if self.path else segment)


@dataclass
class Directive:
    """What a replay does with one node call, decided when the call opens.

    Attributes:
        action: ``serve`` (the recorded call stands in for it), ``perturb`` (the
            replay's target) or ``run`` (the body runs).
        recorded: The recorded call it was matched to, if any.
        skip_body: The body does not run: the builder's ``serve_call`` supplies the
            output (the recorded one, or the perturbed one).
        context: For a target perturbed in its execution: entered around the body.
        llm: What LLM calls made on this call's record do: ``serve`` the recorded
            response, ``serve_if_same`` only when the request equals the recorded one,
            or go ``live``.
        answer_edit: For a target whose output operator is served through its body (an
            agent's turn, :mod:`quiver.integrations.openai_agents`): turns the recorded
            answer (a :class:`quiver._wire.Answer`) into the one served, so that what the
            framework reads from it is the perturbed output.
    """

    action: str
    recorded: Any = None
    skip_body: bool = False
    context: Any = None
    llm: str = "live"
    answer_edit: Any = None


@dataclass(eq=False)
class CallRecord:
    """A node call being recorded; becomes a :class:`~quiver.NodeCall` at the end."""

    node: str
    kind: CallKind
    key: tuple[int, ...]
    call_path: str
    iteration: int | None
    loop: str | None
    input_hash: str | None
    parents: list[CallRecord]
    started_at: float
    scope: Scope
    output: Any = None
    ended_at: float | None = None
    decision: dict[str, Any] = field(default_factory=dict)
    model: ModelInfo | None = None
    prompt: PromptInfo | None = None
    response: LLMResponse | None = None
    retrieval: list[RetrievalDoc] | None = None
    tool: ToolStep | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    error: CallError | None = None
    replay: Any = None
    """What a replay does with this call (a ``quiver.replay.Directive``); None when recording."""


_TRIVIAL = (type(None), bool, int, float)


def _flow_hashes(value: Any, *, items: bool = False) -> list[str]:
    """Hashes under which a value can be recognised as flowing from one call to another.

    The value itself and, for a mapping, each of its top-level values; with ``items``
    (the consuming side), also each element of a list, so that a list of gathered
    outputs links to every call that produced one.
    """
    parts: list[Any] = []
    if isinstance(value, dict):
        parts += list(value.values())
    if items and isinstance(value, list):
        parts += value
    out = [content_hash(value)] if _identifying(value, whole=True) else []
    out += [content_hash(part) for part in parts if _identifying(part, whole=False)]
    return out


_MIN_PART_CHARS = 16


def _identifying(value: Any, *, whole: bool) -> bool:
    """Whether a value is specific enough to say where it came from on its own.

    Scalars and empty containers never are. A field or list element that is a short
    string (a category label such as ``"account"``) is not either: it would link any
    call that happens to take the same word. Short strings count only by unique
    provenance (:func:`_short_parts`, ``TraceBuilder._unique_producer``).
    """
    if isinstance(value, _TRIVIAL) or value in ("", [], {}):
        return False
    return whole or not isinstance(value, str) or len(value) >= _MIN_PART_CHARS


def _is_short(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) < _MIN_PART_CHARS


def _short_parts(value: Any, *, consumer: bool = False) -> list[str]:
    """The short strings of a value that unique provenance can link.

    Consumer side (one argument): the argument itself, and its top-level field values
    or list elements. Producer side (an output): every short string in it, at any depth
    of its objects and lists, so that a label a call passes on inside a structure (a
    list of ids in a plan) makes the label ambiguous rather than credited to whichever
    earlier call output it at the top. Scalars (numbers, booleans) never count, short
    or not: ``True`` or ``1`` are the outputs of too many calls to say where a value
    came from even once.
    """
    if consumer:
        parts: list[Any] = [value]
        if isinstance(value, dict):
            parts += list(value.values())
        if isinstance(value, list):
            parts += value
        return list(dict.fromkeys(p for p in parts if _is_short(p)))
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
        elif _is_short(item):
            found[item] = None
    return list(found)


class TraceBuilder:
    """Collects the calls of one trace; thread-safe."""

    def __init__(
        self,
        *,
        trace_id: str,
        run_id: str,
        pipeline: str,
        input_id: str,
        repeat: int,
        inputs: dict[str, Any],
        sample_key: str | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.run_id = run_id
        self.pipeline = pipeline
        self.input_id = input_id
        self.repeat = repeat
        self.inputs = to_jsonable(inputs)
        self.sample_key = sample_key
        self.root = Scope((), "")
        self.tags: dict[str, Any] = {}
        self.retries: Counter[str] = Counter()
        self.wire = Wire()
        """Every HTTP request the trace sent, counted where it left the process."""
        self.llm_calls: Counter[str] = self.wire.llm
        """LLM requests the endpoint answered (not served from a recording nor from the
        response cache), by node, as the wire counted them."""
        self.llm_tokens = 0
        """Tokens (prompt + completion) of the engine's and the captured LLM calls the
        endpoint answered, as it reported them."""
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._calls: list[CallRecord] = []
        self._by_output: dict[str, list[CallRecord]] = {}
        self._by_short: dict[str, list[CallRecord]] = {}
        self._last_of_node: dict[str, CallRecord] = {}
        source = CallRecord(
            node=INPUT_NODE, kind="source", key=(-1,), call_path=f"{INPUT_NODE}#0",
            iteration=None, loop=None, input_hash=None, parents=[], started_at=0.0,
            scope=self.root, output=self.inputs, ended_at=0.0,
        )
        self._calls.append(source)
        self._index_output(source)

    def now(self) -> float:
        """Seconds since the trace started."""
        return round(time.perf_counter() - self._t0, 6)

    def open_call(
        self,
        node: str,
        kind: CallKind,
        scope: Scope,
        *,
        inputs: Any,
        declared_parents: tuple[str, ...] = (),
        loop: tuple[str, int] | None = None,
        parents: list[CallRecord] | None = None,
    ) -> CallRecord:
        """Register a call at its entry (its slot in program order is taken here).

        ``parents``, when given, are the calls this one consumes as the caller knows
        them (a framework integration reading its own data flow): they replace the
        parents inferred from ``inputs``; ``declared_parents`` are added to them.
        """
        key, path = scope.allocate(node)
        inputs = to_jsonable(inputs)
        if parents is None:
            parents = self._infer_parents(inputs, declared_parents)
        else:
            parents = self._exact_parents(parents, declared_parents)
        record = CallRecord(
            node=node, kind=kind, key=key, call_path=path,
            iteration=loop[1] if loop else None, loop=loop[0] if loop else None,
            input_hash=content_hash(inputs), parents=parents, started_at=self.now(),
            scope=Scope(key, path),
        )
        with self._lock:
            self._calls.append(record)
        return record

    def close_call(self, record: CallRecord, output: Any, error: BaseException | None = None) -> None:
        """Record a call's output (or error) at its exit."""
        record.output = to_jsonable(output)
        record.ended_at = self.now()
        if error is not None:
            from quiver._trace import CallError

            record.error = CallError(type=type(error).__name__, message=str(error))
            return
        self._index_output(record)

    def note_loop(self, name: str, k_max: int | None, iterations: int) -> None:
        """Remember how many iterations a loop ran (kept in the trace's tags)."""
        with self._lock:
            entry = self.tags.setdefault("loops", {}).setdefault(name, {"k_max": k_max, "iterations": []})
            entry["iterations"].append(iterations)

    def _index_output(self, record: CallRecord) -> None:
        with self._lock:
            for h in _flow_hashes(record.output):
                self._by_output.setdefault(h, []).append(record)
            for part in _short_parts(record.output):  # the output itself included, at depth 0
                self._by_short.setdefault(content_hash(part), []).append(record)
            last = self._last_of_node.get(record.node)
            if last is None or record.key > last.key:
                self._last_of_node[record.node] = record

    def _infer_parents(self, inputs: Any, declared: tuple[str, ...]) -> list[CallRecord]:
        found: list[CallRecord] = []
        with self._lock:
            for name in declared:
                if name in self._last_of_node:
                    found.append(self._last_of_node[name])
            values = inputs.values() if isinstance(inputs, dict) else [inputs]
            for h in [h for v in values for h in _flow_hashes(v, items=True)]:
                candidates = self._by_output.get(h)
                if candidates:
                    # the latest producer in program order: a value passed through an
                    # identity step, or produced again by a later loop iteration, comes
                    # from the most recent call that output it
                    found.append(max(candidates, key=lambda r: r.key))
            for part in [p for v in values for p in _short_parts(v, consumer=True)]:
                producer = self._unique_producer(content_hash(part))
                if producer is not None:
                    found.append(producer)
        unique: dict[int, CallRecord] = {id(r): r for r in found}
        return sorted(unique.values(), key=lambda r: r.key)

    def _exact_parents(self, given: list[CallRecord], declared: tuple[str, ...]) -> list[CallRecord]:
        with self._lock:
            found = list(given) + [self._last_of_node[n] for n in declared if n in self._last_of_node]
        unique: dict[int, CallRecord] = {id(r): r for r in found}
        return sorted(unique.values(), key=lambda r: r.key)

    def _unique_producer(self, h: str) -> CallRecord | None:
        """The call a short string comes from, when its provenance is unique.

        The earlier calls whose output is the string or holds it (at any depth) must
        all be calls of one node (then the latest of them, as for other
        values: a loop repeats a label); two nodes that both output it make it no
        evidence at all. Called with the lock held.
        """
        candidates = self._by_output.get(h, []) + self._by_short.get(h, [])
        if not candidates or len({r.node for r in candidates}) > 1:
            return None
        return max(candidates, key=lambda r: r.key)

    def finish(self, output: Any = None, error: BaseException | None = None) -> Trace:
        """Assign occurrences and call ids in program order and build the trace."""
        from quiver._trace import CallError, Trace

        with self._lock:
            records = sorted(self._calls, key=lambda r: r.key)
        ids = {id(r): f"c{i}" for i, r in enumerate(records)}
        seen: Counter[str] = Counter()
        calls = []
        for r in records:
            occurrence = seen[r.node]
            seen[r.node] += 1
            calls.append(_to_node_call(r, ids[id(r)], occurrence, ids))
        tags = dict(self.tags)
        if self.retries:
            tags["retries"] = dict(sorted(self.retries.items()))
        return Trace(
            trace_id=self.trace_id, run_id=self.run_id, pipeline=self.pipeline,
            input_id=self.input_id, repeat=self.repeat, inputs=self.inputs, calls=calls,
            output=to_jsonable(output),
            status="failed" if error is not None else "ok",
            error=CallError(type=type(error).__name__, message=str(error)) if error else None,
            tags=tags,
        )


def _to_node_call(r: CallRecord, call_id: str, occurrence: int, ids: dict[int, str]) -> NodeCall:
    from quiver._trace import NodeCall

    return NodeCall(
        call_id=call_id, node=r.node, occurrence=occurrence, iteration=r.iteration, loop=r.loop,
        call_path=r.call_path, kind=r.kind, parents=[ids[id(p)] for p in r.parents],
        input_hash=r.input_hash, output=r.output, decision=r.decision, model=r.model,
        prompt=r.prompt, response=r.response, retrieval=r.retrieval, tool=r.tool,
        tags=r.tags, started_at=r.started_at,
        ended_at=r.ended_at if r.ended_at is not None else r.started_at, error=r.error,
    )


current_builder: contextvars.ContextVar[TraceBuilder | None] = contextvars.ContextVar(
    "quiver_builder", default=None
)
current_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("quiver_scope", default=None)
current_call: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar("quiver_call", default=None)
current_loop: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "quiver_loop", default=None
)


capture_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("quiver_capture", default=True)
"""Whether chat completions sent over a hooked transport in this context are recorded
(``@quiver.node(..., capture=False)`` turns it off for a node's body)."""


class _ActiveRecordings:
    """How many traces are being recorded in this process (to warn about lost context),
    and what runs as each one starts (:func:`on_recording`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.hooks: list[Callable[[], None]] = []

    def __enter__(self) -> None:
        for hook in list(self.hooks):
            hook()
        with self._lock:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.count -= 1


active_recordings = _ActiveRecordings()


def on_recording(hook: Callable[[], None]) -> None:
    """Run ``hook`` as every trace starts being recorded or replayed (before its
    pipeline runs). Hooks are cheap and idempotent: the transport capture installs its
    patches there, the first time a library it hooks is loaded."""
    if hook not in active_recordings.hooks:
        active_recordings.hooks.append(hook)
