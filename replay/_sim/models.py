"""Simulated models: a registry of seeded stochastic functions and their sampling.

A simulated model is a Python function of a :class:`SimRequest` that describes its
answer as a small set of *groups* with logits, registered by name::

    @sim_model("ticket-router")
    def route(req: SimRequest) -> Fields:
        urgent = 2.0 if "outage" in req.user_text.lower() else -1.0
        return Fields(
            team={"billing": 0.4, "technical": 1.2, "other": 0.0},  # sampled
            urgent={True: urgent, False: 0.0},                     # sampled
            version=2,                                             # fixed
        )

(:class:`SimRequest` and its validation live in :mod:`quiver.replay._sim`; this
module re-exports them.)

:func:`complete` turns the description into OpenAI-style choices. The answer is a pure
function of (model, messages, temperature, top_p, seed, max_tokens, response_format,
sample key, choice index): every random draw comes from a ``random.Random`` seeded with
the SHA-256 of the canonical JSON of those values, so the same request and sample key
give the same answer in any process, on any platform.

Sampling, per choice, group after group in declaration order:

* temperature ``T > 0``: draw from ``softmax(logits / T)`` restricted to the top-p
  nucleus (the most probable candidates whose probabilities first reach ``top_p``);
* ``T == 0``: take the argmax (ties go to the first declared candidate), except that with
  probability ``nondeterminism`` (one draw per choice) exactly one group with at least two
  candidates, chosen by the same generator, takes its runner-up. This stands in for the
  nondeterminism real backends show at temperature 0.

Log-probabilities are those of the distribution at ``T`` (at ``T = 1`` when ``T == 0``),
one entry per group, before any top-p filtering; a fixed value has log-probability 0.

A model may also answer with tool calls: :class:`ToolCall` (or a list of them, for
parallel calls) names a tool the request offers (``tools``, under ``tool_choice``) and
gives its arguments as :class:`Fields` (sampled like any structured answer) or a fixed
dict; its name may be sampled too, from ``{tool_name: logit}`` (a model choosing between
tools or handoffs), its group drawn before its arguments'. The choice is then an
assistant message with ``content: null`` and OpenAI-format
``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments"}}``,
``arguments`` the JSON text), ``finish_reason: "tool_calls"``. A call's id is a hash of
the model, the conversation's length, the call's place and its name and arguments: the
same call made at the same turn has the same id whatever the sample key, so that repeats
differ only where their calls do.

Two models are built in: ``sim-echo`` answers the last user message, and ``sim-json``
fills a ``json_schema`` response format from the prompt's words. ``sim-json`` is defined
in :mod:`quiver.replay._sim`, which this module imports, so both are registered as
soon as this module is imported.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from quiver._canonical import canonical_json
from quiver._errors import SimulatorError

from .registry import get_sim_model, load_model_modules, register_sim_model, sim_model, sim_model_names
from .request import SimRequest, SimRequestError, _is_number

__all__ = [
    "SimRequest",
    "SimRequestError",
    "Fields",
    "Fixed",
    "Text",
    "ToolCall",
    "SimChoice",
    "ModelOutput",
    "SimModelFn",
    "sim_model",
    "register_sim_model",
    "get_sim_model",
    "sim_model_names",
    "load_model_modules",
    "complete",
    "request_digest",
]

Scalar: TypeAlias = str | bool | int | float | None
"""A candidate value of a sampled group."""


# --------------------------------------------------------------------------- outputs


class Fixed:
    """A fixed value of a :class:`Fields` output, never sampled.

    Only needed for values that would otherwise be read as something else: a dict
    (``Fields(meta=Fixed({"v": 1}))``) or a :class:`Fields`. Any other plain value is
    fixed already.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Fixed({self.value!r})"


class Fields:
    """A structured answer: a JSON object whose fields are sampled or fixed.

    Each keyword is an output field, in order. Its value is one of:

    * a dict ``{candidate: logit}`` -- a sampled group; candidates may be ``str``,
      ``bool``, ``int``, ``float`` or ``None`` (beware that Python merges ``True`` and
      ``1``, ``False`` and ``0`` as dict keys);
    * a nested :class:`Fields` -- a nested object whose groups follow in order;
    * :class:`Fixed` or any other JSON value -- a fixed value.

    The content is ``json.dumps`` of the object (non-ASCII kept as is), fields in
    declaration order.
    """

    __slots__ = ("groups",)

    def __init__(self, /, **groups: Any) -> None:  # a field may be named "self"
        self.groups = groups

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.groups.items())
        return f"Fields({inner})"


