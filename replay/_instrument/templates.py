"""Prompt templates registered by id.

A pipeline registers each prompt once with :func:`template` and asks the LLM client
for it by id (or passes the :class:`Template`). Because the lookup happens at call
time, a replay can swap a template for a variant without touching the pipeline:
:func:`template_overrides` installs replacements for the current context.

A template is a list of chat messages whose contents are ``str.format`` strings
(``{query}``; write ``{{`` and ``}}`` for literal braces). Template files hold one
message per section, introduced by a line that is exactly ``[system]``, ``[user]`` or
``[assistant]``; a file without section lines is a single user message.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import string
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiver._canonical import canonical_json, content_hash
from quiver._errors import InstrumentationError

if TYPE_CHECKING:
    from quiver._trace import PromptInfo

__all__ = [
    "Template",
    "template",
    "get_template",
    "registered_templates",
    "load_template_file",
    "template_overrides",
]

_SECTION = re.compile(r"^\[(system|user|assistant)\]\s*$")


@dataclass(frozen=True)
class Template:
    """A registered prompt template.

    Attributes:
        id: The id it is registered under.
        messages: ``(role, content template)`` pairs.
    """

    id: str
    messages: tuple[tuple[str, str], ...]

    @property
    def hash(self) -> str:
        """``sha256:`` of the template's source (roles and unfilled contents)."""
        return content_hash(canonical_json([list(m) for m in self.messages]))

    @property
    def variables(self) -> list[str]:
        """The names of the variables the template fills in, sorted."""
        names = {
            field.split(".")[0].split("[")[0]
            for _, content in self.messages
            for _, field, _, _ in string.Formatter().parse(content)
            if field
        }
        return sorted(names)

    def render(self, variables: Mapping[str, Any]) -> PromptInfo:
        """Fill in ``variables`` and return the prompt as the trace records it."""
        from quiver._trace import Message, PromptInfo

        missing = [v for v in self.variables if v not in variables]
        if missing:
            raise InstrumentationError(
                f"template {self.id!r} needs variable(s) {', '.join(missing)}; "
                f"it uses {', '.join(self.variables) or 'none'} and got "
                f"{', '.join(sorted(variables)) or 'none'}"
            )
        assembled = [
            Message(role=role, content=content.format_map(dict(variables)))
            for role, content in self.messages
        ]
        fragments = [self.hash] + [content_hash(variables[name]) for name in self.variables]
        return PromptInfo(
            template_id=self.id, template_hash=self.hash, assembled=assembled, fragments=fragments
        )


_registry: dict[str, Template] = {}
_registry_lock = threading.Lock()
_overrides: contextvars.ContextVar[Mapping[str, Template] | None] = contextvars.ContextVar(
    "quiver_template_overrides", default=None
)


def _build(
    id: str,
    text: str | None,
    system: str | None,
    user: str | None,
    messages: list[dict[str, str]] | list[tuple[str, str]] | None,
    path: str | os.PathLike[str] | None,
) -> Template:
    given = [name for name, v in (("text", text), ("messages", messages), ("path", path)) if v is not None]
    if system is not None or user is not None:
        given.append("system/user")
    if len(given) != 1:
        raise InstrumentationError(
            f"template {id!r}: give exactly one of text=, system=/user=, messages= or path=; "
            f"got {', '.join(given) or 'none'}"
        )
    if path is not None:
        return Template(id, load_template_file(path))
    if text is not None:
        return Template(id, (("user", text),))
    if messages is not None:
        pairs = tuple(
            (m["role"], m["content"]) if isinstance(m, Mapping) else (m[0], m[1]) for m in messages
        )
        return Template(id, pairs)
    pairs = tuple((role, c) for role, c in (("system", system), ("user", user)) if c is not None)
    return Template(id, pairs)


def template(
    id: str,
    text: str | None = None,
    *,
    system: str | None = None,
    user: str | None = None,
    messages: list[dict[str, str]] | list[tuple[str, str]] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> Template:
    """Register a prompt template under ``id`` and return it.

    Give the prompt one way: ``text`` (one user message), ``system``/``user``,
    ``messages`` (a list of ``{"role", "content"}``), or ``path`` (a template file).
    Registering the same id again with the same content is a no-op; with different
    content it replaces the template (a module reloaded with an edited prompt).
    """
    built = _build(id, text, system, user, messages, path)
    with _registry_lock:
        _registry[id] = built
    return built


def get_template(id: str) -> Template:
    """Return the template registered as ``id``, or its override in this context."""
    overrides = _overrides.get()
    if overrides and id in overrides:
        return overrides[id]
    with _registry_lock:
        found = _registry.get(id)
        known = sorted(_registry)
    if found is None:
        raise InstrumentationError(
            f"no template is registered as {id!r}; registered: {', '.join(known) or 'none'}"
        )
    return found


def registered_templates() -> dict[str, Template]:
    """A snapshot of the registry."""
    with _registry_lock:
        return dict(_registry)


def load_template_file(path: str | os.PathLike[str]) -> tuple[tuple[str, str], ...]:
    """Read a template file into ``(role, content)`` pairs (see the module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstrumentationError(f"cannot read template file {p}: {exc.strerror}") from None
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            sections.append((match.group(1), []))
        elif sections:
            sections[-1][1].append(line)
        elif line.strip():
            sections.append(("user", [line]))
    if not sections:
        raise InstrumentationError(f"template file {p} is empty")
    return tuple((role, "\n".join(lines).strip("\n")) for role, lines in sections)


@contextlib.contextmanager
def template_overrides(overrides: Mapping[str, Template]) -> Iterator[None]:
    """Serve ``overrides`` instead of the registered templates within the block."""
    current = dict(_overrides.get() or {})
    current.update(overrides)
    token = _overrides.set(current)
    try:
        yield
    finally:
        _overrides.reset(token)
