"""Perturbation operators: the base class, the registry and the parameter expansion.

An operator perturbs one node call of a recorded trace (QUIVER.md §11). It works in
one of two modes:

* ``output``: the replayer takes the recorded output of the target call and serves
  ``op.apply(output, ctx)`` in its place (a categorical flip, an override, a list or
  text edit);
* ``execution``: the replayer re-executes the target node live with the
  :class:`ExecutionChange` that ``op.change(ctx)`` returns (a prompt variant, other
  sampling parameters).

**Strata** (QUIVER.md §13). Every interventional pair falls into the *effective* or the
*no-op* stratum; the no-op stratum is the negative control whose divergence must return
to the noise floor. A *binary* operator (``binary = True``: ``override``, ``bool_flip``,
``categorical_flip``) is decided by value: the pair is a no-op when the baseline already
had the value the operator forces (:meth:`Operator.is_noop`: the perturbed output equals
the recorded one). A *continuous* operator (``binary = False``: ``list_edit``,
``numeric_edit``, ``text_edit``, ``prompt_swap``, ``param_change``) is decided by magnitude: the pair is
effective iff the target's own distance ``d_i > eps``, which the replayer measures.

**Registry.** Operators register by class decorator, and every result records what was
applied as :meth:`Operator.describe` (``{"op": name, "params": {...}}``)::

    @operator("uppercase")
    class Uppercase(Operator):
        mode = "output"
        binary = False
        Params = UppercaseParams

        def apply(self, output, ctx):
            return output.upper()

**Magnitudes.** A continuous operator declares the parameters that set how strongly it
perturbs, so a campaign can search their levels adaptively (a ladder
``{adaptive: {param: fraction, range: [0, 1], ...}}``): :attr:`Operator.magnitudes` lists
one :class:`Magnitude` per such parameter with the range it may take, and
:meth:`Operator.magnitude` (or :func:`magnitude_of`) returns one of them with its range
made concrete for the other parameters (``prompt_swap``'s ``level`` runs up to the last
of the ``variants`` given). Binary operators declare none. A plugged-in operator declares
its own the same way; override :meth:`Operator.magnitude` when a range depends on the
other parameters::

    @operator("blur")
    class Blur(Operator):
        mode = "output"
        binary = False
        Params = BlurParams
        magnitudes = (Magnitude("radius", 0, 10, doc="a larger radius blurs more"),)

**Third-party operators** come in through the entry-point group ``quiver.operators``:
each entry point names an :class:`Operator` subclass (registered under the entry point's
name) or a module whose import registers its operators with :func:`operator`. They are
loaded once, the first time a name is not found::

    [project.entry-points."quiver.operators"]
    my_op = "my_package.ops:MyOperator"
"""

from __future__ import annotations

import itertools
import random
from abc import ABC
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, ValidationError, model_serializer

from quiver._canonical import canonical_json
from quiver._errors import QuiverError
from quiver._graph import NodeSpec
from quiver._registry import Registry, adopt_class

if TYPE_CHECKING:
    from quiver.perturbations._templates import TemplateRef

__all__ = [
    "ANY_VALUE",
    "FieldTouch",
    "Magnitude",
    "OperatorError",
    "ExecutionChange",
    "OperatorContext",
    "OperatorParams",
    "Operator",
    "OPERATORS",
    "operator",
    "get_operator",
    "registered_operators",
    "make_operator",
    "expand_ladder",
    "expand_variants",
    "magnitude_of",
]

ENTRY_POINT_GROUP = "quiver.operators"
"""The entry-point group third-party operators are published under."""


class OperatorError(QuiverError):
    """An operator that cannot be built or applied.

    Raised for parameters that are not valid, for an unknown operator name, and for an
    operator that does not apply to the output at hand (a ``bool_flip`` of a string, a
    field the output does not have). The message says what would be valid.
    """


