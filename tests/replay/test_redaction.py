"""A secret passed through a pipeline never reaches disk or the logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from quiver import RedactionConfig, Redactor, iter_traces

API_KEY = "sk-test-51HfakeKEYabcdefghijklmnopqrstu"
EMAIL = "jane.doe@example.com"
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
    assert crm.tool is not None and crm.tool.args == {
        "api_key": "[REDACTED:api_key]", "customer": "[REDACTED:email]", "custom": "[REDACTED:secret]"
    }
    answer = next(c for c in ok.calls if c.node == "answer")
    assert answer.prompt is not None and "[REDACTED:api_key]" in answer.prompt.assembled[0].content
    assert ok.output["key"] == "[REDACTED:api_key]"
    failed = next(t for t in traces if t.status == "failed")
    assert failed.error is not None and "[REDACTED:api_key]" in failed.error.message
    assert "[REDACTED:email]" in (out / "record.log").read_text()


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
