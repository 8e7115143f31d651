"""Whether a perturbation landed: checked on what the replay actually sent or served.

An execution operator changes what the target sends, so it is checked on the target's
LLM requests as the replay recorded them (they are recorded as they went over the wire:
a captured request after its rewrite):

* a template replacement (``prompt_swap``) landed when an LLM request of the target (the
  call or a call under it) rendered a replaced template id with the replacement's text,
  or, where a framework renders the replacement itself and records only the request
  (DSPy's instructions), when the request holds every literal piece of the
  replacement's text;
* an inline prompt swap (``prompt_swap`` of a selected message) landed when an LLM
  request of the target holds a message whose text is the replacement;
* request overrides (``param_change``) landed when an LLM request of the target carried
  every overridden value (the model name, each sampling parameter, in the field its wire
  format keeps it in: ``max_output_tokens`` of the Responses API for ``max_tokens``).

An output operator changes the target's output: it landed when the operator could apply
(the fields it sets are there); the served output is then the perturbed one. A replay
where the perturbation did not land is *not applied*: its own stratum, never effective
nor no-op (QUIVER.md §13, [engine]).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from quiver._trace import NodeCall, Trace
from quiver._wire import format_named
from quiver.perturbations import ExecutionChange
from quiver.replay._instrument import Template

__all__ = ["execution_landing"]


def _under(call: NodeCall, path: str) -> bool:
    return call.call_path == path or call.call_path.startswith(path + "/")


def execution_landing(trace: Trace, target_path: str, change: ExecutionChange,
                      templates: Mapping[str, Template]) -> str | None:
    """None when ``change`` reached the target's LLM requests in ``trace``; else why it
    did not, in one phrase. ``templates``: the replacements in force, by template id."""
    requests = [c for c in trace.calls if _under(c, target_path) and c.model is not None]
    if not requests:
        what = ", ".join([*(f"template {t!r}" for t in sorted(templates)),
                          *(swap.selector.describe() for swap in change.messages),
                          *(f"{k}={v!r}" for k, v in sorted(change.params.items()))]) or "the change"
        return (f"the target sent no LLM request the engine recorded (through a client it does not capture, or "
                f"none at all), so {what} cannot reach the wire")
    if templates:
        wanted = {tid: t.hash for tid, t in templates.items()}
        if not any(c.prompt is not None and (c.prompt.template_id in wanted
                                             and wanted[c.prompt.template_id] == c.prompt.template_hash
                                             or any(_carries_text(c, t) for t in templates.values()))
                   for c in requests):
            rendered = sorted({c.prompt.template_id for c in requests if c.prompt is not None and c.prompt.template_id})
            return (f"no LLM request of the target rendered template {', '.join(map(repr, sorted(wanted)))} with "
                    f"the replacement's text (its requests rendered "
                    f"{', '.join(map(repr, rendered)) if rendered else 'no registered template'})")
    for swap in change.messages:
        if not any(c.prompt is not None and any(m.content == swap.text for m in c.prompt.assembled)
                   for c in requests):
            return (f"no LLM request of the target held the replacement of {swap.selector.describe()} (the selector "
                    "picked no message, or several, in the requests it sent)")
    if change.params and not any(_carries(c, change.params) for c in requests):
        wanted_params = ", ".join(f"{k}={v!r}" for k, v in sorted(change.params.items()))
        return f"no LLM request of the target carried {wanted_params}"
    return None


_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_MIN_SEGMENT = 12
"""Shorter literal pieces of a template (between its placeholders) are not looked for:
they may appear in any prompt."""


def _carries_text(call: NodeCall, template: Template) -> bool:
    """Whether ``call``'s request holds every literal piece of ``template``'s text (a
    framework that renders the variant itself, DSPy's instructions say, records the
    request as sent but not the template's id and hash). A template with no piece long
    enough to tell is never found this way."""
    assert call.prompt is not None
    sent = _spaced(" ".join(m.content for m in call.prompt.assembled))
    pieces = [_spaced(p) for _, content in template.messages for p in _PLACEHOLDER.split(content)]
    pieces = [p for p in pieces if len(p) >= _MIN_SEGMENT]
    return bool(pieces) and all(p in sent for p in pieces)


def _spaced(text: str) -> str:
    """``text`` with every run of whitespace one space (frameworks indent and wrap prompts)."""
    return " ".join(text.split())


def _carries(call: NodeCall, params: Mapping[str, Any]) -> bool:
    """Whether ``call``'s request carried every value of ``params``."""
    model = call.model
    assert model is not None
    wire = call.tags.get("wire")
    fmt = format_named(wire.get("format") if isinstance(wire, dict) else None)
    for name, value in params.items():
        where = fmt.param_field(name)
        if where is None:
            return False
        held = model.name if name == "model" else model.params.get(where)
        if held != value and not (name == "max_tokens" and model.params.get("max_completion_tokens") == value):
            return False
    return True
