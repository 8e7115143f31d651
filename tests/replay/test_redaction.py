"""A secret passed through a pipeline never reaches disk or the logs; every built-in kind
is recognised and named, and nothing of the engine's own is taken for a secret."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pipelines.planted_secrets import ALL_PLANTED, API_KEY, EMAIL, HARMLESS, PLANTED

from quiver import RedactingFilter, RedactionConfig, Redactor, iter_traces
from quiver._trace.redact import SECRET_KINDS
from quiver._trace.redact_output import RedactingStream, redacted_logs

CUSTOM = "zz-custom-secret-778899"


def test_secrets_reach_no_file_and_no_log(pipelines_dir: Path, tmp_path: Path) -> None:
    spec = tmp_path / "leaky.yaml"
    out = tmp_path / "out"
    spec.write_text(
        f"pipeline: {pipelines_dir / 'leaky.py'}:pipeline\n"
        "llm:\n  simulator: {}\n  model: sim-echo\n  api_key_env: QUIVER_TEST_SECRET\n"
        "inputs:\n  - {id: q1, question: \"How do I reset my password?\"}\n"
        "  - {id: q2, question: please fail loudly}\n"
        "repeats: 2\n"
        f"output: {out}\n"
    )
    env = {**os.environ, "QUIVER_TEST_SECRET": CUSTOM}
    proc = subprocess.run(
        [sys.executable, "-m", "quiver.experiments._cli", "record", str(spec)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr  # the q2 traces failed, as they should
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {p.name for p in written} >= {"traces.jsonl", "summary.json", "record.log", "spec.resolved.json"}
    for secret in (API_KEY, EMAIL, CUSTOM):
        for path, data in written.items():
            assert secret.encode() not in data, f"{secret} in {path}"
        assert secret not in proc.stdout and secret not in proc.stderr
    traces = list(iter_traces(out / "traces.jsonl"))
    assert len(traces) == 4
    # the secrets were there, and were replaced, in prompts, tool args, outputs and errors
    ok = next(t for t in traces if t.status == "ok")
    crm = next(c for c in ok.calls if c.node == "crm")
    assert crm.tool is not None and {k: v for k, v in crm.tool.args.items() if k != "vault"} == {
        "api_key": "[REDACTED:api_key]", "customer": "[REDACTED:email]", "custom": "[REDACTED:secret]"
    }
    answer = next(c for c in ok.calls if c.node == "answer")
    assert answer.prompt is not None and "[REDACTED:api_key]" in answer.prompt.assembled[0].content
    assert ok.output["key"] == "[REDACTED:api_key]"
    failed = next(t for t in traces if t.status == "failed")
    assert failed.error is not None and "[REDACTED:api_key]" in failed.error.message
    log = (out / "record.log").read_text()
    assert "[REDACTED:email]" in log and "[REDACTED:private_key]" in log
    assert "Traceback" in log and "Stack (most recent call last)" in log  # the pipeline's own, redacted


def test_field_paths_and_user_patterns() -> None:
    redactor = Redactor(RedactionConfig(fields=["calls.*.tool.args.password", "**.ssn"],
                                        patterns=[r"ACME-\d{6}"], emails=False))
    data = {
        "inputs": {"customer": {"ssn": "123-45-6789", "note": "order ACME-123456"}},
        "calls": [{"tool": {"args": {"password": "hunter2", "user": "bob@example.com"}}}],
    }
    assert redactor.data(data) == {
        "inputs": {"customer": {"ssn": "[REDACTED:field]", "note": "order [REDACTED:pattern]"}},
        "calls": [{"tool": {"args": {"password": "[REDACTED:field]", "user": "bob@example.com"}}}],
    }


def test_builtin_patterns_cover_common_credentials() -> None:
    redactor = Redactor()
    text = (
        "openai sk-proj-abcdefghijklmnopqrstuv aws AKIAABCDEFGHIJKLMNOP "
        "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 auth: Bearer eyJhbGciOi.payload.sig "
        "mail a.b+c@mail.example.org"
    )
    assert redactor.text(text) == (
        "openai [REDACTED:api_key] aws [REDACTED:api_key] gh [REDACTED:api_key] "
        "auth: [REDACTED:bearer] mail [REDACTED:email]"
    )
    assert redactor.text("nothing secret in sk-short") == "nothing secret in sk-short"


def test_encode_agrees_with_the_walk_string_by_string() -> None:
    """``Redactor.encode`` skips the walk when the JSON text shows nothing to redact;
    wherever the rules would change a string (including after a ``Bearer`` that JSON
    escapes, and literals JSON escapes), it redacts exactly as :meth:`Redactor.data`."""
    import json
    import random

    literal = 'p\u00e4ss"wo\\rd\n42'
    redactor = Redactor(literals=[literal])
    pieces = [
        "plain text", "Bearer\tabcDEF123.xyz", "bearer\nabc", "Authorization: BEARER  tok=", API_KEY, EMAIL,
        literal, f"x{literal}y", "caf\u00e9 \u2003 \"quoted\" back\\slash", "ghp_" + "a" * 36, "x@y", "\u00e9@x.org",
        "sk-short", "AKIA" + "B" * 16, "line\nbreak\ttab", "",
        # every kind, and the forms JSON escapes between a key name and its value
        *(text for _, text, _ in PLANTED.values()), *HARMLESS.values(), "password\t=\thunter22", 'secret":\t"abc123"',
        "api-key: 'k-1234'", 'AccountKey\t= ' + "A" * 40, "redis://:pw12345@cache:6379", "PRIVATE KEY",
        "https://x.example/?a=1&sig=" + "b" * 20, "token=512", "eyJ" + "a" * 12 + "." + "b" * 12 + ".c",
    ]
    rng = random.Random(7)
    quick = 0
    for _ in range(300):
        value = {
            rng.choice(pieces): [rng.choice(pieces), rng.randint(0, 9), None],
            "calls": [{"output": "fixed", "nested": {"k": rng.choice(pieces)}}],
        }
        redacted, text = redactor.encode(value)
        expected = redactor.data(value)
        assert redacted == expected
        assert text == json.dumps(expected, sort_keys=True)
        quick += redacted is value
    assert 0 < quick < 300  # both paths were taken

    for secret in ("Bearer\tabcDEF123", API_KEY, literal, EMAIL):
        _, text = redactor.encode({"a": [f"see {secret} here"]})
        assert json.dumps(secret)[1:-1] not in text and "[REDACTED:" in text


def test_encode_walks_whenever_user_patterns_or_fields_are_set() -> None:
    """No quick check is made for rules it cannot reason about: anchored user patterns
    still apply to each string as a whole."""
    redactor = Redactor(RedactionConfig(patterns=[r"^id-\d+$"]))
    redacted, text = redactor.encode({"a": "id-42", "b": "an id-42 inside"})
    assert redacted == {"a": "[REDACTED:pattern]", "b": "an id-42 inside"}
    redactor = Redactor(RedactionConfig(fields=["**.password"]))
    redacted, _ = redactor.encode({"user": {"password": "hunter2"}})
    assert redacted == {"user": {"password": "[REDACTED:field]"}}


def test_every_kind_is_found_and_named_in_its_replacement() -> None:
    """Each planted secret is removed, its replacement naming its kind; all of them in one
    text too, and in the JSON text of data holding them."""
    redactor = Redactor()
    for name, (kind, text, secret) in PLANTED.items():
        out = redactor.text(f"see {text} here")
        assert secret not in out and f"[REDACTED:{kind}]" in out, (name, out)
    everything = redactor.text(ALL_PLANTED)
    assert all(secret not in everything for _, _, secret in PLANTED.values())
    _, text = redactor.encode({"args": {"vault": ALL_PLANTED}, "tags": [ALL_PLANTED]})
    assert all(json.dumps(secret)[1:-1] not in text for _, _, secret in PLANTED.values())


def test_each_kind_is_switched_off_on_its_own() -> None:
    """``RedactionConfig`` has a switch per kind, named as :data:`SECRET_KINDS` says; with
    it off, that kind's replacement no longer appears and the others still do."""
    assert {kind.name for kind in SECRET_KINDS} == {kind for kind, _, _ in PLANTED.values()} | {
        "azure_sas", "npm_token", "twilio_key"} - {"secret"}
    for kind in SECRET_KINDS:
        off = Redactor(RedactionConfig(**{kind.switch: False}))
        out = off.text(ALL_PLANTED)
        assert f"[REDACTED:{kind.name}]" not in out, kind.name
        assert "[REDACTED:" in out


