"""Graph nodes and conditional edges as recorded calls and decisions.

:func:`_wrap_node` wraps a node's function (sync and async) so that each run of it is a
node call (opened with its task's identity and its parents from the run's data flow,
served from the recording when the replay says so, typed by what it did when no kind is
declared); :func:`_wrap_branch` records a conditional edge's choice as a decision of its
source node's call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from quiver import InstrumentationError
from quiver.integrations._body import Body
from quiver.replay import retrieved, tool_step
from quiver.replay._instrument import (
    CallRecord,
    OpenCall,
    TraceBuilder,
    current_builder,
    current_call,
    current_loop,
)

from .graph import _MARK, _node, _NodeCall, _run, _task_meta
from .prompts import _name_prompt
from .values import _docs_in, _tool_steps, from_json, to_json

if TYPE_CHECKING:
    from quiver import CallKind

__all__: list[str] = []

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

