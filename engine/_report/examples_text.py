"""An example pair (:class:`~.examples.ExamplePair`) for the terminal: ``quiver show``.

Names and values are written :func:`~.markup.visible` (one line each, no control or
bidirectional character reaches the terminal); the two runs' paths side by side, the
first divergent call marked ``<- first divergent call``; the final output as a
word-level diff, ``[-removed-]`` and ``{+added+}`` (as ``git diff --word-diff`` writes it).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from quiver._stats import fmt

from .markup import label, visible

if TYPE_CHECKING:
    from .examples import ExamplePair

__all__ = ["render_text", "WIDTH"]

WIDTH = 100
"""The width the text is wrapped at."""
_COLUMN = 34


def _cell(call: str | None, decided: str | None) -> str:
    if decided is None:
        return "—"
    text = label(call or "", 22) + (f" {decided}" if decided else "")
    return text if len(text) <= _COLUMN else text[:_COLUMN - 1] + "…"


def _path(pair: ExamplePair) -> list[str]:
    if not pair.steps:
        return []
    lines = [f"  {'baseline':<{_COLUMN}}  {'replay':<{_COLUMN}}"]
    for s in pair.steps:
        said = [w for w, on in (("first divergent call", s.first), ("the target", s.target)) if on]
        mark = f"  <- {', '.join(said)}" if said else ("  differs" if s.differs else "")
        lines.append(f"  {_cell(s.call, s.baseline):<{_COLUMN}}  {_cell(s.call, s.replay):<{_COLUMN}}{mark}")
    return ["path, call by call (node#occurrence and the decisions taken there):", *lines]


def _wrap(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=True, break_on_hyphens=False) or [indent]


def _output(pair: ExamplePair) -> list[str]:
    if not pair.output_diff:
        return []
    words = " ".join(w if op == "=" else f"[-{w}-]" if op == "-" else f"{{+{w}+}}" for op, w in pair.output_diff)
    head = ("final output, word by word ([-baseline only-] {+replay only+}):" if pair.output_changed
            else "final output (identical):")
    return [head, *_wrap(words)]


def render_text(pair: ExamplePair) -> str:
    """The pair, for people at a terminal."""
    mag = "" if pair.magnitude is None else f"; d_i = {fmt(pair.magnitude)}"
    lines = [f"pair {visible(pair.pair_id)} ({pair.rule})",
             f"perturbation {visible(pair.perturbation)}: {pair.status}, stratum {pair.stratum or '—'}{mag}",
             f"  {pair.headline()}",
             f"input {visible(pair.input_id)}: {pair.inputs}",
             f"baseline trace {visible(pair.baseline_trace)}",
             f"replay trace   {visible(pair.replay_trace or '— (the replay failed)')}"]
    if pair.error:
        lines.append(f"error: {pair.error}")
    if pair.note:
        lines.append(f"not applied: {visible(pair.note)}")
    lines.append(f"target {visible(pair.target)}:" + ("" if pair.changed else " its output is unchanged"))
    for name, before, after in pair.changed:
        lines += _wrap(f"{visible(name)}: {before}  ->  {after}")
    lines += _path(pair)
    if pair.cause:
        lines += ["first divergence, as `quiver diff` explains it:", *_wrap(visible(pair.cause))]
    if pair.distances:
        lines.append("distance of each node, baseline to replay (0 same, 1 entirely different; — did not run):")
        lines += [f"  {label(n, 40):<40} {fmt(d)}" for n, d in pair.distances]
    events = pair.events
    lines.append(f"events: path changed {_yes(events.get('D_shape'))}, call counts changed by "
                 f"{events.get('D_iter', 0)}, nodes run changed {_yes(events.get('D_struct'))}, some node's output "
                 f"changed {_yes(events.get('D_output'))}")
    lines += _output(pair)
    return "\n".join(lines) + "\n"


def _yes(x: object) -> str:
    return "yes" if x else "no"
