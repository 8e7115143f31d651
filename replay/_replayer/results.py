"""What a replay is asked for and what it gives back: the replay mode, the target, the
result (see :mod:`quiver.replay._replayer`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from quiver._errors import QuiverError
from quiver._trace import Divergence, TargetReport, Trace

__all__ = ["DIMENSIONS", "Dimension", "ReplayMode", "Target", "ReplayResult", "ReplayError"]

Dimension = Literal["model", "prompt", "retrieval", "tools"]
DIMENSIONS: tuple[Dimension, ...] = ("model", "prompt", "retrieval", "tools")
"""The dimensions of the replay contract that a replay holds frozen (QUIVER.md §12)."""

_KIND_DIMENSIONS: dict[str, tuple[Dimension, ...]] = {
    "llm": ("model", "prompt"), "retrieval": ("retrieval",), "tool": ("tools",),
}


class ReplayError(QuiverError):
    """A replay cannot be set up: no such target in the trace, a bad template variant."""


class ReplayMode(BaseModel):
    """What a replay holds frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    frozen: tuple[Dimension, ...] = Field(default=DIMENSIONS)
    """Dimensions served from the recording while a call's inputs hash to the recorded
    ones: model, prompt, retrieval, tools (default: all four)."""
    live_nodes: tuple[str, ...] = ()
    """Nodes that always run live, whatever the dimensions."""
    frozen_nodes: tuple[str, ...] = ()
    """Nodes served from the recording before the target whatever the dimensions (a
    node of any kind, a transform included), while their inputs match."""
    downstream: Literal["live", "cached"] = "live"
    """Calls at and after the target: ``live`` asks the endpoint every time; ``cached``
    answers a call from the client's response cache when the same request with the same
    sample key was answered before (a resumed or repeated campaign pays nothing twice)."""
    resample: bool = False
    """LLM calls are sent to the endpoint again, with the replay's sample key, instead of
    served, and the frozen dimensions are taken from the recording: with model and prompt
    frozen the request is the recorded one (assembled messages, model name and
    parameters), so only the model's sampling is live; with the prompt live, today's
    rendered prompt with the recorded model; with the model live, the recorded messages
    with today's model name and parameters. A call whose inputs differ from the recorded
    ones renders today's prompt (the recorded one does not fit it), with the recorded
    model while the model is frozen. Without it a frozen model serves the recorded
    response and a live model sends today's request, prompt included."""

    @property
    def all_frozen(self) -> bool:
        """Every dimension frozen, no node live and nothing resampled."""
        return set(self.frozen) == set(DIMENSIONS) and not self.live_nodes and not self.resample

    def unfreeze(self, *dims: Dimension) -> ReplayMode:
        """The same mode with ``dims`` live."""
        return self.model_copy(update={"frozen": tuple(d for d in self.frozen if d not in dims)})


@dataclass(frozen=True)
class Target:
    """The call a replay perturbs: the ``occurrence``-th call of ``node``."""

    node: str
    occurrence: int = 0


@dataclass
class ReplayResult:
    """One replayed trace next to its recording."""

    baseline: Trace
    trace: Trace
    perturbation_id: str
    repeat: int
    divergences: list[Divergence]
    target: TargetReport | None
    llm_calls: dict[str, int]
    """LLM requests the endpoint answered during the replay, by node."""
    served_calls: int
    """Calls served from the recording (their bodies did not run), the calls nested under
    a served call included."""
    seconds: float
    llm_tokens: int = 0
    """Tokens of the LLM requests the endpoint answered."""
    retries: dict[str, int] = field(default_factory=dict)
    """LLM attempts retried during the replay, by reason (rate_limited, server_error, ...)."""
    wire: dict[str, Any] = field(default_factory=dict)
    """Every HTTP request the replay sent, as the transport counted it
    (:meth:`~quiver.replay._instrument.Wire.to_json`: LLM and other requests by node,
    those unanswered, and those the replay contract did not account for)."""
    judge_calls: int = 0
    """LLM requests the outcome checks' judges sent for this replay (apart from the
    pipeline's ``llm_calls``), as the wire counted them."""

    @property
    def reproduced(self) -> bool:
        """No replay divergence."""
        return not self.divergences

    @property
    def first_divergence(self) -> Divergence | None:
        """The first divergent call in program order."""
        return self.divergences[0] if self.divergences else None

    @property
    def total_llm_calls(self) -> int:
        return sum(self.llm_calls.values())

    def to_json(self) -> dict[str, Any]:
        """Everything but the baseline (which the receiver has), as JSON."""
        return {
            "trace": self.trace.model_dump(mode="json"), "perturbation_id": self.perturbation_id,
            "repeat": self.repeat, "divergences": [d.to_json() for d in self.divergences],
            "target": self.target.to_json() if self.target is not None else None,
            "llm_calls": self.llm_calls, "served_calls": self.served_calls, "seconds": self.seconds,
            "llm_tokens": self.llm_tokens, "retries": self.retries,
            **({"wire": self.wire} if self.wire else {}),
            **({"judge_calls": self.judge_calls} if self.judge_calls else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], baseline: Trace) -> ReplayResult:
        """The inverse of :meth:`to_json`, given the baseline."""
        target = data.get("target")
        return cls(
            baseline=baseline, trace=Trace.model_validate(data["trace"]), perturbation_id=data["perturbation_id"],
            repeat=data["repeat"], divergences=[Divergence.from_json(d) for d in data["divergences"]],
            target=TargetReport(**{k: v for k, v in target.items()}) if target else None,
            llm_calls=dict(data["llm_calls"]), served_calls=data["served_calls"], seconds=data["seconds"],
            llm_tokens=data.get("llm_tokens", 0), retries=dict(data.get("retries", {})),
            wire=dict(data.get("wire") or {}), judge_calls=int(data.get("judge_calls", 0)),
        )
