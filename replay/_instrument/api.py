"""The instrumentation API for plain Python pipelines.

::

    import quiver

    @quiver.node("signal", kind="llm")
    def signal(query: str) -> dict:
        return quiver.llm().chat("signal", query=query).data

    def pipeline(query: str) -> str:
        intake = signal(query)
        if quiver.decide("route", "smalltalk" if intake["is_small_talk"] else "discovery", on=intake) == ...
        for it in quiver.loop("planner", k_max=5):
            ...

Everything here is a no-op passthrough when no trace is being recorded, so an
instrumented pipeline runs unchanged in production.

* :func:`node` marks a function (sync or async) or a block (``with``) as a node call.
* :func:`decide` records a branch decision (``gate -> arm``) at the current call.
* :func:`loop` / :func:`iteration` number loop iterations.
* :func:`bind`, :class:`ThreadPoolExecutor` and :func:`gather` open parallel
  branches whose calls get the same identities on every run, whatever the scheduling.
* :func:`retrieved` and :func:`tool_step` record retrieval sets and tool steps.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from quiver._canonical import content_hash, to_jsonable
from quiver._errors import InstrumentationError

if TYPE_CHECKING:  # the graph and the trace model load when a recording or a declaration needs them
    import asyncio

    from quiver._graph import NodeSpec as GraphNode, PipelineGraph
    from quiver._trace import CallKind, RetrievalDoc

from .context import (
    CallRecord,
    Scope,
    TraceBuilder,
    active_recordings,
    capture_enabled,
    current_builder,
    current_call,
    current_loop,
    current_scope,
)
from .threads import ReusingThreadPool

__all__ = [
    "node",
    "NodeSpec",
    "CallHandle",
    "decide",
    "loop",
    "iteration",
    "bind",
    "gather",
    "ThreadPoolExecutor",
    "retrieved",
    "tool_step",
    "child_call",
    "declared_graph",
    "OpenCall"
]

log = logging.getLogger("quiver")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_KINDS = ("llm", "retrieval", "tool", "transform", "router", "source")
_warned_lost_context: set[str] = set()


def _warn_lost_context(name: str) -> None:
    if active_recordings.count and name not in _warned_lost_context:
        _warned_lost_context.add(name)
        log.warning(
            "node %r ran outside any trace while a recording is active: threads do not "
            "inherit the trace context; submit work through quiver.bind(fn) or "
            "quiver.ThreadPoolExecutor so that its calls are recorded",
            name,
        )


class CallHandle:
    """The call opened by a ``with quiver.node(...)`` block.

    Set :attr:`output` inside the block; it is recorded when the block exits.
    """

    def __init__(self, record: CallRecord | None) -> None:
        self.record = record
        self.output: Any = None

    @property
    def call_path(self) -> str | None:
        """The call's path, or ``None`` when nothing is being recorded."""
        return self.record.call_path if self.record else None


class OpenCall:
    """Entering and leaving one recorded call: the context variables and the record."""

    def __init__(self, record: CallRecord | None, capture: bool | None = None) -> None:
        self.record = record
        self.capture = capture
        self._tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] = []

    @classmethod
    def open(
        cls, name: str, kind: CallKind, inputs: Any, parents: tuple[str, ...], capture: bool | None = None
    ) -> OpenCall:
        builder = current_builder.get()
        if builder is None:
            _warn_lost_context(name)
            return cls(None)
        scope = current_scope.get() or builder.root
        record = builder.open_call(
            name, kind, scope, inputs=inputs, declared_parents=parents, loop=current_loop.get()
        )
        return cls(record, capture)

    @property
    def directive(self) -> Any:
        """The replay's directive for this call (None when recording)."""
        return self.record.replay if self.record is not None else None

    def serve(self) -> Any:
        """Close the call without running its body; return the output the replay gives."""
        builder = current_builder.get()
        assert builder is not None and self.record is not None
        return builder.serve_call(self.record)  # type: ignore[attr-defined]

    def enter(self) -> None:
        if self.record is not None:
            self._tokens = [
                (current_scope, current_scope.set(self.record.scope)),
                (current_call, current_call.set(self.record)),
            ]
            if self.capture is not None:
                self._tokens.append((capture_enabled, capture_enabled.set(self.capture)))

    def exit(self, output: Any, error: BaseException | None) -> None:
        for var, token in reversed(self._tokens):
            var.reset(token)
        self._tokens = []
        builder = current_builder.get()
        if self.record is not None and builder is not None:
            if error is None:
                _autofill(self.record, output)
            self.record.tags.pop("_args", None)
            builder.close_call(self.record, output, error)


