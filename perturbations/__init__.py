"""quiver.perturbations: the operators that perturb one node call of a recorded trace.

Nine operators are registered on import (QUIVER.md §11):

====================  =========  ======  ============================================  ==========================
name                  mode       binary  what it does                                  magnitudes
====================  =========  ======  ============================================  ==========================
``override``          output     yes     force fields to given values                  none
``identity``          output     yes     serve the recorded output (control replays)   none
``bool_flip``         output     yes     negate a boolean field                        none
``categorical_flip``  output     yes     flip a class (given, next-most-likely, next)  none
``list_edit``         output     no      remove, reorder, add or truncate elements     fraction (0, 1], count [1, inf)
``numeric_edit``      output     no      shift or scale a number                       amount (shift: any; scale: >= 0)
``text_edit``         output     no      add or remove keywords, paraphrase            count, temperature [0, 2]
``prompt_swap``       execution  no      re-run with a prompt template variant         level [0, variants - 1]
``param_change``      execution  no      re-run with other model or sampling params    temperature [0, 2], top_p (0, 1]
====================  =========  ======  ============================================  ==========================

Binary operators put a pair in the no-op stratum when the baseline already had the
value; the others are effective iff the target's distance ``d_i > eps`` (QUIVER.md §13).
Third-party operators register through the entry-point group ``quiver.operators`` (see
:mod:`quiver.perturbations._registry`). An operator says which output fields it changes
(:meth:`Operator.fields_touched`), so a campaign checks them against the graph before
anything runs, for a plugged-in operator as for a built-in one. A continuous operator
declares the parameters that set its magnitude and their ranges
(:attr:`Operator.magnitudes`, :func:`magnitude_of`), so a campaign can search their levels.

Layout: ``_registry`` (the base class, the registry, parameter expansion), ``_fields``
(dotted field paths), ``_logprobs`` (alternatives from recorded logprobs),
``_templates`` (template references), ``_operators`` (the built-in operators).
"""

from __future__ import annotations

from quiver.perturbations._operators import (
    BoolFlip,
    CategoricalFlip,
    ListEdit,
    NumericEdit,
    Override,
    ParamChange,
    PromptSwap,
    TextEdit,
    logprob_alternatives,
)
from quiver.perturbations._prompts import MessageSelector, MessageSwap
from quiver.perturbations._registry import (
    ANY_VALUE,
    ExecutionChange,
    FieldTouch,
    Magnitude,
    Operator,
    OperatorContext,
    OperatorError,
    OperatorParams,
    expand_ladder,
    expand_variants,
    get_operator,
    magnitude_of,
    make_operator,
    operator,
    registered_operators,
)
from quiver.perturbations._templates import TemplateRef, resolve_template_ref

__all__ = [
    "MessageSelector",
    "MessageSwap",
    "OperatorError",
    "ExecutionChange",
    "OperatorContext",
    "OperatorParams",
    "Operator",
    "FieldTouch",
    "ANY_VALUE",
    "Magnitude",
    "magnitude_of",
    "operator",
    "get_operator",
    "registered_operators",
    "make_operator",
    "expand_ladder",
    "expand_variants",
    "logprob_alternatives",
    "TemplateRef",
    "resolve_template_ref",
    "Override",
    "BoolFlip",
    "CategoricalFlip",
    "ListEdit",
    "NumericEdit",
    "TextEdit",
    "PromptSwap",
    "ParamChange",
]
