"""The sequential search of one failure's decisive step: which replays each round adds.

Round 1 gives every tested step ``n_min`` replays per arm (intervention and control).
Each later round adds one replay per arm to every step still undecided that comes before
the earliest decisive step found so far (every undecided step, with ``full_ranking``),
within the failure's replay budget; a step is decided (decisive or ruled out) by
:func:`quiver._localize.step_stats`. The search stops when no step is left to add to:
the earliest decisive step is known with every earlier step ruled out, every step is
ruled out, or the budget is spent.

Everything here is a pure function of the replays' results so far, so a resumed run
(or the same run on Ray) asks for the same replays in the same rounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quiver._localize import Arm, LocalizeSettings, StepStats, step_stats, verdict

from .steps import Step

__all__ = ["ARMS", "Failure", "job_key"]

ARMS = ("intervention", "control")


def job_key(trace_id: str, step: Step, arm: str, repeat: int) -> str:
    """The id of one replay of a failure's step."""
    return f"{trace_id}/{step.index}:{step.label}/{arm}/{repeat}"


@dataclass
class Failure:
    """One failing run under search: its steps and the replays asked and answered.

    Attributes:
        trace_id: The failing trace.
        steps: Its steps (tested or not).
        asked: Replays asked per (step index, arm).
        results: Job id -> passed (True/False), or None for a replay that failed or whose
            outcome could not be evaluated (it counts toward the budget, not toward n).
    """

    trace_id: str
    steps: list[Step]
    asked: dict[tuple[int, str], int] = field(default_factory=dict)
    results: dict[str, bool | None] = field(default_factory=dict)

    @property
    def tested(self) -> list[Step]:
        return [s for s in self.steps if s.tested]

    @property
    def spent(self) -> int:
        return sum(self.asked.values())

    def arm(self, step: Step, arm: str) -> Arm:
        """What the replays of one arm of a step gave so far."""
        asked = self.asked.get((step.index, arm), 0)
        got = [self.results.get(job_key(self.trace_id, step, arm, r)) for r in range(asked)]
        seen = [g for g in got if g is not None]
        return Arm(len(seen), sum(seen))

    def stats(self, settings: LocalizeSettings) -> dict[int, StepStats]:
        """Each tested step's effect and state so far."""
        k = len(self.tested)
        return {s.index: step_stats(self.arm(s, "intervention"), self.arm(s, "control"), k, settings)
                for s in self.tested}

    def next_round(self, settings: LocalizeSettings, *, full_ranking: bool = False) -> list[tuple[Step, str, int]]:
        """The replays the next round adds: ``(step, arm, repeat)``; empty when the search
        is over. Asked replays are remembered."""
        tested = self.tested
        if not tested:
            return []
        if not self.asked:
            wanted = [(s, settings.n_min) for s in tested]
        else:
            stats = self.stats(settings)
            first = next((s.index for s in tested if stats[s.index].state == "decisive"), None)
            wanted = [(s, self.asked[(s.index, "intervention")] + 1) for s in tested
                      if stats[s.index].state == "undecided" and (full_ranking or first is None or s.index < first)
                      and self.asked[(s.index, "intervention")] < settings.n_max]
        out: list[tuple[Step, str, int]] = []
        left = settings.budget - self.spent
        for step, upto in wanted:  # the earliest steps first, within the budget
            have = self.asked.get((step.index, "intervention"), 0)
            need = 2 * (upto - have)
            if need > left:
                break
            left -= need
            for arm in ARMS:
                out += [(step, arm, r) for r in range(have, upto)]
                self.asked[(step.index, arm)] = upto
        return out

    def take(self, results: Mapping[str, bool | None]) -> None:
        """Record the replays' results (job id -> passed)."""
        self.results.update({k: v for k, v in results.items() if k.startswith(self.trace_id + "/")})

    def summary(self, settings: LocalizeSettings) -> dict[str, Any]:
        """The failure's verdict, its decisive step and every step's effect (JSON)."""
        stats = self.stats(settings)
        tested = self.tested
        said, index = verdict([stats[s.index].state for s in tested])
        decisive = tested[index] if index is not None else None
        steps = []
        for s in self.steps:
            row = s.to_json()
            if s.index in stats:
                row.update(stats[s.index].to_json())
            steps.append(row)
        ranked = sorted((s for s in tested if stats[s.index].effect is not None),
                        key=lambda s: (-(stats[s.index].effect or 0.0), s.index))
        return {
            "trace_id": self.trace_id, "verdict": said, "replays": self.spent,
            "decisive": None if decisive is None else {
                "node": decisive.node, "occurrence": decisive.occurrence, "step": decisive.index,
                "how": decisive.how, **{k: v for k, v in stats[decisive.index].to_json().items()
                                        if k in ("effect", "effect_ci", "p_value")}},
            "ranking": [{"node": s.node, "occurrence": s.occurrence, "step": s.index,
                         "effect": stats[s.index].to_json()["effect"]} for s in ranked],
            "steps": steps,
        }


def searching(failures: Sequence[Failure]) -> list[Failure]:
    """The failures whose search goes on."""
    return [f for f in failures if f.tested]
