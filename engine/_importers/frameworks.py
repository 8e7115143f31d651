"""LangGraph and DSPy spans in OpenInference traces, arranged as the integrations record them.

The OpenInference instrumentations of LangChain and DSPy write one span per runnable
or module call. :func:`arrange` folds them into the calls that
``quiver.integrations.langgraph`` and ``quiver.integrations.dspy`` record; other
traces are left as read.

**LangGraph** (spans whose ``metadata`` holds ``langgraph_node``):

* the graph's root span (``LangGraph``) is the trace: its input the trace's inputs,
  its output the trace's output;
* each span directly under it is one call of the graph node named by
  ``metadata.langgraph_node``, in ``langgraph_step`` order. The spans under it fold
  into that call: the first LLM span gives it its model, messages, response and usage
  (kind llm; its output stays the node's state update), a prompt template span its
  template hash; a second LLM span under one node is a call of its own (``llm``);
* the node's conditional edge (its last child: a chain span with no LLM span under it
  whose output is a destination or a list of them) is the node's decision: the gate is
  named as LangGraph names the branch (the routing function's name, ``condition`` for a
  lambda), the arm is the destination (a path-map label is resolved from
  the next step's ``branch:to:X`` triggers), ``__end__`` when the graph ends there;
* a node whose spans hold a tool span (a ``ToolNode``) is a ``tool`` call: its tool
  step the tool's name, arguments and ``ToolMessage`` content (a second tool a call of
  its own, named by the tool); a node with no LLM call that holds a retriever span or
  whose name says ``retriev`` is a ``retrieval`` call, its documents the first list of
  ``doc_id``/``content`` records in its update;
* parents: the calls of the previous step that triggered the node (those whose
  decision sent elsewhere left out) and the calls whose writes made the channels it
  reads (the keys of its input state): a channel's last write, every write of a channel
  that accumulates (a reducer: the state holds more than its last write), the input
  ``c0`` for a channel no node wrote. An update of one string (OpenInference writes it
  bare) wrote the channel holding that string in the next step's state;
* loops: a node that runs again in a later step closes a cycle. The loop is named after
  it, each of its runs starts an iteration, and the calls from one run to the next (and
  those of the cycle right after its last run) carry the iteration number;
  ``tags["loops"]`` counts the iterations as ``quiver.loop`` does.

**DSPy** (``Predict(...).forward``, ``*Adapter.__call__``, ``LM.__call__`` spans):

* the program's root module span is the trace;
* a predictor's spans (``Predict.forward``, ``Predict(Sig).forward``,
  ``ChatAdapter.__call__``, ``LM.__call__``) fold into one llm call: input and output
  the predictor's (the prediction's fields as a dict), model, messages, response and
  usage the LM's; an output field typed ``Literal[...]`` or ``bool`` is a routing
  field, its value the decision of the gate named by the field;
* it is named by its attribute path in the program (``router``, ``hops.gen_query``;
  ``answer`` for the predictor of a ``ChainOfThought`` at ``answer``) when the
  program's saved state is given (``dspy_program``: what ``program.save(PATH)``
  writes, keyed by ``named_predictors()``): the predictor whose instructions, fields
  and nesting depth match the span's signature. Without it, by the signature's name (a
  class signature's name; a string signature's output fields, ``reasoning`` left out);
* module spans between the root and the predictors (``Hop.forward``,
  ``ChainOfThought.forward``) are structure only: they fold away (kept in the trace's
  tags);
* parents: the earlier calls whose output values the call's input holds, else the call
  just before it;
* a module holding no other module (a retriever, a tool wrapper) is a node: named by its
  attribute path when the program itself is given (``dspy_program=program``: its
  ``named_sub_modules()``, the module of that class at that depth), else by its class
  (``retrieval`` when the class name says ``Retriev``);
* loops: each call of a module holding others (``Hop`` at ``hops``) is the next
  iteration of the loop named by its path (``hops``: the path of the calls under it
  without their last part; its class name when the program's state is not given).

Folded spans keep what the call did not map in ``tags["otel.absorbed"]`` (the LLM
span's serialized LangChain result with its ``lc_run--`` id among them).
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from quiver._errors import QuiverError

from .common import SourceSpan
from .values import parse_json

__all__ = ["arrange", "load_program_state"]

Note = Callable[[SourceSpan, str], None]

_KIND = "openinference.span.kind"
_DSPY_PREDICT = re.compile(r"^(?P<cls>\w+)\((?P<sig>.*)\)\.a?forward$", re.DOTALL)
_DSPY_MODULE = re.compile(r"^(?P<cls>\w+)\.a?forward$")
_END = "__end__"


def arrange(spans: list[SourceSpan], hints: Mapping[str, Any], note: Note) -> list[SourceSpan]:
    """The spans of one trace folded into the calls the framework integrations record."""
    if any(_meta(s).get("langgraph_node") for s in spans):
        return _LangGraph(spans).arrange()
    if any(_DSPY_PREDICT.match(s.name) for s in spans):
        return _DSPy(spans, hints.get("dspy_program"), note).arrange()
    return spans


def load_program_state(source: Any) -> dict[str, Any]:
    """A DSPy program's saved state (``program.save(PATH)``, ``dump_state()``) or the program itself:
    predictor paths to signatures, and (from a program) every module's path under ``"__modules__"``."""
    if callable(getattr(source, "dump_state", None)) and callable(getattr(source, "named_sub_modules", None)):
        predictors = {k: v for k, v in source.dump_state().items() if isinstance(v, Mapping) and "signature" in v}
        modules = [(name.removeprefix("self."), type(m).__name__) for name, m in source.named_sub_modules()
                   if name != "self"]
        return {**load_program_state(predictors), "__modules__": modules}
    if isinstance(source, Mapping):
        state: Any = dict(source)
        where = "dspy_program"
    else:
        path = Path(source)
        where = str(path)
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise QuiverError(f"{path}: cannot be read ({exc.strerror or exc}); give the JSON file "
                              "a DSPy program's save(PATH) wrote") from None
        except ValueError as exc:
            raise QuiverError(f"{path}: not JSON ({exc}); give the JSON file a DSPy program's save(PATH) "
                              "wrote") from None
    if not isinstance(state, Mapping):
        raise QuiverError(f"{where}: a JSON {type(state).__name__}, not an object of predictors; give the JSON "
                          "file a DSPy program's save(PATH) wrote")
    predictors = {k: v for k, v in state.items() if isinstance(v, Mapping) and isinstance(v.get("signature"), Mapping)}
    if not predictors:
        raise QuiverError(f"{where}: no predictor in it (entries with a 'signature'); give the state a DSPy "
                          "program's save(PATH) or dump_state() writes")
    return predictors


