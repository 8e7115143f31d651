"""No secret reaches any file or stream: record, run (local and Ray), gate, replay and import.

A pipeline (``tests/pipelines/leaky.py``) puts a fake secret of every built-in kind
(``tests/pipelines/planted_secrets.py``: API keys and tokens of every provider the rules
know, an AWS secret key, a PEM private key and a GCP service account, a JWT, Azure keys
and SAS signatures, a password in a URL, ``password=``/``secret=``/``token=``
assignments, an e-mail address) and the value of the spec's ``api_key_env`` variable
into its inputs, prompts, tool arguments, tool responses, outputs and errors; it prints
and logs them (with a traceback and a stack) in every run, writes them to file
descriptors 1 and 2 in a Ray worker, and raises with them in its message when recorded
(``record.log``) and when a perturbed replay reaches it (``campaign.log``, Ray's worker
logs). Every command runs as a user would run it (a subprocess, the bundled simulator),
with a response cache (``downstream: cached``), an embedding cache and a Ray instance
whose temporary folder lives inside the test's own; ``quiver import`` reads an
OpenInference span file carrying the secrets in its attributes. Then every file
written anywhere there (output folders, caches, the ledger, the imported corpus and its
summary, Ray's session folders and logs) and every command's stdout and stderr are
searched for each secret, as bytes, as written, as JSON escapes it and in UTF-16.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipelines.planted_secrets import ALL_PLANTED, API_KEY, BEARER, EMAIL, PLANTED

from quiver import iter_traces

from .conftest import quiver_command

PIPELINES = Path(__file__).parents[1] / "pipelines"
SPANS = Path(__file__).parents[1] / "data" / "traces" / "openinference" / "openinference_client_span_tool_calls.json"
TOKEN = BEARER.removeprefix("Bearer ")
CUSTOM = "zz-custom-secret-778899"  # the api_key_env variable's value
SECRETS = {name: secret for name, (_, _, secret) in PLANTED.items()} | {"api_key_env value": CUSTOM}

RECORD = """\
pipeline: {pipelines}/leaky.py:pipeline
llm:
  simulator: {{}}
  model: sim-echo
  api_key_env: QUIVER_TEST_SECRET
inputs:
  - {{id: q1, question: "How do I reset my password? Reply to {email}"}}
  - {{id: q2, question: {q2}}}
  - {{id: q3, question: "please fail loudly, key {key}"}}
repeats: 2
output: {out}
"""

CAMPAIGN = """\
pipeline: {pipelines}/leaky.py:pipeline
name: leaky
llm:
  simulator: {{}}
  model: sim-echo
  api_key_env: QUIVER_TEST_SECRET
baseline: {baseline}
perturbations:
  - id: answer-hot
    node: answer
    op: param_change
    params: {{temperature: 1.5}}
  - id: lookup-owner
    node: lookup
    op: override
    params: {{set: {{owner: "someone else, contact {email}"}}}}
replay: {{repeats: 2, downstream: cached}}
fidelity: {{per_group: 0}}  # the pipeline reads its redacted secrets back: its replays cannot reproduce
executor: {{kind: {executor}, concurrency: 2}}
analysis: {{resamples: 100, permutations: 100, cache_dir: {embeddings}}}
gate: {{probes: 2, repeats: 1}}
output: {out}
"""


def _leaky_spans(path: Path) -> None:
    """An OpenInference span (the fixture of tests/data) carrying every secret: in a
    message, a tool call's arguments, a tool's response, the session's user, an attribute
    kept in tags and an attribute's name."""
    attrs = json.loads(SPANS.read_text(encoding="utf-8"))
    attrs["llm.input_messages.0.message.contents.0.message_content.text"] = f"Weather in Paris? {ALL_PLANTED}"
    attrs["llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments"] = json.dumps(
        {"location": "Paris", "api_key": API_KEY, "vault": ALL_PLANTED})
    attrs["llm.input_messages.2.message.content"] = f"rainy, 57F; {ALL_PLANTED}"
    attrs["user.id"] = EMAIL
    attrs["app.debug.vault"] = ALL_PLANTED
    attrs[f"app.owner.{EMAIL}"] = "kept in tags under a name that is a secret"
    path.write_text(json.dumps(attrs), encoding="utf-8")