ANY_VALUE: Any = type("AnyValue", (), {"__repr__": lambda self: "ANY_VALUE"})()
"""A :class:`FieldTouch` value that is not fixed before the operator runs (a flip to
whatever the output does not hold, an edit of the field's contents)."""


@dataclass(frozen=True)
class FieldTouch:
    """A field of the target's output an operator changes, and the value it sets.

    Attributes:
        field: A dotted path into the output (``"sufficient"``, ``"plan.action"``).
        value: The value it sets, or :data:`ANY_VALUE` when that is not known until the
            operator runs.
    """

    field: str
    value: Any = ANY_VALUE


def _bound_text(value: float | None, integer: bool) -> str:
    if value is None:
        return "inf"
    return str(int(value)) if integer and float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True)
class Magnitude:
    """A parameter that sets how strongly an operator perturbs, and the range it may take.

    Attributes:
        param: The parameter's name (a field of the operator's ``Params``).
        lo: The smallest value allowed (``None``: unbounded below).
        hi: The largest value allowed (``None``: unbounded above).
        integer: Levels are whole numbers (an index, a count).
        doc: One line: what a larger value does.
        lo_open: ``lo`` itself is not allowed, only values above it (``fraction`` in
            ``(0, 1]``).
        hi_open: ``hi`` itself is not allowed, only values below it.
    """

    param: str
    lo: float | None
    hi: float | None
    integer: bool = False
    doc: str = ""
    lo_open: bool = False
    hi_open: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.param, str) or not self.param.strip():
            raise OperatorError(f"a Magnitude needs a parameter name; got param={self.param!r}")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise OperatorError(f"magnitude '{self.param}': lo={self.lo!r} is above hi={self.hi!r}")

    def range_text(self) -> str:
        """The range in interval notation, ``(0, 1]``, ``[1, inf) integer``."""
        left = "(" if self.lo is None or self.lo_open else "["
        right = ")" if self.hi is None or self.hi_open else "]"
        lo = "-inf" if self.lo is None else _bound_text(self.lo, self.integer)
        text = f"{left}{lo}, {_bound_text(self.hi, self.integer)}{right}"
        return f"{text} integer" if self.integer else text

    def contains(self, value: float) -> bool:
        """Whether ``value`` is a level this parameter may take (a whole number when
        ``integer``; ``bool`` is not a number)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return False
        if self.integer and not float(value).is_integer():
            return False
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return not (self.hi is not None and (value > self.hi or (self.hi_open and value == self.hi)))

    def __str__(self) -> str:
        return f"{self.param} {self.range_text()}"


@dataclass(frozen=True)
class ExecutionChange:
    """What an execution-mode operator changes when the target node runs again.

    Attributes:
        templates: Template id -> its replacement (a registered template or a template
            file, see :func:`~quiver.perturbations.resolve_template_ref`).
        params: LLM request overrides (``model``, ``temperature``, ``top_p``, ``seed``,
            ``max_tokens``).
    """

    templates: dict[str, TemplateRef] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    messages: tuple[Any, ...] = ()
    """Inline prompt swaps (:class:`~quiver.perturbations.MessageSwap`): a message of the
    target's requests selected and replaced, for prompts written inline in SDK calls."""


@dataclass
class OperatorContext:
    """What an operator may know about the call it perturbs.

    Attributes:
        node: The target node's name.
        spec: The graph's spec of the target node (field types, categories), if any.
        output: The recorded output of the target call (a JSON value).
        prompt_template: The template id the recorded call used, if any.
        logprobs: The recorded response logprobs (OpenAI ``logprobs.content`` entries:
            ``{token, logprob, top_logprobs: [{token, logprob}, ...]}``), if any.
        rng: The operator's random generator; the replayer seeds it per (trace,
            perturbation, repeat), so an operator is deterministic given that seed.
        chat: An LLM call ``(messages, params) -> content`` (for paraphrases), if any.
        base_dir: The folder relative paths in the parameters resolve against (the
            spec's folder); ``None`` means the working directory.
    """

    node: str
    spec: NodeSpec | None
    output: Any
    prompt_template: str | None = None
    logprobs: list[dict[str, Any]] | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    chat: Callable[[list[dict[str, str]], dict[str, Any]], str] | None = None
    base_dir: Path | None = None


