"""What can be checked of a campaign spec before its first replay.

Two rounds, both before the run writes anything to its output folder (no ledger, no
``spec.resolved.json``):

* :func:`check_spec`, before anything runs: the pipeline imports, the graph and baseline
  files exist, every perturbation names a node, a field and values the graph knows (when
  it declares them), every prompt variant is a template that exists and parses, and the
  bundled simulator serves the models the spec names (``llm.model``, an operator's
  ``model``).
* :func:`check_baseline`, once the baseline is loaded (or recorded): a perturbation that
  cannot land on its target's recorded calls is refused (a ``prompt_swap`` whose
  ``params.template`` none of them renders, a ``categorical_flip`` to a class none of
  them output without ``allow_unseen: true``, a ``param_change`` where none of them
  recorded an LLM call: each would replay the target as it was and count what sampling
  did as its effect); every operator is applied once, dry, to the recorded call of its
  target in the first baseline trace where that call ran (an output operator to the
  recorded output, an execution operator's change built and every replacement template
  checked against the variables the recorded call supplied), and the simulator serves
  every model the replays call live.

A problem is one :class:`~quiver.SpecError` naming the spec's file and line, the field
and the perturbation: a mistake that would fail every replay the same way is refused
here, in one line, instead of once per replay.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from quiver._canonical import canonical_json
from quiver._errors import QuiverError, SpecError
from quiver._graph import PipelineGraph, load_graph
from quiver._trace import NodeCall, Trace
from quiver._yamlspec import load_yaml_with_lines
from quiver.experiments._config import CampaignSpec, PerturbationSpec, simulator_models
from quiver.perturbations import (
    ANY_VALUE,
    MessageSelector,
    Operator,
    OperatorContext,
    OperatorError,
    TemplateRef,
    expand_variants,
    get_operator,
    make_operator,
    resolve_template_ref,
)
from quiver.replay import Template, declared_graph, get_template, load_pipeline, load_template_file

from .jobs import eligible_traces

__all__ = ["check_spec", "check_baseline", "check_candidates", "template_problem", "unselected", "inline_candidate"]

_Where = tuple[Any, ...]


class _Spot:
    """Errors that name the spec file, the line of a field path and the field path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _, self.lines = load_yaml_with_lines(path)

    def fail(self, where: _Where, reason: str) -> SpecError:
        line = next((self.lines[where[:i]] for i in range(len(where), 0, -1) if where[:i] in self.lines), None)
        dotted = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where).lstrip(".")
        return SpecError(str(self.path), line, dotted, reason)


def check_spec(spec: CampaignSpec, path: Path) -> tuple[Any, PipelineGraph | None]:
    """Everything that can be checked before anything runs (see the module docstring).
    Returns the pipeline function and the declared graph.

    Raises:
        SpecError: naming the file, the line and the field path, and what would be valid.
    """
    spot = _Spot(path)
    base_dir = path.parent
    try:
        fn = load_pipeline(spec.pipeline, base_dir)
    except QuiverError as exc:
        raise spot.fail(("pipeline",), str(exc)) from None
    for key in ("baseline", "graph"):
        value = getattr(spec, key)
        if value is not None and not (base_dir / value).is_file():
            raise spot.fail((key,), f"no file at {base_dir / value}")
    _check_models(spec, base_dir, spot)
    for i, p in enumerate(spec.perturbations):
        _check_variants(p, i, base_dir, spot)
    graph = load_graph(base_dir / spec.graph).over(declared_graph()) if spec.graph else declared_graph()
    if not graph.nodes:
        return fn, None
    for i, p in enumerate(spec.perturbations):
        # the graph file names the pipeline's nodes; the decorators declare only the nodes that give types or
        # parents (and, in one process, those of every pipeline imported so far): a node they leave out is
        # checked against the baseline's traces instead (check_baseline)
        if spec.graph or p.node in graph.nodes:
            _check_fields(p, i, graph, spot)
    return fn, graph


