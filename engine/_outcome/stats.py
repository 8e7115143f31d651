"""Pass rates of a corpus, with their intervals (QUIVER.md §13: 95% percentile intervals
from a bootstrap over input groups, seeded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from quiver._stats import Estimate, GroupBootstrap, fmt
from quiver._trace import Trace

__all__ = ["pass_indicator", "pass_rate", "pass_rate_line"]


def pass_indicator(trace: Trace) -> float | None:
    """1.0 for a trace whose outcome passed, 0.0 for one that failed or could not be
    evaluated (an error is never a pass), None for a trace without an outcome."""
    if trace.outcome is None:
        return None
    return 1.0 if trace.outcome.status == "pass" else 0.0


def pass_rate(traces: Sequence[Trace], *, resamples: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """The pass rate of the traces that carry an outcome, with its interval (a bootstrap
    over input groups), the mean score, and the counts; None when none carries one."""
    judged = [t for t in traces if t.outcome is not None]
    if not judged:
        return None
    groups = sorted({t.input_id for t in judged})
    index = {g: i for i, g in enumerate(groups)}
    boot = GroupBootstrap(np.array([index[t.input_id] for t in judged]), len(groups), resamples=resamples, seed=seed)
    passed = np.array([pass_indicator(t) for t in judged], dtype=np.float64)
    rate = boot.mean(passed)
    scores = np.array([np.nan if t.outcome.score is None else t.outcome.score  # type: ignore[union-attr]
                       for t in judged], dtype=np.float64)
    score = boot.mean(scores, np.isfinite(scores)) if np.isfinite(scores).any() else Estimate.empty()
    status = [t.outcome.status for t in judged]  # type: ignore[union-attr]
    return {"pass_rate": rate.value, "pass_rate_ci": list(rate.ci) if rate.ci else None, "n": len(judged),
            "inputs": len(groups), "passed": status.count("pass"), "failed": status.count("fail"),
            "errors": status.count("error"), "score": score.value,
            "score_ci": list(score.ci) if score.ci else None}


def pass_rate_line(rate: dict[str, Any]) -> str:
    """One line for people: the pass rate, its interval, n and the errors."""
    ci = rate.get("pass_rate_ci") or [None, None]
    errors = f"; {rate['errors']} could not be evaluated (counted as not passing)" if rate["errors"] else ""
    return (f"pass rate {fmt(rate['pass_rate'])} [{fmt(ci[0])}, {fmt(ci[1])}] "
            f"({rate['passed']} of {rate['n']} traces over {rate['inputs']} inputs passed{errors})")