class OperatorParams(BaseModel):
    """A convenient base for operator parameters: unknown keys are refused, values are
    frozen, and attribute docstrings become the fields' descriptions (their docs)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    omitted_when_none: ClassVar[tuple[str, ...]] = ()
    """Parameters added after an operator shipped: left out of the dump (and so of
    ``describe()`` and a campaign's identity) while None, so that parameters without them
    dump as they did before they existed."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.omitted_when_none:
                if getattr(self, name) is None:
                    data.pop(name, None)
        return data


class Operator(ABC):
    """A perturbation operator, built from validated parameters.

    Subclasses set the class attributes and implement :meth:`apply` (output mode) or
    :meth:`change` (execution mode), then register with :func:`operator`.

    Attributes:
        name: The registered name (set by :func:`operator`).
        mode: ``"output"`` (perturb the recorded output) or ``"execution"`` (re-run the
            node with a change).
        binary: ``True`` when the stratum is decided by value (no-op when the baseline
            already had it), ``False`` when by magnitude (``d_i > eps``).
        Params: The pydantic model of the parameters.
        magnitudes: The parameters that set how strongly it perturbs, with their ranges
            (see :meth:`magnitude`); none for a binary operator.
        params: This instance's validated parameters.
    """

    name: ClassVar[str] = ""
    mode: ClassVar[Literal["output", "execution"]]
    binary: ClassVar[bool]
    Params: ClassVar[type[BaseModel]]
    magnitudes: ClassVar[tuple[Magnitude, ...]] = ()

    def __init__(self, params: BaseModel) -> None:
        if not isinstance(params, self.Params):
            raise OperatorError(
                f"operator '{self.name}' takes {self.Params.__name__} parameters; got "
                f"{type(params).__name__} (use make_operator() to build one from a mapping)"
            )
        self.params = params

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        """The perturbed output (output mode); ``output`` is never modified."""
        raise OperatorError(
            f"operator '{self.name}' works in {self.mode} mode; it has no apply(), "
            "the replayer calls change() and re-executes the node"
        )

    def change(self, ctx: OperatorContext) -> ExecutionChange:
        """The change to re-execute the target node with (execution mode)."""
        raise OperatorError(
            f"operator '{self.name}' works in {self.mode} mode; it has no change(), "
            "the replayer calls apply() on the recorded output"
        )

    def is_noop(self, output: Any, perturbed: Any, ctx: OperatorContext) -> bool:
        """Whether the perturbation left the output as it was (canonical JSON equality).

        This decides the stratum of binary operators; the replayer decides the others
        by the target's distance.
        """
        return canonical_json(perturbed) == canonical_json(output)

    def fields_touched(self) -> list[FieldTouch]:
        """The output fields this operator changes, for the checks made before a campaign
        runs: each field must exist in the graph's spec of the target node, and a fixed
        value of a categorical field must be one of its categories.

        The default is none: an execution operator changes how the node runs, not a
        field. An output operator that changes named fields says which here, and its
        spec checks come with it, a plugged-in operator included.
        """
        return []

    def describe(self) -> dict[str, Any]:
        """What was applied, as every result records it: ``{"op": ..., "params": ...}``."""
        return {"op": self.name, "params": self.params.model_dump(mode="json")}

    @classmethod
    def variants(cls, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Split one parameter mapping into several perturbations (see
        :func:`expand_variants`); by default, the parameters as they are."""
        return [dict(params)]

    @classmethod
    def magnitude(cls, param: str, params: Mapping[str, Any]) -> Magnitude:
        """The declaration of the magnitude ``param``, its range made concrete for the
        other parameters ``params`` (which do not hold ``param`` itself).

        The default returns the static declaration from :attr:`magnitudes`; an operator
        whose range depends on its other parameters overrides this and narrows it.

        Raises:
            OperatorError: ``param`` is not a magnitude of this operator (the message
                lists those it has, or says it has none), or the other parameters leave
                it without a range.
        """
        for declared in cls.magnitudes:
            if declared.param == param:
                return declared
        raise OperatorError(cls._no_magnitude(param))

    @classmethod
    def _no_magnitude(cls, param: str) -> str:
        if not cls.magnitudes:
            kind = "binary: it forces a value" if cls.binary else "it declares no magnitude parameter"
            return (f"operator '{cls.name}' has no magnitude to ladder adaptively ({kind}); "
                    f"give '{param}' as listed steps")
        valid = ", ".join(str(m) for m in cls.magnitudes)
        return f"operator '{cls.name}' cannot ladder '{param}' adaptively; its magnitudes: {valid}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"


# --------------------------------------------------------------------------- registry

OPERATORS: Registry[type[Operator]] = Registry(
    "operator", "operators", ENTRY_POINT_GROUP, error=OperatorError, how="with @quiver.perturbations.operator",
    adopt=adopt_class(lambda name, cls: _register(name, cls), OperatorError, "operator", "an Operator subclass",
                      "@operator"),
)
"""Every operator by name (see :class:`quiver._registry.Registry`)."""


def _check_operator_class(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Operator)):
        raise OperatorError(f"operator '{name}' must be a subclass of quiver.perturbations.Operator; got {cls!r}")
    problems = []
    if getattr(cls, "mode", None) not in ("output", "execution"):
        problems.append("mode = 'output' or 'execution'")
    if not isinstance(getattr(cls, "binary", None), bool):
        problems.append("binary = True or False")
    params = getattr(cls, "Params", None)
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        problems.append("Params = a pydantic model of its parameters")
    elif not _magnitudes_declared(cls, params):
        problems.append("magnitudes = a tuple of Magnitude, each naming one of its Params fields")
    if problems:
        raise OperatorError(f"operator class {cls.__qualname__} ('{name}') must set {'; '.join(problems)}")


def _magnitudes_declared(cls: type[Operator], params: type[BaseModel]) -> bool:
    magnitudes = getattr(cls, "magnitudes", ())
    return isinstance(magnitudes, tuple) and all(
        isinstance(m, Magnitude) and m.param in params.model_fields for m in magnitudes
    )


def _register(name: str, cls: type[Operator], *, rename: bool = False) -> None:
    OPERATORS.check_name(name)
    _check_operator_class(name, cls)
    OPERATORS.add(name, cls)
    if rename or not cls.__dict__.get("name"):
        cls.name = name


def operator(name: str) -> Callable[[type[Operator]], type[Operator]]:
    """Class decorator registering an :class:`Operator` subclass as ``name``.

    Raises:
        OperatorError: ``name`` is taken by another class, or the class does not set
            ``mode``, ``binary`` and ``Params``.
    """

    def decorate(cls: type[Operator]) -> type[Operator]:
        _register(name, cls, rename=True)
        return cls

    return decorate


def registered_operators() -> dict[str, type[Operator]]:
    """Every registered operator by name, including those from entry points."""
    return OPERATORS.items()


def get_operator(name: str) -> type[Operator]:
    """The operator class registered as ``name``.

    Raises:
        OperatorError: No operator has that name (the message lists the known ones), or
            the entry point that should provide it failed to load.
    """
    return OPERATORS.get(name)


# --------------------------------------------------------------------------- building


def _error_location(loc: Sequence[int | str]) -> str:
    path = "params"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _validation_message(name: str, params_model: type[BaseModel], exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        msg = str(err["msg"]).removeprefix("Value error, ")
        problems.append(f"{_error_location(err['loc'])}: {msg}")
    valid = ", ".join(params_model.model_fields) or "none"
    return f"operator '{name}' {'; '.join(problems)}; valid params: {valid}"


def make_operator(name: str, params: Mapping[str, Any] | None) -> Operator:
    """Build the operator ``name`` from a parameter mapping, validating it.

    Raises:
        OperatorError: The operator is unknown or the parameters are not valid; the
            message names each bad parameter and lists the valid ones, e.g.
            ``operator 'list_edit' params.count: Input should be greater than or equal
            to 1; valid params: field, action, count, fraction, pool``.
    """
    cls = get_operator(name)
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise OperatorError(
            f"operator '{name}' params must be a mapping of parameter names to values; "
            f"got {type(params).__name__}; valid params: {', '.join(cls.Params.model_fields)}"
        )
    try:
        validated = cls.Params.model_validate(dict(params))
    except ValidationError as exc:
        raise OperatorError(_validation_message(name, cls.Params, exc)) from None
    return cls(validated)


def expand_ladder(
    params: Mapping[str, Any], ladder: Mapping[str, Sequence[Any]] | None
) -> list[dict[str, Any]]:
    """One parameter mapping per step of a ladder.

    ``ladder={"count": [1, 2, 3]}`` gives ``params`` with ``count=1``, then ``2``, then
    ``3``; several keys give their cartesian product, the first key varying slowest. No
    ladder gives ``[dict(params)]``.

    Raises:
        OperatorError: A ladder key also appears in ``params``, or a ladder's steps are
            not a non-empty list.
    """
    if not ladder:
        return [dict(params)]
    for key, steps in ladder.items():
        if key in params:
            raise OperatorError(
                f"ladder.{key}: '{key}' is also given in params ({params[key]!r}); give it "
                "either as one value in params or as the steps of the ladder, not both"
            )
        if isinstance(steps, (str, bytes, Mapping)) or not isinstance(steps, Sequence) or not steps:
            raise OperatorError(f"ladder.{key}: the steps must be a non-empty list of values; got {steps!r}")
    keys = list(ladder)
    return [
        {**params, **dict(zip(keys, combo, strict=True))} for combo in itertools.product(*(ladder[k] for k in keys))
    ]


def expand_variants(
    name: str, params: Mapping[str, Any] | None, laddered: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Split one operator's parameters into one mapping per variant.

    ``prompt_swap`` with ``variants: [a, b]`` gives ``[{variant: a, ...}, {variant: b,
    ...}]``; with a ``level`` it gives the parameters as they are (one perturbation over
    the ordered list); other operators give ``[params]``.

    ``laddered`` names the parameters a ladder sets afterwards (listed steps or an
    adaptive search): they count as given, so ``prompt_swap`` with ``variants`` and a
    laddered ``level`` is not split. They are not added to the mappings returned.

    Raises:
        OperatorError: The operator is unknown.
    """
    cls = get_operator(name)
    params = dict(params or {})
    placeholders = [key for key in laddered if key not in params]
    split = cls.variants({**params, **dict.fromkeys(placeholders)})
    return [{k: v for k, v in one.items() if k not in placeholders} for one in split]


def magnitude_of(op_name: str, param: str, params: Mapping[str, Any] | None = None) -> Magnitude:
    """The magnitude ``param`` of the operator ``op_name``, its range made concrete for the
    operator's other parameters ``params`` (see :meth:`Operator.magnitude`).

    Raises:
        OperatorError: The operator is unknown, ``param`` is not one of its magnitudes
            (the message lists those it has), or ``params`` leave it without a range.
    """
    if params is not None and not isinstance(params, Mapping):
        raise OperatorError(
            f"operator '{op_name}' params must be a mapping of parameter names to values; got {type(params).__name__}"
        )
    return get_operator(op_name).magnitude(param, dict(params or {}))
