"""Campaigns (``quiver run``): the spec, job expansion, resume after SIGKILL, executors.

A small campaign on a fixed support_bot baseline (recorded once per module, so trace
ids and sample keys are the same in every run) is run uninterrupted, killed with
SIGKILL part-way and resumed, and run on a real local Ray instance: the pairs and the
campaign's numbers must be the same every time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from quiver._errors import SpecError
from quiver._trace import load_traces
from quiver._yamlspec import load_spec
from quiver.experiments._campaign import CampaignRun, expand_jobs, run_campaign
from quiver.experiments._cli import build_parser, main
from quiver.experiments._config import CampaignSpec
from quiver.perturbations import FieldTouch, Operator, OperatorContext, OperatorParams, make_operator, operator
from quiver.replay import Executor, ReplayContext, Replayer, Target, executor, worker_for

ROOT = Path(__file__).parents[2]
DEMO = ROOT / "experiments" / "support_bot"
QUIVER = shutil.which("quiver")


def _cli(*args: str, **kwargs: Any) -> list[str]:
    command = [QUIVER] if QUIVER else [sys.executable, "-m", "quiver.experiments._cli"]
    return [*command, *args]


SMALL = """\
pipeline: {demo}/pipeline.py:run
name: support_bot
llm:
  simulator:
    models: [{demo}/sim_models.py]
    nondeterminism: 0.15
  model: support-bot-planner
  params: {{temperature: 0, seed: 42}}
baseline: {baseline}
graph: {demo}/graph.yaml
select: {{mode: sample, n: 8, seed: 3}}
perturbations:
  - id: cs-override
    node: context_sufficiency
    op: override
    params: {{set: {{sufficient: true}}}}
  - id: rewriter-swap
    node: rewriter
    op: prompt_swap
    params: {{variants: [{demo}/prompts/rewriter_terse.txt, {demo}/prompts/rewriter_polite.txt]}}
  - id: fragments-drop
    node: discovery
    op: list_edit
    params: {{action: remove}}
    ladder: {{count: [1, 3]}}
