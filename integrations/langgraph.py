"""LangGraph graphs recorded and replayed without glue: ``instrument(graph)``.

::

    from quiver.integrations.langgraph import instrument

    graph = instrument(builder.compile())      # or instrument(builder) before compile()

What a recording then holds, read from LangGraph's own structure:

* **Nodes.** Every graph node is a node call under its graph name, sync or async. Its
  inputs are the state (or the ``Send`` argument) it was given; its output is the state
  update it returned, JSON (LangChain messages as ``{"role", "content", ...}`` dicts,
  ``Document``s as dicts), rebuilt into messages and documents when a replay serves it.
  A node's kind is what ``kinds=`` says, ``tool`` for a ``ToolNode`` (each tool it ran
  recorded as a tool step: the name and arguments of the tool call, the
  ``ToolMessage``'s content), else what its calls did, settled when the call closes:
  ``llm`` when an LLM call was recorded on it or under it (the first one is recorded
  on the node's call itself), ``retrieval`` when it made none and its update holds
  documents (LangChain ``Document``s, or dicts with an id and a content), ``transform``
  otherwise. A replay opens each such call with the kind of the recorded call it
  replays, so that a frozen replay serves and runs what a declared kind would.
* **Decisions.** A conditional edge is a decision of the gate named after the branch
  (the routing function's name), recorded on the call of its source node; the arm is the
  chosen destination (a list when it fans out). A conditional entry point becomes a
  ``router`` call named after its gate.
* **Loops.** Each cycle of the graph (a strongly connected set of nodes, from its edges
  and its branches' destinations) is a loop named after its entry node; every pass
  through the entry node starts the next iteration, and the nodes of the cycle carry it.
* **Parents** come from the graph's data flow, never from matching values: the calls
  that triggered the node (an edge, a branch, a ``Send``) and the calls whose writes made
  the channels the node reads (the last write of a plain channel; every write of a
  reducer channel such as ``Annotated[list, operator.add]``).
* **Identity.** A call's path is fixed by the superstep and LangGraph's task path
  (``[s3:grade.1]/grade#0``), so parallel tasks and ``Send`` fan-outs get the same
  identities whatever order they run in.
* **Prompts.** A ``ChatPromptTemplate`` a node formats is registered as a quiver template
  (id: the variable that holds it, lower-cased, or ``NODE.prompt``); the LLM call it
  feeds records the template id, and a replay's ``prompt_swap`` renders the variant in
  its place (``placeholder`` sections stand for ``MessagesPlaceholder``s).

Outside a recording or a replay every wrapper is a pass-through; checkpointers and
interrupts work as before (an interrupted node's call ends with the interrupt as its
error, and the resumed run records it again).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from quiver import InstrumentationError
from quiver.integrations._body import Body
from quiver.replay import retrieved, tool_step
from quiver.replay._instrument import (
    CallRecord,
    OpenCall,
    Scope,
    Template,
    TraceBuilder,
    current_builder,
    current_call,
    current_loop,
    current_scope,
    get_template,
    registered_templates,
    template,
)

if TYPE_CHECKING:
    from quiver import CallKind

__all__ = ["instrument"]

_KINDS = ("llm", "retrieval", "tool", "transform", "router")
_START, _END = "__start__", "__end__"
_MARK = "__quiver_langgraph__"


# --------------------------------------------------------------------------- public


def instrument(graph: Any, *, kinds: Mapping[str, str] | None = None) -> Any:
    """Record every run of a LangGraph graph; return the same graph.

    Args:
        graph: A ``StateGraph`` before ``compile()`` (the graphs it compiles are
            instrumented) or a compiled graph.
        kinds: Node name -> call kind (``llm``, ``retrieval``, ``tool``, ``transform``,
            ``router``), which wins over what the node's calls did; a ``ToolNode`` is
            ``tool`` without being named here, and every other node is typed by what
            each of its calls did (``llm`` when it made an LLM call, else
            ``retrieval`` when its update holds documents, else ``transform``).

    Raises:
        InstrumentationError: ``graph`` is not a LangGraph graph, or ``kinds`` names a
            node the graph does not have or a kind that does not exist.
    """
    from langgraph.graph import StateGraph
    from langgraph.graph.state import CompiledStateGraph

    if isinstance(graph, CompiledStateGraph):
        builder = graph.builder
    elif isinstance(graph, StateGraph):
        builder = graph
    else:
        raise InstrumentationError(
            f"instrument() takes a langgraph StateGraph or a compiled graph; got {type(graph).__name__}"
        )
    kinds = dict(kinds or {})
    _check_kinds(kinds, builder)
    _patch_prompt_templates()
    if not getattr(builder, _MARK, False):
        setattr(builder, _MARK, True)
        for name, spec in builder.nodes.items():
            _wrap_node(name, spec.runnable, _kind_of(name, spec.runnable, kinds))
            for fn in (getattr(spec.runnable, "func", None), getattr(spec.runnable, "afunc", None)):
                if fn is not None:
                    _scan_prompts(name, fn)
        for source, branches in builder.branches.items():
            for gate, branch in branches.items():
                _wrap_branch(source, gate, branch)
    if isinstance(graph, CompiledStateGraph):
        _wrap_runs(graph)
        return graph
    compile_ = graph.compile

    @functools.wraps(compile_)
    def compile(*args: Any, **kwargs: Any) -> Any:
        compiled = compile_(*args, **kwargs)
        _wrap_runs(compiled)
        return compiled

    graph.compile = compile
    return graph


def _check_kinds(kinds: Mapping[str, str], builder: Any) -> None:
    for name, kind in kinds.items():
        if name not in builder.nodes:
            raise InstrumentationError(
                f"instrument(kinds=...): the graph has no node {name!r}; its nodes are "
                f"{', '.join(builder.nodes) or 'none'}"
            )
        if kind not in _KINDS:
            raise InstrumentationError(
                f"instrument(kinds=...): node {name!r} has kind {kind!r}; a kind is one of {', '.join(_KINDS)}"
            )


def _kind_of(name: str, runnable: Any, kinds: Mapping[str, str]) -> str | None:
    """The kind ``kinds=`` gives, ``tool`` for a ``ToolNode``; None: typed by its calls."""
    if name in kinds:
        return kinds[name]
    from langgraph.prebuilt import ToolNode

    return "tool" if isinstance(runnable, ToolNode) else None


# --------------------------------------------------------------------------- the graph


@dataclass
class _GraphInfo:
    """What every run of one compiled graph shares: its nodes, reads, edges and cycles."""

    order: dict[str, int]
    reads: dict[str, tuple[str, ...]]
    accumulating: frozenset[str]
    state_keys: frozenset[str]
    next_static: dict[str, tuple[str, ...]]
    loop_of: dict[str, str]

    @classmethod
    def of(cls, compiled: Any) -> _GraphInfo:
        from langgraph.channels import LastValue

        builder = compiled.builder
        names = [n for n in builder.nodes]
        state_keys = frozenset(k for k in builder.channels)
        reads = {}
        for name in names:
            channels = compiled.nodes[name].channels
            channels = [channels] if isinstance(channels, str) else list(channels)
            if channels == ["__root__"]:
                channels = ["__root__"]
            reads[name] = tuple(c for c in channels if c in state_keys)
        accumulating = frozenset(
            k for k in state_keys if k in compiled.channels and not isinstance(compiled.channels[k], LastValue)
        )
        successors: dict[str, set[str]] = {n: set() for n in [_START, *names]}
        for a, b in builder.edges:
            successors.setdefault(a, set()).add(b)
        for starts, end in builder.waiting_edges:
            for a in starts:
                successors.setdefault(a, set()).add(end)
        next_static = {a: tuple(sorted(b for b in bs if b != _END)) for a, bs in successors.items()}
        for source, branches in builder.branches.items():
            for branch in branches.values():
                ends = list(branch.ends.values()) if branch.ends else names
                successors.setdefault(source, set()).update(e for e in ends if e != _END)
        return cls(
            order={n: i for i, n in enumerate(names)}, reads=reads, accumulating=accumulating,
            state_keys=state_keys, next_static=next_static, loop_of=_loops(names, successors),
        )


def _loops(names: list[str], successors: dict[str, set[str]]) -> dict[str, str]:
    """Node -> the loop it belongs to (named after the cycle's entry node)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; graphs are small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(successors.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(component)

    for v in [_START, *names]:
        if v not in index:
            visit(v)
    loop_of: dict[str, str] = {}
    for component in components:
        members = set(component)
        if len(members) == 1 and component[0] not in successors.get(component[0], set()):
            continue
        entered = [n for n in names if n in members and any(
            n in successors.get(p, set()) for p in [_START, *names] if p not in members)]
        header = entered[0] if entered else min(members, key=names.index)
        for n in members:
            loop_of[n] = header
    return loop_of


_run: contextvars.ContextVar[_GraphRun | None] = contextvars.ContextVar("quiver_langgraph_run", default=None)


class _GraphRun:
    """One invocation of a graph inside a recording: its anchor, writers and loops."""

    def __init__(self, info: _GraphInfo, builder: TraceBuilder, input: Any) -> None:
        self.info = info
        self.builder = builder
        scope = current_scope.get() or builder.root
        self.anchor = scope.branch()
        self.parent = current_call.get()
        self.lock = threading.Lock()
        self.writers: dict[str, list[tuple[int, CallRecord | None]]] = {}
        self.pending: dict[str, list[tuple[int, CallRecord]]] = {}
        self.sent: dict[str, list[tuple[int, CallRecord]]] = {}
        self.tasks: dict[tuple[int, str], CallRecord] = {}
        self.scopes: dict[tuple[int, str], Scope] = {}
        self.passes: dict[str, int] = {}
        updates = input.items() if isinstance(input, Mapping) else ()
        for key, _ in updates:
            if key in info.state_keys:
                self.writers[key] = [(-1, None)]

    # -- identity ---------------------------------------------------------------------
    def task_scope(self, step: int, path: Sequence[Any], name: str) -> tuple[Scope, tuple[int, str]]:
        if path and path[0] == "__pregel_push":
            order, label = (1, _int(path[1] if len(path) > 1 else 0)), f"{name}.{_int(path[1] if len(path) > 1 else 0)}"
        else:
            order, label = (0, self.info.order.get(name, len(self.info.order))), name
        task = (step, label)
        with self.lock:
            scope = self.scopes.get(task)
            if scope is None:
                key = (*self.anchor.key, step + 2, *order)
                scope = self.scopes[task] = Scope(key, f"{self.anchor.path}/[s{step}:{label}]")
        return scope, task

    # -- data flow --------------------------------------------------------------------
    def parents(self, name: str, step: int, pushed: bool) -> tuple[list[CallRecord], bool]:
        """The calls a call of ``name`` at ``step`` consumes, and whether the graph's
        input is among them."""
        found: list[CallRecord] = []
        from_input = False
        with self.lock:
            if pushed:  # a Send: its sender, whichever of the fan-out's tasks this is
                found += [r for s, r in self.sent.get(name, []) if s == step - 1]
            else:
                waiting = self.pending.get(name, [])
                found += [r for s, r in waiting if s < step]
                self.pending[name] = [(s, r) for s, r in waiting if s >= step]
            for channel in () if pushed else self.info.reads.get(name, ()):
                writes = [(s, r) for s, r in self.writers.get(channel, []) if s < step]
                if writes and channel not in self.info.accumulating:
                    last = max(s for s, _ in writes)
                    writes = [(s, r) for s, r in writes if s == last]
                for _, r in writes:
                    if r is None:
                        from_input = True
                    else:
                        found.append(r)
        return found, from_input

    def wrote(self, record: CallRecord, step: int, update: Any, name: str) -> None:
        keys, goto = _written(update)
        with self.lock:
            for key in keys:
                if key in self.info.state_keys:
                    self.writers.setdefault(key, []).append((step, record))
            for target in [*self.info.next_static.get(name, ()), *goto]:
                self.pending.setdefault(target, []).append((step, record))

    def triggered(self, record: CallRecord, step: int, targets: Sequence[str], sent: Sequence[str]) -> None:
        with self.lock:
            for target in targets:
                if target != _END:
                    self.pending.setdefault(target, []).append((step, record))
            for target in sent:
                self.sent.setdefault(target, []).append((step, record))

    def loop(self, name: str) -> tuple[str, int] | None:
        header = self.info.loop_of.get(name)
        if header is None:
            return None
        with self.lock:
            done = self.passes.get(header, 0)
            if name == header:
                self.passes[header] = done + 1
                return header, done
        return header, max(done - 1, 0)

    def finish(self) -> None:
        for header, done in sorted(self.passes.items()):
            self.builder.note_loop(header, None, done)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _written(update: Any) -> tuple[list[str], list[str]]:
    """The state keys an update writes and the nodes a ``Command`` goes to."""
    from langgraph.types import Command, Send

    if isinstance(update, Command):
        goto = update.goto if isinstance(update.goto, (list, tuple)) else [update.goto]
        targets = [g.node if isinstance(g, Send) else g for g in goto if g]
        keys, _ = _written(update.update)
        return keys, [t for t in targets if isinstance(t, str)]
    if isinstance(update, Mapping):
        return [str(k) for k in update], []
    if isinstance(update, (list, tuple)):
        written: list[str] = []
        goto_all: list[str] = []
        for item in update:
            k, g = _written(item)
            written += k
            goto_all += g
        return written, goto_all
    if hasattr(update, "model_fields_set"):
        return list(update.model_fields_set), []
    return [], []


def _wrap_runs(compiled: Any) -> None:
    """Give every ``stream``/``astream`` of the compiled graph (``invoke`` and ``ainvoke``
    go through them) a run state while a trace is recorded."""
    if getattr(compiled, _MARK, False):
        return
    setattr(compiled, _MARK, True)
    info = _GraphInfo.of(compiled)
    stream, astream = compiled.stream, compiled.astream

    @functools.wraps(stream)
    def wrapped_stream(input: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        builder = current_builder.get()
        if builder is None:
            yield from stream(input, *args, **kwargs)
            return
        run = _GraphRun(info, builder, input)
        token = _run.set(run)
        try:
            yield from stream(input, *args, **kwargs)
        finally:
            _reset(_run, token)
            run.finish()

    @functools.wraps(astream)
    async def wrapped_astream(input: Any, *args: Any, **kwargs: Any) -> Any:
        builder = current_builder.get()
        if builder is None:
            async for chunk in astream(input, *args, **kwargs):
                yield chunk
            return
        run = _GraphRun(info, builder, input)
        token = _run.set(run)
        try:
            async for chunk in astream(input, *args, **kwargs):
                yield chunk
        finally:
            _reset(_run, token)
            run.finish()

    compiled.stream = wrapped_stream
    compiled.astream = wrapped_astream


def _reset(var: contextvars.ContextVar[Any], token: contextvars.Token[Any]) -> None:
    try:
        var.reset(token)
    except ValueError:  # a generator closed in another context: that context never saw the value
        pass


# --------------------------------------------------------------------------- nodes


def _task_meta() -> tuple[int, tuple[Any, ...]] | None:
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    meta = config.get("metadata") or {}
    if "langgraph_step" not in meta:
        return None
    return int(meta["langgraph_step"]), tuple(meta.get("langgraph_path") or ())


@dataclass
class _NodeCall:
    """One open node call: its record, the run and what its prompts rendered."""

    run: _GraphRun
    record: CallRecord
    step: int
    opened: OpenCall
    input: Any = None
    settle: bool = False
    """The node has no declared kind and the recording gave none: typed at its close."""
    renders: list[tuple[Template, dict[str, Any]]] = field(default_factory=list)
    tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] = field(default_factory=list)


_node: contextvars.ContextVar[_NodeCall | None] = contextvars.ContextVar("quiver_langgraph_node", default=None)


def _open(name: str, kind: str | None, input: Any) -> _NodeCall | None:
    run = _run.get()
    meta = _task_meta()
    if run is None or meta is None or current_builder.get() is not run.builder:
        return None
    inputs = {"state": to_json(input)}
    settle = False
    if kind is None:  # typed by what it did: in a replay, as the recording typed it
        kind = _recorded_kind(run.builder, name, inputs)
        settle = kind is None
    step, path = meta
    scope, task = run.task_scope(step, path, name)
    pushed = bool(path) and path[0] == "__pregel_push"
    parents, from_input = run.parents(name, step, pushed)
    if from_input and run.parent is not None:
        parents.append(run.parent)
    declared = ("input",) if from_input and run.parent is None else ()
    loop = run.loop(name)
    record = run.builder.open_call(
        name, cast("CallKind", kind or "llm"), scope, inputs=inputs, declared_parents=declared, loop=loop,
        parents=parents,
    )
    with run.lock:
        run.tasks[task] = record
    return _NodeCall(run, record, step, OpenCall(record), input, settle)


def _recorded_kind(builder: TraceBuilder, name: str, inputs: Any) -> str | None:
    """In a replay, the kind the recording gave the node's call: that of its recorded
    calls with these inputs, else of all its recorded calls, when they agree. None when
    recording, or when the recording does not say: the call opens as ``llm`` (so that
    its first LLM call is recorded on it) and is typed at its close (:func:`_settle`)."""
    from quiver import content_hash, to_jsonable
    from quiver.replay._replayer import ReplayBuilder

    if not isinstance(builder, ReplayBuilder):
        return None
    calls = [c for c in builder.baseline.calls if c.node == name]
    input_hash = content_hash(to_jsonable(inputs))
    kinds = {c.kind for c in calls if c.input_hash == input_hash} or {c.kind for c in calls}
    return kinds.pop() if len(kinds) == 1 else None


def _settle(call: _NodeCall, output: Any) -> None:
    """Type a call of a node with no declared kind by what it did: ``llm`` when an LLM
    call was recorded on it or under it, else ``retrieval`` when its update holds
    documents, else ``transform``."""
    record = call.record
    if not call.settle or record.kind != "llm" or _holds_llm_call(call.run.builder, record):
        return
    record.kind = "retrieval" if record.retrieval is not None or _docs_in(output) else "transform"


def _holds_llm_call(builder: TraceBuilder, record: CallRecord) -> bool:
    """Whether an LLM call was recorded on ``record`` or on a call under it."""
    if record.model is not None or record.response is not None:
        return True
    inner = record.call_path + "/"
    with builder._lock:
        calls = list(builder._calls)
    return any(c.call_path.startswith(inner) and (c.model is not None or c.response is not None) for c in calls)


def _enter(call: _NodeCall) -> None:
    call.opened.enter()
    call.tokens = [(_node, _node.set(call))]
    if call.record.loop is not None:
        call.tokens.append((current_loop, current_loop.set((call.record.loop, call.record.iteration or 0))))


def _stable(error: BaseException) -> BaseException:
    """An interrupt as the trace records it: its values, not its volatile ids."""
    from langgraph.errors import GraphInterrupt

    if isinstance(error, GraphInterrupt):
        values = [getattr(i, "value", i) for i in (error.args[0] if error.args else ())]
        interrupted: BaseException = type("GraphInterrupt", (Exception,), {})(f"interrupted: {to_json(values)!r}")
        return interrupted
    return error


def _exit(call: _NodeCall, output: Any, error: BaseException | None) -> None:
    for var, token in reversed(call.tokens):
        var.reset(token)
    _settle(call, output)
    if error is None:
        if call.record.kind == "retrieval" and call.record.retrieval is None:
            docs = _docs_in(output)
            if docs:
                token = current_call.set(call.record)
                try:
                    retrieved(docs)
                finally:
                    current_call.reset(token)
        if call.record.kind == "tool" and call.record.tool is None:
            steps = _tool_steps(call.input, output)
            if steps:
                token = current_call.set(call.record)
                try:
                    for name, args, response in steps:
                        tool_step(name, args, response)
                finally:
                    current_call.reset(token)
        _name_prompt(call)
        call.run.wrote(call.record, call.step, output, call.record.node)
    call.opened.exit(to_json(output) if error is None else None, _stable(error) if error is not None else None)


def _served(call: _NodeCall) -> Any:
    output = from_json(call.opened.serve())
    _settle(call, output)
    call.run.wrote(call.record, call.step, output, call.record.node)
    return output


def _wrap_node(name: str, runnable: Any, kind: str | None) -> None:
    """Wrap a node's function in place: a ``RunnableCallable``'s ``func`` and ``afunc``
    (the signature LangGraph read stays the one it passes arguments for)."""
    from langgraph._internal._runnable import RunnableCallable

    if not isinstance(runnable, RunnableCallable):
        raise InstrumentationError(
            f"node {name!r} is a {type(runnable).__name__}; instrument() wraps nodes added as functions "
            "(sync or async) or ToolNodes: add it as a function that invokes it"
        )
    if runnable.func is not None and not getattr(runnable.func, _MARK, False):
        runnable.func = _sync_node(name, kind, runnable.func)
    if runnable.afunc is not None and not getattr(runnable.afunc, _MARK, False):
        runnable.afunc = _async_node(name, kind, runnable.afunc)


def _sync_node(name: str, kind: str | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def node(*args: Any, **kwargs: Any) -> Any:
        call = _open(name, kind, args[0] if args else None)
        if call is None:
            return fn(*args, **kwargs)
        body = _body(call)
        if body is None:
            return _served(call)
        with body.running():
            result = fn(*args, **kwargs)
        return body.done(result)

    setattr(node, _MARK, True)
    return node


def _async_node(name: str, kind: str | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def node(*args: Any, **kwargs: Any) -> Any:
        call = _open(name, kind, args[0] if args else None)
        if call is None:
            return await fn(*args, **kwargs)
        body = _body(call)
        if body is None:
            return _served(call)
        with body.running():
            result = await fn(*args, **kwargs)
        return body.done(result)

    setattr(node, _MARK, True)
    return node


def _body(call: _NodeCall) -> Body | None:
    """How the call's body runs (:class:`~quiver.integrations._body.Body`), or None when
    the replay serves it from the recording."""
    directive = call.opened.directive
    if directive is not None and directive.skip_body:
        return None

    def close(result: Any, error: BaseException | None) -> Any:
        _exit(call, result, error)
        return result

    return Body(lambda: _enter(call), close, directive)


# --------------------------------------------------------------------------- branches


def _wrap_branch(source: str, gate: str, branch: Any) -> None:
    path = branch.path
    ends = dict(branch.ends) if branch.ends else None
    for attr in ("func", "afunc"):
        fn = getattr(path, attr, None)
        if fn is None or getattr(fn, _MARK, False):
            continue
        wrapped = _async_branch(source, gate, ends, fn) if attr == "afunc" else _sync_branch(source, gate, ends, fn)
        setattr(path, attr, wrapped)


def _sync_branch(source: str, gate: str, ends: dict[Any, str] | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def route(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        _decided(source, gate, ends, result)
        return result

    setattr(route, _MARK, True)
    return route


def _async_branch(source: str, gate: str, ends: dict[Any, str] | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def route(*args: Any, **kwargs: Any) -> Any:
        result = await fn(*args, **kwargs)
        _decided(source, gate, ends, result)
        return result

    setattr(route, _MARK, True)
    return route


def _decided(source: str, gate: str, ends: dict[Any, str] | None, result: Any) -> None:
    """Record a branch's choice on its source node's call (a router call for a
    conditional entry point) and trigger the destinations with it."""
    from langgraph.types import Send

    run = _run.get()
    meta = _task_meta()
    if run is None or meta is None or current_builder.get() is not run.builder:
        return
    step, path = meta
    chosen = result if isinstance(result, (list, tuple)) else [result]
    targets = [r.node if isinstance(r, Send) else (ends[r] if ends and r in ends else str(r)) for r in chosen]
    arm: Any = targets[0] if len(targets) == 1 else list(targets)
    scope, task = run.task_scope(step, path, source)
    with run.lock:
        record = run.tasks.get(task)
    if record is None:  # a conditional entry point: no node call owns it
        parents, from_input = run.parents(gate, step, False)
        record = run.builder.open_call(
            gate, "router", scope, inputs={"gate": gate}, declared_parents=("input",) if from_input else (),
            parents=parents,
        )
        record.decision[gate] = arm
        run.builder.close_call(record, arm)
    else:
        record.decision[gate] = arm
    run.triggered(
        record, step, [t for t, r in zip(targets, chosen, strict=True) if not isinstance(r, Send)],
        [t for t, r in zip(targets, chosen, strict=True) if isinstance(r, Send)],
    )


# --------------------------------------------------------------------------- values


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


def to_json(value: Any) -> Any:
    """A state, update or input as the trace records it: LangChain messages as role
    dicts (without their volatile ids), ``Document``s as dicts, ``Send``s and
    ``Command``s spelled out, the rest JSON as :func:`quiver.to_jsonable` makes it."""
    from langchain_core.documents import Document
    from langchain_core.messages import BaseMessage
    from langgraph.types import Command, Send

    if isinstance(value, BaseMessage):
        return _message_json(value)
    if isinstance(value, Document):
        return {"page_content": value.page_content, "metadata": to_json(value.metadata), "type": "Document"}
    if isinstance(value, Send):
        return {"send": value.node, "arg": to_json(value.arg)}
    if isinstance(value, Command):
        return {"__command__": {"update": to_json(value.update), "goto": to_json(value.goto)}}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    from quiver import to_jsonable

    return to_jsonable(value)


def _message_json(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": _ROLES.get(message.type, message.type), "content": to_json(message.content)}
    if getattr(message, "name", None):
        out["name"] = message.name
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [{"name": c["name"], "args": to_json(c["args"]), "id": c.get("id")} for c in calls]
    if getattr(message, "tool_call_id", None):
        out["tool_call_id"] = message.tool_call_id
    return out


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json` for a served output: role dicts become messages,
    document dicts ``Document``s, a spelled-out ``Command`` a ``Command``."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__command__"} and isinstance(value["__command__"], dict):
        from langgraph.types import Command

        inner = value["__command__"]
        return Command(update=from_json(inner.get("update")), goto=inner.get("goto") or ())
    if _is_message(value):
        from langchain_core.messages import convert_to_messages

        data = dict(value)
        if "tool_calls" in data:
            data["tool_calls"] = [{**c, "type": "tool_call"} for c in data["tool_calls"]]
        return convert_to_messages([data])[0]
    if value.get("type") == "Document" and set(value) == {"page_content", "metadata", "type"}:
        from langchain_core.documents import Document

        return Document(page_content=value["page_content"], metadata=value["metadata"])
    return {k: from_json(v) for k, v in value.items()}


def _is_message(value: dict[str, Any]) -> bool:
    return (
        "role" in value and "content" in value and set(value) <= _MESSAGE_KEYS
        and value["role"] in ("user", "assistant", "system", "tool")
    )


def _messages_in(value: Any) -> list[Any]:
    """The messages of a state or update: its ``messages`` channel, or the value itself
    when it is a list (a ``ToolNode`` takes either)."""
    if isinstance(value, Mapping):
        value = value.get("messages")
    return list(value) if isinstance(value, (list, tuple)) else []


def _tool_steps(input: Any, update: Any) -> list[tuple[str, dict[str, Any], Any]]:
    """The tool steps a ``ToolNode`` ran: each ``ToolMessage`` of its update with the
    name and arguments of the tool call it answers (read from the input's messages)."""
    from langchain_core.messages import AIMessage, ToolMessage

    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in _messages_in(input):
        if isinstance(message, AIMessage):
            for c in message.tool_calls:
                asked[str(c.get("id"))] = (c["name"], dict(c["args"]))
    steps = []
    for message in _messages_in(update):
        if isinstance(message, ToolMessage):
            name, args = asked.get(str(message.tool_call_id), (message.name or "tool", {}))
            steps.append((name, args, to_json(message.content)))
    return steps


def _docs_in(update: Any) -> list[dict[str, Any]] | None:
    """The first list of documents in a retrieval node's update, as quiver records them."""
    from langchain_core.documents import Document

    if not isinstance(update, Mapping):
        return None
    for value in update.values():
        if not isinstance(value, list) or not value:
            continue
        if all(isinstance(d, Document) for d in value):
            return [
                {"doc_id": d.id or d.metadata.get("id") or d.metadata.get("doc_id") or str(i),
                 "content": d.page_content, "score": d.metadata.get("score")}
                for i, d in enumerate(value)
            ]
        if all(isinstance(d, Mapping) and ("doc_id" in d or "id" in d) and ("content" in d or "text" in d)
               for d in value):
            return list(value)
    return None


# --------------------------------------------------------------------------- prompts

_template_ids: dict[str, str] = {}
"""Canonical source of a ChatPromptTemplate -> the quiver template id it is registered as."""
_templates_lock = threading.Lock()
_patched: list[bool] = []


def _template_messages(prompt: Any) -> tuple[tuple[str, str], ...] | None:
    """A ChatPromptTemplate as quiver template messages, or None when a part of it has
    no ``str.format`` form (a jinja2 or mustache template, an image part)."""
    from langchain_core.messages import BaseMessage
    from langchain_core.prompts import MessagesPlaceholder
    from langchain_core.prompts.chat import (
        AIMessagePromptTemplate,
        ChatMessagePromptTemplate,
        HumanMessagePromptTemplate,
        SystemMessagePromptTemplate,
    )

    roles = {SystemMessagePromptTemplate: "system", HumanMessagePromptTemplate: "user",
             AIMessagePromptTemplate: "assistant"}
    out: list[tuple[str, str]] = []
    for part in prompt.messages:
        if isinstance(part, MessagesPlaceholder):
            out.append(("placeholder", "{" + part.variable_name + "}"))
        elif isinstance(part, BaseMessage) and isinstance(part.content, str):
            out.append((_ROLES.get(part.type, part.type), part.content.replace("{", "{{").replace("}", "}}")))
        elif type(part) in roles or isinstance(part, ChatMessagePromptTemplate):
            inner = getattr(part, "prompt", None)
            text = getattr(inner, "template", None)
            if getattr(inner, "template_format", None) != "f-string" or not isinstance(text, str):
                return None
            role = part.role if isinstance(part, ChatMessagePromptTemplate) else roles[type(part)]
            out.append((str(role), text))
        else:
            return None
    return tuple(out)


def _source_key(messages: tuple[tuple[str, str], ...]) -> str:
    from quiver import canonical_json

    return str(canonical_json([list(m) for m in messages]))


def register_prompt(prompt: Any, template_id: str) -> str | None:
    """Register a ChatPromptTemplate as the quiver template ``template_id`` (the id it
    already has, when its source was registered before); None when it has no
    ``str.format`` form."""
    messages = _template_messages(prompt)
    if messages is None:
        return None
    key = _source_key(messages)
    with _templates_lock:
        known = _template_ids.get(key)
        if known is not None:
            return known
        taken = set(_template_ids.values()) | set(registered_templates())
        tid, k = template_id, 2
        while tid in taken:
            tid, k = f"{template_id}{k}", k + 1
        _template_ids[key] = tid
    template(tid, messages=list(messages))
    return tid


def _scan_prompts(name: str, fn: Callable[..., Any]) -> None:
    """Register the ChatPromptTemplates a node function names (globals, closure)."""
    from langchain_core.prompts import ChatPromptTemplate

    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    found: dict[str, Any] = {}
    globals_ = getattr(fn, "__globals__", {})
    for var in code.co_names:
        if var in globals_:
            found[var] = globals_[var]
    for var, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            found[var] = cell.cell_contents
        except ValueError:
            continue
    for var, value in found.items():
        steps = getattr(value, "steps", None)
        candidates = [value] + (list(steps) if isinstance(steps, list) else [])
        for item in candidates:
            if isinstance(item, ChatPromptTemplate):
                register_prompt(item, var.lower() if item is value else f"{var.lower()}.prompt")


def _patch_prompt_templates() -> None:
    """Make ChatPromptTemplate formatting inside an instrumented node go through the
    quiver template registry (once per process)."""
    if _patched:
        return
    from langchain_core.prompts import ChatPromptTemplate

    format_messages = ChatPromptTemplate.format_messages
    aformat_messages = ChatPromptTemplate.aformat_messages

    def patched(self: Any, **kwargs: Any) -> Any:
        rendered = _render(self, kwargs)
        return rendered if rendered is not None else format_messages(self, **kwargs)

    async def apatched(self: Any, **kwargs: Any) -> Any:
        rendered = _render(self, kwargs)
        return rendered if rendered is not None else await aformat_messages(self, **kwargs)

    ChatPromptTemplate.format_messages = patched  # type: ignore[method-assign]
    ChatPromptTemplate.aformat_messages = apatched  # type: ignore[method-assign]
    _patched.append(True)


def _render(prompt: Any, kwargs: dict[str, Any]) -> list[Any] | None:
    """Within a node call: note the template rendered; render the replay's variant
    when one stands in for it. None: format as LangChain does."""
    call = _node.get()
    if call is None:
        return None
    tid = register_prompt(prompt, f"{call.record.node}.prompt")
    if tid is None:
        return None
    variables = prompt._merge_partial_and_user_variables(**kwargs)
    current = get_template(tid)
    call.renders.append((current, variables))
    if current.messages == registered_templates()[tid].messages:
        return None
    return _messages_of(current, variables)


def _messages_of(tmpl: Template, variables: Mapping[str, Any]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, convert_to_messages

    classes = {"system": SystemMessage, "user": HumanMessage, "human": HumanMessage, "assistant": AIMessage,
               "ai": AIMessage}
    out: list[Any] = []
    for role, content in tmpl.messages:
        try:
            if role == "placeholder":
                out += convert_to_messages(variables.get(content.strip("{} "), []) or [])
                continue
            text = content.format_map(dict(variables))
        except (KeyError, IndexError) as exc:
            raise InstrumentationError(
                f"template {tmpl.id!r} needs variable {exc}; the prompt supplies {', '.join(sorted(variables))}"
            ) from None
        out.append(classes.get(role, HumanMessage)(content=text))
    return out


def _name_prompt(call: _NodeCall) -> None:
    """Give the node's LLM call the template its prompt came from."""
    record = call.record
    if record.prompt is None or record.prompt.template_id is not None or not call.renders:
        return
    from quiver import content_hash

    tmpl, variables = call.renders[-1]
    fragments = [tmpl.hash] + [content_hash(to_json(variables[v])) for v in tmpl.variables if v in variables]
    rendered = sum(
        len(variables.get(content.strip("{} ")) or []) if role == "placeholder" else 1
        for role, content in tmpl.messages
    )
    fragments += record.prompt.fragments[rendered:]  # messages sent after the template's (a tool call, its answer)
    record.prompt = record.prompt.model_copy(
        update={"template_id": tmpl.id, "template_hash": tmpl.hash, "fragments": fragments}
    )
