"""The spec's ``llm.limits`` (pacing) and ``llm.simulator.limits``, and ``quiver sim``'s limit flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiver._errors import QuiverError, SpecError
from quiver._yamlspec import load_spec
from quiver.experiments._cli import build_parser
from quiver.experiments._cli.sim import simulator_config
from quiver.experiments._config import RecordSpec

SPEC = """\
pipeline: p.py:run
llm:
  simulator:
    limits: {{requests_per_minute: 600, tokens_per_minute: 90000, window_s: 10,
              models: {{sim-json: {{requests_per_minute: 60}}}}}}
  limits: {limits}
inputs: [{{x: 1}}]
"""


def _load(tmp_path: Path, limits: str) -> RecordSpec:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(limits=limits), encoding="utf-8")
    return load_spec(RecordSpec, path)


def test_a_spec_states_the_limits_the_run_paces_to_and_the_simulators(tmp_path: Path) -> None:
    spec = _load(tmp_path, "{requests_per_minute: 500, tokens_per_minute: 80000, utilization: 0.9}")
    assert (spec.llm.limits.requests_per_minute, spec.llm.limits.tokens_per_minute) == (500, 80000)
    assert spec.llm.limits.pace and spec.llm.limits.utilization == 0.9
    sim = spec.llm.simulator
    assert sim is not None and sim.limits.window_s == 10 and sim.limits.of("sim-json").requests_per_minute == 60
    assert _load(tmp_path, "{pace: false}").llm.limits.pace is False


@pytest.mark.parametrize("limits, field", [("{requests_per_minute: '600'}", "requests_per_minute"),
                                           ("{requests_per_minute: 0}", "requests_per_minute"),
                                           ("{utilization: 1.5}", "utilization"),
                                           ("{per_second: 3}", "per_second")])
def test_a_wrong_limit_is_named_with_its_line(tmp_path: Path, limits: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, limits)
    assert err.value.line == 6 and field in str(err.value)


def test_quiver_sim_takes_the_limits_as_flags() -> None:
    args = build_parser().parse_args(["sim", "--requests-per-minute", "120", "--tokens-per-minute", "9000",
                                      "--limit-window", "5"])
    limits = simulator_config(args).limits
    assert (limits.requests_per_minute, limits.tokens_per_minute, limits.window_s) == (120, 9000, 5)
    with pytest.raises(QuiverError, match="--limit-window"):
        simulator_config(build_parser().parse_args(["sim", "--requests-per-minute", "1", "--limit-window", "0"]))