# --------------------------------------------------------------------------- shared


def _meta(span: SourceSpan) -> dict[str, Any]:
    meta = parse_json(span.attributes.get("metadata"))
    return meta if isinstance(meta, dict) else {}


def _kind(span: SourceSpan) -> str:
    return str(span.attributes.get(_KIND) or "").upper()


def _start(span: SourceSpan) -> tuple[Any, ...]:
    return (span.start_ns is None, span.start_ns or 0, span.span_id or "", span.index)


def _output(span: SourceSpan) -> Any:
    raw = span.attributes.get("output.value")
    return raw if span.attributes.get("output.mime_type") == "text/plain" else parse_json(raw)


class _Tree:
    def __init__(self, spans: list[SourceSpan]) -> None:
        self.spans = spans
        self.by_id: dict[str | None, SourceSpan] = {s.span_id: s for s in spans if s.span_id is not None}
        self.children: dict[str | None, list[SourceSpan]] = defaultdict(list)
        for span in spans:
            if span.parent_id in self.by_id:
                self.children[span.parent_id].append(span)
        for kids in self.children.values():
            kids.sort(key=_start)
        self.roots = [s for s in spans if s.parent_id not in self.by_id]

    def below(self, span: SourceSpan) -> list[SourceSpan]:
        """The spans under ``span``, depth first."""
        out: list[SourceSpan] = []
        stack = list(reversed(self.children.get(span.span_id, [])))
        seen = {id(span)}
        while stack:
            s = stack.pop()
            if id(s) in seen:
                continue
            seen.add(id(s))
            out.append(s)
            stack += reversed(self.children.get(s.span_id, []))
        return out