class Streams:
    """Every command's stdout and stderr, and how long it ran, by command."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    def run(self, name: str, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        started = time.perf_counter()
        proc = subprocess.run([*quiver_command(), *args], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=600)
        self.seconds[name] = time.perf_counter() - started
        self.text[name] = proc.stdout + proc.stderr
        return proc


@pytest.fixture(scope="module")
def leaky_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Streams]]:
    """Record, run (local, Ray), gate, replay and import the leaky pipeline's secrets; the
    folder that holds everything they wrote, Ray's temporary folder, and their streams."""
    started = time.perf_counter()
    root = tmp_path_factory.mktemp("secrets")  # everything the commands write
    specs = tmp_path_factory.mktemp("secret-specs")  # the user's own files, which hold the secrets in inputs
    ray_tmp = Path(tempfile.mkdtemp(prefix="qs", dir="/tmp"))  # short: Ray's socket paths have a length limit
    env = {**os.environ, "QUIVER_TEST_SECRET": CUSTOM, "RAY_TMPDIR": str(ray_tmp), "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    streams = Streams()
    record = specs / "record.yaml"
    record.write_text(RECORD.format(pipelines=PIPELINES, email=EMAIL, key=API_KEY, out=root / "rec",
                                    q2=json.dumps(f"Use {BEARER} for the export; {ALL_PLANTED}")))
    proc = streams.run("record", ["record", str(record), "--quiet"], env, root)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the q3 traces fail, as they should
    for executor in ("local", "ray"):
        spec = specs / f"campaign-{executor}.yaml"
        spec.write_text(CAMPAIGN.format(pipelines=PIPELINES, baseline=root / "rec" / "traces.jsonl", email=EMAIL,
                                        executor=executor, embeddings=root / "embeddings", out=root / executor))
        proc = streams.run(f"run {executor}", ["run", str(spec), "--quiet"], env, root)
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        assert (root / executor / "campaign.json").is_file(), proc.stderr[-3000:]
    candidate = specs / "answer_candidate.txt"
    candidate.write_text("[system]\nYou answer support questions in one short sentence.\n[user]\n{question}\n")
    proc = streams.run("gate", ["gate", str(specs / "campaign-local.yaml"), "--candidate", f"answer={candidate}",
                                "--profile", str(root / "local"), "--output", str(root / "gate"), "--quiet"],
                       env, root)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert (root / "gate" / "gate.json").is_file(), proc.stderr[-3000:]
    traces = str(root / "rec" / "traces.jsonl")
    proc = streams.run("replay --check", ["replay", traces, "--spec", str(record), "--check", "--quiet"], env, root)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    proc = streams.run("replay --op", ["replay", traces, "--spec", str(record), "--node", "answer",
                                       "--op", "param_change", "--params", '{"temperature": 1.5}',
                                       "--cache", str(root / "embeddings"), "--out", str(root / "replay"),
                                       "--quiet"], env, root)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    spans = specs / "spans.json"
    _leaky_spans(spans)
    proc = streams.run("import", ["import", "openinference", str(spans), "--out", str(root / "import" / "traces.jsonl"),
                                  "--summary", str(root / "import" / "summary.json")], env, root)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    print(f"the secrets fixture ran its commands in {time.perf_counter() - started:.1f} s: "
          + ", ".join(f"{name} {s:.1f} s" for name, s in streams.seconds.items()))
    yield root, ray_tmp, streams
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _forms(secret: str) -> list[bytes]:
    """A secret as it could sit in a file: as written, as JSON escapes it, in UTF-16."""
    return sorted({secret.encode(), json.dumps(secret)[1:-1].encode(), secret.encode("utf-16-le")})


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def test_every_command_wrote_what_it_should(leaky_runs: tuple[Path, Path, Streams]) -> None:
    root, ray_tmp, _ = leaky_runs
    names = {p.name for p in _files(root)}
    assert {"traces.jsonl", "ledger.sqlite", "campaign.json", "pairs.jsonl", "gate.json"} <= names
    assert any(p.name == "cache.db" for p in _files(root / "local" / "cache")), "the response cache was not used"
    assert any(p.name == "vectors.sqlite" for p in _files(root / "embeddings"))
    assert list(ray_tmp.rglob("session_*")), "Ray kept no session folder to search"
    # the secrets were there, and were replaced
    ok = next(t for t in iter_traces(root / "rec" / "traces.jsonl") if t.status == "ok" and t.input_id == "q1")
    crm = next(c for c in ok.calls if c.node == "crm")
    assert crm.tool is not None and crm.tool.response["auth"] == "[REDACTED:bearer]"
    vault = crm.tool.response["vault"]
    for name, (kind, _, _) in PLANTED.items():
        assert f"[REDACTED:{kind}]" in vault, name
    # the logs, the worker's streams and the import got them, redacted
    assert "upstream rejected key [REDACTED:api_key]" in (root / "rec" / "record.log").read_text()
    assert "the owner changed; the vault still holds [REDACTED:" in (root / "local" / "campaign.log").read_text()
    worker_logs = "".join(p.read_text(errors="replace") for p in ray_tmp.rglob("worker-*")
                          if p.suffix in (".out", ".err"))
    assert "native: [REDACTED:" in worker_logs and "the owner changed; the vault still holds [REDACTED:" in worker_logs
    assert "[REDACTED:" in (root / "import" / "traces.jsonl").read_text()
    assert "[REDACTED:email]" in (root / "import" / "summary.json").read_text()


@pytest.mark.parametrize("what", list(SECRETS))
def test_no_secret_in_any_file_or_stream(leaky_runs: tuple[Path, Path, Streams], what: str) -> None:
    root, ray_tmp, streams = leaky_runs
    secret = SECRETS[what]
    files = _files(root) + _files(ray_tmp)
    assert len(files) > 20
    hits = [str(p) for p in files for form in _forms(secret) if form in p.read_bytes()]
    hits += [f"{name} output" for name, text in streams.text.items() if secret in text]
    assert hits == [], f"the {what} was found in {len(hits)} place(s): {hits[:10]}"
