"""Reading the recorded token logprobs: which other class a categorical value could
have taken (``categorical_flip``'s "logprobs" strategy).

The simulator emits one logprobs entry per output value, its token the bare value
(strings unquoted, anything else as JSON) and ``top_logprobs`` the candidates by
decreasing logprob; an OpenAI-style backend splits a JSON answer into pieces where a
class may be quoted, start with a colon, or span tokens. Both are read here.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from quiver._canonical import canonical_json
from quiver.perturbations._fields import get_field

__all__ = ["logprob_alternatives", "same_value"]


def same_value(a: Any, b: Any) -> bool:
    """Equal as JSON (``1`` and ``1.0`` alike, ``True`` and ``1`` not)."""
    return canonical_json(a) == canonical_json(b)


def _form(value: Any) -> str:
    """How a value appears as text: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _clean(token: str) -> str:
    """A token without surrounding whitespace, quotes and a leading JSON colon."""
    return token.strip().lstrip(":").strip().strip('"').strip()


def _leaves(value: Any) -> Iterator[tuple[tuple[str, ...] | None, Any]]:
    """Scalar leaves of a JSON value in document order, with their key path (None
    inside lists)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend(((*path, str(k)) if path is not None else None, v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((None, v) for v in reversed(node))
        else:
            yield path, node


def _occurrence(output: Any, field: str | None, form: str) -> int:
    """How many leaves before the target field are written the same way."""
    if field is None:
        return 0
    target = tuple(field.split("."))
    count = 0
    for path, leaf in _leaves(output):
        if path == target:
            return count
        count += _form(leaf) == form
    return count


def _is_json_text(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def _emitted_at(tokens: Sequence[str], value: Any) -> list[tuple[int, bool]]:
    """Where ``value`` was emitted: (index of its first token, whether that token
    holds the whole value), in order.

    The tokens either spell a JSON document (a real model: the value's text sits
    between quotes, possibly split over several tokens, and is not an object key) or
    are one token per value (the bundled simulator: ``billing``, ``true``), or spell a
    plain text.
    """
    text = "".join(tokens)
    starts = list(itertools.accumulate((len(t) for t in tokens[:-1]), initial=0))
    as_json = _is_json_text(text)
    if as_json and isinstance(value, str):
        pattern = rf'(?<=")({re.escape(json.dumps(value, ensure_ascii=False)[1:-1])})"(?!\s*:)'
    elif as_json:
        pattern = rf'(?<![\w."])({re.escape(_form(value))})(?![\w."])(?!\s*:)'
    else:
        pattern = rf"({re.escape(_form(value))})"
    found = []
    for match in re.finditer(pattern, text):
        begin, end = match.span(1)
        index = next(i for i in reversed(range(len(tokens))) if starts[i] <= begin < starts[i] + len(tokens[i]))
        token_end = starts[index] + len(tokens[index])
        if not as_json and not _aligned(text, starts, begin, end, index):
            continue
        found.append((index, token_end >= end))
    return found


def _aligned(text: str, starts: Sequence[int], begin: int, end: int, index: int) -> bool:
    """In tokens that are not JSON, a value starts a token (after blanks or quotes) and
    ends a token or a word."""
    if text[starts[index]:begin].strip(' \t\n"'):
        return False
    return end in starts or end == len(text) or not (text[end].isalnum() or text[end] == "_")


def _as_class(token: str, current: Any, categories: Sequence[Any] | None, whole: bool) -> Any:
    """The class an alternative token stands for, or ``None`` (not a different class).

    With categories, a token is the category it spells or the only one it begins;
    without, it is taken as a class only when the current value was emitted as one
    token, as the same JSON type.
    """
    text = _clean(token)
    if not text:
        return None
    candidate: Any = None
    if categories:
        exact = [c for c in categories if _form(c) == text]
        prefixed = [c for c in categories if _form(c).startswith(text)]
        candidate = exact[0] if exact else prefixed[0] if len(prefixed) == 1 else None
    elif whole and isinstance(current, str):
        candidate = text
    elif whole:
        try:
            candidate = json.loads(text)
        except ValueError:
            return None
        if type(candidate) is not type(current):
            return None
    if candidate is None or same_value(candidate, current):
        return None
    return candidate


def logprob_alternatives(
    output: Any, field: str | None, logprobs: Sequence[Mapping[str, Any]], categories: Sequence[Any] | None = None
) -> list[tuple[Any, float]]:
    """Other classes the model considered where it emitted the field's value.

    Finds the token position where the current value of ``field`` was emitted (its
    n-th occurrence when earlier fields are written the same way) and reads that
    position's ``top_logprobs``: each alternative token that stands for a different
    class (restricted to ``categories`` when given; a token may be a quoted class or
    the beginning of one) counts with its log-probability.

    Returns:
        ``(class, logprob)`` pairs, most likely first; empty when the value cannot be
        located or no alternative is a different class.
    """
    value = get_field(output, field, "categorical_flip")
    entries = [e for e in logprobs if isinstance(e, Mapping) and isinstance(e.get("token"), str)]
    positions = _emitted_at([e["token"] for e in entries], value)
    k = _occurrence(output, field, _form(value))
    if k >= len(positions):
        return []
    index, whole = positions[k]
    best: dict[str, tuple[Any, float]] = {}
    for alt in entries[index].get("top_logprobs") or []:
        if not isinstance(alt, Mapping) or not isinstance(alt.get("token"), str):
            continue
        candidate = _as_class(alt["token"], value, categories, whole)
        logprob = alt.get("logprob")
        if candidate is None or not isinstance(logprob, (int, float)):
            continue
        key = canonical_json(candidate)
        if key not in best or logprob > best[key][1]:
            best[key] = (candidate, float(logprob))
    return sorted(best.values(), key=lambda pair: -pair[1])
