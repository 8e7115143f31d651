"""``quiver init PIPELINE``: the specs of a new pipeline, written from one run of it.

Runs the pipeline once on the inputs given (against the bundled simulator, or an
endpoint the user names), through the same recording as ``quiver record``; lists the
nodes the run found (kind, calls, output fields with their types and the categorical
values seen, prompt templates and inline prompts); and writes a record spec and a
campaign spec beside each other, the campaign with one commented perturbation per node
(:func:`proposal`). It never overwrites a file: when either spec exists it refuses
before running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, EXIT_PROBLEMS

if TYPE_CHECKING:
    from quiver import Trace
    from quiver._graph import FieldSpec, NodeSpec

__all__ = ["add_parser", "command", "NodeFound", "find_nodes", "proposal"]

RECORD_FILE = "record.yaml"
CAMPAIGN_FILE = "campaign.yaml"
_SHOWN_VALUES = 8


def add_parser(sub: Any) -> None:
    """Register ``quiver init``."""
    init = sub.add_parser(
        "init",
        help="run a pipeline once and write its record and campaign specs",
        description=(
            "Run PIPELINE once on the inputs given, against the bundled simulator (or the endpoint "
            "--base-url names), list the nodes it found (kinds, output fields and the categorical values "
            "seen, prompt templates, inline prompts), and write record.yaml and campaign.yaml to --out-dir: "
            "the campaign with one commented perturbation per node, ready for `quiver run --plan`. "
            "Never overwrites a file. Exit 1 when some runs failed (the specs are written all the same)."
        ),
    )
    init.add_argument("pipeline", help="the pipeline: file.py:function (relative to here) or package.module:function")
    src = init.add_mutually_exclusive_group(required=True)
    src.add_argument("--inputs", type=Path, metavar="FILE.jsonl",
                     help="the inputs, one JSON object a line ({input_id, inputs} or the keyword arguments)")
    src.add_argument("--input", action="append", metavar="JSON", dest="inline",
                     help="one input as a JSON object of keyword arguments (repeat for more)")
    init.add_argument("--sim-models", action="append", type=Path, default=[], metavar="FILE.py",
                      help="a module registering simulated models for the bundled simulator (repeat for more)")
    init.add_argument("--base-url", help="an OpenAI-compatible endpoint instead of the simulator")
    init.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding the endpoint's key")
    init.add_argument("--model", help="the default model of the specs (the pipeline's calls may name their own)")
    init.add_argument("--out-dir", type=Path, default=Path("."),
                      help="where record.yaml and campaign.yaml are written (default: here)")
    init.add_argument("--name", help="the pipeline's name in the specs (default: the function's name)")
    init.add_argument("--json", action="store_true", help="print the nodes found as JSON instead of a table")
    init.set_defaults(handler=command)


@dataclass
class NodeFound:
    """One node as the run shows it."""

    name: str
    kind: str
    calls: int = 0
    fields: dict[str, str] = field(default_factory=dict)
    """Output field -> inferred type (``output``: a whole output that is not an object)."""
    values: dict[str, list[Any]] = field(default_factory=dict)
    """Categorical and bool fields -> the values seen, commonest first."""
    templates: list[str] = field(default_factory=list)
    """Prompt template ids its LLM calls rendered."""
    inline_prompts: list[str] = field(default_factory=list)
    """The first message of each distinct inline prompt (no template id), shortened."""
    temperature: float | None = None
    """The sampling temperature of its LLM calls (None: it made none)."""
    lists: list[str] = field(default_factory=list)
    """Fields (``output``: the whole output) whose every value seen is a list."""

    def to_json(self) -> dict[str, Any]:
        """The node as a JSON object."""
        return {"name": self.name, "kind": self.kind, "calls": self.calls, "fields": self.fields,
                "values": self.values, "templates": self.templates, "inline_prompts": self.inline_prompts}


def command(args: argparse.Namespace) -> int:
    """Run ``quiver init``; return the exit code."""
    from quiver import QuiverError

    out_dir = args.out_dir
    for name in (RECORD_FILE, CAMPAIGN_FILE):
        if (out_dir / name).exists():
            raise QuiverError(f"{out_dir / name} exists; quiver init never overwrites a file: give another "
                              "--out-dir, or move the file aside")
    if args.base_url and args.sim_models:
        raise QuiverError("--sim-models registers models for the bundled simulator; with --base-url the "
                          "endpoint serves the models: give one or the other")
    here = Path.cwd()
    spec = _record_spec(args, here)
    traces, failed = _run_once(spec, args.base_url is None)
    if not traces:
        raise QuiverError("the pipeline produced no trace: give at least one input")
    nodes = find_nodes(traces)
    name = args.name or _default_name(args.pipeline)
    written = _write_specs(out_dir, spec, nodes, name, args, len(traces))
    if args.json:
        print(json.dumps({"traces": len(traces), "failed": failed, "nodes": [n.to_json() for n in nodes],
                          "written": [str(p) for p in written]}, indent=2))
    else:
        _print_nodes(nodes, len(traces), failed, "the simulator" if args.base_url is None else args.base_url)
        print(f"wrote {', '.join(str(p) for p in written)}")
        print(f"next: quiver schema spec --check {written[1]}; quiver run {written[1]} --plan; "
              f"quiver run {written[1]}")
    if failed:
        print(f"quiver init: warning: {failed} of {len(traces)} run(s) failed; see their errors with "
              "`quiver record` on the written record spec", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


# --------------------------------------------------------------------------- one run


def _default_name(pipeline: str) -> str:
    """The pipeline's name: its file's (its folder's, for a file named pipeline, main or app), or its module's."""
    target, _, fn = pipeline.rpartition(":")
    if target.endswith(".py"):
        path = Path(target)
        return path.resolve().parent.name if path.stem in ("pipeline", "main", "app") else path.stem
    parts = target.split(".")
    return parts[-2] if parts[-1] in ("pipeline", "main", "app") and len(parts) > 1 else parts[-1] or fn


def _absolute_pipeline(pipeline: str, here: Path) -> str:
    target, sep, fn = pipeline.rpartition(":")
    if not sep or not target or not fn:
        from quiver import QuiverError

        raise QuiverError(f"pipeline {pipeline!r}: give file.py:function or package.module:function")
    if target.endswith(".py"):
        return f"{(here / target).resolve()}:{fn}"
    return pipeline


def _record_spec(args: argparse.Namespace, here: Path) -> dict[str, Any]:
    """The recording spec of the run, every path absolute."""
    from quiver import QuiverError

    llm: dict[str, Any]
    if args.base_url:
        llm = {"base_url": args.base_url}
        if args.api_key_env:
            llm["api_key_env"] = args.api_key_env
    else:
        llm = {"simulator": {"models": [str((here / m).resolve()) for m in args.sim_models]}}
    if args.model:
        llm["model"] = args.model
    inputs: Any
    if args.inputs is not None:
        inputs = str((here / args.inputs).resolve())
    else:
        try:
            inputs = [json.loads(text) for text in args.inline]
        except json.JSONDecodeError as exc:
            raise QuiverError(f"--input: not a JSON object ({exc.msg}); give the keyword arguments, "
                              "as in --input '{\"question\": \"...\"}'") from None
        if not all(isinstance(i, dict) for i in inputs):
            raise QuiverError("--input: give a JSON object of keyword arguments, as in "
                              "--input '{\"question\": \"...\"}'")
    return {"pipeline": _absolute_pipeline(args.pipeline, here), "llm": llm, "inputs": inputs, "repeats": 1,
            "concurrency": 1, "seed": 0}


def _run_once(spec: dict[str, Any], simulator: bool) -> tuple[list[Trace], int]:
    """Record the pipeline once on every input (in a temporary folder); the traces and how many failed."""
    import yaml

    from quiver import iter_traces

    from .record import RecordOverrides, run_record

    with tempfile.TemporaryDirectory(prefix="quiver-init-") as tmp:
        path = Path(tmp) / RECORD_FILE
        path.write_text(yaml.safe_dump({**spec, "output": str(Path(tmp) / "run")}, sort_keys=False), encoding="utf-8")
        print(f"quiver init: running {spec['pipeline'].rsplit('/', 1)[-1]} once on each input against "
              f"{'the bundled simulator' if simulator else spec['llm']['base_url']} ...", file=sys.stderr)
        _, result = run_record(path, RecordOverrides(), progress_stream=None)
        traces = list(iter_traces(result.traces_path, on_error="skip"))
    return traces, result.failed


# --------------------------------------------------------------------------- what the run shows


def find_nodes(traces: list[Trace]) -> list[NodeFound]:
    """The nodes of the traces, in the order they first ran (the source ``input`` left out)."""
    from quiver import infer_graph

    graph, _ = infer_graph([t for t in traces if t.status == "ok"] or traces)
    nodes: dict[str, NodeFound] = {}
    outputs: dict[str, list[Any]] = {}
    for trace in traces:
        for call in trace.calls:
            if call.kind == "source":
                continue
            node = nodes.setdefault(call.node, NodeFound(call.node, call.kind))
            node.calls += 1
            outputs.setdefault(call.node, []).append(call.output)
            _prompt_of(node, call)
    for node in nodes.values():
        spec = graph.nodes.get(node.name)
        if spec is not None:
            node.fields, node.values = _fields(spec, outputs[node.name])
            node.lists = [f for f in node.fields if _all_lists(outputs[node.name], None if f == "output" else f)]
    return list(nodes.values())


def _all_lists(outputs: list[Any], name: str | None) -> bool:
    seen = [o for o in outputs if o is not None] if name is None else [
        o.get(name) for o in outputs if isinstance(o, dict) and o.get(name) is not None]
    return bool(seen) and all(isinstance(v, list) and v for v in seen)


def _prompt_of(node: NodeFound, call: Any) -> None:
    if call.model is not None and node.temperature is None:
        temperature = call.model.params.get("temperature")
        node.temperature = float(temperature) if isinstance(temperature, int | float) else 1.0
    if call.prompt is None:
        return
    if call.prompt.template_id:
        if call.prompt.template_id not in node.templates:
            node.templates.append(call.prompt.template_id)
    elif call.prompt.assembled:
        first = call.prompt.assembled[0]
        text = " ".join(first.content.split())
        shown = f"{first.role}: {text[:70]}{'...' if len(text) > 70 else ''}"
        if shown not in node.inline_prompts and len(node.inline_prompts) < 3:
            node.inline_prompts.append(shown)


def _fields(spec: NodeSpec, outputs: list[Any]) -> tuple[dict[str, str], dict[str, list[Any]]]:
    items: dict[str, FieldSpec] = dict(spec.fields) if spec.fields is not None else (
        {"output": spec.output} if spec.output is not None else {})
    values: dict[str, list[Any]] = {}
    for name, fspec in items.items():
        if fspec.type in ("categorical", "bool"):
            seen = [o if spec.fields is None else o.get(name) for o in outputs
                    if spec.fields is None or isinstance(o, dict)]
            counts = Counter(json.dumps(v) for v in seen if v is not None)
            values[name] = [json.loads(v) for v, _ in counts.most_common()]
    return {name: fspec.type for name, fspec in items.items()}, values


def _print_nodes(nodes: list[NodeFound], traces: int, failed: int, where: str) -> None:
    print(f"ran the pipeline on {traces} input(s) against {where} ({failed} failed): {len(nodes)} node(s)")
    width = max(len(n.name) for n in nodes)
    for node in nodes:
        fields = "; ".join(f"{f}: {t}" + (f" {_values(node.values[f])}" if f in node.values else "")
                           for f, t in node.fields.items()) or "no output"
        print(f"  {node.name:<{width}}  {node.kind:<9} {node.calls:>3} call(s)  {fields}")
        for template in node.templates:
            print(f"  {'':<{width}}  template {template}")
        for prompt in node.inline_prompts:
            print(f"  {'':<{width}}  inline prompt ({prompt})")


def _values(values: list[Any]) -> str:
    shown = ", ".join(json.dumps(v) for v in values[:_SHOWN_VALUES])
    return f"[{shown}{', ...' if len(values) > _SHOWN_VALUES else ''}]"


# --------------------------------------------------------------------------- the specs


def proposal(node: NodeFound) -> tuple[str, str, dict[str, Any]] | str:
    """One sensible perturbation of ``node``: (why, op, params), or why none is proposed.

    In this order: flip a bool field (a routing decision), flip a categorical field to the
    second commonest value seen, drop one element of a list, scale a number by 1.5, move
    the sampling temperature of its LLM calls (0 <-> 1), empty a text field."""
    types = node.fields
    if node.kind == "router":
        return ("no perturbation proposed: a router's output is the arm it took, which a replay decides "
                "again; perturb the field it decides on, at the node that produced it")
    for name, kind in types.items():
        if kind == "bool":
            return (f"flip {name}: what follows when the decision goes the other way", "bool_flip",
                    {"field": _field_param(name)})
    for name, kind in types.items():
        seen = node.values.get(name, [])
        if kind == "categorical" and len(seen) >= 2:
            return (f"set {name} to {json.dumps(seen[1])}, the second commonest value seen (of {_values(seen)})",
                    "categorical_flip", {"field": _field_param(name), "to": seen[1]})
    for name, kind in types.items():
        if kind == "list" or name in node.lists:
            return (f"drop one element of {name}: a retrieval or a plan with one item fewer", "list_edit",
                    {"field": _field_param(name), "action": "remove", "count": 1})
    for name, kind in types.items():
        if kind == "numeric":
            return (f"scale {name} by 1.5", "numeric_edit",
                    {"field": _field_param(name), "action": "scale", "amount": 1.5})
    if node.kind == "llm" and node.temperature is not None:
        new = 0.0 if node.temperature >= 0.5 else 1.0
        return (f"sample its LLM calls at temperature {new:g} instead of {node.temperature:g}", "param_change",
                {"temperature": new})
    for name, kind in types.items():
        if kind == "text" and name != "output":
            return f"an empty {name}: what follows when this node says nothing", "override", {"set": {name: ""}}
    kinds = ", ".join(f"{f}: {t}" for f, t in types.items()) or "no output"
    return f"no perturbation proposed ({kinds}): set one by hand with `quiver schema spec` as the guide"


def _field_param(name: str) -> str | None:
    """An operator's ``field``: None for a whole output."""
    return None if name == "output" else name


def _perturbation_lines(nodes: list[NodeFound]) -> list[str]:
    lines: list[str] = []
    for node in nodes:
        found = proposal(node)
        lines.append(f"  # {node.name} ({node.kind}, {node.calls} call(s))")
        for template in node.templates:
            lines.append(f"  #   its prompt: template {template}; to try a new wording, put it in a file and use "
                         f"op: prompt_swap, params: {{variants: [FILE]}}")
        if node.inline_prompts and not node.templates:
            lines.append("  #   its prompt is inline (no template): prompt_swap with params: "
                         "{message: {role: system, index: 0}, text: ...} swaps one message")
        if isinstance(found, str):
            lines.append(f"  #   {found}")
            continue
        why, op, params = found
        params = {k: v for k, v in params.items() if v is not None}
        lines += [f"  #   {why}", f"  - id: {_id(node.name)}.{op}", f"    node: {json.dumps(node.name)}",
                  f"    op: {op}", f"    params: {json.dumps(params, ensure_ascii=False)}"]
    return lines


def _id(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.:-]+", "-", name).strip("-") or "node"


def _relative(value: str, out_dir: Path) -> str:
    """A path of the spec relative to the folder the spec is written in."""
    return os.path.relpath(value, out_dir.resolve())


def _common(spec: dict[str, Any], out_dir: Path, name: str) -> dict[str, Any]:
    pipeline = spec["pipeline"]
    target, _, fn = pipeline.rpartition(":")
    if target.endswith(".py"):
        pipeline = f"{_relative(target, out_dir)}:{fn}"
    llm = json.loads(json.dumps(spec["llm"]))
    if "simulator" in llm:
        llm["simulator"]["models"] = [_relative(m, out_dir) for m in llm["simulator"]["models"]]
    inputs = _relative(spec["inputs"], out_dir) if isinstance(spec["inputs"], str) else spec["inputs"]
    return {"pipeline": pipeline, "name": name, "llm": llm, "inputs": inputs, "repeats": 3, "concurrency": 4,
            "seed": 0}


def _yaml_block(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=110)


def _write_specs(out_dir: Path, spec: dict[str, Any], nodes: list[NodeFound], name: str, args: argparse.Namespace,
                 traces: int) -> list[Path]:
    """Write record.yaml and campaign.yaml (neither may exist: each is created, never replaced)."""
    from quiver._outdir import make_folder

    common = _common(spec, out_dir, name)
    how = f"`quiver init {args.pipeline}` from one run on {traces} input(s)"
    corpus = f"runs/{_id(name)}"
    baseline = _relative(str(Path.cwd() / corpus / "traces.jsonl"), out_dir)
    record = (f"# The recording spec of {name}, written by {how}.\n"
              f"# `quiver record {out_dir / RECORD_FILE}` records each input 3 times (repeats) into {corpus}/\n"
              "# (relative to the folder it is run from): the corpus `quiver analyze` reads and the\n"
              f"# campaign in {CAMPAIGN_FILE} perturbs. Every key: `quiver schema record`.\n"
              + _yaml_block({**common, "output": corpus}))
    campaign = (f"# A first perturbation campaign on {name}, written by {how}: one perturbation\n"
                "# per node the run found, each with what it asks. First record the baseline it perturbs\n"
                f"# (`quiver record {out_dir / RECORD_FILE}`, from {Path.cwd()}), then\n"
                f"# `quiver run {out_dir / CAMPAIGN_FILE} --plan` says what it would run and cost, and\n"
                f"# `quiver run {out_dir / CAMPAIGN_FILE}` runs it. Every key: `quiver schema spec`.\n"
                + _yaml_block({k: v for k, v in common.items() if k not in ("inputs", "repeats")})
                + f"# the corpus {RECORD_FILE} records (relative to this file)\n"
                + f"baseline: {json.dumps(baseline)}\n"
                + "perturbations:\n" + "\n".join(_perturbation_lines(nodes)) + "\n"
                + "# every perturbed trace is paired with a control replay (nothing perturbed, downstream live)\n"
                + _yaml_block({"replay": {"controls": 1}, "output": f"runs/{_id(name)}_campaign"}))
    if "  - id:" not in campaign:
        from quiver import QuiverError

        raise QuiverError("no node of the run has an output a perturbation can change; nothing written")
    make_folder(out_dir)
    written = []
    for file, text in ((RECORD_FILE, record), (CAMPAIGN_FILE, campaign)):
        path = out_dir / file
        with open(path, "x", encoding="utf-8") as fh:  # never replaces a file, even one made meanwhile
            fh.write(text)
        written.append(path)
    return written