replay: {{repeats: 2}}
executor: {{kind: {executor}, concurrency: 4, batch_size: 4}}
analysis: {{resamples: 200, permutations: 200, cache_dir: {cache}}}
output: {output}
"""


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("baseline")
    proc = subprocess.run(
        _cli("record", str(DEMO / "record.yaml"), "--output", str(out), "--repeats", "2", "--quiet"),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "traces.jsonl"


def _spec(tmp: Path, baseline: Path, name: str, executor: str = "local") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(SMALL.format(demo=DEMO, baseline=baseline, executor=executor, cache=tmp / "emb",
                                 output=tmp / name), encoding="utf-8")
    return path


def _pairs(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(baseline: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small campaign, run once without interruption (local executor)."""
    tmp = tmp_path_factory.mktemp("reference")
    result = run_campaign(_spec(tmp, baseline, "run"), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    return tmp / "run"


# --------------------------------------------------------------------------- the spec


def test_spec_errors_name_the_file_line_and_field(tmp_path: Path, baseline: Path) -> None:
    good = _spec(tmp_path, baseline, "x").read_text()
    bad = good.replace("params: {set: {sufficient: true}}", "params: {set: {}}")
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(SpecError) as err:
        load_spec(CampaignSpec, path)
    assert err.value.file == str(path) and err.value.line is not None
    assert "perturbations" in (err.value.path or "") and "override" in str(err.value)
    path.write_text(good.replace("id: rewriter-swap", "id: cs-override"))
    with pytest.raises(SpecError, match="unique; repeated: cs-override"):
        load_spec(CampaignSpec, path)
    path.write_text(good.replace("kind: local", "kind: spark"))
    with pytest.raises(SpecError, match="executor.kind"):
        load_spec(CampaignSpec, path)


def test_jobs_expand_variants_ladders_traces_and_repeats(tmp_path: Path, baseline: Path) -> None:
    spec = load_spec(CampaignSpec, _spec(tmp_path, baseline, "x"))
    traces = load_traces(baseline).traces
    jobs, steps, _ = expand_jobs(spec, traces)
    per = {}
    for job in jobs:
        per.setdefault(job.job_id.split("/")[0], []).append(job)
    assert len(per["cs-override"]) == 8 * 2  # 8 sampled traces x 2 repeats
    assert len(per["rewriter-swap"]) == 2 * 8 * 2  # 2 variants
    assert len(per["fragments-drop"]) <= 2 * 8 * 2 and {steps[j.job_id] for j in per["fragments-drop"]} == {0, 1}
    assert len({j.job_id for j in jobs}) == len(jobs) and [j.seq for j in jobs] == list(range(len(jobs)))
    assert {j.perturbation_id for j in per["rewriter-swap"]} == {"rewriter-swap#0", "rewriter-swap#1"}
    again, _, _ = expand_jobs(spec, traces)
    assert [j.job_id for j in again] == [j.job_id for j in jobs]


# --------------------------------------------------------------------------- the run folder


def test_run_folder_holds_everything(reference: Path) -> None:
    for name in ("spec.resolved.json", "pairs.jsonl", "replays.jsonl", "campaign.json", "report.md",
                 "summary.json", "ledger.sqlite", "observational/profile.json"):
        assert (reference / name).is_file(), name
    pairs = _pairs(reference)
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["complete"] and summary["done"] == summary["jobs"] == len(pairs)
    campaign = json.loads((reference / "campaign.json").read_text())
    ids = {p["id"] for p in campaign["perturbations"]}
    assert ids == {"cs-override", "rewriter-swap", "fragments-drop"}
    cs = next(p for p in campaign["perturbations"] if p["id"] == "cs-override")
    assert cs["pairs"] == cs["effective"] + cs["noop"] == 16
    report = (reference / "report.md").read_text()
    assert "cs-override" in report and "fragments-drop" in report


def test_replays_are_stored_as_differences_from_their_baseline_and_read_back_whole(
    baseline: Path, reference: Path
) -> None:
    """The ledger's rows and ``replays.jsonl``'s lines hold each replay as its difference
    from its baseline trace: together under a tenth of the whole replays' JSON, and read
    back as exactly the replays the pairs were made from."""
    from quiver._trace import load_traces
    from quiver.experiments._campaign.stored import whole_rows

    rows = whole_rows(reference / "ledger.sqlite", baseline)
    whole = {r["trace"]["trace_id"]: r["trace"] for r in rows.values() if "trace" in r}
    loaded = load_traces(reference / "replays.jsonl")
    assert loaded.ok and {t.trace_id: t.model_dump(mode="json") for t in loaded.traces} == whole
    assert [f"{p['trace_id']}~{p['replay_id']}/{p['repeat']}" for p in _pairs(reference) if p["status"] != "failed"] \
        == [t.trace_id for t in loaded.traces]
    with sqlite3.connect(str(reference / "ledger.sqlite")) as db:
        stored = sum(n for (n,) in db.execute("SELECT length(CAST(data AS BLOB)) FROM replays"))
    plain = sum(len(json.dumps(r, sort_keys=True)) for r in rows.values())
    lines = (reference / "replays.jsonl").stat().st_size
    full_lines = sum(len(json.dumps(t)) + 1 for t in whole.values())
    print(f"per replay: ledger {stored / len(rows):.0f} B, replays.jsonl {lines / len(rows):.0f} B; whole "
          f"{plain / len(rows):.0f} B and {full_lines / len(rows):.0f} B")
    assert stored + lines < (plain + full_lines) / 10, (stored, lines, plain, full_lines)


def _run_killed(spec: Path, out: Path, after: int) -> None:
    proc = subprocess.Popen(_cli("run", str(spec), "--quiet"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ledger = out / "ledger.sqlite"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the campaign ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
            if ledger.exists():
                try:
                    with sqlite3.connect(str(ledger)) as db:
                        n = db.execute("SELECT COUNT(*) FROM replays").fetchone()[0]
                except sqlite3.Error:
                    n = 0
                if n >= after:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the campaign made no progress")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkill_then_resume_equals_an_uninterrupted_run(baseline: Path, reference: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, baseline, "run")
    out = tmp_path / "run"
    _run_killed(spec, out, after=10)
    with sqlite3.connect(str(out / "ledger.sqlite")) as db:
        kept = db.execute("SELECT COUNT(*) FROM replays").fetchone()[0]
    total = len(_pairs(reference))
    assert 10 <= kept < total
    refused = subprocess.run(_cli("run", str(spec), "--quiet"), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = subprocess.run(_cli("run", str(spec), "--resume", "--quiet"), capture_output=True, text=True, timeout=600)
    assert resumed.returncode in (0, 1), resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed"] == kept and summary["complete"]
    assert _pairs(out) == _pairs(reference)  # none lost, none duplicated, same numbers
    assert json.loads((out / "campaign.json").read_text()) == json.loads((reference / "campaign.json").read_text())


# --------------------------------------------------------------------------- ray


@pytest.fixture(scope="module")
def ray_instance() -> Any:
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray


# --------------------------------------------------------------------------- a new executor


@executor("toy-serial")
class ToySerial(Executor):
    """A whole executor in one class: jobs handed out in job order (or reversed) to a few
    threads of this process. Its own setting comes from the spec's ``executor.options``."""

    def __init__(self, reverse: bool) -> None:
        self.reverse = reverse

    @classmethod
    def from_settings(cls, settings: Any) -> ToySerial:
        return cls(bool(settings.get("options", {}).get("reverse", False)))

    def run(self, context: ReplayContext, jobs: Any, on_done: Any, should_stop: Any) -> None:
        from concurrent.futures import ThreadPoolExecutor

        worker = worker_for(context)

        def one(job: Any) -> None:
            if not should_stop():
                on_done(job.job_id, worker.run(job))

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(one, reversed(jobs) if self.reverse else jobs))


def test_a_new_executor_is_one_class_that_specs_and_the_command_line_can_name(
    baseline: Path, reference: Path, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, baseline, "run", executor="toy-serial")
    spec.write_text(spec.read_text().replace("kind: toy-serial,", "kind: toy-serial, options: {reverse: true},"))
    assert main(["run", str(spec), "--quiet"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["executor"] == "toy-serial" and summary["nodes"] == 1 and summary["complete"]
    assert _pairs(tmp_path / "run") == _pairs(reference)  # the order jobs ran in changes nothing
    assert json.loads((tmp_path / "run" / "campaign.json").read_text()) == json.loads(
        (reference / "campaign.json").read_text())
    assert build_parser().parse_args(["run", str(spec), "--executor", "toy-serial"]).executor == "toy-serial"


def test_replays_finished_in_any_order_give_the_same_files_in_job_order(baseline: Path, tmp_path: Path) -> None:
    """Each replay is paired where it ran, alone, and kept once as it is committed; a
    run whose jobs finish in reverse order gives the same rows and numbers, and
    ``replays.jsonl`` and ``pairs.jsonl`` in job order, each run on an embedding cache of
    its own."""
    runs = {}
    for name, reverse in (("forward", False), ("reverse", True)):
        folder = tmp_path / name
        folder.mkdir()
        spec = _spec(folder, baseline, "run", executor="toy-serial")
        options = f"kind: toy-serial, options: {{reverse: {str(reverse).lower()}}},"
        spec.write_text(spec.read_text().replace("kind: toy-serial,", options))
        result = run_campaign(spec, progress_stream=None)
        assert result.complete and result.jobs > 40
        runs[name] = folder / "run"
    assert _pairs(runs["forward"]) == _pairs(runs["reverse"])
    assert (runs["forward"] / "campaign.json").read_bytes() == (runs["reverse"] / "campaign.json").read_bytes()
    ids = {name: [t.trace_id for t in load_traces(out / "replays.jsonl").traces] for name, out in runs.items()}
    assert ids["forward"] == ids["reverse"] and len(ids["forward"]) == result.jobs  # in job order, each once
    assert not list(runs["forward"].glob("*.journal"))  # the journals became the final files


def test_an_unknown_executor_names_the_registered_ones(baseline: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", str(_spec(tmp_path, baseline, "x")), "--executor", "spark"])
    assert "invalid choice: 'spark'" in capsys.readouterr().err
    path = _spec(tmp_path, baseline, "y", executor="spark")
    with pytest.raises(SpecError,
                       match=r"executor.kind: .*unknown executor 'spark'; the registered executors are .*local"):
        load_spec(CampaignSpec, path)


# --------------------------------------------------------------------------- a new operator


class MoodParams(OperatorParams):
    """Parameters of the toy ``set_mood`` operator."""

    mood: str
    """The sentiment to force."""


@operator("set_mood")
class SetMood(Operator):
    """A whole operator in one class: force signal_analysis' sentiment. It says which field
    it touches, so campaigns check it against the graph like a built-in one."""

    mode = "output"
    binary = True
    Params = MoodParams
    params: MoodParams

    def fields_touched(self) -> list[FieldTouch]:
        return [FieldTouch("sentiment", self.params.mood)]

    def apply(self, output: Any, ctx: OperatorContext) -> Any:
        return {**output, "sentiment": self.params.mood}


def test_a_new_operator_gets_the_spec_checks_and_replays(baseline: Path, tmp_path: Path) -> None:
    text = _spec(tmp_path, baseline, "x").read_text()
    head = text[:text.index("perturbations:")]
    tail = text[text.index("replay:"):]
    path = tmp_path / "mood.yaml"
    path.write_text(head + "perturbations:\n  - {id: furious, node: signal_analysis, op: set_mood, "
                    "params: {mood: furious}}\n" + tail)
    with pytest.raises(SpecError, match=r"mood\.yaml:\d+: perturbations\[0\]\.params: 'furious' is not a category of "
                                        r"signal_analysis\.sentiment; its categories are negative, neutral, positive"):
        CampaignRun.load(path, stream=None)
    path.write_text(head + "perturbations:\n  - {id: negative, node: signal_analysis, op: set_mood, "
                    "params: {mood: negative}}\n" + tail)
    run = CampaignRun.load(path, stream=None)
    traces = load_traces(baseline).traces
    jobs, _, _ = expand_jobs(run.spec, traces)
    trace = next(t for t in traces if t.trace_id == jobs[0].trace["trace_id"])
    with run.connected() as client:
        replayer = Replayer(run.fn, client=client, graph=run.graph(traces), base_dir=run.base_dir)
        result = replayer.replay(trace, target=Target("signal_analysis"),
                                 operator=make_operator("set_mood", {"mood": "negative"}))
    assert result.reproduced and result.target is not None
    assert result.target.perturbed["sentiment"] == "negative"
    assert result.target.noop == (result.target.original["sentiment"] == "negative")


def test_another_recording_of_the_same_inputs_gives_the_same_numbers(
    baseline: Path, reference: Path, tmp_path: Path
) -> None:
    """Recording again with the same seed gives the same traces under another run id;
    replays are keyed by (input, repeat), not by that id, so the campaign's pairs and
    numbers are the same."""
    lines = baseline.read_text().splitlines()
    old = json.loads(lines[0])["run_id"]
    new = "20990101T000000Z-abcdef"
    assert all(json.loads(line)["trace_id"].startswith(f"{old}/") for line in lines)
    again = tmp_path / "again.jsonl"
    again.write_text("".join(line.replace(old, new) + "\n" for line in lines))
    result = run_campaign(_spec(tmp_path, again, "run"), progress_stream=None)
    assert result.complete and result.status.get("failed", 0) == 0
    pairs = (tmp_path / "run" / "pairs.jsonl").read_text()
    assert new in pairs and old not in pairs
    assert pairs.replace(new, old) == (reference / "pairs.jsonl").read_text()
    assert json.loads((tmp_path / "run" / "campaign.json").read_text().replace(new, old)) == json.loads(
        (reference / "campaign.json").read_text()
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("op: override", "op: squash"), "unknown operator 'squash'; the registered operators are bool_flip"),
        (("node: context_sufficiency", "node: sufficiency"), "unknown node 'sufficiency'"),
        (("params: {set: {sufficient: true}}", "params: {set: {enough: true}}"), "has no field 'enough'"),
        (("id: rewriter-swap", "id: rewriter-swap\n    repeats: -1"), "repeats"),
        (("pipeline: ", "pipeline: nowhere_"), "pipeline"),
        (("select: {mode: sample", "select: {mode: [sample"), "YAML"),
    ],
)
def test_bad_specs_are_one_clear_error_and_nothing_runs(
    tmp_path: Path, baseline: Path, change: tuple[str, str], message: str
) -> None:
    spec = _spec(tmp_path, baseline, "bad")
    text = spec.read_text()
    assert change[0] in text
    spec.write_text(text.replace(change[0], change[1], 1))
    proc = subprocess.run(_cli("run", str(spec), "--quiet"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message.lower() in proc.stderr.lower(), proc.stderr
    assert proc.stderr.strip().count("\n") == 0  # one line
    assert str(spec) in proc.stderr
    assert not (tmp_path / "bad").exists()  # nothing ran, nothing written


def test_a_value_outside_the_field_s_categories_is_refused(tmp_path: Path, baseline: Path) -> None:
    spec = _spec(tmp_path, baseline, "bad")
    text = spec.read_text().replace(
        "  - id: rewriter-swap",
        "  - id: action-force\n    node: planner\n    op: override\n    params: {set: {action: SKIP}}\n"
        "  - id: rewriter-swap",
    )
    spec.write_text(text)
    from quiver.experiments._campaign import check_spec

    with pytest.raises(SpecError, match="'SKIP' is not a category of planner.action; "
                                        "its categories are EXECUTE, RETRY, COMPOSE") as err:
        check_spec(load_spec(CampaignSpec, spec), spec)
    assert err.value.line is not None and err.value.path == "perturbations[1].params"


def test_faults_are_retried_and_every_pair_is_accounted_for(baseline: Path, reference: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, baseline, "faulty")
    text = spec.read_text().replace(
        "    nondeterminism: 0.15\n",
        "    nondeterminism: 0.15\n"
        "    faults: {rate_429: 0.10, rate_500: 0.05, rate_timeout: 0.02, retry_after_s: 0.02,"
        " timeout_hang_s: 3, seed: 5}\n"
        "  timeout_s: 1.0\n"
        "  retry: {attempts: 10, initial_s: 0.02, max_s: 0.2}\n",
    )
    spec.write_text(text)
    result = run_campaign(spec, progress_stream=None)
    summary = json.loads((tmp_path / "faulty" / "summary.json").read_text())
    assert result.complete and summary["done"] == summary["jobs"]
    assert sum(summary["status"].values()) == summary["jobs"]
    assert {"rate_limited", "server_error", "timeout"} <= set(summary["retries"])
    # faults are drawn apart from content: the same pairs as the fault-free run
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("retries", "llm_calls")} for r in rows]  # noqa: E731
    faulty, clean = _pairs(tmp_path / "faulty"), _pairs(reference)
    assert strip(faulty) == strip(clean)
    # the wire counts every answered attempt: a 429 or a 500 answered is a request the endpoint received
    for f, c in zip(faulty, clean, strict=True):
        answered_retries = sum(n for reason, n in (f.get("retries") or {}).items() if reason != "timeout")
        assert sum(f["llm_calls"].values()) == sum(c["llm_calls"].values()) + answered_retries, f["job_id"]


def _kill_one_ray_batch(stop: threading.Event, killed: list[int]) -> None:
    while not stop.is_set() and not killed:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    command = fh.read()
            except OSError:
                continue
            if b"ray::_ReplayActor.replay" in command:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
                return
        time.sleep(0.02)


def test_ray_gives_the_same_pairs_and_numbers_with_a_worker_killed_mid_task(
    baseline: Path, reference: Path, tmp_path: Path, ray_instance: Any
) -> None:
    """Also paced: against a simulator allowing 50 requests a second per model (over a
    1 s window), the actors share one schedule at 30 a second through the run's
    coordinator, so no attempt meets a 429 (every answered request counts as an LLM
    call: a 429 would change the numbers); actors pacing each on its own would not."""
    spec = _spec(tmp_path, baseline, "run", executor="ray")
    spec.write_text(spec.read_text().replace(
        "    nondeterminism: 0.15\n",
        "    nondeterminism: 0.15\n    limits: {requests_per_minute: 3000, window_s: 1}\n",
    ).replace("  model: support-bot-planner\n",
              "  model: support-bot-planner\n  limits: {requests_per_minute: 3000, utilization: 0.6}\n"))
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_one_ray_batch, args=(stop, killed))
    killer.start()
    try:
        result = run_campaign(spec, progress_stream=None)
    finally:
        stop.set()
        killer.join()
    assert killed, "no Ray worker was seen running a batch"
    assert result.complete and result.executor == "ray" and result.nodes >= 1
    pairs = _pairs(tmp_path / "run")
    assert [p for p in pairs if p["status"] != "ok"] == []
    assert pairs == _pairs(reference)
    assert json.loads((tmp_path / "run" / "campaign.json").read_text()) == json.loads(
        (reference / "campaign.json").read_text()
    )