def _check_fields(p: PerturbationSpec, i: int, graph: PipelineGraph, spot: _Spot) -> None:
    if p.node not in graph.nodes:
        raise spot.fail(("perturbations", i, "node"),
                        f"unknown node {p.node!r}; the graph's nodes are {', '.join(sorted(graph.nodes))}")
    node = graph.nodes[p.node]
    for step in p.steps():
        for touch in make_operator(p.op, step).fields_touched():
            field_name, value = touch.field, touch.value
            top = field_name.split(".")[0]
            if node.fields is not None and top not in node.fields:
                raise spot.fail(("perturbations", i, "params"),
                                f"node {p.node!r} has no field {top!r}; its fields are {', '.join(node.fields)}")
            spec_f = node.fields.get(top) if node.fields is not None else None
            cats = spec_f.categories if spec_f is not None else None
            if cats and value is not ANY_VALUE and value not in cats:
                raise spot.fail(("perturbations", i, "params"),
                                f"{value!r} is not a category of {p.node}.{top}; its categories are "
                                f"{', '.join(map(str, cats))}")


# --------------------------------------------------------------------------- models


def _served(spec: CampaignSpec, base_dir: Path, spot: _Spot) -> set[str] | None:
    """The models the spec's simulator serves (None: a real endpoint, not checked)."""
    sim = spec.llm.simulator
    if sim is None:
        return None
    try:
        return set(simulator_models(sim, base_dir))
    except QuiverError as exc:
        raise spot.fail(("llm", "simulator", "models"), str(exc)) from None


def _not_served(model: str, served: set[str], spec: CampaignSpec) -> str:
    given = spec.llm.simulator.models if spec.llm.simulator is not None else []
    hint = ("add the module that registers it with @sim_model to llm.simulator.models" if not given
            else f"the modules of llm.simulator.models ({', '.join(given)}) do not register it with @sim_model")
    return f"the simulator does not serve model {model!r} (it serves {', '.join(sorted(served))}); {hint}"


def _check_models(spec: CampaignSpec, base_dir: Path, spot: _Spot) -> None:
    served = _served(spec, base_dir, spot)
    if served is None:
        return
    if "model" in spec.llm.model_fields_set and spec.llm.model not in served:
        raise spot.fail(("llm", "model"), _not_served(spec.llm.model, served, spec))
    for i, p in enumerate(spec.perturbations):
        for step in p.steps():
            model = step.get("model")
            if isinstance(model, str) and model not in served:
                where = ("perturbations", i, "params", "model") if "model" in p.params else ("perturbations", i)
                raise spot.fail(where, f"perturbation {p.id!r}: {_not_served(model, served, spec)}")


# --------------------------------------------------------------------------- templates


def _variant_where(p: PerturbationSpec, i: int, ref: str) -> _Where:
    variants = p.params.get("variants")
    if isinstance(variants, list) and ref in variants:
        return ("perturbations", i, "params", "variants", variants.index(ref))
    return ("perturbations", i, "params", "variant" if "variant" in p.params else "ladder")


def _applied(p: PerturbationSpec) -> list[dict[str, Any]]:
    """The perturbation's parameter sets, a prompt_swap over an ordered list of variants
    (``level``) split into one per variant, each once: any level may apply any of them."""
    applied: dict[str, dict[str, Any]] = {}
    for step in p.steps():
        if p.op == "prompt_swap" and isinstance(step.get("variants"), list) and "variant" not in step:
            split = expand_variants(p.op, {k: v for k, v in step.items() if k != "level"})
        else:
            split = [step]
        applied.update((canonical_json(one), one) for one in split)
    return list(applied.values())


def _check_variants(p: PerturbationSpec, i: int, base_dir: Path, spot: _Spot) -> None:
    """Every template a prompt_swap names exists and parses (its variables are checked
    against a recorded call by :func:`check_baseline`)."""
    for step in _applied(p):
        ref = step.get("variant")
        if p.op != "prompt_swap" or not isinstance(ref, str):
            continue
        try:
            template = _template(resolve_template_ref(ref, base_dir))
            _variables(template)
        except QuiverError as exc:
            raise spot.fail(_variant_where(p, i, ref), f"perturbation {p.id!r}: {exc}") from None


