"""The request a simulated model sees: :class:`SimRequest`, and its validation.

:meth:`SimRequest.from_openai` builds a request from an OpenAI chat completion body; a
missing parameter or a wrong type or value raises :class:`SimRequestError`, which the
simulator answers with a 400. :mod:`quiver.replay._sim` re-exports both names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from quiver._errors import SimulatorError

__all__ = [
    "SimRequest",
    "SimRequestError",
]

MAX_SCHEMA_DEPTH = 64
"""The deepest nesting of objects and arrays a ``json_schema`` response format's schema
may have (an object property adds two levels: ``properties`` and the property's schema)."""

_RESPONSE_FORMATS = ("text", "json_object", "json_schema")


class SimRequestError(SimulatorError):
    """A chat completion request the simulator cannot serve (an HTTP 400).

    Attributes:
        param: The request parameter at fault (``"temperature"``), when there is one.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class SimRequest:
    """A chat completion request as the simulated models see it.

    Attributes:
        model: The model name.
        messages: The messages as sent, ``{"role": ..., "content": ...}`` dicts; a
            ``content`` may be a string, a list of ``{"type": "text", "text": ...}``
            parts, or ``None``.
        temperature: Sampling temperature, ``>= 0`` (OpenAI's default 1.0).
        top_p: Nucleus mass in ``(0, 1]``.
        seed: The request's ``seed`` parameter (it only enters the sample hash).
        max_tokens: Cap on the words of a text answer, ``>= 1``, or ``None``.
        n: Number of choices, ``>= 1``.
        response_format: The ``response_format`` parameter as sent, or ``None``.
        sample_key: The ``X-Quiver-Sample-Key`` header (``""`` when absent).
        logprobs: Whether to return log-probabilities.
        top_logprobs: How many alternatives to list per log-probability entry.
        tools: The ``tools`` parameter as sent (``{"type": "function", "function":
            {"name", "description", "parameters"}}`` objects), or ``None``.
        tool_choice: The ``tool_choice`` parameter as sent (``"auto"``, ``"none"``,
            ``"required"`` or ``{"type": "function", "function": {"name": ...}}``), or
            ``None``.
    """

    model: str
    messages: tuple[Mapping[str, Any], ...]
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = None
    n: int = 1
    response_format: Mapping[str, Any] | None = None
    sample_key: str = ""
    logprobs: bool = False
    top_logprobs: int = 0
    tools: tuple[Mapping[str, Any], ...] | None = None
    tool_choice: str | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(_check_messages(self.messages)))
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(_check_tools(self.tools)))
        _check_request_values(self)

    @classmethod
    def from_openai(cls, body: Mapping[str, Any], sample_key: str = "") -> SimRequest:
        """Build a request from an OpenAI chat completion body.

        ``null`` values mean the OpenAI default; ``max_completion_tokens`` is read when
        ``max_tokens`` is absent; parameters the simulator does not use are ignored.

        Raises:
            SimRequestError: A parameter is missing or has a wrong type or value (a
                content part's ``text`` that is not a string, a ``response_format``
                whose ``type`` is not ``text``, ``json_object`` or ``json_schema``, a
                schema that is not an object or nests deeper than
                :data:`MAX_SCHEMA_DEPTH` levels).
        """
        if "model" not in body:
            raise SimRequestError("missing required parameter: 'model'", "model")
        if "messages" not in body:
            raise SimRequestError("missing required parameter: 'messages'", "messages")
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_completion_tokens")
        return cls(
            model=body["model"],
            messages=body["messages"],
            temperature=_default(body.get("temperature"), 1.0),
            top_p=_default(body.get("top_p"), 1.0),
            seed=body.get("seed"),
            max_tokens=max_tokens,
            n=_default(body.get("n"), 1),
            response_format=body.get("response_format"),
            sample_key=sample_key,
            logprobs=_default(body.get("logprobs"), False),
            top_logprobs=_default(body.get("top_logprobs"), 0),
            tools=body.get("tools") or None,
            tool_choice=body.get("tool_choice"),
        )

    @property
    def system_text(self) -> str:
        """The contents of the system (and developer) messages, joined by newlines."""
        return _join(self.messages, {"system", "developer"})

    @property
    def user_text(self) -> str:
        """The contents of the user messages, joined by newlines."""
        return _join(self.messages, {"user"})

    @property
    def last_user(self) -> str:
        """The content of the last user message (``""`` when there is none)."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return _content_text(message)
        return ""

    @property
    def text(self) -> str:
        """The contents of all messages, joined by newlines."""
        return _join(self.messages, None)

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the tools the model may call now: every offered tool, none under
        ``tool_choice: "none"``, the named one when ``tool_choice`` names a function."""
        if not self.tools or self.tool_choice == "none":
            return ()
        if isinstance(self.tool_choice, Mapping):
            return (str(self.tool_choice["function"]["name"]),)
        return tuple(str(t["function"]["name"]) for t in self.tools)

    @property
    def tool_results(self) -> list[str]:
        """The contents of the ``tool`` messages (tool results sent back), in order."""
        return [_content_text(m) for m in self.messages if m["role"] == "tool"]

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The schema of a ``json_schema`` response format, else ``None``."""
        fmt = self.response_format
        if not fmt or fmt.get("type") != "json_schema":
            return None
        schema = (fmt.get("json_schema") or {}).get("schema")
        return schema if isinstance(schema, dict) else None


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))