def _perturbed(directive: Any) -> contextlib.AbstractContextManager[Any]:
    """The execution change of a replay's target, entered around its body."""
    if directive is not None and directive.context is not None:
        return directive.context()  # type: ignore[no-any-return]
    return contextlib.nullcontext()


def _autofill(record: CallRecord, output: Any) -> None:
    """Fill a tool or retrieval call's contract fields from its output when not given."""
    if record.kind == "tool" and record.tool is None:
        from quiver._trace import ToolStep

        record.tool = ToolStep(
            name=record.node, args=record.tags.get("_args", {}), response=to_jsonable(output),
            response_hash=content_hash(output),
        )
    if record.kind == "retrieval" and record.retrieval is None and _looks_like_docs(output):
        record.retrieval = _docs(output)


class NodeSpec:
    """What :func:`node` returns: a decorator, and a context manager for blocks."""

    def __init__(
        self,
        name: str | None,
        kind: CallKind,
        parents: Sequence[str],
        ignore: Sequence[str],
        inputs: Mapping[str, Any] | None,
        fields: Mapping[str, Any] | None = None,
        output: Mapping[str, Any] | None = None,
        restore: Callable[[Any], Any] | None = None,
        capture: bool | None = None,
    ) -> None:
        if kind not in _KINDS:
            raise InstrumentationError(f"node kind must be one of {', '.join(_KINDS)}; got {kind!r}")
        self.name = name
        self.kind: CallKind = kind
        self.parents = tuple(parents)
        self.ignore = frozenset(ignore)
        self.inputs = dict(inputs or {})
        self.declared = _declaration(fields, output)
        self.restore = restore
        self.capture = capture
        self._stack: list[tuple[OpenCall, CallHandle]] = []
        if name:
            _declare(name, self)

    # -- decorator -------------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        name = self.name or fn.__name__
        _declare(name, self)
        signature = inspect.signature(fn)

        def bound_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return {"args": list(args), "kwargs": kwargs}
            bound.apply_defaults()
            return {
                k: v for k, v in bound.arguments.items() if k not in self.ignore and k not in ("self", "cls")
            }

        def start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> OpenCall:
            inputs = bound_inputs(args, kwargs)
            call = OpenCall.open(name, self.kind, inputs, self.parents, self.capture)
            if call.record is not None and self.kind == "tool":
                call.record.tags["_args"] = to_jsonable(inputs)
            return call

        if inspect.iscoroutinefunction(fn):

            async def run_async(call: OpenCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                directive = call.directive
                if directive is not None and directive.skip_body:
                    return self._restored(call.serve())
                call.enter()
                try:
                    with _perturbed(directive):
                        result = await fn(*args, **kwargs)
                except BaseException as exc:
                    call.exit(None, exc)
                    raise
                call.exit(result, None)
                return result

            @functools.wraps(fn)
            def async_wrapper(*args: Any, **kwargs: Any) -> Awaitable[Any]:
                # The slot is taken here, when the coroutine is created (program order),
                # not when it first runs (scheduling order).
                return run_async(start(args, kwargs), args, kwargs)

            async_wrapper.__quiver_node__ = name  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call = start(args, kwargs)
            directive = call.directive
            if directive is not None and directive.skip_body:
                return self._restored(call.serve())
            call.enter()
            try:
                with _perturbed(directive):
                    result = fn(*args, **kwargs)
            except BaseException as exc:
                call.exit(None, exc)
                raise
            call.exit(result, None)
            return result

        wrapper.__quiver_node__ = name  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    def _restored(self, output: Any) -> Any:
        """A served output (recorded JSON) as the node's callers expect it."""
        return self.restore(output) if self.restore is not None else output

    # -- context manager -------------------------------------------------------------
    def __enter__(self) -> CallHandle:
        if not self.name:
            raise InstrumentationError("quiver.node(...) used as a block needs a name: quiver.node('rewriter')")
        call = OpenCall.open(self.name, self.kind, self.inputs, self.parents, self.capture)
        directive = call.directive
        if directive is not None and directive.skip_body:
            # a block's body cannot be skipped: it runs, and its LLM calls are served
            if directive.action == "perturb":
                raise InstrumentationError(
                    f"node {self.name!r} is a `with quiver.node(...)` block: an output perturbation "
                    "replaces a decorated function's return value; decorate the step with "
                    "@quiver.node to perturb its output, or use an execution operator"
                )
            directive.action, directive.skip_body = "run", False
        call.enter()
        handle = CallHandle(call.record)
        self._stack.append((call, handle))
        return handle

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        call, handle = self._stack.pop()
        call.exit(handle.output if exc is None else None, exc)

    async def __aenter__(self) -> CallHandle:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)


