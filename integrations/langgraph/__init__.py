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

**The prebuilt ReAct agent.** A graph ``langgraph.prebuilt.create_react_agent`` built is
recorded with the model every agent integration shares (:mod:`.react`;
``quiver.integrations.openai_agents``, ``quiver.integrations.pydantic_ai``) instead of as
its ``agent`` and ``tools`` graph nodes::

    desk = instrument(create_react_agent(model, [lookup_invoice, check_service], name="desk"))

* each model turn is a call of the node named by the agent (the graph's ``name``;
  ``agent`` when it has none), its inputs the state's messages and its output what the
  turn decided: ``text``, ``tool_calls`` (``{"name", "arguments"}``), ``tool`` (the
  first one's name); its decision ``tools`` (the tools it called);
* each tool call is a call of the ``tool`` node named by the tool, its inputs the
  call's arguments and its output what the tool returned (a JSON text as its value);
* parents follow the conversation by tool call ids (the routing out of ``agent`` and
  ``tools`` is the turn's ``tools`` decision, not a gate of its own); the graph's other
  nodes (model hooks, the structured response) are graph nodes as above.

A ``categorical_flip`` / ``override`` of a turn's ``tool`` serves its recorded answer
with the tool call renamed (LangGraph runs the other tool, the next turn runs live on
its result); an ``override`` of a tool node's output hands the ``ToolNode`` that value;
``param_change`` and ``prompt_swap`` with ``node:`` the agent's name act on its turns.

Outside a recording or a replay every wrapper is a pass-through; checkpointers and
interrupts work as before (an interrupted node's call ends with the interrupt as its
error, and the resumed run records it again).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from quiver import InstrumentationError

from .graph import _MARK, _wrap_runs
from .nodes import _wrap_branch, _wrap_node
from .prompts import _patch_prompt_templates, _scan_prompts, register_prompt
from .react import ReactAgent, react_agent
from .values import from_json, to_json

__all__ = ["from_json", "instrument", "register_prompt", "to_json"]

_KINDS = ("llm", "retrieval", "tool", "transform", "router")


def instrument(graph: Any, *, kinds: Mapping[str, str] | None = None) -> Any:
    """Record every run of a LangGraph graph; return the same graph.

    Args:
        graph: A ``StateGraph`` before ``compile()`` (the graphs it compiles are
            instrumented) or a compiled graph.
        kinds: Node name -> call kind (``llm``, ``retrieval``, ``tool``, ``transform``,
            ``router``), which wins over what the node's calls did; a ``ToolNode`` is
            ``tool`` without being named here, and every other node is typed by what
            each of its calls did (``llm`` when it made an LLM call, else
            ``retrieval`` when its update holds documents, else ``transform``). A
            graph ``create_react_agent`` built records its ``agent`` and ``tools``
            nodes as the agent's turns and tools, whatever ``kinds`` says of them.

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
    react = react_agent(graph) if isinstance(graph, CompiledStateGraph) else None
    if not getattr(builder, _MARK, False):
        setattr(builder, _MARK, True)
        _wrap_graph(builder, kinds, skip=ReactAgent.graph_nodes if react is not None else ())
        if react is not None:
            react.wrap(builder)
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


def _wrap_graph(builder: Any, kinds: Mapping[str, str], skip: tuple[str, ...]) -> None:
    """Wrap the graph's nodes and conditional edges, but those in ``skip`` (and the
    edges out of them)."""
    for name, spec in builder.nodes.items():
        if name in skip:
            continue
        _wrap_node(name, spec.runnable, _kind_of(name, spec.runnable, kinds))
        for fn in (getattr(spec.runnable, "func", None), getattr(spec.runnable, "afunc", None)):
            if fn is not None:
                _scan_prompts(name, fn)
    for source, branches in builder.branches.items():
        for gate, branch in branches.items():
            if source not in skip:
                _wrap_branch(source, gate, branch)


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

