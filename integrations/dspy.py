# mypy: disable-error-code="import-untyped"
# (DSPy ships no type information)
"""DSPy programs recorded and replayed without glue: ``instrument(program)``.

::

    import dspy
    from quiver.integrations.dspy import instrument

    program = instrument(MultiHop())          # the one added line
    program(question="...")                   # recorded inside `quiver record`

What it adds to a program, in place (the program is returned for chaining):

* **Node names are attribute paths.** A ``dspy.Predict`` or ``dspy.ChainOfThought`` at
  ``self.router`` is the ``llm`` node ``router``; one at ``self.hops.gen_query`` is
  ``hops.gen_query``; items of a list are ``hops[0]``, ``hops[1]``. A predictor call is
  one node call and its chat completion (captured at the transport by
  ``quiver.replay``) lands on it: one LLM call per predictor call. A module that holds no
  other module (a retriever, a tool wrapper) is a node too: ``retrieval`` when it is a
  ``dspy.Retrieve`` or its class name says ``Retriev``, else ``transform``.
* **Loops.** A module that holds other modules (``self.hops`` called once per hop)
  numbers its calls in a trace as iterations of the loop named by its path, so the
  nodes called inside it record ``loop="hops"`` and ``iteration=k``. A ``dspy.ReAct`` at
  ``agent`` numbers its ``agent.react`` steps as iterations of the loop ``agent``.
* **Decisions.** An output field typed ``Literal[...]`` or ``bool`` is a routing field:
  its value is recorded as the decision of the gate named by the field, and the node
  declares it (``categorical`` with its categories, or ``bool``, role ``routing``) so
  that ``categorical_flip`` and the analysis know it. ``reasoning`` is declared
  observability.
* **Predictions as dicts.** A node's ``dspy.Prediction`` is recorded as the dict of its
  fields; a replay that serves the node returns a ``Prediction`` rebuilt from that dict
  (fields typed other than ``str`` validated back to their annotation).
* **Prompts as templates.** Each predictor's signature instructions are registered as
  the quiver template named by its node (``router``), each field's description as
  ``router:question``. The recorded LLM call names the instructions template, so a
  ``prompt_swap`` of that node replaces them: inside the replay, the variant's text
  becomes the signature's instructions when the adapter formats the prompt (the field
  structure and the inputs are DSPy's as always). A variant is a template like any
  other: ``{{`` and ``}}`` for literal braces; it uses no variables.
* **Tools.** Each tool of a ``dspy.ReAct`` at ``agent`` is the ``tool`` node
  ``agent.<tool name>``, recorded with its tool step (``quiver.tool_step``) and served
  by a replay while the tools are frozen.
* **DSPy's response cache is bypassed inside a recording or a replay** (each predictor
  call asks ``dspy.LM`` for ``cache=False``): a cached answer makes no request, so the
  engine could neither record nor serve it, and one cache entry would answer every
  sample key (three repeats of an input would be one sample). Outside a recording the
  program and its cache behave as before.

Outside a recording every wrapper calls straight through.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import types
import typing
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import quiver
from quiver.integrations._body import Body
from quiver.replay._instrument import (
    OpenCall,
    Template,
    current_builder,
    get_template,
    registered_templates,
    template,
)

if TYPE_CHECKING:
    import dspy

__all__ = ["instrument", "node_names"]

_MARK = "_quiver_dspy"
"""The attribute an instrumented module carries (its node, loop or prompt role)."""


# --------------------------------------------------------------------------- values


def _jsonable(value: Any) -> Any:
    """A DSPy value as recorded JSON: Predictions and Examples become dicts of their fields."""
    import dspy

    if isinstance(value, dspy.Example):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return quiver.to_jsonable(value)


def _validated(annotation: Any, value: Any) -> Any:
    """A recorded JSON value validated back to a field's annotation (as it was, on failure)."""
    if annotation in (str, Any, None) or value is None:
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(annotation).validate_python(value)
    except (ValidationError, TypeError, ValueError):
        return value


# --------------------------------------------------------------------------- prompts


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _text_of(t: Template) -> str:
    """A template's text as DSPy reads it: its messages joined, literal braces undoubled."""
    joined = "\n\n".join(content for _, content in t.messages)
    try:
        return joined.format_map({})
    except (KeyError, IndexError, ValueError, AttributeError):
        return joined