@overload
def node(name: F, /) -> F: ...
@overload
def node(
    name: str | None = None,
    /,
    *,
    kind: CallKind = "transform",
    parents: Sequence[str] = (),
    ignore: Sequence[str] = (),
    inputs: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    restore: Callable[[Any], Any] | None = None,
    capture: bool | None = None,
) -> NodeSpec: ...
def node(
    name: Any = None,
    /,
    *,
    kind: CallKind = "transform",
    parents: Sequence[str] = (),
    ignore: Sequence[str] = (),
    inputs: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    restore: Callable[[Any], Any] | None = None,
    capture: bool | None = None,
) -> Any:
    """Mark a function or a block as a pipeline node.

    As a decorator (``@quiver.node``, ``@quiver.node("planner", kind="llm")``) on a
    sync or async function: each call is recorded with its inputs' hash, its output,
    its parents and its place in the trace. As a context manager
    (``with quiver.node("rewriter", inputs={...}) as call: ... call.output = x``) for a
    block of code.

    Args:
        name: The node name (default: the function's name).
        kind: llm, retrieval, tool, transform, router or source.
        parents: Node names this node consumes, in addition to the parents inferred
            from data flow: an argument equal to an earlier call's output, or to one of
            its top-level fields. Scalars never count; a short string (under 16
            characters, such as a label ``"billing"``) that is an argument, or a
            top-level field or list element of one, counts only when the earlier calls
            whose output is it or holds it (at any depth) are all calls of one node:
            the latest of them is the parent; two nodes make it no evidence.
        ignore: Argument names left out of the input hash and of data-flow inference
            (clients, connections, callbacks).
        inputs: For the block form: the inputs to hash and to infer parents from.
        fields: The output's field types and roles for the analysis, as in a graph
            file: ``{"turn_type": {"type": "categorical", "role": "routing"}}``.
        output: The whole output's type, for outputs that are not objects:
            ``{"type": "set"}``.
        restore: Rebuilds the node's return value from its recorded JSON, for replays
            that serve a frozen call without running it (``MyModel.model_validate``).
            By default the JSON value is returned as it is: dicts, lists, strings,
            numbers, booleans and None (a tuple comes back as a list).
        capture: ``False``: chat completions the body sends through a client the
            engine hooks (the ``openai`` SDK, ``httpx``, ``httpx2``, DSPy's engine) are
            not recorded, served nor perturbed; they go to the endpoint as they are.
            ``True`` turns capture back on inside an opted-out node. Default: as the
            enclosing call (on). ``quiver.llm()`` calls are recorded either way.

    ``quiver.replay.declared_graph()`` collects the declared types and parents of
    every node defined so far.
    """
    if callable(name):
        return NodeSpec(None, kind, parents, ignore, inputs)(name)
    return NodeSpec(name, kind, parents, ignore, inputs, fields, output, restore, capture)


_declared: dict[str, NodeSpec] = {}


def _declaration(fields: Mapping[str, Any] | None, output: Mapping[str, Any] | None) -> GraphNode | None:
    if fields is None and output is None:
        return None
    from pydantic import ValidationError

    from quiver._graph import NodeSpec as GraphNode

    try:
        return GraphNode.model_validate({"fields": fields, "output": output})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InstrumentationError(f"quiver.node field declaration {where}: {message}") from None


def _declare(name: str, spec: NodeSpec) -> None:
    if spec.declared is not None or spec.parents:
        _declared[name] = spec


def declared_graph() -> PipelineGraph:
    """The graph declared by the ``@quiver.node`` decorators run so far.

    Nodes that declared ``fields=`` or ``output=`` carry those types; edges come from
    every node's declared ``parents=``. Complete it from recorded traces with
    ``quiver.infer_graph(traces, base=declared_graph())``.
    """
    from quiver._graph import NodeSpec as GraphNode, PipelineGraph

    nodes = {name: spec.declared for name, spec in _declared.items() if spec.declared is not None}
    edges = [(p, name) for name, spec in _declared.items() for p in spec.parents]
    for p, _ in edges:
        nodes.setdefault(p, GraphNode())
    for _, c in edges:
        nodes.setdefault(c, GraphNode())
    return PipelineGraph(nodes=nodes, edges=edges)


def child_call(name: str, kind: CallKind, inputs: Any) -> OpenCall:
    """Open a call for an engine helper (LLM client, tool step) under the current call."""
    return OpenCall.open(name, kind, inputs, ())