def _fold(into: SourceSpan, spans: Iterable[SourceSpan], llm: SourceSpan | None) -> None:
    """Fold ``spans`` into ``into``: the LLM span's ``llm.*`` attributes (and a prompt
    template's) become its own, the rest is kept in ``absorbed``."""
    for span in spans:
        copied: set[str] = set()
        if span is llm:
            copied = {k for k in span.attributes if k.startswith("llm.")}
            into.attributes[_KIND] = "LLM"
        elif _kind(span) == "PROMPT":
            copied = {k for k in span.attributes if k.startswith("llm.prompt_template.")
                      and k not in into.attributes}
        for key in copied:
            into.attributes[key] = span.attributes[key]
        rest = {k: v for k, v in span.attributes.items() if k not in copied and k != _KIND}
        into.absorbed.append({"name": span.name, "span_id": span.span_id, "kind": _kind(span) or None,
                              "attributes": rest})


def _number_loops(calls: list[SourceSpan]) -> dict[str, dict[str, Any]]:
    """Loops from calls of one node repeated along ``calls`` (see the module docstring)."""
    loops: dict[str, dict[str, Any]] = {}
    i, n = 0, len(calls)
    while i < n:
        head = calls[i].name
        runs = [j for j in range(i, n) if calls[j].name == head]
        if len(runs) < 2:
            i += 1
            continue
        body = {calls[j].name for j in range(runs[0], runs[-1])}
        end = runs[-1]
        while end + 1 < n and calls[end + 1].name in body and calls[end + 1].name != head:
            end += 1
        iteration = -1
        for j in range(runs[0], end + 1):
            iteration += calls[j].name == head
            calls[j].loop, calls[j].iteration = head, iteration
        loops.setdefault(head, {"k_max": None, "iterations": []})["iterations"].append(iteration + 1)
        i = end + 1
    return loops


# --------------------------------------------------------------------------- LangGraph


