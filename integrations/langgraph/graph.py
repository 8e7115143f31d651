"""One graph's structure and one run's state: what every call of a run shares.

:class:`_GraphInfo` is read once per compiled graph (its nodes, the channels each reads,
its edges and cycles); :class:`_GraphRun` is the state of one invocation inside a
recording (the writers of each channel, the pending triggers, the task scopes that fix
every call's identity, the loops' passes); :class:`_NodeCall` is one open node call.
:func:`_wrap_runs` gives every ``stream``/``astream`` of a compiled graph its run state.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quiver.replay._instrument import (
    CallRecord,
    OpenCall,
    Scope,
    Template,
    TraceBuilder,
    current_builder,
    current_call,
    current_scope,
)

__all__: list[str] = []

_START, _END = "__start__", "__end__"
_MARK = "__quiver_langgraph__"


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

