"""A campaign (and a gate) is checked against its baseline before its first replay.

Each mistake that used to fail every replay the same way, found replay by replay, is one
error line naming the perturbation (or candidate), exit 2, with nothing written to the
output folder; the command's own time is measured and must stay under 5 s. The
quickstart baseline is recorded once per module and given to every spec as ``baseline:``.
What the checks cannot see (a pipeline that raises on the perturbed value) runs, and its
failures are counted by reason in ``campaign.json``, ``summary.json`` and on the console.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).parents[2] / "experiments" / "quickstart"

CHECK_SECONDS = 5.0
"""What refusing a campaign may take, interpreter start and imports included."""

SPEC = """\
pipeline: {pipeline}:run
llm: {llm}
baseline: {baseline}
perturbations:
{perturbations}
replay: {{controls: 0}}
analysis: {{resamples: 100, permutations: 100}}
output: {output}
"""

SIMULATOR = f"{{simulator: {{models: [{QUICKSTART / 'sim_models.py'}]}}}}"


def quiver_run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``quiver ARGV`` as a user runs it (the console script)."""
    found = shutil.which("quiver")
    command = [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart corpus (10 tickets x 3 repeats), recorded once."""
    out = tmp_path_factory.mktemp("quickstart") / "baseline"
    proc = quiver_run(["record", str(QUICKSTART / "record.yaml"), "--output", str(out), "--quiet"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / "traces.jsonl"


def _spec(tmp: Path, baseline: Path, perturbations: str, llm: str = SIMULATOR) -> Path:
    (tmp / "prompts").mkdir(exist_ok=True)
    (tmp / "prompts" / "terse.txt").write_text("[system]\nTriage tickets.\n[user]\nTicket: {ticket}\n")
    (tmp / "prompts" / "named.txt").write_text("[user]\nTicket from {customer_name}: {ticket}\n")
    spec = tmp / "campaign.yaml"
    spec.write_text(SPEC.format(pipeline=QUICKSTART / "pipeline.py", llm=llm, baseline=baseline,
                                perturbations=perturbations, output=tmp / "out"), encoding="utf-8")
    return spec


@dataclass
class Refusal:
    """What one ``quiver`` command did: exit code, output, wall and CPU seconds."""

    argv: list[str]
    out: Path
    code: int
    stdout: str
    stderr: str
    wall: float
    cpu: float

    def line(self) -> str:
        """Exit 2, one error line, the command's own CPU time under the limit, nothing in
        its output folder; the error line."""
        assert self.code == 2, self.stdout[-2000:] + self.stderr[-2000:]
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"quiver {self.argv[0]}: error: "), self.stderr
        assert self.cpu < CHECK_SECONDS, f"{self.cpu:.1f} s of CPU (wall {self.wall:.1f} s)"
        assert not self.out.exists() or not any(self.out.iterdir()), sorted(p.name for p in self.out.iterdir())
        return lines[0]


def _start(argv: list[str], folder: Path) -> tuple[subprocess.Popen[bytes], float]:
    found = shutil.which("quiver")
    command = [found] if found else [sys.executable, "-m", "quiver.experiments._cli"]
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        return subprocess.Popen([*command, *argv], stdout=out, stderr=err), time.monotonic()


def _finish(proc: subprocess.Popen[bytes], t0: float, argv: list[str], folder: Path, out: Path) -> Refusal:
    """Wait for ``proc`` with ``os.wait4``: its own CPU time, whatever else runs."""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Refusal(argv, out, proc.returncode, (folder / "stdout").read_text(), (folder / "stderr").read_text(),
                   wall, usage.ru_utime + usage.ru_stime)


def _refused(argv: list[str], out: Path) -> str:
    """Run ``quiver ARGV`` alone: :meth:`Refusal.line`, and its wall time under the limit
    when the machine is not oversubscribed by other jobs."""
    folder = out.parent / f"cli-{len(list(out.parent.glob('cli-*')))}"
    folder.mkdir()
    refusal = _finish(*_start(argv, folder), argv, folder, out)
    line = refusal.line()
    if os.getloadavg()[0] <= (os.cpu_count() or 1):
        assert refusal.wall < CHECK_SECONDS, f"{refusal.wall:.1f} s"
    return line


CASES = {
    "categorical flip to the next of no declared categories": (
        "  - {id: category-next, node: classify, op: categorical_flip, params: {field: category, strategy: next}}",
        ["perturbations[0].params", "perturbation 'category-next'", "declares no categories"],
    ),
    "prompt variant file that does not exist": (
        "  - {id: classify-swap, node: classify, op: prompt_swap,\n"
        "     params: {variants: [prompts/terse.txt, prompts/missing.txt]}}",
        ["perturbations[0].params.variants[1]", "perturbation 'classify-swap'", "missing.txt", "does not exist"],
    ),
    "override of a field the node does not have": (
        "  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}\n"
        "  - {id: priority, node: classify, op: override, params: {set: {priority: high}}}",
        ["perturbations[1].params", "perturbation 'priority'", "no key 'priority'", "category, urgent, sentiment"],
    ),
    "prompt variant with a variable the recorded calls never supply": (
        "  - {id: named, node: classify, op: prompt_swap, params: {variants: [prompts/terse.txt, prompts/named.txt]}}",
        ["perturbations[0].params.variants[1]", "perturbation 'named'", "{customer_name}", "they supply ticket"],
    ),
    "param_change to a model the simulator does not serve": (
        "  - {id: bigger, node: classify, op: param_change, params: {model: gpt-4o}}",
        ["perturbations[0].params.model", "perturbation 'bigger'", "'gpt-4o'", "quickstart-classify"],
    ),
    "prompt_swap of a template the target's calls do not render": (
        "  - {id: classify-as-draft, node: classify, op: prompt_swap, params: {variant: prompts/terse.txt, "
        "template: draft}}",
        ["perturbations[0].params.template", "perturbation 'classify-as-draft'", "params.template 'draft'",
         "no baseline call of node 'classify'", "its calls render 'classify'"],
    ),
    "prompt_swap on a node that makes no LLM call": (
        "  - {id: normalize-swap, node: normalize, op: prompt_swap, params: {variant: prompts/terse.txt, "
        "template: classify}}",
        ["perturbations[0].params.template", "perturbation 'normalize-swap'",
         "node 'normalize' renders no registered template: it recorded no LLM call"],
    ),
    "categorical_flip to a class no baseline output holds": (
        "  - {id: to-refunds, node: classify, op: categorical_flip, params: {field: category, to: refunds}}",
        ["perturbations[0].params.to", "perturbation 'to-refunds'", "'refunds' is a class no baseline output holds",
         "classify.category (it holds 'account', 'billing', 'bug', 'other')", "allow_unseen: true"],
    ),
    "param_change on a node that recorded no LLM call": (
        "  - {id: retrieve-cold, node: retrieve, op: param_change, params: {temperature: 0}}",
        ["perturbations[0].params", "perturbation 'retrieve-cold'", "param_change on node 'retrieve'",
         "recorded no LLM call", "the nodes whose LLM calls were recorded are chitchat, classify, draft, review"],
    ),
}


OTHERS = {
    "simulator without the models the replays call": (
        "  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}", "simulator", None,
        ["llm.simulator.models", "perturbation 'urgent'", "quickstart-draft", "it serves sim-echo, sim-json"],
    ),
    "gate candidate with a variable the recorded calls never supply": (
        "  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}", SIMULATOR, "named.txt",
        ["--candidate classify=", "{customer_name}", "they supply ticket"],
    ),
    "operator param of another type than the operator's": (
        "  - {id: drop, node: retrieve, op: list_edit, params: {action: remove}, ladder: {count: [1, \"2\"]}}",
        SIMULATOR, None, [':5: perturbations[0].ladder.count: Input should be a valid integer, got "2"'],
    ),
    "plan of a param_change on a node that recorded no LLM call": (
        "  - {id: retrieve-cold, node: retrieve, op: param_change, params: {temperature: 0}}", SIMULATOR, "--plan",
        ["perturbations[0].params", "perturbation 'retrieve-cold'", "param_change on node 'retrieve'"],
    ),
    "prompt_swap of a template on a node whose calls send raw messages": (
        "  - {id: raw-swap, node: classify, op: prompt_swap, params: {variant: prompts/terse.txt, template: classify}}",
        SIMULATOR, "--raw", ["perturbations[0].params.template", "perturbation 'raw-swap'",
                             "node 'classify' renders no registered template: its calls send raw messages"],
    ),
}


def _raw_messages(baseline: Path, tmp: Path) -> Path:
    """The baseline with the classifier's prompts as raw messages (no template id)."""
    lines = []
    for line in baseline.read_text().splitlines():
        trace = json.loads(line)
        for call in trace["calls"]:
            if call["node"] == "classify" and call.get("prompt"):
                call["prompt"]["template_id"] = call["prompt"]["template_hash"] = None
        lines.append(json.dumps(trace))
    raw = tmp / "raw.jsonl"
    raw.write_text("\n".join(lines) + "\n")
    return raw


@pytest.fixture(scope="module")
def refusals(baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Refusal, Path]]:
    """Every case's command, all started at once (each one's own CPU time is measured),
    with its spec."""
    started = {}
    cases = {**{name: (p, SIMULATOR, None, expected) for name, (p, expected) in CASES.items()}, **OTHERS}
    for name, (perturbations, llm, candidate, _) in cases.items():
        tmp = tmp_path_factory.mktemp("refused")
        spec = _spec(tmp, _raw_messages(baseline, tmp) if candidate == "--raw" else baseline, perturbations, llm=llm)
        out = tmp / "out"
        argv = ["run", str(spec)] + (["--plan"] if candidate == "--plan" else [])
        if candidate is not None and candidate.endswith(".txt"):
            out = tmp / "gate"
            argv = ["gate", str(spec), "--candidate", f"classify={tmp / 'prompts' / candidate}", "--output", str(out)]
        started[name] = (argv, tmp, out, spec, _start(argv, tmp))
    return {name: (_finish(proc, t0, argv, tmp, out), spec)
            for name, (argv, tmp, out, spec, (proc, t0)) in started.items()}