class _LangGraph:
    def __init__(self, spans: list[SourceSpan]) -> None:
        self.tree = _Tree(spans)

    def arrange(self) -> list[SourceSpan]:
        graphs = [r for r in self.tree.roots if not _meta(r).get("langgraph_node")]
        if len(graphs) != 1:
            return self.tree.spans
        root = graphs[0]
        nodes = [c for c in self.tree.children.get(root.span_id, []) if _meta(c).get("langgraph_node")]
        nodes.sort(key=lambda s: (_step(s), *_start(s)))
        known = {str(_meta(s)["langgraph_node"]) for s in nodes} | {_END}
        dropped: set[int] = set()
        extra: list[SourceSpan] = []
        edges: dict[int, tuple[str, Any]] = {}
        for node in nodes:
            node.name = str(_meta(node)["langgraph_node"])
            edge = self._edge(node)
            under = self.tree.below(node)
            llms = [s for s in under if _kind(s) == "LLM"]
            for later in llms[1:]:  # a second LLM call of one node is a call of its own
                later.name, later.parent_id = "llm", node.span_id
                extra.append(later)
            tools = [] if llms else [s for s in under if _kind(s) == "TOOL"]
            for later in tools[1:]:  # so is a second tool a ToolNode ran
                later.name, later.parent_id, later.tool = _tool_name(later), node.span_id, _tool_step(later)
                extra.append(later)
            folded = [s for s in under if s not in llms[1:] and s not in tools[1:]]
            _fold(node, folded, llms[0] if llms else None)
            if tools:
                node.attributes[_KIND], node.tool = "TOOL", _tool_step(tools[0])
            elif not llms and ("retriev" in node.name.lower() or any(_kind(s) == "RETRIEVER" for s in under)):
                _retrieved(node)
            dropped.update(id(s) for s in folded)
            if edge is not None:  # LangGraph names a branch after its routing function, else "condition"
                gate = "condition" if edge.name in ("RunnableCallable", "RunnableLambda") else edge.name
                edges[id(node)] = (gate, _output(edge))
        for i, node in enumerate(nodes):
            if id(node) in edges:
                gate, out = edges[id(node)]
                node.decision = {gate: self._arm(out, node, nodes[i + 1:], known)}
        self._link(root, nodes)
        root.as_trace = True
        loops = _number_loops(nodes)
        if loops:
            root.trace_tags = {"loops": loops}
        return [s for s in self.tree.spans if id(s) not in dropped or s in extra]

    def _edge(self, node: SourceSpan) -> SourceSpan | None:
        """The node's conditional edge: its last child, a chain span without an LLM span under
        it, whose output is a destination (a string) or several (a list of strings)."""
        kids = self.tree.children.get(node.span_id, [])
        if not kids:
            return None
        last = kids[-1]
        if _kind(last) != "CHAIN" or any(_kind(s) == "LLM" for s in self.tree.below(last)):
            return None
        out = _output(last)
        if isinstance(out, str) or (isinstance(out, list) and out and all(isinstance(x, str) for x in out)):
            return last
        return None

    @staticmethod
    def _arm(out: Any, node: SourceSpan, after: list[SourceSpan], known: set[str]) -> Any:
        if isinstance(out, str) and out in known:
            return out
        if isinstance(out, list) and all(x in known for x in out):
            return out
        later = [s for s in after if _step(s) > _step(node)]
        if not later:
            return _END
        first = min(_step(s) for s in later)
        peers = [s for s in after if _step(s) == _step(node)]
        if peers:  # another node of the same step may have triggered the next ones: keep the label
            return out
        triggered = sorted({t[len("branch:to:"):] for s in later if _step(s) == first
                            for t in _triggers(s) if t.startswith("branch:to:")})
        return triggered[0] if len(triggered) == 1 else triggered or out

    def _link(self, root: SourceSpan, nodes: list[SourceSpan]) -> None:
        """Parents: the calls that triggered the node (the previous step's, those whose decision
        sent elsewhere left out) and the calls whose writes made the channels it reads (the keys
        of its input state): the last write of a channel, every write of one that accumulates
        (a reducer: the state holds more than its last write), the graph's input for a channel
        no node wrote."""
        writes: dict[str, list[tuple[int, SourceSpan, Any]]] = defaultdict(list)
        accumulating: set[str] = set()
        for i, node in enumerate(nodes):
            step = _step(node)
            found: list[SourceSpan] = []
            before = [s for s in nodes if _step(s) < step]
            if before:
                last = max(_step(s) for s in before)
                sources = [s for s in before if _step(s) == last]
                sent = [s for s in sources if not s.decision or node.name in _arms(s.decision)]
                found += sent or sources
            state = parse_json(node.attributes.get("input.value"))
            for channel, value in (state.items() if isinstance(state, dict) else ()):
                made = [w for w in writes.get(channel, []) if w[0] < step]
                if not made:
                    found.append(root)
                    continue
                top = max(w[0] for w in made)
                latest = [w for w in made if w[0] == top]
                if isinstance(value, list) and all(isinstance(w[2], list) for w in latest) \
                        and len(value) > sum(len(w[2]) for w in latest):
                    accumulating.add(channel)
                found += [w[1] for w in (made if channel in accumulating else latest)]
            if not isinstance(state, dict) and not before:
                found.append(root)
            node.links = list(dict.fromkeys(s.span_id for s in found if s.span_id is not None))
            for channel, value in self._written(node, nodes[i + 1:], root).items():
                writes[channel].append((step, node, value))

    @staticmethod
    def _written(node: SourceSpan, after: list[SourceSpan], root: SourceSpan) -> dict[str, Any]:
        """The channels a node's update wrote, with their values. An update of one string is
        written as the string alone: its channel is the one holding that string in the next
        step's state (the graph's output after the last step), changed where one changed."""
        out = _output(node)
        if isinstance(out, dict):
            return {str(k): v for k, v in out.items()}
        if not isinstance(out, str):
            return {}
        later = [s for s in after if _step(s) > _step(node)]
        first = min((_step(s) for s in later), default=None)
        states = [parse_json(s.attributes.get("input.value")) for s in later if _step(s) == first] \
            if first is not None else [_output(root)]
        state = next((s for s in states if isinstance(s, dict)), None)
        if state is None:
            return {}
        given = parse_json(node.attributes.get("input.value"))
        given = given if isinstance(given, dict) else {}
        same = [k for k, v in state.items() if v == out]
        changed = [k for k in same if given.get(k) != out]
        return {k: out for k in (changed or same)}


