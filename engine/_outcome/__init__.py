"""Outcomes: whether a pipeline's answer is right, by a spec's checks.

* ``spec``: the ``outcome:`` checks of a spec (built-in comparisons, Python checks, LLM
  judges, ``all``/``any`` groups);
* ``evaluate``: a trace's :class:`~quiver.Outcome` by those checks (the checks that run
  user code or call a model are handed to the caller's evaluators);
* ``stats``: pass rates with their intervals, and the effect of an intervention on them.
"""

from __future__ import annotations

from .checks import Evaluators, MissingField, evaluate, field_value, input_value, normalize_answer
from .imported import outcome_from_attributes, outcome_from_scores
from .qa import answer_exact_match, answer_f1
from .spec import KINDS, CheckSpec, InputRef, JudgeSpec, OutcomeSpec, has_judge, input_refs, outcome_spec
from .stats import pass_indicator, pass_rate, pass_rate_line

__all__ = [
    "KINDS", "CheckSpec", "InputRef", "JudgeSpec", "OutcomeSpec", "has_judge", "input_refs", "outcome_spec",
    "Evaluators", "MissingField", "evaluate", "field_value", "input_value", "normalize_answer",
    "pass_indicator", "pass_rate", "pass_rate_line", "answer_exact_match", "answer_f1",
    "outcome_from_attributes", "outcome_from_scores",
]