@pytest.mark.parametrize("case", [*CASES, *OTHERS])
def test_mistake_that_would_fail_every_replay_is_one_line_before_the_first(
        case: str, refusals: dict[str, tuple[Refusal, Path]]) -> None:
    refusal, spec = refusals[case]
    line = refusal.line()
    expected = CASES[case][1] if case in CASES else OTHERS[case][3]
    for part in expected:
        assert part in line, line
    assert f"{spec}:" in line or "--candidate" in line
    assert not (spec.parent / "out").exists()  # a gate writes nothing to the campaign's folder either


def test_a_flip_to_an_unseen_class_runs_with_allow_unseen(baseline: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    spec = _spec(tmp_path, baseline, "  - {id: to-refunds, node: classify, op: categorical_flip,\n"
                                     "     params: {field: category, to: refunds, allow_unseen: true}}\n"
                                     "  - {id: to-bug, node: classify, op: categorical_flip, params: {field: category, "
                                     "to: bug}}")
    proc = quiver_run(["run", str(spec), "--plan"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "to-refunds" in proc.stdout and "to-bug" in proc.stdout
    print(f"planned in {time.monotonic() - t0:.2f} s")


RAISER = '''\
import quiver


@quiver.node("level", kind="transform")
def level(ticket: str) -> dict:
    return {"level": len(ticket) % 3}


@quiver.node("act", kind="transform", parents=["level"])
def act(state: dict, ticket: str) -> str:
    if state["level"] < 0:
        raise ValueError(f"level {state['level']} is below 0 in /var/spool/q/{len(ticket)}.json")
    return "filed"


def run(ticket: str) -> str:
    return act(level(ticket), ticket)
'''


def test_failures_the_checks_cannot_see_are_counted_by_reason(tmp_path: Path) -> None:
    (tmp_path / "raiser.py").write_text(RAISER, encoding="utf-8")
    spec = tmp_path / "campaign.yaml"
    spec.write_text(
        "pipeline: raiser.py:run\nllm: simulator\n"
        "inputs: [{id: a, ticket: one}, {id: b, ticket: three}, {id: c, ticket: seven!}]\nrepeats: 2\n"
        "perturbations:\n"
        "  - {id: below-zero, node: level, op: override, params: {set: {level: -1}}}\n"
        "  - {id: two, node: level, op: override, params: {set: {level: 2}}}\n"
        "replay: {controls: 0, repeats: 2}\n"
        f"analysis: {{resamples: 100, permutations: 100}}\noutput: {tmp_path / 'out'}\n", encoding="utf-8")
    proc = quiver_run(["run", str(spec)], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    reason = "ValueError: level <n> is below <n> in <path>"
    assert "WARNING" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert [ln for ln in proc.stdout.splitlines() if "failed" in ln and reason in ln] == \
        [f"  {'below-zero':<22} failed    12: {reason}",
         f"* below-zero: 12 of 12 replays failed ({reason}); the estimates leave them out."], proc.stdout
    assert "never changed its target" not in proc.stdout, proc.stdout  # no ok pair: nothing to say of its effect
    assert "12 of 24 replays FAILED" in proc.stderr
    campaign = json.loads((tmp_path / "out" / "campaign.json").read_text())
    failures = {p["id"]: p["failures"] for p in campaign["perturbations"]}
    assert failures == {"below-zero": {"count": 12, "by_reason": {reason: 12}},
                        "two": {"count": 0, "by_reason": {}}}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failures"]["count"] == 12 and summary["failures"]["by_reason"] == {reason: 12}
    assert summary["status"]["failed"] == 12
    log = (tmp_path / "out" / "campaign.log").read_text()
    assert log.count(" failed: ValueError: level -1 is below 0 in /var/spool/q/") == 12  # each replay's own, kept


def test_run_that_fails_before_its_first_replay_leaves_nothing_to_refuse_the_rerun(
        baseline: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, baseline, "  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}")
    text = spec.read_text()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")  # no line of it reads: the run cannot load its baseline
    spec.write_text(text.replace(str(baseline), str(broken)))
    proc = quiver_run(["run", str(spec), "--quiet"])
    assert proc.returncode == 2 and "broken.jsonl" in proc.stderr, proc.stderr
    out = tmp_path / "out"
    assert not (out / "ledger.sqlite").exists() and not (out / "spec.resolved.json").exists()
    spec.write_text(text.replace("params: {set: {urgent: true}}", "params: {set: {priority: high}}"))
    line = _refused(["run", str(spec)], out)  # checked again, not "holds a campaign's ledger already"
    assert "perturbation 'urgent'" in line and "no key 'priority'" in line


def test_baseline_recorded_with_a_simulator_that_lacks_its_models_is_refused_after_recording(tmp_path: Path) -> None:
    spec = tmp_path / "campaign.yaml"
    spec.write_text(
        f"pipeline: {QUICKSTART / 'pipeline.py'}:run\nllm: simulator\n"
        "inputs: [{id: a, ticket: I was charged twice}, {id: b, ticket: the app crashes}]\nrepeats: 1\n"
        "perturbations:\n  - {id: urgent, node: classify, op: override, params: {set: {urgent: true}}}\n"
        f"output: {tmp_path / 'out'}\n", encoding="utf-8")
    proc = quiver_run(["run", str(spec), "--quiet"])
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("quiver run: error: ")]
    assert len(errors) == 1 and f"{spec}:2: llm.simulator.models: none of the 2 baseline traces ran" in errors[0]
    assert "'quickstart-classify' does not exist" in errors[0]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["baseline"]  # no ledger, no spec.resolved.json
