"""The shared fuzz helpers hold their contract: a hang is caught, a traceback is seen."""

from __future__ import annotations

import time

import pytest
from fuzzing import Hang, run_cli, time_limit, tried


def test_time_limit_stops_a_hang() -> None:
    with pytest.raises(Hang), time_limit(0.2, "sleep"):
        time.sleep(5)
    tried("helpers")


def test_run_cli_reports_a_missing_spec_as_one_line_and_exit_2(tmp_path) -> None:
    result = run_cli(["run", str(tmp_path / "missing.yaml")])
    assert result.code == 2
    assert len(result.error_lines()) == 1
    tried("helpers")