def _template(ref: TemplateRef) -> Template:
    """The template a reference names (a file, or a registered id)."""
    try:
        messages = load_template_file(ref.path) if ref.path is not None else get_template(ref.ref).messages
    except QuiverError as exc:
        raise OperatorError(f"template {ref.ref!r}: {exc}") from None
    return Template(ref.ref, messages)


def _variables(template: Template) -> set[str]:
    """The variables a template fills in, or an error when it is not a valid template."""
    try:
        names = set(template.variables)
        for _, content in template.messages:
            content.format_map({name: "" for name in names})
    except (ValueError, IndexError, KeyError, AttributeError) as exc:
        raise OperatorError(
            f"template {template.id!r} is not a valid template ({type(exc).__name__}: {exc}); write {{name}} for "
            "a variable and {{ or }} for a literal brace"
        ) from None
    return names


def template_problem(template_id: str, replacement: Template) -> str | None:
    """Why ``replacement`` cannot stand in for the registered template ``template_id``:
    it is not a valid template, or it uses a variable that the calls rendering
    ``template_id`` do not supply (they supply that template's variables). None when it
    can, or when ``template_id`` is not registered in this process (nothing to compare)."""
    try:
        used = _variables(replacement)
    except OperatorError as exc:
        return str(exc)
    try:
        current = get_template(template_id)
    except QuiverError:
        return None
    supplied = set(current.variables)
    unknown = sorted(used - supplied)
    if not unknown:
        return None
    return (f"template {replacement.id!r} uses {', '.join('{' + v + '}' for v in unknown)}, which the recorded calls "
            f"of template {template_id!r} do not supply; they supply {', '.join(sorted(supplied)) or 'no variable'}")


# --------------------------------------------------------------------------- the dry run


class _NoLLM(Exception):
    """An operator asked for an LLM call during the dry run: what it would do is not checked."""


def _no_chat(messages: list[dict[str, str]], params: dict[str, Any]) -> str:
    raise _NoLLM


def _context(call: NodeCall, graph: PipelineGraph, base_dir: Path) -> OperatorContext:
    """The context the replayer gives an operator at ``call`` (with no LLM)."""
    return OperatorContext(
        node=call.node, spec=graph.nodes.get(call.node), output=copy.deepcopy(call.output),
        prompt_template=call.prompt.template_id if call.prompt is not None else None,
        logprobs=call.response.logprobs if call.response is not None else None,
        rng=random.Random(0), chat=_no_chat, base_dir=base_dir,
    )


def _dry_run(op: Operator, call: NodeCall, graph: PipelineGraph, base_dir: Path) -> None:
    """Apply ``op`` to the recorded ``call`` as a replay would, or raise OperatorError."""
    ctx = _context(call, graph, base_dir)
    try:
        if op.mode == "output":
            op.apply(copy.deepcopy(call.output), ctx)
            return
        change = op.change(ctx)
    except _NoLLM:
        return
    for template_id, ref in change.templates.items():
        problem = template_problem(template_id, _template(ref))
        if problem is not None:
            raise OperatorError(problem)


def _target(traces: Sequence[Trace], p: PerturbationSpec) -> tuple[Trace, int] | None:
    """The first ok baseline trace where the perturbation's target call ran, and the
    call's index in it."""
    for trace in eligible_traces(traces, p.node, p.occurrence):
        index = next(k for k, c in enumerate(trace.calls) if c.node == p.node and c.occurrence == p.occurrence)
        return trace, index
    return None


def _live_models(trace: Trace, index: int, execution: bool) -> list[str]:
    """The models of the calls a replay at ``trace.calls[index]`` makes live: those after
    the target, and the target's own when it runs again."""
    start = index if execution else index + 1
    return list(dict.fromkeys(c.model.name for c in trace.calls[start:] if c.model is not None and c.model.name))


