"""Replay fidelity is checked before a run spends anything, and says why it fails.

``tests/pipelines/emails.py`` routes support messages by the customer's e-mail domain.
Recorded with the default redaction, the stored inputs hold ``[REDACTED:email]``: the
recording warns, with counts, that redaction replaced inputs the pipeline reads;
``quiver run`` stops before its first replay (exit 2, one line) naming redaction as the
cause and the setting that keeps the addresses; recorded again with that setting, every
trace reproduces and the campaign runs. A pipeline that draws a random number stops the
run the same way, naming code that is not deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import run_cli

RUN_SECONDS = 180.0
"""The longest one command may take here on a loaded 2-core machine."""
PIPELINES = Path(__file__).parents[1] / "pipelines"
CUSTOMERS = ["ana@bigcorp.com", "bo@smallshop.io", "cy@bigcorp.com"]

RECORD = """\
pipeline: {pipelines}/emails.py:{function}
llm: {{simulator: {{}}, model: sim-echo}}
inputs: inputs.jsonl
repeats: 2
{redact}output: {out}
"""

CAMPAIGN = """\
pipeline: {pipelines}/emails.py:{function}
llm: {{simulator: {{}}, model: sim-echo}}
baseline: {baseline}
{redact}perturbations:
  - {{id: queue-flip, node: route, op: override, params: {{set: {{queue: enterprise}}}}}}
replay: {{repeats: 1, controls: 0}}
analysis: {{resamples: 100, permutations: 100, cache_dir: {embeddings}}}
output: {out}
"""

KEEP = "redact: {emails: false}\n"


def _spec(root: Path, name: str, template: str, **fields: object) -> Path:
    path = root / name
    path.write_text(template.format(pipelines=PIPELINES, **fields), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fidelity")
    (folder / "inputs.jsonl").write_text("".join(
        json.dumps({"id": f"m{i}", "customer": c, "question": "my export fails"}) + "\n"
        for i, c in enumerate(CUSTOMERS)), encoding="utf-8")
    return folder


def test_redacted_inputs_are_named_by_record_and_stop_the_run_before_it_spends(root: Path) -> None:
    spec = _spec(root, "record.yaml", RECORD, function="pipeline", redact="", out=root / "rec")
    done = run_cli(["record", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if "redaction replaced" in line]
    assert len(warning) == 1 and "6 of 6 traces" in warning[0] and "inputs.customer" in warning[0], done.stderr
    campaign = _spec(root, "campaign.yaml", CAMPAIGN, function="pipeline", redact="",
                     baseline=root / "rec" / "traces.jsonl", embeddings=root / "emb", out=root / "run")
    done = run_cli(["run", str(campaign), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 2, done.stdout + done.stderr
    (line,) = done.error_lines()
    assert "does not replay exactly" in line and "redaction replaced" in line and "emails: false" in line, line
    assert not (root / "run" / "ledger.sqlite").exists()  # nothing was spent


def test_with_the_addresses_kept_every_trace_reproduces_and_the_run_goes_on(root: Path) -> None:
    spec = _spec(root, "record_keep.yaml", RECORD, function="pipeline", redact=KEEP, out=root / "rec_keep")
    done = run_cli(["record", str(spec), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0 and "redaction replaced" not in done.stderr, done.stderr
    done = run_cli(["replay", str(root / "rec_keep" / "traces.jsonl"), "--spec", str(spec), "--check"],
                   seconds=RUN_SECONDS)
    assert done.code == 0 and "6 of 6 traces reproduce exactly" in done.stdout, done.stdout + done.stderr
    campaign = _spec(root, "campaign_keep.yaml", CAMPAIGN, function="pipeline", redact=KEEP,
                     baseline=root / "rec_keep" / "traces.jsonl", embeddings=root / "emb", out=root / "run_keep")
    done = run_cli(["run", str(campaign), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 0, done.stdout + done.stderr


def test_code_that_is_not_deterministic_stops_the_run_and_is_named(root: Path) -> None:
    spec = _spec(root, "record_ticket.yaml", RECORD, function="pipeline_with_ticket", redact=KEEP,
                 out=root / "rec_ticket")
    assert run_cli(["record", str(spec), "--quiet"], seconds=RUN_SECONDS).code == 0
    campaign = _spec(root, "campaign_ticket.yaml", CAMPAIGN, function="pipeline_with_ticket", redact=KEEP,
                     baseline=root / "rec_ticket" / "traces.jsonl", embeddings=root / "emb", out=root / "run_ticket")
    done = run_cli(["run", str(campaign), "--quiet"], seconds=RUN_SECONDS)
    assert done.code == 2, done.stdout + done.stderr
    (line,) = done.error_lines()
    assert "ticket#0" in line and "not deterministic" in line, line
