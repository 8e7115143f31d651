"""Command-line values that override a spec are checked as the spec checks them, and an
endpoint given on the command line is probed like a spec's: one line, exit 2, before
any work."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fuzzing import run_cli, tried

ROOT = Path(__file__).parents[2]
RECORD = ROOT / "experiments" / "quickstart" / "record.yaml"
CAMPAIGN = ROOT / "experiments" / "specs" / "support_bot.yaml"


@pytest.mark.parametrize(("argv", "says"), [
    (["record", str(RECORD), "--repeats", "1000000000000"], "--repeats 1000000000000: Input should be less than"),
    (["record", str(RECORD), "--repeats", "0"], "--repeats 0: Input should be greater than"),
    (["record", str(RECORD), "--concurrency", "100000"], "--concurrency 100000: Input should be less than"),
    (["gate", str(CAMPAIGN), "--probes", "1"], "--probes 1: Input should be greater than"),
    (["gate", str(CAMPAIGN), "--repeats", "10000000"], "--repeats 10000000: Input should be less than"),
    (["gate", str(CAMPAIGN), "--alpha", "3"], "--alpha 3.0: Input should be less than"),
    (["gate", str(CAMPAIGN), "--seed", "-1"], "--seed -1: Input should be greater than"),
])
def test_an_override_out_of_the_specs_range_is_one_line_and_exit_2(argv: list[str], says: str, tmp_path: Path) -> None:
    result = run_cli([*argv, "--output", str(tmp_path / "out")], seconds=30)
    assert result.code == 2
    assert says in result.error_lines()[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written
    tried("overrides")


def test_replay_against_a_closed_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import json

    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(json.loads((ROOT / "tests" / "data" / "trace_example.json").read_text())) + "\n")
    pipeline = ROOT / "tests" / "pipelines" / "structured.py"
    result = run_cli(["replay", str(traces), "--pipeline", f"{pipeline}:pipeline", "--base-url",
                      f"http://127.0.0.1:{port}/v1", "--model", "m", "--node", "x", "--op", "override",
                      "--params", '{"set": {"a": 1}}'], seconds=30)
    assert result.code == 2
    assert f"127.0.0.1:{port}" in result.error_lines()[0]
    tried("overrides")


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--max-connections", "0", "--max-connections: max_connections must be an integer >= 1"),
    ("--read-timeout", "-1", "--read-timeout: read_timeout_s must be a finite number of seconds > 0"),
    ("--max-body-bytes", "0", "--max-body-bytes: "),
])
def test_a_simulator_limit_out_of_range_is_one_line_and_exit_2(flag: str, value: str, says: str) -> None:
    result = run_cli(["sim", "--port", "0", flag, value], seconds=30)
    assert result.code == 2 and result.error_lines()[0].startswith(f"quiver sim: error: {says}")
    tried("overrides")


def test_quiver_sim_serves_with_the_limits_its_flags_set() -> None:
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "quiver.experiments._cli", "sim", "--port", "0",
                             "--max-body-bytes", "1000"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "quiver sim listening on URL (models: ...)"
        url = line.split(" listening on ", 1)[1].split()[0]
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": "x" * 2000}]}
        too_big = httpx.post(f"{url}/chat/completions", json=body, timeout=10)
        small = httpx.post(f"{url}/chat/completions", json={**body, "messages": [{"role": "user", "content": "hi"}]},
                           timeout=10)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert too_big.status_code == 413 and small.status_code == 200