def decide(gate: str, arm: T, *, on: Any = None) -> T:
    """Record that branch ``gate`` took ``arm`` and return ``arm``.

    Inside a node call the decision is stored on that call (``decision[gate] = arm``);
    the call's parents are those of the node. Outside any node call it becomes a
    ``router`` call named ``gate`` whose output is the arm and whose parent is the call
    that produced the value decided on: ``on`` (default: the arm itself), found as
    the graph inference finds parents, by content hash (the latest closed call whose
    output is that value or holds it as a top-level field; a short label only when
    one node outputs it)::

        label = classify(text)
        arm = quiver.decide("route", "escalate" if label["urgent"] else "answer", on=label)

    Without a parent the router would read as the source of the variation it only
    passes on (a noise origin), and the classifier's fields would not be routing
    fields. A value no recorded call produced (the pipeline's own inputs, a constant)
    leaves the router without a parent. Outside a node the decision is attached, not
    refused: a gate in the pipeline's own code is common, and the value it decides on
    identifies the call it depends on as well as an enclosing node would.

    Call it at every gate: divergence of trajectories (D_shape) is read from these
    decisions. A gate can be decided once per call.
    """
    builder = current_builder.get()
    if builder is None:
        return arm
    record = current_call.get()
    value = to_jsonable(arm)
    if record is None:
        _router_call(builder, gate, value, value if on is None else to_jsonable(on))
        return arm
    if gate in record.decision:
        raise InstrumentationError(
            f"gate {gate!r} was decided twice in call {record.call_path} "
            f"({record.decision[gate]!r}, then {value!r}); decide each gate once per call, "
            "or give the decisions different gate names"
        )
    record.decision[gate] = value
    return arm


def _router_call(builder: TraceBuilder, gate: str, arm: Any, on: Any) -> None:
    """The ``router`` call of a decision taken outside any node: its parent the call
    that produced ``on`` (its inputs stay ``{"gate": gate}``, so that its input hash is
    that of recordings made before parents were found)."""
    scope = current_scope.get() or builder.root
    parents = builder._infer_parents({"on": on}, ())
    record = builder.open_call(
        gate, "router", scope, inputs={"gate": gate}, loop=current_loop.get(), parents=parents,
    )
    with _ScopedCall(OpenCall(record)) as call:
        record.decision[gate] = arm
        call.output = arm


class _ScopedCall:
    """``with`` over an :class:`OpenCall`, recording ``.output`` at exit."""

    def __init__(self, call: OpenCall) -> None:
        self.call = call
        self.record = call.record
        self.output: Any = None

    def __enter__(self) -> _ScopedCall:
        self.call.enter()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.call.exit(self.output if exc is None else None, exc)


def loop(name: str, k_max: int | None = None) -> Iterator[int]:
    """Iterate a loop, numbering its iterations for the calls made inside.

    ``for it in quiver.loop("planner", k_max=5): ...`` yields 0, 1, ... up to
    ``k_max - 1`` (forever without ``k_max``); every node call inside the body records
    ``loop="planner"`` and ``iteration=it``. Leaving the loop (``break`` included)
    restores the enclosing loop's numbering, and the trace's tags record how many
    iterations ran.
    """
    if k_max is not None and k_max < 1:
        raise InstrumentationError(f"quiver.loop({name!r}): k_max must be >= 1; got {k_max}")
    return _loop(name, k_max)


def _loop(name: str, k_max: int | None) -> Iterator[int]:
    previous = current_loop.get()
    done = 0
    try:
        i = 0
        while k_max is None or i < k_max:
            current_loop.set((name, i))
            done = i + 1
            yield i
            i += 1
    finally:
        current_loop.set(previous)
        builder = current_builder.get()
        if builder is not None:
            builder.note_loop(name, k_max, done)


class iteration:
    """Number one loop iteration by hand: ``with quiver.iteration("planner", i): ...``.

    For ``while`` loops and other shapes :func:`loop` does not fit.
    """

    def __init__(self, name: str, index: int) -> None:
        if index < 0:
            raise InstrumentationError(f"quiver.iteration({name!r}, {index}): the index must be >= 0")
        self.name = name
        self.index = index
        self._token: contextvars.Token[tuple[str, int] | None] | None = None

    def __enter__(self) -> int:
        self._token = current_loop.set((self.name, self.index))
        return self.index

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            current_loop.reset(self._token)