def test_values_of_the_engine_are_not_taken_for_secrets() -> None:
    """Content hashes, UUIDs, trace ids, sample keys, base64 embeddings, token counts and
    prose about passwords come out as they went in: replay compares them."""
    redactor = Redactor()
    for name, value in HARMLESS.items():
        assert redactor.text(value) == value, name
    data = {"calls": [{"input_hash": HARMLESS["content hash"], "output": dict(HARMLESS)}], "tags": {"k": "v"}}
    assert redactor.encode(data)[0] is data  # the quick check saw nothing to walk for
    recorded = json.loads((Path(__file__).parents[1] / "data" / "trace_example.json").read_text())
    assert redactor.encode(recorded)[0] is recorded


def test_a_replacement_is_not_redacted_again() -> None:
    """Redacting twice gives what redacting once gave (a replay is compared in redacted
    form with a recording that was redacted when written), whatever the replacement."""
    for replacement in ("[REDACTED:{kind}]", "<{kind}>", "***"):
        redactor = Redactor(RedactionConfig(replacement=replacement))
        once = redactor.text(ALL_PLANTED + " password=hunter2 https://u:pw123@h.example")
        assert redactor.text(once) == once, replacement


def test_log_records_are_redacted_with_their_traceback_and_stack() -> None:
    """Within ``redacted_logs``, a record is redacted whatever handler writes it: its
    arguments (the format string kept when that is enough), its exception's traceback and
    its stack; a record whose arguments do not fit its format still fails where logging
    reports it."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("quiver.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    kept: list[logging.LogRecord] = []
    handler.addFilter(lambda record: kept.append(record) or True)
    try:
        with redacted_logs(Redactor(literals=[CUSTOM])):
            try:
                raise RuntimeError(f"rejected {ALL_PLANTED} {CUSTOM}")
            except RuntimeError as exc:
                logger.error("trace %s failed: %s", "t1", exc, exc_info=True, stack_info=True)
            logger.warning(f"formatted before: {API_KEY}")
            logger.warning("a number %d", "not a number")  # a bad record: logging reports it, as ever
        logger.warning("after the block: %s", EMAIL)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    written = stream.getvalue()
    assert all(secret not in written.split("after the block")[0] for _, _, secret in PLANTED.values())
    assert CUSTOM not in written and "[REDACTED:secret]" in written and "Traceback" in written
    assert "Stack (most recent call last)" in written and kept[0].msg == "trace %s failed: %s"
    assert f"after the block: {EMAIL}" in written  # outside a block, and no console: as it was


def test_the_redacting_filter_covers_tracebacks_too() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "%s", (API_KEY,), None, None, f"stack {EMAIL}")
    try:
        raise ValueError(API_KEY)
    except ValueError:
        record.exc_info = sys.exc_info()
    RedactingFilter(Redactor()).filter(record)
    text = logging.Formatter().format(record)
    assert API_KEY not in text and EMAIL not in text and "ValueError: [REDACTED:api_key]" in text


def test_a_stream_is_redacted_line_by_line() -> None:
    """A secret written in pieces is held until its line ends; a line rewritten in place
    (``\\r``) shows at once; flush passes on what is held."""
    out = io.StringIO()
    stream = RedactingStream(out, lambda: Redactor())
    stream.write(API_KEY[:10])
    assert out.getvalue() == ""
    stream.write(API_KEY[10:] + " done\nprogress 1/2\r")
    assert out.getvalue() == "[REDACTED:api_key] done\nprogress 1/2\r"
    stream.write(f"tail {EMAIL}")
    stream.flush()
    assert out.getvalue().endswith("tail [REDACTED:email]")


@pytest.mark.parametrize("where", ["stdout", "stderr"])
def test_a_worker_process_output_is_redacted_at_its_file_descriptors(where: str, tmp_path: Path) -> None:
    """What a Ray worker process writes to file descriptors 1 and 2 (Python's streams, a
    handler made before, native code's ``write``) and logs is redacted before it reaches
    the file its descriptors pointed to."""
    target = tmp_path / "worker.log"
    code = textwrap.dedent(f"""
        import logging, os, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from pipelines.planted_secrets import ALL_PLANTED
        early = logging.StreamHandler(sys.{where})
        logging.getLogger().addHandler(early)
        from quiver.replay._executors._redirect import redact_worker_output
        redact_worker_output({{"config": {{}}, "literals": ["{CUSTOM}"]}})
        fd = 1 if "{where}" == "stdout" else 2
        print("python", ALL_PLANTED, "{CUSTOM}", file=sys.{where}, flush=True)
        os.write(fd, ("native " + ALL_PLANTED + "\\n").encode())
        logging.getLogger("w").warning("logged %s", ALL_PLANTED)
        sys.{where}.flush()
        os.write(fd, b"end\\n")
    """)
    with target.open("wb") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=fh, check=True, timeout=60)
    written = target.read_text()
    assert "python" in written and "native [REDACTED:" in written and "logged [REDACTED:" in written
    assert all(secret not in written for _, _, secret in PLANTED.values()) and CUSTOM not in written


def test_import_redacts_with_a_redact_block_or_the_built_in_rules(tmp_path: Path) -> None:
    """``quiver import --redact FILE.yaml`` applies the file's ``redact:`` block (its own
    patterns; e-mail addresses kept when switched off); a block that is wrong is one line
    naming the file, the line and the field, exit 2."""
    fixture = Path(__file__).parents[1] / "data" / "traces" / "openinference"
    attrs = json.loads((fixture / "openinference_client_span_tool_calls.json").read_text(encoding="utf-8"))
    attrs["llm.input_messages.0.message.contents.0.message_content.text"] = f"order ACME-123456 for {EMAIL} {API_KEY}"
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps(attrs), encoding="utf-8")
    block = tmp_path / "redact.yaml"
    block.write_text('redact:\n  patterns: ["ACME-[0-9]{6}"]\n  emails: false\n')
    cli = [sys.executable, "-m", "quiver.experiments._cli", "import", "openinference", str(spans)]
    proc = subprocess.run([*cli, "--out", str(tmp_path / "a.jsonl"), "--redact", str(block)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = (tmp_path / "a.jsonl").read_text()
    assert "ACME-123456" not in written and API_KEY not in written and EMAIL in written
    proc = subprocess.run([*cli, "--out", str(tmp_path / "b.jsonl")], capture_output=True, text=True, timeout=120)
    written = (tmp_path / "b.jsonl").read_text()
    assert proc.returncode == 0 and EMAIL not in written and "ACME-123456" in written
    block.write_text("redact:\n  emails: maybe\n")
    proc = subprocess.run([*cli, "--out", str(tmp_path / "c.jsonl"), "--redact", str(block)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f'quiver import: error: {block}:2: redact.emails: Input should be a valid boolean, unable to interpret '
        'input, got "maybe"']


def test_a_placeholder_key_is_not_removed_wherever_it_occurs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local servers take any key (``EMPTY``, ``x``): the value of ``api_key_env`` is redacted
    as a literal only when it is long enough to be a secret, else it would wreck every text
    it occurs in (each ``x`` of "exactly")."""
    from quiver.experiments._config import MIN_KEY_LITERAL, key_literals

    assert key_literals("x") == [] and key_literals("EMPTY") == [] and key_literals(None) == []
    secret = "k" * MIN_KEY_LITERAL
    assert key_literals(secret) == [secret]
    redactor = Redactor(literals=key_literals("x") + key_literals(secret))
    assert redactor.text(f"exactly EMPTY {secret}") == "exactly EMPTY [REDACTED:secret]"