def check_baseline(spec: CampaignSpec, path: Path, traces: Sequence[Trace],
                   graph_of: Callable[[], PipelineGraph]) -> None:
    """The dry run of every perturbation on the baseline (see the module docstring).
    ``graph_of`` gives the graph the replays are given (the declared one, completed from
    the baseline), once a baseline trace is known to have run through. A perturbation
    whose target node no baseline trace ran is refused (a misspelt node of a pipeline
    without a graph file); one whose call (that occurrence) never ran is left to the run.

    Raises:
        SpecError: naming the spec's file, line and field, the perturbation, the trace
            and call it was tried on, and what went wrong.
    """
    spot = _Spot(path)
    base_dir = path.parent
    served = _served(spec, base_dir, spot)
    _some_trace_ran(spec, traces, served, spot)
    graph = graph_of()
    ran = {c.node for t in traces for c in t.calls}
    for i, p in enumerate(spec.perturbations):
        found = _target(traces, p)
        if found is None and p.node not in ran:
            raise spot.fail(("perturbations", i, "node"), f"unknown node {p.node!r}: no baseline trace ran it; the "
                                                          f"baseline's nodes are {', '.join(sorted(ran))}")
        if found is None:
            continue
        trace, index = found
        call = trace.calls[index]
        _check_lands(p, i, traces, spot)
        on = f"on the recorded call {p.node}#{p.occurrence} of trace {trace.trace_id}"
        for step in _applied(p):
            try:
                _dry_run(make_operator(p.op, step), call, graph, base_dir)
            except OperatorError as exc:
                where = _variant_where(p, i, step["variant"]) if "variant" in step else ("perturbations", i, "params")
                raise spot.fail(where, f"perturbation {p.id!r} fails {on}: {exc}") from None
        if served is not None:
            missing = [m for m in _live_models(trace, index, get_operator(p.op).mode == "execution") if m not in served]
            if missing:
                raise spot.fail(("llm", "simulator", "models"),
                                f"perturbation {p.id!r}: its replays call model(s) {', '.join(missing)} ({on} and "
                                f"after it), which the simulator does not serve (it serves "
                                f"{', '.join(sorted(served))}); add the module that registers them with "
                                "@sim_model to llm.simulator.models")


# --------------------------------------------------------------------------- landing


def _target_calls(traces: Sequence[Trace], p: PerturbationSpec) -> list[tuple[Trace, NodeCall]]:
    """Every recorded call of the perturbation's target (``node#occurrence``) in the ok
    baseline traces, with its trace."""
    return [(t, c) for t in eligible_traces(traces, p.node, p.occurrence)
            for c in t.calls if c.node == p.node and c.occurrence == p.occurrence]


def _with_inner(trace: Trace, call: NodeCall) -> list[NodeCall]:
    """``call`` and the calls recorded under it (an LLM call it made as a child call)."""
    inner = call.call_path + "/"
    return [c for c in trace.calls if c is call or c.call_path.startswith(inner)]


def _label(p: PerturbationSpec) -> str:
    return f"node {p.node!r}" if p.occurrence == 0 else f"call {p.node}#{p.occurrence}"


def _check_lands(p: PerturbationSpec, i: int, traces: Sequence[Trace], spot: _Spot) -> None:
    """Refuse a perturbation that cannot change the target's recorded calls (see the
    module docstring); ``i`` is its index in the spec."""
    calls = _target_calls(traces, p)
    for step in _applied(p):
        problem, key = None, None
        if p.op == "prompt_swap" and isinstance(step.get("template"), str):
            problem, key = _unrendered(step["template"], p, calls), "template"
        elif p.op == "prompt_swap" and isinstance(step.get("message"), dict):
            problem, key = unselected(step["message"], _label(p), calls, "params.message"), "message"
        elif p.op == "categorical_flip" and "to" in step and not step.get("allow_unseen"):
            problem, key = _unseen(step["to"], step.get("field"), p, calls), "to"
        elif p.op == "param_change":
            problem = _uncaptured(p, traces, calls)
        if problem is not None:
            where: _Where = ("perturbations", i, "params") + ((key,) if key in p.params else ())
            raise spot.fail(where, f"perturbation {p.id!r}: {problem}")