def _join(messages: Sequence[Mapping[str, Any]], roles: set[str] | None) -> str:
    return "\n".join(
        _content_text(m) for m in messages if roles is None or m["role"] in roles
    )


def _check_messages(messages: Any) -> list[Mapping[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise SimRequestError(
            f"'messages' must be a list of {{role, content}} objects; "
            f"got {type(messages).__name__}",
            "messages",
        )
    if not messages:
        raise SimRequestError("'messages' must not be empty", "messages")
    for i, message in enumerate(messages):
        _check_message(i, message)
    return list(messages)


def _check_message(i: int, message: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise SimRequestError(
            f"'{where}' must be an object with a string 'role'; got {message!r:.80}", where
        )
    content = message.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list) or not all(isinstance(p, Mapping) for p in content):
        raise SimRequestError(
            f"'{where}.content' must be a string, a list of content parts or null; "
            f"got {type(content).__name__}",
            f"{where}.content",
        )
    for k, part in enumerate(content):
        if "text" in part and not isinstance(part["text"], str):
            raise SimRequestError(
                f"'{where}.content[{k}].text' must be a string; got {type(part['text']).__name__}",
                f"{where}.content[{k}].text",
            )


def _check_tools(tools: Any) -> list[Mapping[str, Any]]:
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise SimRequestError(
            f"'tools' must be a list of {{type: function, function: {{name, parameters}}}} objects; "
            f"got {type(tools).__name__}",
            "tools",
        )
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise SimRequestError(
                f"'{where}' must be an object with \"type\": \"function\"; got {tool!r:.80}", where
            )
        function = tool.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) \
                or not function["name"]:
            raise SimRequestError(
                f"'{where}.function' must be an object with a non-empty string 'name'; "
                f"got {function!r:.80}",
                f"{where}.function",
            )
    return list(tools)


def _check_tool_choice(req: SimRequest) -> None:
    choice = req.tool_choice
    if choice is None or choice in ("auto", "none", "required"):
        return
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    function = choice.get("function") if isinstance(choice, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or kind != "function":
        raise SimRequestError(
            "'tool_choice' must be \"auto\", \"none\", \"required\" or "
            f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}; got {choice!r:.80}",
            "tool_choice",
        )
    offered = [t["function"]["name"] for t in req.tools or ()]
    if name not in offered:
        raise SimRequestError(
            f"'tool_choice' names the function {name!r}, which 'tools' does not offer; "
            f"offered: {', '.join(map(repr, offered)) or 'none'}",
            "tool_choice",
        )


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> TypeGuard[float]:
    return _is_number(value) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_request_values(req: SimRequest) -> None:
    checks: list[tuple[str, bool, str]] = [
        ("model", isinstance(req.model, str) and bool(req.model), "a non-empty string"),
        ("temperature", _is_finite(req.temperature) and req.temperature >= 0,
         "a finite number >= 0"),
        ("top_p", _is_finite(req.top_p) and 0 < req.top_p <= 1, "a number in (0, 1]"),
        ("seed", req.seed is None or _is_int(req.seed), "an integer or null"),
        ("max_tokens", req.max_tokens is None or (_is_int(req.max_tokens) and req.max_tokens >= 1),
         "an integer >= 1 or null"),
        ("n", _is_int(req.n) and 1 <= req.n <= 128, "an integer in [1, 128]"),
        ("response_format",
         req.response_format is None or isinstance(req.response_format, Mapping),
         "an object or null"),
        ("sample_key", isinstance(req.sample_key, str), "a string"),
        ("logprobs", isinstance(req.logprobs, bool), "a boolean"),
        ("top_logprobs", _is_int(req.top_logprobs) and 0 <= req.top_logprobs <= 20,
         "an integer in [0, 20]"),
    ]
    for name, ok, expected in checks:
        if not ok:
            raise SimRequestError(
                f"'{name}' must be {expected}; got {getattr(req, name)!r:.80}", name
            )
    if req.response_format is not None:
        _check_response_format(req.response_format)
    _check_tool_choice(req)


def _check_response_format(fmt: Mapping[str, Any]) -> None:
    kind = fmt.get("type")
    if kind not in _RESPONSE_FORMATS:
        raise SimRequestError(
            f"'response_format.type' must be one of {', '.join(map(repr, _RESPONSE_FORMATS))}; "
            f"got {kind!r:.80}",
            "response_format.type",
        )
    if kind != "json_schema":
        return
    spec = fmt.get("json_schema")
    if not isinstance(spec, Mapping):
        raise SimRequestError(
            "'response_format.json_schema' must be an object with the schema under 'schema'; "
            f"got {type(spec).__name__}",
            "response_format.json_schema",
        )
    schema = spec.get("schema")
    if schema is not None and not isinstance(schema, Mapping):
        raise SimRequestError(
            f"'response_format.json_schema.schema' must be a JSON schema object or null; "
            f"got {type(schema).__name__}",
            "response_format.json_schema.schema",
        )
    if _deeper_than(schema, MAX_SCHEMA_DEPTH):
        raise SimRequestError(
            "'response_format.json_schema.schema' nests objects and arrays more than "
            f"{MAX_SCHEMA_DEPTH} levels deep; the simulator accepts schemas of at most "
            f"{MAX_SCHEMA_DEPTH} levels",
            "response_format.json_schema.schema",
        )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests mappings and lists more than ``limit`` levels (iterative)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