def _tool_name(span: SourceSpan) -> str:
    return str(span.attributes.get("tool.name") or span.name)


def _tool_step(span: SourceSpan) -> tuple[str, Any, Any]:
    """A LangChain tool span's step: the tool's name, its arguments, the ``ToolMessage``'s content."""
    args = parse_json(span.attributes.get("input.value"))
    out = _output(span)
    data = out.get("data") if isinstance(out, dict) and out.get("type") == "tool" else None
    response = data.get("content", out) if isinstance(data, dict) else out
    return _tool_name(span), args if isinstance(args, dict) else {"input": args}, response


def _retrieved(node: SourceSpan) -> None:
    """A retrieval node: the first list of documents in its update (``doc_id`` or ``id``, and
    ``content``, ``page_content`` or ``text``) as its retrieved documents."""
    node.attributes[_KIND] = "RETRIEVER"
    out = _output(node)
    for value in (out.values() if isinstance(out, dict) else [out]):
        if isinstance(value, list) and value and all(
                isinstance(d, dict) and any(k in d for k in ("doc_id", "id"))
                and any(k in d for k in ("content", "page_content", "text")) for d in value):
            for i, doc in enumerate(value):
                for key, item in doc.items():
                    name = {"doc_id": "id", "page_content": "content", "text": "content"}.get(key, key)
                    if name in ("id", "content", "score", "metadata") and item is not None:
                        node.attributes[f"retrieval.documents.{i}.document.{name}"] = \
                            item if isinstance(item, (str, int, float)) else json.dumps(item)
            return