def _unrendered(template: str, p: PerturbationSpec, calls: list[tuple[Trace, NodeCall]]) -> str | None:
    """Why no recorded call of the target renders ``template`` (None when one does)."""
    prompts = [c.prompt for t, call in calls for c in _with_inner(t, call)
               if c.prompt is not None and (c.model is not None or c.response is not None)]
    rendered = sorted({q.template_id for q in prompts if q.template_id})
    if template in rendered:
        return None
    if rendered:
        return (f"params.template {template!r} is rendered by no baseline call of {_label(p)}, so the swap would "
                f"not land; its calls render {', '.join(repr(r) for r in rendered)}")
    why = ("its calls send raw messages (register the prompt with quiver.template, or format it with a "
           "ChatPromptTemplate in an instrumented graph, to swap it)" if prompts else "it recorded no LLM call")
    return f"params.template {template!r} cannot land: {_label(p)} renders no registered template: {why}"


def unselected(message: dict[str, Any], label: str, calls: Sequence[tuple[Trace, NodeCall]],
               what: str = "the selector") -> str | None:
    """Why an inline message selector (a ``prompt_swap``'s ``params.message``, a gate
    candidate's) selects no message of the recorded requests of ``calls`` (of the node
    ``label`` names), or more than one of one request; None when it selects one."""
    try:
        selector = MessageSelector.parse(message)
    except OperatorError as exc:
        return str(exc)
    prompts = [c.prompt for t, call in calls for c in _with_inner(t, call)
               if c.prompt is not None and (c.model is not None or c.response is not None)]
    if not prompts:
        return f"{what} cannot land: {label} recorded no LLM request"
    counts = [len(selector.matches([(m.role, m.content) for m in q.assembled], q.fragments)) for q in prompts]
    if max(counts) > 1:
        return (f"{what} selects {max(counts)} messages of one recorded request of {label} "
                f"({selector.describe()}); a swap replaces one: narrow the selector")
    if 1 not in counts:
        roles = ", ".join(dict.fromkeys(m.role for q in prompts for m in q.assembled))
        return (f"{what} ({selector.describe()}) matches no message of the recorded requests of {label}, "
                f"so the swap would not land; their messages' roles are {roles or 'none'}")
    return None


def _unseen(to: Any, field: Any, p: PerturbationSpec, calls: list[tuple[Trace, NodeCall]]) -> str | None:
    """Why ``to`` is a class no recorded output of the target holds in ``field`` (None
    when one does)."""
    seen: dict[str, Any] = {}
    for _, call in calls:
        value = _field_value(call.output, field)
        if isinstance(value, (str, bool, int, float)):
            seen.setdefault(canonical_json(value), value)
    if canonical_json(to) in seen:
        return None
    where = f"{p.node}.{field}" if field else f"the output of {p.node}"
    classes = ", ".join(repr(v) for v in sorted(seen.values(), key=canonical_json)) or "none"
    return (f"params.to {to!r} is a class no baseline output holds in {where} (it holds {classes}); flip to one "
            "of those, or set allow_unseen: true to flip to a class the pipeline never produced")


def _field_value(output: Any, field: Any) -> Any:
    """The value at the dotted ``field`` of ``output`` (the whole output for None); None
    when it is not there."""
    value = output
    for key in str(field).split(".") if field else ():
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _uncaptured(p: PerturbationSpec, traces: Sequence[Trace], calls: list[tuple[Trace, NodeCall]]) -> str | None:
    """Why no recorded call of the target holds an LLM call to change (None when one does)."""
    if any(c.model is not None or c.response is not None for t, call in calls for c in _with_inner(t, call)):
        return None
    llm_nodes = sorted({_owner(t, c) for t in traces for c in t.calls if c.model is not None or c.response is not None})
    return (f"param_change on {_label(p)}, whose baseline calls recorded no LLM call (on them or under them), so "
            "there is no request to change; the nodes whose LLM calls were recorded are "
            f"{', '.join(llm_nodes) or 'none'}")


