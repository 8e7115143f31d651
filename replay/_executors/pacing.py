"""One schedule for a Ray run's LLM requests: a small coordinator actor.

Each Ray worker process would otherwise pace its own requests to the whole limit
(:mod:`quiver.replay._llm.pacing`). The :class:`RayExecutor` starts one coordinator per
run, holding the run's :class:`~quiver.replay._llm.pacing.Pacer`; every actor's requests
reserve their place there (one round trip each, made only once a limit is known) and
report their answers to it without waiting, so the limit is shared by all actors as it
is by the threads of the local executor.
"""

from __future__ import annotations

import uuid
from typing import Any

from quiver.replay._llm import Pacer, RateLimits, RemoteBackend, remote_owner, use_remote

__all__ = ["PaceCoordinator", "Coordination", "start_coordinator", "coordinate", "use_coordinator"]


class PaceCoordinator:
    """The Ray actor holding a run's schedules (:class:`~quiver.replay._llm.pacing.Pacer`)."""

    def __init__(self) -> None:
        self.pacer = Pacer()

    def configure(self, origin: str, limits: RateLimits | None) -> None:
        self.pacer.configure(origin, limits)

    def reserve(self, origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]:
        return self.pacer.reserve(origin, model, raw, max_tokens)

    def answered(self, origin: str, model: str, answer: dict[str, Any]) -> None:
        self.pacer.answered(origin, model, answer)

    def stats(self) -> dict[str, float]:
        return dict(self.pacer.stats)


class Coordination:
    """What a Ray actor needs to pace at a run's coordinator: its handle, a token naming
    it, and the run's endpoint and limits (an actor's client may predate the run)."""

    def __init__(self, handle: Any, origin: str, limits: RateLimits) -> None:
        self.handle, self.origin, self.limits = handle, origin, limits
        self.token = uuid.uuid4().hex


def start_coordinator(ray: Any) -> Any:
    """A coordinator actor (it reserves no CPU: it answers in microseconds); started with
    the replay actors, so that its process is up when the first request asks it."""
    return ray.remote(PaceCoordinator).options(num_cpus=0, max_concurrency=1).remote()


def coordinate(handle: Any, origin: str, limits: RateLimits) -> Coordination:
    """Pace requests to ``origin`` by ``limits`` at the coordinator ``handle``."""
    handle.configure.remote(origin, limits)
    return Coordination(handle, origin, limits)


def use_coordinator(found: Coordination) -> None:
    """Pace this process's requests at the run's coordinator (installed once per coordinator)."""
    if remote_owner() == found.token:
        return
    import ray

    handle = found.handle

    def reserve(origin: str, model: str, raw: float, max_tokens: int | None) -> tuple[float, float]:
        placed: tuple[float, float] = ray.get(handle.reserve.remote(origin, model, raw, max_tokens))
        return placed

    backend = RemoteBackend(
        reserve=reserve,
        report=lambda origin, model, answer: handle.answered.remote(origin, model, answer),
        configure=lambda origin, limits: handle.configure.remote(origin, limits),
    )
    backend.configure(found.origin, found.limits)
    use_remote(found.token, backend)