def _step(span: SourceSpan) -> int:
    step = _meta(span).get("langgraph_step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _triggers(span: SourceSpan) -> list[str]:
    triggers = _meta(span).get("langgraph_triggers")
    return [str(t) for t in triggers] if isinstance(triggers, list) else []


def _arms(decision: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for arm in decision.values():
        out.update(arm if isinstance(arm, list) else [arm])
    return out


# --------------------------------------------------------------------------- DSPy


_WRAPPERS = {"ChainOfThought", "ChainOfThoughtWithHint", "ProgramOfThought", "ReAct", "Refine", "BestOfN",
             "MultiChainComparison", "CodeAct"}
"""DSPy modules that wrap a predictor of their own (``self.predict``): the predictor is named after them."""
_INSTRUCTIONS = re.compile(r"""\binstructions=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.DOTALL)
_SIGNATURE_HEAD = re.compile(r"^\w+\((?P<inputs>[^\n]*?)->(?P<outputs>[^\n]*?)\n", re.DOTALL)


class _DSPy:
    def __init__(self, spans: list[SourceSpan], state: Mapping[str, Any] | None, note: Note) -> None:
        self.tree = _Tree(spans)
        self.state = state
        self.note = note

    def arrange(self) -> list[SourceSpan]:
        units = self._units()
        unit_ids = {id(u) for u, _ in units}  # a predictor called on its own is a call, not the trace
        modules = [r for r in self.tree.roots if _DSPY_MODULE.match(r.name) and id(r) not in unit_ids]
        root = modules[0] if len(modules) == 1 else None
        keep: list[SourceSpan] = []
        wrappers: dict[int, SourceSpan | None] = {}
        for unit, predict in units:
            under = self.tree.below(unit)
            llm = next((s for s in under if _kind(s) == "LLM"), None)
            adapter = next((s for s in under if s.name.endswith(("Adapter.__call__", "Adapter.acall"))), None)
            unit.name, wrappers[id(unit)] = self._name(unit, predict, adapter)
            _fold(unit, under, llm)
            prediction = _output(unit)
            if isinstance(prediction, dict):
                unit.decision = {f: prediction[f] for f in _routing_fields(adapter) if f in prediction}
            keep.append(unit)
        in_units = {id(s) for u, _ in units for s in self.tree.below(u)}
        out: list[SourceSpan] = []
        for span in self.tree.spans:
            if id(span) in in_units:
                continue
            module = _DSPY_MODULE.match(span.name)
            if span is root or span in keep or module is None or _kind(span) != "CHAIN":
                out.append(span)
            elif not self.tree.children.get(span.span_id):  # a module holding none: a node (retriever, tool)
                span.name = self._module_path(span, module["cls"])
                if "retriev" in span.name.lower():
                    span.attributes[_KIND] = "RETRIEVER"
                out.append(span)
            elif root is not None:  # a module holding others is structure: its calls number a loop
                root.absorbed.append({"name": span.name, "span_id": span.span_id, "kind": "CHAIN",
                                      "attributes": dict(span.attributes)})
            else:
                out.append(span)
        if root is None:
            return out
        root.as_trace = True
        calls = sorted((s for s in out if s is not root), key=_start)
        loops = self._loops(calls, root, wrappers)
        for span in calls:
            span.parent_id = root.span_id
        self._link(calls)
        if loops:
            root.trace_tags = {"loops": loops}
        return out

    def _loops(self, calls: list[SourceSpan], root: SourceSpan,
               wrappers: Mapping[int, SourceSpan | None]) -> dict[str, dict[str, Any]]:
        """Each call of a module holding others is the next iteration of the loop named by its
        path (the call's path without its last part; its class name without one)."""
        iterations: dict[str, list[str]] = defaultdict(list)
        for call in calls:
            wrapper = wrappers.get(id(call))
            holders = [a for a in self._ancestors(call) if a is not root and a is not wrapper
                       and _DSPY_MODULE.match(a.name) and self._ancestors(a) and a.span_id is not None]
            if not holders:
                continue
            holder = holders[0]
            name = call.name.rsplit(".", 1)[0] if "." in call.name else holder.name.rsplit(".", 1)[0]
            seen = iterations[name]
            if holder.span_id not in seen:
                seen.append(str(holder.span_id))
            call.loop, call.iteration = name, seen.index(str(holder.span_id))
        return {name: {"k_max": None, "iterations": [len(seen)]} for name, seen in iterations.items()}

    def _units(self) -> list[tuple[SourceSpan, SourceSpan]]:
        """Each predictor call: its outermost span (``Predict.forward``) and its ``Predict(Sig).forward`` span."""
        units = []
        for span in self.tree.spans:
            m = _DSPY_PREDICT.match(span.name)
            if m is None:
                continue
            parent = self.tree.by_id.get(span.parent_id)
            unit = parent if parent is not None and parent.name in (f"{m['cls']}.forward", f"{m['cls']}.aforward") \
                and _DSPY_PREDICT.match(parent.name) is None else span
            units.append((unit, span))
        outer = {id(u) for u, _ in units}
        # a predictor inside another predictor's spans (not seen in DSPy 3) stays inside it
        return [(u, p) for u, p in units if not any(id(a) in outer for a in self._ancestors(u))]

    def _ancestors(self, span: SourceSpan) -> list[SourceSpan]:
        out, seen = [], {id(span)}
        cur = self.tree.by_id.get(span.parent_id)
        while cur is not None and id(cur) not in seen:
            seen.add(id(cur))
            out.append(cur)
            cur = self.tree.by_id.get(cur.parent_id)
        return out

    def _name(self, unit: SourceSpan, predict: SourceSpan,
              adapter: SourceSpan | None) -> tuple[str, SourceSpan | None]:
        """The predictor's node name, and the module span that wraps it (a ``ChainOfThought``), if any."""
        m = _DSPY_PREDICT.match(predict.name)
        assert m is not None
        instructions, inputs, outputs = _signature(adapter)
        modules = [a for a in self._ancestors(unit) if _DSPY_MODULE.match(a.name)]
        enclosing = _DSPY_MODULE.match(modules[0].name) if len(modules) > 1 else None
        if self.state is not None and instructions is not None:
            found = self._path(instructions, inputs + outputs, len(modules))
            if found is not None:
                if found.endswith(".predict") and enclosing is not None and enclosing["cls"] != "Predict":
                    return found[: -len(".predict")], modules[0]
                return found, None
            self.note(unit, f"no predictor of the DSPy program has this span's signature "
                      f"({', '.join(inputs)} -> {', '.join(outputs)}); named after the signature")
        wrapper = modules[0] if enclosing is not None and enclosing["cls"] in _WRAPPERS else None
        if m["sig"] != "StringSignature":
            return m["sig"], wrapper
        shown = [f for f in outputs if f != "reasoning"] or outputs
        return (", ".join(shown) if shown else predict.name), wrapper

    def _module_path(self, span: SourceSpan, cls: str) -> str:
        """A module's attribute path: the program's module of that class at that depth; else its class name."""
        modules = self.state.get("__modules__", []) if self.state is not None else []
        depth = sum(1 for a in self._ancestors(span) if _DSPY_MODULE.match(a.name))
        found = [path for path, kind in modules if kind == cls and _depth(path) == depth]
        return found[0] if found else cls

    def _path(self, instructions: str, fields: list[str], depth: int) -> str | None:
        assert self.state is not None
        same = [path for path, entry in self.state.items() if path != "__modules__"
                and entry["signature"].get("instructions") == instructions
                and len(entry["signature"].get("fields") or []) == len(fields)]
        named = [p for p in same if _prefixes(self.state[p]) == [_squash(f) for f in fields]] or same
        deep = [p for p in named if _depth(p) == depth] or named
        return deep[0] if deep else None

    @staticmethod
    def _link(calls: list[SourceSpan]) -> None:
        produced: list[tuple[SourceSpan, set[str]]] = []
        for i, span in enumerate(calls):
            given = _strings(parse_json(span.attributes.get("input.value")))
            sources = [p for p, values in produced if values & given]
            if sources:
                span.links = [s.span_id for s in sources if s.span_id is not None]
            else:
                before = calls[i - 1].span_id if i else None
                span.links = [before] if before is not None else []
            produced.append((span, _strings(_output(span))))


def _signature(adapter: SourceSpan | None) -> tuple[str | None, list[str], list[str]]:
    """Instructions, input and output fields of the signature an adapter span was called with."""
    given = parse_json(adapter.attributes.get("input.value")) if adapter is not None else None
    text = given.get("signature") if isinstance(given, dict) else None
    if not isinstance(text, str):
        return None, [], []
    head = _SIGNATURE_HEAD.match(text + "\n")
    inputs = [f.strip() for f in head["inputs"].split(",") if f.strip()] if head else []
    outputs = [f.strip() for f in head["outputs"].split(",") if f.strip()] if head else []
    m = _INSTRUCTIONS.search(text)
    try:
        instructions = ast.literal_eval(m.group(1)) if m else None
    except (ValueError, SyntaxError):
        instructions = None
    return (instructions if isinstance(instructions, str) else None), inputs, outputs


_ROUTING_FIELD = re.compile(r"^\s+(\w+) = Field\(annotation=(?:Literal\[|bool\b).*'__dspy_field_type': 'output'",
                            re.MULTILINE)


def _routing_fields(adapter: SourceSpan | None) -> list[str]:
    """The output fields typed ``Literal[...]`` or ``bool`` of the adapter span's signature: routing fields,
    whose values are decisions (gate: the field)."""
    given = parse_json(adapter.attributes.get("input.value")) if adapter is not None else None
    text = given.get("signature") if isinstance(given, dict) else None
    return _ROUTING_FIELD.findall(text) if isinstance(text, str) else []


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _prefixes(entry: Mapping[str, Any]) -> list[str]:
    return [_squash(str(f.get("prefix", ""))) for f in entry["signature"].get("fields") or [] if isinstance(f, Mapping)]


def _depth(path: str) -> int:
    return len(re.findall(r"[.\[]", path)) + 1


def _strings(value: Any, depth: int = 0) -> set[str]:
    """The non-empty strings of a value, down to lists and mappings two levels deep."""
    if isinstance(value, str):
        return {value} if value.strip() else set()
    if depth > 2:
        return set()
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        return {s for v in value for s in _strings(v, depth + 1)}
    return set()