def _owner(trace: Trace, call: NodeCall) -> str:
    """The node a recorded LLM call belongs to: its own, or the node of the call it was
    made in when it is a child ``llm`` call."""
    if "/" not in call.call_path:
        return call.node
    outer = call.call_path.rsplit("/", 1)[0]
    return next((c.node for c in trace.calls if c.call_path == outer), call.node)


def _some_trace_ran(spec: CampaignSpec, traces: Sequence[Trace], served: set[str] | None, spot: _Spot) -> None:
    """A baseline none of whose traces ran through gives no replay at all: refused with
    the first trace's error (and the simulator's models, when it serves too few)."""
    if not traces or any(t.status == "ok" for t in traces):
        return
    first = traces[0]
    error = f"{first.error.type}: {first.error.message}" if first.error is not None else "no error recorded"
    where: _Where = ("baseline",) if spec.baseline is not None else ("inputs",)
    models = sorted({c.model.name for t in traces for c in t.calls if c.model is not None and c.model.name})
    if served is not None and any(m not in served for m in models):
        where = ("llm", "simulator", "models")
    raise spot.fail(where, f"none of the {len(traces)} baseline traces ran through, so no perturbation has a call to "
                           f"perturb; the first, {first.trace_id}, failed with {error.splitlines()[0][:300]}"
                           + (f" (the simulator serves {', '.join(sorted(served))})" if served is not None else ""))


def inline_candidate(key: str) -> tuple[str, dict[str, Any]] | None:
    """A gate candidate's key that names an inline message (``NODE/SELECTOR``: ``draft/system``,
    ``draft/user#1``, ``draft/contains:Answer in``, ``draft/fragment:3f2a...``) as (node, the
    ``params.message`` selector a ``prompt_swap`` takes); None for a template id.

    Raises:
        QuiverError: A ``/`` key whose selector is not one of those shapes.
    """
    node, sep, selector = key.partition("/")
    if not sep:
        return None
    way, colon, text = selector.partition(":")
    if colon and way in ("contains", "fragment") and text:
        found: dict[str, Any] = {way: text}
    elif not colon and selector:
        role, hash_, index = selector.partition("#")
        found = {"role": role}
        if hash_:
            if not index.isdigit():
                raise QuiverError(f"--candidate {key}: {index!r} is not a message index; give ROLE#N, e.g. user#1")
            found["index"] = int(index)
    else:
        found = {}
    if not node or not found or not next(iter(found.values())):
        raise QuiverError(f"--candidate {key}: give NODE/ROLE[#N], NODE/contains:TEXT or NODE/fragment:HEX to swap "
                          "an inline message, or a template id")
    return node, found


def check_candidates(candidates: Mapping[str, Path], changed: Callable[[str], str],
                     calls: Callable[[str], Sequence[tuple[Trace, NodeCall]]] | None = None) -> None:
    """``quiver gate`` candidates: each file a valid template that uses only the
    variables the recorded calls of its template supply (``changed`` gives the node
    whose calls rendered it, or raises); an inline candidate (``NODE/SELECTOR``) a text
    file whose selector picks one message of each recorded request of the node (``calls``
    gives the node's recorded calls).

    Raises:
        QuiverError: naming the candidate (``--candidate ID=PATH``) and the problem.
    """
    for template_id, file in candidates.items():
        inline = inline_candidate(template_id)
        if inline is not None:
            node, selector = inline
            changed(template_id)
            problem = unselected(selector, f"node {node!r}", calls(node) if calls is not None else [])
            if problem is not None:
                raise QuiverError(f"--candidate {template_id}={file}: {problem}")
            continue
        changed(template_id)
        try:
            replacement = Template(str(file), load_template_file(file))
        except QuiverError as exc:
            raise QuiverError(f"--candidate {template_id}={file}: {exc}") from None
        problem = template_problem(template_id, replacement)
        if problem is not None:
            raise QuiverError(f"--candidate {template_id}={file}: {problem}")

