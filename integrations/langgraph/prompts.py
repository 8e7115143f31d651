"""``ChatPromptTemplate``s as quiver templates, so that ``prompt_swap`` works.

A template a node formats is registered as a quiver template (:func:`register_prompt`);
formatting inside an instrumented node goes through the quiver registry
(:func:`_patch_prompt_templates`), which renders a replay's variant in its place; the
LLM call the prompt feeds records the template id (:func:`_name_prompt`).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

from quiver import InstrumentationError
from quiver.replay._instrument import (
    Template,
    get_template,
    registered_templates,
    template,
)

from .graph import _node, _NodeCall
from .values import _ROLES, to_json

__all__ = ["register_prompt"]

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