@dataclass
class _Prompt:
    """The templates of one predictor: its instructions, and each field's description."""

    id: str
    instructions: Template
    descriptions: dict[str, Template]

    @classmethod
    def register(cls, tid: str, signature: Any) -> _Prompt:
        instructions = template(tid, system=_escaped(signature.instructions or ""))
        descriptions = {
            name: template(f"{tid}:{name}", system=_escaped(str((f.json_schema_extra or {}).get("desc", ""))))
            for name, f in signature.fields.items()
        }
        return cls(tid, instructions, descriptions)

    @staticmethod
    def _swapped(mine: Template) -> str | None:
        """The variant's text when a replay has swapped this template, else None."""
        current = get_template(mine.id)
        if current == mine or current == registered_templates().get(mine.id):
            return None
        return _text_of(current)

    def signature(self, signature: Any) -> Any | None:
        """``signature`` with the swapped instructions and descriptions, or None when none is."""
        changed = False
        text = self._swapped(self.instructions)
        if text is not None:
            signature, changed = signature.with_instructions(text), True
        for name, desc in self.descriptions.items():
            text = self._swapped(desc)
            if text is not None and name in signature.fields:
                signature, changed = signature.with_updated_fields(name, desc=text), True
        return signature if changed else None


# --------------------------------------------------------------------------- nodes


_KIND_OF_ANNOTATION: list[tuple[type, str]] = [(bool, "bool"), (int, "numeric"), (float, "numeric"),
                                                (str, "text"), (list, "list"), (dict, "mapping")]


def _field_spec(name: str, annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"type": "categorical", "role": "routing", "categories": list(typing.get_args(annotation))}
    if annotation is bool:
        return {"type": "bool", "role": "routing"}
    if name == "reasoning":
        return {"type": "text", "role": "observability"}
    base = origin or annotation
    for kind_type, kind in _KIND_OF_ANNOTATION:
        if isinstance(base, type) and issubclass(base, kind_type):
            return {"type": kind, "role": "context"}
    return {"type": "json", "role": "context"}


def _is_gate(annotation: Any) -> bool:
    return annotation is bool or typing.get_origin(annotation) is typing.Literal


@dataclass
class _Node:
    """What an instrumented module records as one node call."""

    name: str
    kind: quiver.CallKind
    signature: Any = None
    """The predictor's signature (llm nodes), for restoring and for decisions."""
    prompt: _Prompt | None = None
    react: _React | None = None
    """The ReAct whose steps this node is (its ``react`` predictor), if any."""
    params: inspect.Signature | None = None

    def inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.signature is not None:
            return {k: _jsonable(v) for k, v in kwargs.items() if k in self.signature.input_fields}
        if self.params is not None:
            try:
                bound = self.params.bind(*args, **kwargs)
                return {k: _jsonable(v) for k, v in bound.arguments.items()}
            except TypeError:
                pass
        return {"args": _jsonable(list(args)), "kwargs": _jsonable(kwargs)}

    def restore(self, output: Any) -> Any:
        """A served (recorded) output as the module returns it."""
        import dspy

        if not isinstance(output, dict):
            return output
        if self.signature is None:
            return dspy.Prediction(**output)
        fields = self.signature.output_fields
        values = {k: _validated(fields[k].annotation, v) if k in fields else v for k, v in output.items()}
        return dspy.Prediction.from_completions([values], signature=self.signature)

    def served(self, call: OpenCall) -> Any:
        """The output a replay serves (the recorded one, or the perturbed one at the target),
        with the routing fields' decisions taken from it: a flipped ``route`` is the route taken."""
        output = call.serve()
        if self.signature is not None and call.record is not None and isinstance(output, dict):
            for name, f in self.signature.output_fields.items():
                value = output.get(name)
                if _is_gate(f.annotation) and isinstance(value, (str, bool, int)):
                    call.record.decision[name] = value
        return output

    def finish(self, call: OpenCall, result: Any) -> Any:
        """Record what the body returned (decisions, retrieval set, prompt); return the output."""
        output = _jsonable(result)
        record = call.record
        if self.signature is not None and isinstance(output, dict):
            for name, f in self.signature.output_fields.items():
                value = output.get(name)
                if _is_gate(f.annotation) and isinstance(value, (str, bool, int)):
                    quiver.decide(name, value)
        if self.kind == "retrieval" and isinstance(output, dict) and _passages(output) is not None:
            quiver.retrieved(_passages(output) or [])
        if record is not None and self.prompt is not None and record.prompt is not None \
                and record.prompt.template_id is None:
            t = get_template(self.prompt.instructions.id)  # a replay's variant when it stands in for them
            record.prompt = record.prompt.model_copy(update={
                "template_id": t.id, "template_hash": t.hash,
                "fragments": [t.hash, *(quiver.content_hash(v) for v in _user_contents(record))],
            })
        return output