def _branch_context() -> contextvars.Context:
    """Copy the current context with a new branch scope (slot taken now)."""
    ctx = contextvars.copy_context()
    builder = current_builder.get()
    if builder is not None:
        scope: Scope = current_scope.get() or builder.root
        ctx.run(current_scope.set, scope.branch())
    return ctx


def bind(fn: Callable[..., T]) -> Callable[..., T]:
    """Bind ``fn`` to the current trace as a parallel branch, for another thread.

    Threads do not inherit context variables, so work submitted to a thread pool would
    run outside the trace. ``pool.submit(quiver.bind(fn), x)`` carries the trace along
    and opens a branch whose slot is taken here, in program order: the calls made in
    the branch get the same identities whatever order the threads run in.
    """
    ctx = _branch_context()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return ctx.run(fn, *args, **kwargs)

    return run


class ThreadPoolExecutor(ReusingThreadPool):
    """A thread pool whose submitted work joins the current trace (see :func:`bind`).

    A :class:`concurrent.futures.ThreadPoolExecutor` in interface and behaviour; its
    threads are reused across pools (:class:`~quiver.replay._instrument.ReusingThreadPool`),
    so a pipeline that opens a pool per run does not start threads per run.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        return super().submit(bind(fn), *args, **kwargs)


async def gather(*aws: Awaitable[Any], return_exceptions: bool = False) -> list[Any]:
    """``asyncio.gather`` with one branch per awaitable (slots taken in argument order).

    Plain ``asyncio.gather`` of decorated async nodes is already deterministic; use this
    one when the gathered coroutines are undecorated helpers that call nodes after
    awaiting something else.
    """
    tasks = [_task_in(_branch_context(), aw) for aw in aws]
    import asyncio  # loaded by the pipeline that awaits this, not by `import quiver`

    return list(await asyncio.gather(*tasks, return_exceptions=return_exceptions))


def _task_in(ctx: contextvars.Context, aw: Awaitable[Any]) -> asyncio.Task[Any]:
    import asyncio

    return asyncio.get_running_loop().create_task(_await(aw), context=ctx)


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


def _looks_like_docs(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(d, Mapping) and ("doc_id" in d or "id" in d) and ("content" in d or "text" in d)
        for d in value
    )


def _docs(docs: Iterable[Any]) -> list[RetrievalDoc]:
    from quiver._trace import RetrievalDoc

    out = []
    for rank, d in enumerate(docs):
        if isinstance(d, Mapping):
            doc_id, content, score = d.get("doc_id", d.get("id")), d.get("content", d.get("text")), d.get("score")
        else:
            doc_id, content, score = (*tuple(d), None)[:3]
        if doc_id is None or content is None:
            raise InstrumentationError(
                f"retrieved document {rank} needs a doc id and its content: give dicts with "
                "doc_id (or id) and content (or text), or (doc_id, content, score) tuples"
            )
        out.append(
            RetrievalDoc(
                doc_id=str(doc_id), content_hash=content_hash(str(content)),
                score=float(score) if score is not None else None, rank=rank,
            )
        )
    return out


def retrieved(docs: Iterable[Any]) -> None:
    """Record a retrieval set at the current call.

    ``docs``: dicts with ``doc_id`` (or ``id``), ``content`` (or ``text``) and
    optionally ``score``, or ``(doc_id, content[, score])`` tuples, in rank order. The
    content is stored as a hash; the order gives the rank. Outside any node call a
    ``retrieval`` call is opened for it.
    """
    if current_builder.get() is None:
        return
    entries = _docs(docs)
    record = current_call.get()
    if record is None:
        with _ScopedCall(child_call("retrieval", "retrieval", {"docs": [e.doc_id for e in entries]})) as call:
            assert call.record is not None
            call.record.retrieval = entries
            call.output = [e.doc_id for e in entries]
        return
    record.retrieval = entries


def tool_step(name: str, args: Mapping[str, Any], response: Any) -> None:
    """Record a tool step: its name, arguments and response.

    Stored on the current call when it is a ``tool`` call with no step yet; otherwise a
    ``tool`` call named ``name`` is opened under the current call for it.
    """
    if current_builder.get() is None:
        return
    from quiver._trace import ToolStep

    step = ToolStep(
        name=name, args=to_jsonable(dict(args)), response=to_jsonable(response),
        response_hash=content_hash(response),
    )
    record = current_call.get()
    if record is not None and record.kind == "tool" and record.tool is None:
        record.tool = step
        return
    with _ScopedCall(child_call(name, "tool", dict(args))) as call:
        assert call.record is not None
        call.record.tool = step
        call.output = step.response
