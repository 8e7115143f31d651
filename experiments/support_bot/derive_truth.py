"""Derive the support bot's decision boundaries from its models: what ``truth.yaml`` states.

Run from anywhere (the rewriter distances need the ``embed`` extra)::

    python -m quiver.experiments.support_bot.derive_truth            # everything
    python -m quiver.experiments.support_bot.derive_truth --inputs   # per-input decisions
    python -m quiver.experiments.support_bot.derive_truth --variants # rewriter prompt swaps

It runs the pipeline outside any recording against the bundled simulator at temperature
0 with no backend noise, so that every model answers its argmax, and reads the decision
structure off the models' own rules (:mod:`.sim_models`):

* per input, the path taken and, per planner call, the subtask's coverage and the
  actions the planner is torn between (the near ties that backend noise can turn over),
  with what turning each one over does downstream;
* the planner's observational beta_shape: the smallest planner distance of a pair whose
  decisions differ. Every such pair comes from one near tie turning over (nothing else
  is a near tie, and the rewriter's own noise never moves a planner decision: checked
  here), so it is ``(w_action / W) / c`` for the largest number of planner calls c of a
  trace holding a near tie, with the field weights read from ``graph.yaml``;
* for each rewriter prompt variant (``prompts/rewriter_*.txt``), the rewriter distance
  d_rewriter to the default rewrite, computed with the engine's own mapping distance and
  all-MiniLM-L6-v2 embeddings, and the planner decisions the swap moves (with the
  coverage shift behind each). The interventional threshold is the smallest d_rewriter
  of a swap that moves a decision; the rewriter's own noise (its runner-up rewrites) is
  measured alongside and stays below it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import quiver
from quiver.replay import LLMClient, Simulator, SimulatorConfig, load_template_file

from . import pipeline as sb, sim_models as models

HERE = Path(__file__).resolve().parent
GRAPH = HERE / "graph.yaml"
VARIANTS = ("terse", "verbose", "polite")
"""The rewriter prompt variants, ``prompts/rewriter_<name>.txt``."""


@dataclass
class PlannerStep:
    """One planner call of a dry run."""

    task: str
    coverage: float
    offered: dict[str, float]
    action: str

    @property
    def near_tie(self) -> str | None:
        """``COMPOSE/RETRY``-style name of the tie, or None when the action is clear."""
        return "/".join(sorted(self.offered)) if len(self.offered) > 1 else None

    @property
    def runner_up(self) -> str | None:
        ranked = sorted(self.offered, key=lambda a: -self.offered[a])
        return ranked[1] if len(ranked) > 1 else None


@dataclass
class DryRun:
    """What one input does with every model at its argmax."""

    input_id: str
    path: str
    rewrite: dict[str, str] = field(default_factory=dict)
    gates: dict[str, str] = field(default_factory=dict)
    steps: list[PlannerStep] = field(default_factory=list)
    reply: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    """How many times each node ran."""
    found: list[str] = field(default_factory=list)
    """What the initial discovery found (before any fragment was dropped)."""

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps]


def load_inputs() -> list[dict[str, Any]]:
    """The records of ``inputs.jsonl``."""
    with (HERE / "inputs.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@contextmanager
def simulator() -> Iterator[None]:
    """The bundled simulator, no noise, temperature 0, as the LLM of ``quiver.llm()``."""
    with Simulator(SimulatorConfig(models=[models.__name__])) as sim:
        client = LLMClient(base_url=sim.url, model=sb.PLANNER_MODEL, api_key="sk-simulator",
                           params={"temperature": 0, "seed": 42})
        quiver.configure_llm(client)
        try:
            yield
        finally:
            quiver.configure_llm(None)
            client.close()


def _watch_planner(run: DryRun, flip_at: int | None) -> Callable[..., dict[str, Any]]:
    """``pipeline.planner``, recording each step and turning over one near tie."""
    original = sb.planner

    def watched(message: str, turn_type: str, subtasks: list[str], position: int, query: str,
                material: str) -> dict[str, Any]:
        plan = original(message, turn_type, subtasks, position, query, material)
        fetched = {line[len("[account:"):].split("]")[0] for line in material.splitlines()
                   if line.startswith("[account:")}
        logits = models.action_logits(plan["task"], plan["coverage"], models.DEFAULT_THETA, fetched)
        step = PlannerStep(plan["task"], plan["coverage"], models.near_ties(logits), plan["action"])
        if flip_at == len(run.steps) and step.runner_up:
            plan = {**plan, "action": step.runner_up}
            step.action = step.runner_up
        run.steps.append(step)
        return plan

    return watched


COUNTED = ("smalltalk", "web_search", "discovery", "account_api", "composer")
"""The nodes whose calls depend on the gates and the planner (the planner's are its steps)."""


@contextmanager
def _counting(run: DryRun, flip_at: int | None) -> Iterator[None]:
    """Count the calls of :data:`COUNTED` and watch the planner while the block runs."""
    originals = {name: getattr(sb, name) for name in (*COUNTED, "planner")}

    def counted(name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            run.calls[name] = run.calls.get(name, 0) + 1
            return originals[name](*args)
        return call

    for name in COUNTED:
        setattr(sb, name, counted(name))
    sb.planner = _watch_planner(run, flip_at)
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(sb, name, fn)
        if run.steps:
            run.calls["planner"] = len(run.steps)


def dry_run(record: dict[str, Any], rewrite: dict[str, str] | None = None,
            flip_at: int | None = None, overrides: dict[str, Any] | None = None,
            drop: frozenset[str] = frozenset()) -> DryRun:
    """Run one input with every model at its argmax.

    Args:
        record: An input record (message, account_id, history).
        rewrite: Use this rewrite instead of the rewriter's.
        flip_at: Turn the planner's near tie at this call (0-based) over to its runner-up.
        overrides: Force fields of the first wave's outputs, as an override perturbation
            would: ``{"sufficient": True}``, ``{"is_small_talk": True}``, ...
        drop: Fragment ids removed from the initial discovery's output, as a
            ``list_edit`` remove perturbation would (``run.found`` keeps what it found).
    """
    message, history = record["message"], record.get("history") or []
    rewritten, signals, sufficiency = sb.first_wave(message, history)
    for key, value in (overrides or {}).items():
        (sufficiency if key in sufficiency else signals)[key] = value
    run = DryRun(record["input_id"], "answer", rewrite if rewrite is not None else rewritten)
    run.gates = sb.route(signals, sufficiency)
    with _counting(run, flip_at):
        if run.gates["small_talk"] == "short_circuit":
            run.path = "smalltalk"
            run.reply = {"response": sb.smalltalk(message)}
            return run
        found = sb.discovery

        def initial_discovery(queries: list[str], turn_type: str, expand_from: list[str]) -> list[str]:
            run.found = found(queries, turn_type, expand_from)
            return [i for i in run.found if i not in drop]

        sb.discovery = initial_discovery
        try:
            material = sb.initial_material(run.gates, message, run.rewrite, signals, history)
        finally:
            sb.discovery = found
        material, account = sb.plan_and_act(message, run.rewrite, signals, material, record["account_id"])
        lines = sb.material_lines(material, account)
        run.reply = sb.composer(message, signals["sentiment"], list(run.rewrite), lines)
    return run


def rewrite_in_style(record: dict[str, Any], style: str, runner_up_of: str | None = None) -> dict[str, str]:
    """The rewriter's argmax answer under a prompt variant (``default``: the bundled
    prompt), or with one subtask's query at its runner-up (the rewriter's noise)."""
    path = sb.PROMPTS / ("rewriter.txt" if style == "default" else f"rewriter_{style}.txt")
    template = quiver.Template("support_bot.rewriter", load_template_file(path))
    history = sb.history_text(record.get("history") or [])
    system = template.render({"message": record["message"], "history": history}).assembled[0].content
    out = {}
    for label in models.subtasks(record["message"], history):
        alt = models.runner_up(label, style) if label == runner_up_of else None
        out[label] = alt or models.query_for(label, models.query_style(system))
    return out


# --------------------------------------------------------------------------- planner


def planner_weights() -> tuple[float, float]:
    """w_action and W, the sum of the weights of the planner's fields (graph.yaml)."""
    fields = quiver.load_graph(GRAPH).nodes["planner"].fields or {}
    return fields["action"].effective_weight, sum(f.effective_weight for f in fields.values())


def describe_inputs(records: list[dict[str, Any]], verbose: bool) -> dict[str, Any]:
    """The near-tie census and the planner's observational beta_shape."""
    ties: list[dict[str, Any]] = []
    crossings: list[str] = []
    paths: dict[str, int] = {}
    for record in records:
        base = dry_run(record)
        key = base.path if base.path == "smalltalk" else (
            f"web_search={base.gates['web_search']}, discovery={base.gates['discovery']}")
        paths[key] = paths.get(key, 0) + 1
        if verbose:
            gates = ", ".join(f"{k}={v}" for k, v in base.gates.items())
            print(f"{record['input_id']:34s} {gates}")
        for k, step in enumerate(base.steps):
            if verbose:
                print(f"    planner#{k} {step.task!r}: coverage {step.coverage:.3f} "
                      f"{ {a: round(v, 2) for a, v in step.offered.items()} } -> {step.action}")
            if step.near_tie:
                flipped = dry_run(record, flip_at=k)
                ties.append({"input": record["input_id"], "call": k, "calls": len(base.steps),
                             "tie": step.near_tie, "turned_over": flipped.actions,
                             "composer_unchanged": flipped.reply == base.reply})
                if verbose:
                    print(f"        near tie {step.near_tie}, turned over: {flipped.actions}, composer "
                          f"{'unchanged' if flipped.reply == base.reply else 'changed'}")
        for label in base.rewrite if base.path == "answer" else []:
            alt = rewrite_in_style(record, "default", runner_up_of=label)
            if alt != base.rewrite and dry_run(record, rewrite=alt).actions != base.actions:
                crossings.append(record["input_id"])
    w_action, total = planner_weights()
    per_call = w_action / total
    calls = max(t["calls"] for t in ties)
    return {
        "paths": paths,
        "near_ties": {tie: sum(t["tie"] == tie for t in ties) for tie in sorted({t["tie"] for t in ties})},
        "near_ties_by_calls": {c: sum(t["calls"] == c for t in ties) for c in sorted({t["calls"] for t in ties})},
        "composer_unchanged_after_turnover": sum(t["composer_unchanged"] for t in ties),
        "rewriter_noise_moves_planner": crossings,
        "planner": {"w_action": w_action, "W": total, "d_one_call": per_call,
                    "max_calls_with_near_tie": calls, "beta_shape": per_call / calls},
    }


# --------------------------------------------------------------------------- rewriter


def _moved(base: DryRun, swapped: DryRun) -> list[str]:
    return [f"call {k}: coverage {a.coverage:.2f} -> {b.coverage:.2f}, {a.action} -> {b.action}"
            for k, (a, b) in enumerate(zip(base.steps, swapped.steps, strict=False)) if a.action != b.action]


def _rate(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {"swaps": len(rows), "moving_a_decision": sum(bool(r["moved"]) for r in rows)}


def describe_variants(records: list[dict[str, Any]], verbose: bool) -> dict[str, Any]:
    """Per rewriter prompt variant: d_rewriter and the planner decisions it moves; and
    d_rewriter of the rewriter's own noise (its runner-up rewrites), for comparison."""
    spec = quiver.load_graph(GRAPH).nodes["rewriter"]
    rows: list[dict[str, Any]] = []
    noise: list[dict[str, Any]] = []
    for record in records:
        base = dry_run(record)
        if base.path != "answer":
            continue
        near = any(step.near_tie for step in base.steps)
        for style in VARIANTS:
            swapped = dry_run(record, rewrite=rewrite_in_style(record, style))
            rows.append({"input": record["input_id"], "style": style, "a": base.rewrite, "b": swapped.rewrite,
                         "moved": _moved(base, swapped), "near": near})
        for label in base.rewrite:
            alt = rewrite_in_style(record, "default", runner_up_of=label)
            if alt != base.rewrite:
                noise.append({"a": base.rewrite, "b": alt})
    texts = sorted({q for r in rows + noise for q in (*r["a"].values(), *r["b"].values())})
    with quiver.EmbeddingStore(quiver.SentenceTransformerEmbedder(), quiver.default_cache_dir()) as store:
        store.ensure(texts)
        for row in rows + noise:
            row["d"] = quiver.output_distance(spec, row["a"], row["b"], store.distance)[0]
    crossing = sorted((r for r in rows if r["moved"]), key=lambda r: r["d"])
    beta = crossing[0]["d"] if crossing else float("nan")
    if verbose:
        for r in sorted(rows, key=lambda r: r["d"]):
            print(f"{r['d']:.3f} {r['style']:8s} {r['input']:34s} {'; '.join(r['moved'])}")
    return {
        "swaps": len(rows),
        "inputs": len({r["input"] for r in rows}),
        "by_variant": {
            s: {"mean_d": round(sum(r["d"] for r in rows if r["style"] == s)
                                / sum(r["style"] == s for r in rows), 4),
                "moves": {r["input"]: r["moved"] for r in crossing if r["style"] == s}}
            for s in VARIANTS
        },
        "crossing_d": [round(r["d"], 4) for r in crossing],
        "interventional_beta_shape": round(beta, 4) if crossing else None,
        "swaps_below": _rate([r for r in rows if r["d"] < beta]),
        "swaps_at_or_above": _rate([r for r in rows if r["d"] >= beta]),
        "near_tie_inputs_swaps_below": _rate([r for r in rows if r["near"] and r["d"] < beta]),
        "near_tie_inputs_swaps_at_or_above": _rate([r for r in rows if r["near"] and r["d"] >= beta]),
        "rewriter_noise_d": {"n": len(noise), "mean": round(sum(r["d"] for r in noise) / len(noise), 4),
                             "max": round(max(r["d"] for r in noise), 4)},
    }


OVERRIDES = {
    "context_sufficiency.sufficient=true": {"sufficient": True},
    "signal_analysis.is_small_talk=true": {"is_small_talk": True},
    "signal_analysis.web_search_hint=true": {"web_search_hint": True},
}
"""The override perturbations of the first wave that change the graph."""


def describe_ladder(records: list[dict[str, Any]], verbose: bool) -> dict[str, Any]:
    """Removing one fragment from the initial discovery's output (the first step of a
    ``list_edit`` remove ladder): for every answering input and every fragment found,
    whether the planner's decisions move. The discovery distance of such a removal is
    the set distance 1/n (n fragments found), so the interventional threshold of the
    ladder is the smallest 1/n of a removal that moves a decision."""
    rows = []
    for record in records:
        base = dry_run(record)
        if not base.found:
            continue
        for fragment in base.found:
            moved = _moved(base, dry_run(record, drop=frozenset({fragment})))
            rows.append({"input": record["input_id"], "fragment": fragment, "n": len(base.found),
                         "d": round(1 / len(base.found), 4), "moves": moved})
    crossing = [r for r in rows if r["moves"]]
    by_input: dict[str, list[bool]] = {}
    for r in rows:
        by_input.setdefault(r["input"], []).append(bool(r["moves"]))
    out: dict[str, Any] = {
        "removals": len(rows), "moving": len(crossing), "inputs": len(by_input),
        # one fragment removed at random, averaged over inputs (what a fraction ladder's
        # smallest step measures: every list loses one fragment)
        "moving_share_by_input": round(sum(sum(v) / len(v) for v in by_input.values()) / len(by_input), 4),
        "interventional_beta_shape": min(r["d"] for r in crossing) if crossing else None,
        "fragments_found": sorted({r["n"] for r in rows}),
    }
    if verbose:
        out["rows"] = rows
    return out


def describe_overrides(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per override: on the inputs where it is effective (the value differs), which
    nodes it adds and removes, and how often it changes the call counts."""
    out: dict[str, Any] = {}
    for name, override in OVERRIDES.items():
        added: dict[str, int] = {}
        removed: dict[str, int] = {}
        effective = count_changed = 0
        for record in records:
            base = dry_run(record)
            with_it = dry_run(record, overrides=override)
            if with_it.gates == base.gates:
                continue  # a no-op: the gates already took these arms
            effective += 1
            count_changed += with_it.calls != base.calls
            for node in set(with_it.calls) - set(base.calls):
                added[node] = added.get(node, 0) + 1
            for node in set(base.calls) - set(with_it.calls):
                removed[node] = removed.get(node, 0) + 1
        out[name] = {"effective_inputs": effective, "adds": added, "removes": removed,
                     "call_counts_change": count_changed}
    return out


def answered(run: DryRun) -> bool:
    """The outcome check (``outcome.py``'s ``answered``) on a dry run: small talk as
    small talk; an account question answered; any other question answered with at least
    one document cited."""
    if run.input_id.startswith("smalltalk-"):
        return run.path == "smalltalk"
    if run.input_id.startswith("account-"):
        return run.path == "answer"
    return run.path == "answer" and bool(run.reply.get("selected_refs"))


def describe_outcome(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The outcome check at every model's argmax: which inputs pass, and per override, on
    the inputs where it is effective, how many pass with it (against without it)."""
    base = {r["input_id"]: dry_run(r) for r in records}
    out: dict[str, Any] = {"inputs": len(records), "argmax_pass": sum(answered(run) for run in base.values()),
                           "argmax_failing": sorted(i for i, run in base.items() if not answered(run)),
                           "overrides": {}}
    for name, override in OVERRIDES.items():
        effective = passing = passing_before = 0
        for record in records:
            with_it = dry_run(record, overrides=override)
            if with_it.gates == base[record["input_id"]].gates:
                continue
            effective += 1
            passing += answered(with_it)
            passing_before += answered(base[record["input_id"]])
        out["overrides"][name] = {"effective_inputs": effective, "pass": passing, "pass_without": passing_before}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--inputs", action="store_true", help="only the per-input decisions")
    parser.add_argument("--variants", action="store_true", help="only the rewriter prompt swaps")
    parser.add_argument("--overrides", action="store_true", help="only the first-wave overrides")
    parser.add_argument("--ladder", action="store_true", help="only the discovery remove ladder")
    parser.add_argument("--outcome", action="store_true", help="only the outcome check at the argmax")
    parser.add_argument("--only", default="", help="only the inputs whose id starts with this")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per input or swap")
    args = parser.parse_args(argv)
    records = [r for r in load_inputs() if r["input_id"].startswith(args.only)]
    both = not (args.inputs or args.variants or args.overrides or args.ladder or args.outcome)
    derived: dict[str, Any] = {}
    with simulator():
        if args.inputs or both:
            derived["inputs"] = describe_inputs(records, args.verbose)
        if args.overrides or both:
            derived["overrides"] = describe_overrides(records)
        if args.variants or both:
            derived["rewriter_variants"] = describe_variants(records, args.verbose)
        if args.ladder or both:
            derived["discovery_ladder"] = describe_ladder(records, args.verbose)
        if args.outcome or both:
            derived["outcome"] = describe_outcome(records)
    print(json.dumps(derived, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