def _user_contents(record: Any) -> list[str]:
    """The user message contents of a call's assembled prompt (its filled-in fragments)."""
    return [m.content for m in record.prompt.assembled if m.role != "system"]


def _passages(output: dict[str, Any]) -> list[dict[str, str]] | None:
    """A retrieval output's passages as quiver.retrieved documents (``Title | text`` -> id Title)."""
    passages = output.get("passages")
    if not isinstance(passages, list) or not all(isinstance(p, str) for p in passages):
        return None
    docs = []
    for p in passages:
        title, sep, _ = p.partition(" | ")
        docs.append({"doc_id": title if sep else quiver.content_hash(p)[7:23], "content": p})
    return docs


def _run(node: _Node, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if current_builder.get() is None:
        return fn(*args, **kwargs)
    with _step(node):
        call = OpenCall.open(node.name, node.kind, node.inputs(args, kwargs), ())
        body = _body(node, call)
        if body is None:
            return node.restore(node.served(call))
        with body.running():
            result = fn(*args, **kwargs)
        return body.done(result)


async def _arun(node: _Node, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if current_builder.get() is None:
        return await fn(*args, **kwargs)
    with _step(node):
        call = OpenCall.open(node.name, node.kind, node.inputs(args, kwargs), ())
        body = _body(node, call)
        if body is None:
            return node.restore(node.served(call))
        with body.running():
            result = await fn(*args, **kwargs)
        return body.done(result)


def _body(node: _Node, call: OpenCall) -> Body | None:
    """How the call's body runs (:class:`~quiver.integrations._body.Body`), or None when
    the replay serves it from the recording. Closing it records what the body returned
    (:meth:`_Node.finish`); a failure there closes the call with that error."""
    directive = call.directive
    if directive is not None and directive.skip_body:
        return None

    def close(result: Any, error: BaseException | None) -> Any:
        if error is not None:
            call.exit(None, error)
            return None
        try:
            output = node.finish(call, result)
        except BaseException as exc:
            call.exit(None, exc)
            raise
        call.exit(output, None)
        return result

    return Body(call.enter, close, directive)


# --------------------------------------------------------------------------- loops


@dataclass(eq=False)
class _React:
    """A ReAct module: its path names the loop its steps are iterations of."""

    path: str


_react_step: contextvars.ContextVar[tuple[_React, list[int]] | None] = contextvars.ContextVar(
    "quiver_dspy_react_step", default=None
)
_loop_counts: weakref.WeakKeyDictionary[Any, Counter[str]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def _step(node: _Node) -> Iterator[None]:
    """The iteration a node call belongs to, when it is a ReAct step or one of its tools."""
    state = _react_step.get()
    if state is None or node.react is not state[0]:
        yield
        return
    if node.kind == "llm":
        state[1][0] += 1
    with quiver.iteration(state[0].path, max(state[1][0], 0)):
        yield


@contextlib.contextmanager
def _numbered(path: str) -> Iterator[None]:
    """One call of a module holding others: the next iteration of the loop ``path`` in this trace."""
    builder = current_builder.get()
    if builder is None:
        yield
        return
    counts = _loop_counts.setdefault(builder, Counter())
    k = counts[path]
    counts[path] += 1
    with quiver.iteration(path, k):
        yield


@contextlib.contextmanager
def _react_loop(react: _React) -> Iterator[None]:
    token = _react_step.set((react, [-1]))
    try:
        yield
    finally:
        _react_step.reset(token)


# --------------------------------------------------------------------------- wrapping


@dataclass
class _Role:
    """How one module is instrumented."""

    node: _Node | None = None
    loop: str | None = None
    react: _React | None = None
    prompt: _Prompt | None = None
    names: list[str] = field(default_factory=list)


def _node_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    role: _Role = getattr(self, _MARK)
    original = functools.partial(type(self).forward, self)
    if role.prompt is not None:
        original = functools.partial(_predict_forward, self)
    if role.node is not None:
        return _run(role.node, original, args, kwargs)
    if role.react is not None:
        with _react_loop(role.react):
            return original(*args, **kwargs)
    assert role.loop is not None
    with _numbered(role.loop):
        return original(*args, **kwargs)


async def _node_aforward(self: Any, *args: Any, **kwargs: Any) -> Any:
    role: _Role = getattr(self, _MARK)
    original = functools.partial(type(self).aforward, self)
    if role.prompt is not None:
        original = functools.partial(_predict_aforward, self)
    if role.node is not None:
        return await _arun(role.node, original, args, kwargs)
    if role.react is not None:
        with _react_loop(role.react):
            return await original(*args, **kwargs)
    assert role.loop is not None
    with _numbered(role.loop):
        return await original(*args, **kwargs)


def _predict_kwargs(self: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A predictor call's keywords inside a recording: the swapped signature, no DSPy cache."""
    import dspy

    if current_builder.get() is None:
        return kwargs
    role: _Role = getattr(self, _MARK)
    kwargs = dict(kwargs)
    assert role.prompt is not None
    swapped = role.prompt.signature(kwargs.get("signature", self.signature))
    if swapped is not None:
        kwargs["signature"] = swapped
    lm = kwargs.get("lm") or self.lm or dspy.settings.lm
    if isinstance(lm, dspy.LM):
        kwargs["config"] = {**kwargs.get("config", {}), "cache": False}
    return kwargs


def _predict_forward(self: Any, **kwargs: Any) -> Any:
    return type(self).forward(self, **_predict_kwargs(self, kwargs))


async def _predict_aforward(self: Any, **kwargs: Any) -> Any:
    return await type(self).aforward(self, **_predict_kwargs(self, kwargs))


def _prompt_only_forward(self: Any, **kwargs: Any) -> Any:
    return _predict_forward(self, **kwargs)


async def _prompt_only_aforward(self: Any, **kwargs: Any) -> Any:
    return await _predict_aforward(self, **kwargs)


def _install(module: Any, role: _Role, *, prompt_only: bool = False) -> None:
    setattr(module, _MARK, role)
    if prompt_only:
        module.forward = types.MethodType(_prompt_only_forward, module)
        module.aforward = types.MethodType(_prompt_only_aforward, module)
    else:
        module.forward = types.MethodType(_node_forward, module)
        module.aforward = types.MethodType(_node_aforward, module)


class _RecordedTool:
    """A ReAct tool that records each call as a ``tool`` node with its tool step."""

    def __init__(self, tool: Any, node: _Node) -> None:
        self.tool = tool
        self.node = node

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("tool", "node"):
            raise AttributeError(name)
        return getattr(self.tool, name)

    def _call(self, **kwargs: Any) -> Any:
        result = self.tool(**kwargs)
        quiver.tool_step(self.tool.name, kwargs, result)
        return result

    async def _acall(self, **kwargs: Any) -> Any:
        result = await self.tool.acall(**kwargs)
        quiver.tool_step(self.tool.name, kwargs, result)
        return result

    def __call__(self, **kwargs: Any) -> Any:
        return _run(self.node, self._call, (), kwargs)

    async def acall(self, **kwargs: Any) -> Any:
        return await _arun(self.node, self._acall, (), kwargs)


# --------------------------------------------------------------------------- the walk


def _join(prefix: str, name: str) -> str:
    if not prefix:
        return name
    return f"{prefix}{name}" if name.startswith("[") else f"{prefix}.{name}"


def _children(module: Any) -> Iterator[tuple[str, Any]]:
    """The modules a module holds, with their path segments (attributes, list items, dict keys)."""
    import dspy

    for attr, value in vars(module).items():
        if attr.startswith("_"):
            continue
        if isinstance(value, dspy.Module):
            yield attr, value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, dspy.Module):
                    yield f"{attr}[{i}]", item
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, dspy.Module):
                    yield f"{attr}[{key}]", item


def _declare(node: _Node) -> None:
    if node.signature is None:  # a retriever returns passages (dspy.Retrieve's contract); the rest is inferred
        passages = {"passages": {"type": "list", "role": "context"}} if node.kind == "retrieval" else {}
        quiver.node(node.name, kind=node.kind, fields=passages)
        return
    fields = {name: _field_spec(name, f.annotation) for name, f in node.signature.output_fields.items()}
    quiver.node(node.name, kind=node.kind, fields=fields)


def _predictor(module: Any, name: str, names: list[str], react: _React | None = None) -> None:
    """A Predict or ChainOfThought at ``name``: an llm node, its inner Predict's prompt registered."""
    import dspy

    inner = module.predict if isinstance(module, dspy.ChainOfThought) else module
    prompt = _Prompt.register(name, inner.signature)
    node = _Node(name, "llm", signature=inner.signature, prompt=prompt, react=react)
    _declare(node)
    if inner is module:
        _install(module, _Role(node=node, prompt=prompt))
    else:
        _install(inner, _Role(prompt=prompt), prompt_only=True)
        _install(module, _Role(node=node))
    names.append(name)


def _leaf_kind(module: Any) -> quiver.CallKind:
    import dspy

    if isinstance(module, dspy.Retrieve) or "retriev" in type(module).__name__.lower():
        return "retrieval"
    return "transform"


def _walk(module: Any, path: str, names: list[str], seen: set[int], *, root: bool = False) -> None:
    import dspy

    if id(module) in seen:
        return
    seen.add(id(module))
    name = path or type(module).__name__
    if isinstance(module, (dspy.Predict, dspy.ChainOfThought)):
        _predictor(module, name, names)
        return
    if isinstance(module, dspy.ReAct):
        react = _React(name)
        _predictor(module.react, _join(path, "react"), names, react)
        _predictor(module.extract, _join(path, "extract"), names)
        for tool_name, tool in list(module.tools.items()):
            node = _Node(_join(path, tool_name), "tool", react=react)
            _declare(node)
            module.tools[tool_name] = _RecordedTool(tool, node)
            names.append(node.name)
        seen.update({id(module.react), id(module.extract)})
        _install(module, _Role(react=react))
        return
    children = list(_children(module))
    if not children:
        params = inspect.signature(type(module).forward)
        node = _Node(name, _leaf_kind(module), params=_without_self(params))
        _declare(node)
        _install(module, _Role(node=node))
        names.append(name)
        return
    if not root:
        _install(module, _Role(loop=name))
    for segment, child in children:
        _walk(child, _join(path, segment), names, seen)


def _without_self(params: inspect.Signature) -> inspect.Signature:
    return params.replace(parameters=list(params.parameters.values())[1:])


def instrument(program: dspy.Module, *, name: str | None = None) -> dspy.Module:
    """Instrument a DSPy program in place and return it (see the module docstring).

    Args:
        program: The program (any ``dspy.Module``; a single ``dspy.Predict`` too).
        name: The node name of ``program`` itself when it is a predictor or a leaf
            module, and the prefix of every node when given (``name.router``); by default
            nodes are the attribute paths from the program (``router``) and a lone
            predictor is named by its class (``Predict``).

    Instrumenting the same program twice changes nothing the second time.

    Raises:
        InstrumentationError: ``program`` is not a ``dspy.Module``.
    """
    import dspy

    if not isinstance(program, dspy.Module):
        raise quiver.InstrumentationError(
            f"instrument() takes a dspy.Module (a program, or a Predict/ChainOfThought/ReAct); "
            f"got {type(program).__name__}"
        )
    if hasattr(program, _MARK):
        return program
    names: list[str] = []
    _walk(program, name or "", names, set(), root=True)
    if not hasattr(program, _MARK):
        setattr(program, _MARK, _Role(names=names))
    else:
        getattr(program, _MARK).names = names
    return program


def node_names(program: dspy.Module) -> list[str]:
    """The node names an instrumented program records, in the order they were found.

    Raises:
        InstrumentationError: ``program`` was not instrumented.
    """
    role = getattr(program, _MARK, None)
    if role is None:
        raise quiver.InstrumentationError(
            f"{type(program).__name__} is not instrumented; call quiver.integrations.dspy.instrument(program) first"
        )
    return list(role.names)
