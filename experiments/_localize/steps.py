"""The steps of a failing run that ``quiver localize`` tests, and how it intervenes at each.

A failing run's *steps* are its node calls in program order that enclose no other call
(the source call left out): the calls that produced something, not the blocks around
them. For each step:

* **transplant** when a passing run of the same input has the same step (same node and
  occurrence): its output, served in place of the failing run's (``replace``);
* else **resample** when the step is an LLM call: its call run again live with its
  recorded inputs (the target runs live, unchanged);
* else the step is not tested (a deterministic step with no passing run to take an
  output from: re-running it gives what it gave).

A step whose output equals that of every passing run of the input (and there is at
least one) is skipped: no passing run differs there, so nothing there can be what made
this run fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from quiver._canonical import canonical_json
from quiver._trace import NodeCall, Trace

__all__ = ["Step", "failure_steps"]

How = Literal["transplant", "resample", "untested", "skipped"]


@dataclass(frozen=True)
class Step:
    """One step of a failing run and how it is intervened on.

    Attributes:
        index: Its place among the run's steps (0-based).
        node: The call's node.
        occurrence: The call's occurrence.
        call_path: The call's path.
        kind: The call's kind.
        how: ``transplant``, ``resample``, ``untested`` or ``skipped``.
        value: For a transplant, the output served (from ``source``).
        source: For a transplant, the passing trace it is taken from.
        why: For a step not tested or skipped, why.
    """

    index: int
    node: str
    occurrence: int
    call_path: str
    kind: str
    how: How
    value: Any = None
    source: str | None = None
    why: str | None = None

    @property
    def tested(self) -> bool:
        return self.how in ("transplant", "resample")

    @property
    def label(self) -> str:
        return f"{self.node}#{self.occurrence}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "node": self.node, "occurrence": self.occurrence,
                               "call_path": self.call_path, "kind": self.kind, "how": self.how}
        if self.source is not None:
            out["source"] = self.source
        if self.why is not None:
            out["why"] = self.why
        return out


def _leaves(trace: Trace) -> list[NodeCall]:
    paths = [c.call_path for c in trace.calls]
    return [c for c in trace.calls if c.kind != "source" and not any(p.startswith(c.call_path + "/") for p in paths)]


def failure_steps(failing: Trace, passing: Sequence[Trace]) -> list[Step]:
    """The steps of ``failing`` and how each is intervened on, given the passing runs of
    its input (see the module docstring)."""
    found: list[Step] = []
    for i, call in enumerate(_leaves(failing)):
        same = [(t, c) for t in passing for c in t.calls if c.node == call.node and c.occurrence == call.occurrence]
        text = canonical_json(call.output)

        def step(how: How, value: Any = None, source: str | None = None, why: str | None = None,
                 index: int = i, call: NodeCall = call) -> Step:
            return Step(index, call.node, call.occurrence, call.call_path, call.kind, how, value, source, why)

        if passing and len(same) == len(passing) and all(canonical_json(c.output) == text for _, c in same):
            found.append(step("skipped", why="its output is that of every passing run of the input"))
            continue
        other = next(((t, c) for t, c in same if canonical_json(c.output) != text), None)
        if other is not None:
            found.append(step("transplant", value=other[1].output, source=other[0].trace_id))
        elif call.kind == "llm":
            found.append(step("resample"))
        else:
            why = "no passing run of the input has this step" if passing else "no passing run of the input"
            found.append(step("untested", why=f"{why}, and re-running a {call.kind} step gives what it gave"))
    return found