class Text:
    """A text answer: ``{candidate_text: logit}`` to sample, or one fixed string."""

    __slots__ = ("candidates",)

    def __init__(self, candidates: Mapping[str, float] | str) -> None:
        self.candidates = candidates

    def __repr__(self) -> str:
        return f"Text({self.candidates!r})"


class ToolCall:
    """A tool call answer: the tool's ``name`` and its ``arguments``.

    ``arguments`` is a :class:`Fields` (its groups sampled like a structured answer's) or
    a dict (a fixed JSON object). The name must be one of the request's
    :attr:`SimRequest.tool_names`, or a dict ``{tool_name: logit}`` of such names, sampled
    as a group (before the arguments' groups): which tool a model picks, or which agent it
    hands off to, then varies as a sampled field does. A model answers several calls at
    once with a list.
    """

    __slots__ = ("name", "arguments")

    def __init__(self, name: str | Mapping[str, float], arguments: Fields | Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.arguments = Fields() if arguments is None else arguments

    def __repr__(self) -> str:
        return f"ToolCall({self.name!r}, {self.arguments!r})"


ModelOutput: TypeAlias = Fields | Text | ToolCall | list[ToolCall] | str | dict[str, Any]
"""What a simulated model function may return (a ``str`` is a fixed text, a ``dict`` a
fixed JSON object, a list of :class:`ToolCall` parallel tool calls)."""

SimModelFn: TypeAlias = Callable[[SimRequest], ModelOutput]


@dataclass(frozen=True)
class SimChoice:
    """One choice of a simulated completion.

    Attributes:
        content: The message content.
        logprobs: OpenAI ``logprobs.content`` entries, or ``None`` when not requested.
        finish_reason: ``"stop"``, ``"length"`` when ``max_tokens`` cut a text,
            ``"tool_calls"`` for tool calls.
        tool_calls: OpenAI ``tool_calls`` entries (the content is then ``""``, sent as
            ``null``), or ``None``.
    """

    content: str
    logprobs: list[dict[str, Any]] | None
    finish_reason: str = "stop"
    tool_calls: tuple[dict[str, Any], ...] | None = None


_MAX_ANSWER_CHARS = 16 * 1024 * 1024
"""The most characters the choices of one answer may hold together (``n`` echoes of a
large prompt would otherwise take gigabytes)."""


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class _Group:
    """One sampled or fixed slot of an answer: candidates with logits."""

    path: tuple[str, ...] | None  # field path in the object; None for a text answer
    values: tuple[Any, ...]
    logits: tuple[float, ...] = ()  # empty for a fixed value

    @property
    def sampled(self) -> bool:
        return bool(self.logits)


@dataclass(frozen=True)
class _Plan:
    """A model's answer before sampling.

    ``slots`` lists, in declaration order, each field path of a JSON object answer with
    the index of its group in ``groups``, or ``None`` for an empty nested object. A text
    answer has one group and no slots.
    """

    groups: tuple[_Group, ...]
    slots: tuple[tuple[tuple[str, ...], int | None], ...] | None = None
    calls: tuple[tuple[str | int, tuple[tuple[tuple[str, ...], int | None], ...]], ...] | None = None
    """For tool calls: each call's name (or the index of the group its name is sampled
    from) and the slots of its arguments."""


def _plan(model: str, output: Any, req: SimRequest | None = None) -> _Plan:
    if isinstance(output, ToolCall) or (
        isinstance(output, list) and output and all(isinstance(c, ToolCall) for c in output)
    ):
        return _tool_plan(model, output if isinstance(output, list) else [output], req)
    if isinstance(output, Text):
        return _Plan((_text_group(model, output.candidates),))
    if isinstance(output, str):
        return _Plan((_Group(None, (output,)),))
    if isinstance(output, Fields):
        groups: list[_Group] = []
        slots: list[tuple[tuple[str, ...], int | None]] = []
        _flatten(model, output, (), groups, slots)
        return _Plan(tuple(groups), tuple(slots))
    if isinstance(output, dict):
        return _plan(model, Fields(**{str(k): Fixed(v) for k, v in output.items()}))
    raise SimulatorError(
        f"simulated model '{model}' returned {type(output).__name__}; it must return "
        "Fields, Text, a ToolCall, a list of ToolCalls, a str (a fixed text) or a dict "
        "(a fixed JSON object)"
    )


def _tool_plan(model: str, calls: list[ToolCall], req: SimRequest | None) -> _Plan:
    offered = req.tool_names if req is not None else ()
    groups: list[_Group] = []
    planned = []
    for call in calls:
        names = list(call.name) if isinstance(call.name, Mapping) else [call.name]
        for name in names:
            if not isinstance(name, str) or name not in offered:
                raise SimulatorError(
                    f"simulated model '{model}' called the tool {name!r}, which the request does not "
                    f"let it call; callable tools: {', '.join(map(repr, offered)) or 'none'} "
                    "(read SimRequest.tool_names before answering with a ToolCall)"
                )
        named: str | int = call.name if isinstance(call.name, str) else len(groups)
        if isinstance(call.name, Mapping):
            groups.append(_sampled_group(model, ("(tool name)",), call.name))
        arguments = call.arguments
        if isinstance(arguments, Mapping) and not isinstance(arguments, Fields):
            arguments = Fields(**{str(k): Fixed(v) for k, v in arguments.items()})
        if not isinstance(arguments, Fields):
            raise SimulatorError(
                f"simulated model '{model}': ToolCall({call.name!r}) has arguments of type "
                f"{type(arguments).__name__}; give Fields or a dict"
            )
        slots: list[tuple[tuple[str, ...], int | None]] = []
        _flatten(model, arguments, (), groups, slots)
        planned.append((named, tuple(slots)))
    return _Plan(tuple(groups), None, tuple(planned))


def _text_group(model: str, candidates: Any) -> _Group:
    if isinstance(candidates, str):
        return _Group(None, (candidates,))
    if not isinstance(candidates, Mapping) or not all(isinstance(c, str) for c in candidates):
        raise SimulatorError(
            f"simulated model '{model}' returned Text({candidates!r:.80}); Text takes a "
            "str or a dict {candidate_text: logit} with string keys"
        )
    return _sampled_group(model, None, candidates)


def _flatten(
    model: str,
    fields: Fields,
    prefix: tuple[str, ...],
    groups: list[_Group],
    slots: list[tuple[tuple[str, ...], int | None]],
) -> None:
    if not fields.groups and prefix:
        slots.append((prefix, None))
    for name, spec in fields.groups.items():
        path = (*prefix, name)
        if isinstance(spec, Fields):
            _flatten(model, spec, path, groups, slots)
            continue
        if isinstance(spec, Fixed):
            group = _Group(path, (spec.value,))
        elif isinstance(spec, Mapping):
            group = _sampled_group(model, path, spec)
        else:
            group = _Group(path, (spec,))
        slots.append((path, len(groups)))
        groups.append(group)


def _sampled_group(model: str, path: tuple[str, ...] | None, logits: Mapping[Any, Any]) -> _Group:
    where = f"field '{'.'.join(path)}'" if path else "Text"
    if not logits:
        raise SimulatorError(
            f"simulated model '{model}': {where} has no candidates; give at least one "
            "{candidate: logit}"
        )
    for value, logit in logits.items():
        if not isinstance(value, (str, bool, int, float, type(None))):
            raise SimulatorError(
                f"simulated model '{model}': {where} has candidate {value!r} of type "
                f"{type(value).__name__}; candidates must be str, bool, int, float or None"
            )
        if not _is_number(logit) or not math.isfinite(logit):
            raise SimulatorError(
                f"simulated model '{model}': {where} gives candidate {value!r} the logit "
                f"{logit!r}; logits must be finite numbers"
            )
    return _Group(path, tuple(logits), tuple(float(v) for v in logits.values()))


# --------------------------------------------------------------------------- sampling


def _sample_basis(req: SimRequest) -> dict[str, Any]:
    tools = {} if req.tools is None else {"tools": list(req.tools), "tool_choice": req.tool_choice}
    return {
        **tools,
        "model": req.model,
        "messages": list(req.messages),
        "temperature": float(req.temperature),
        "top_p": float(req.top_p),
        "seed": req.seed,
        "max_tokens": req.max_tokens,
        "response_format": req.response_format,
        "sample_key": req.sample_key,
    }


def _choice_rng(req: SimRequest, index: int) -> random.Random:
    basis = canonical_json({**_sample_basis(req), "i": index})
    digest = hashlib.sha256(basis.encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def request_digest(req: SimRequest) -> str:
    """SHA-256 hex digest of every field of the request (used for response ids)."""
    basis = {
        **_sample_basis(req),
        "n": req.n,
        "logprobs": req.logprobs,
        "top_logprobs": req.top_logprobs,
    }
    return hashlib.sha256(canonical_json(basis).encode("utf-8")).hexdigest()


def _log_softmax(logits: Sequence[float], temperature: float) -> list[float]:
    scaled = [x / temperature for x in logits]
    if not all(map(math.isfinite, scaled)):  # a tiny temperature or huge logits overflow
        peak = max(logits)
        scaled = [(x - peak) / temperature for x in logits]  # 0 at the top, -inf far below
    top = max(scaled)
    log_total = top + math.log(math.fsum(math.exp(x - top) for x in scaled))
    return [x - log_total for x in scaled]


def _ranked(scores: Sequence[float]) -> list[int]:
    """Indices by decreasing score; equal scores keep declaration order."""
    return sorted(range(len(scores)), key=lambda k: -scores[k])


def _draw(group: _Group, temperature: float, top_p: float, rng: random.Random) -> int:
    probs = [math.exp(lp) for lp in _log_softmax(group.logits, temperature)]
    nucleus: list[int] = []
    mass = 0.0
    for k in _ranked(probs):
        nucleus.append(k)
        mass += probs[k]
        if mass >= top_p:
            break
    u = rng.random() * mass
    for k in nucleus:
        u -= probs[k]
        if u < 0:
            return k
    return nucleus[-1]


def _picks_at_zero(
    groups: Sequence[_Group], nondeterminism: float, rng: random.Random
) -> list[int]:
    picks = [_ranked(g.logits)[0] if g.sampled else 0 for g in groups]
    if rng.random() < nondeterminism:
        flippable = [k for k, g in enumerate(groups) if len(g.logits) >= 2]
        if flippable:
            k = flippable[int(rng.random() * len(flippable))]
            picks[k] = _ranked(groups[k].logits)[1]
    return picks


def _picks(
    groups: Sequence[_Group], req: SimRequest, nondeterminism: float, rng: random.Random
) -> list[int]:
    if req.temperature == 0:
        return _picks_at_zero(groups, nondeterminism, rng)
    return [
        _draw(g, req.temperature, req.top_p, rng) if g.sampled else 0 for g in groups
    ]


# --------------------------------------------------------------------------- rendering


def _token(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_LOGPROB_FLOOR = -9999.0
"""OpenAI's log-probability for a token too unlikely to matter; JSON has no ``-inf``."""


def _logprob_entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": max(logprob, _LOGPROB_FLOOR),
            "bytes": list(token.encode("utf-8"))}


def _logprobs(
    groups: Sequence[_Group], picks: Sequence[int], req: SimRequest, tokens: Sequence[str]
) -> list[dict[str, Any]]:
    temperature = req.temperature if req.temperature > 0 else 1.0
    entries = []
    for group, pick, token in zip(groups, picks, tokens, strict=True):
        if not group.sampled:
            entry = _logprob_entry(token, 0.0)
            top = [_logprob_entry(token, 0.0)] if req.top_logprobs else []
        else:
            lps = _log_softmax(group.logits, temperature)
            entry = _logprob_entry(token, lps[pick])
            top = [
                _logprob_entry(_token(group.values[k]), lps[k])
                for k in _ranked(lps)[: req.top_logprobs]
            ]
        entries.append({**entry, "top_logprobs": top})
    return entries


def _truncate_words(text: str, max_words: int | None) -> tuple[str, bool]:
    if max_words is None:
        return text, False
    words = list(re.finditer(r"\S+", text))
    if len(words) <= max_words:
        return text, False
    return text[: words[max_words - 1].end()], True


def _render_object(
    model: str, slots: Sequence[tuple[tuple[str, ...], int | None]], values: Sequence[Any]
) -> str:
    obj: dict[str, Any] = {}
    for path, index in slots:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = {} if index is None else values[index]
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SimulatorError(
            f"simulated model '{model}' returned a fixed value that is not JSON: {exc}"
        ) from exc


def _choice(plan: _Plan, req: SimRequest, nondeterminism: float, index: int) -> SimChoice:
    rng = _choice_rng(req, index)
    picks = _picks(plan.groups, req, nondeterminism, rng)
    values = [g.values[k] for g, k in zip(plan.groups, picks, strict=True)]
    if plan.calls is not None:
        calls = tuple(
            _tool_call(req, index, k, name if isinstance(name, str) else str(values[name]),
                       _render_object(req.model, slots, values))
            for k, (name, slots) in enumerate(plan.calls)
        )
        tokens = [_token(v) for v in values]
        logprobs = _logprobs(plan.groups, picks, req, tokens) if req.logprobs else None
        return SimChoice("", logprobs, "tool_calls", calls)
    if plan.slots is not None:
        content, cut = _render_object(req.model, plan.slots, values), False
        tokens = [_token(v) for v in values]
    else:
        content, cut = _truncate_words(str(values[0]), req.max_tokens)
        tokens = [content]
    logprobs = _logprobs(plan.groups, picks, req, tokens) if req.logprobs else None
    return SimChoice(content, logprobs, "length" if cut else "stop")


def _tool_call(req: SimRequest, index: int, position: int, name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` entry; its id does not depend on the sample key."""
    basis = canonical_json([req.model, len(req.messages), index, position, name, arguments])
    call_id = "call_" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:24]
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def complete(req: SimRequest, nondeterminism: float = 0.0) -> list[SimChoice]:
    """Answer a request with ``req.n`` choices; a pure function of its arguments.

    Args:
        req: The request; ``req.model`` must be registered.
        nondeterminism: At temperature 0, the probability that a choice takes the
            runner-up of one of its groups, in ``[0, 1]``.

    Raises:
        SimRequestError: The model refused the request, or the choices would hold more
            than :data:`_MAX_ANSWER_CHARS` characters (the simulator answers 400).
        SimulatorError: The model is unknown, ``nondeterminism`` is out of range, or the
            model function failed or returned something that is not an answer.
    """
    if not _is_number(nondeterminism) or not 0 <= nondeterminism <= 1:
        raise SimulatorError(f"nondeterminism must be a number in [0, 1]; got {nondeterminism!r}")
    fn = get_sim_model(req.model)
    try:
        output = fn(req)
    except SimulatorError:
        raise
    except Exception as exc:
        raise SimulatorError(
            f"simulated model '{req.model}' raised {type(exc).__name__}: {exc}"
        ) from exc
    plan = _plan(req.model, output, req)
    choices: list[SimChoice] = []
    size = 0
    for i in range(req.n):
        choices.append(_choice(plan, req, nondeterminism, i))
        size += len(choices[-1].content) + sum(
            len(c["function"]["arguments"]) for c in choices[-1].tool_calls or ()
        )
        if size > _MAX_ANSWER_CHARS:
            raise SimRequestError(
                f"the {req.n} choices of this answer would hold more than {_MAX_ANSWER_CHARS} "
                "characters; ask for fewer choices (n) or fewer words (max_tokens)", "n"
            )
    return choices


# --------------------------------------------------------------------------- built-ins


def _sim_echo(req: SimRequest) -> Text:
    """``sim-echo``: answers the last user message, word for word."""
    return Text(req.last_user)


register_sim_model("sim-echo", _sim_echo)

# ``sim-json`` lives in _simjson, which registers it when imported. _simjson imports its
# building blocks from this module, so it is imported here, last, once they are all
# defined: every import of this module then registers ``sim-json``, and the cycle is
# harmless whichever of the two modules is imported first.
from . import jsonfill  # noqa: E402, F401
