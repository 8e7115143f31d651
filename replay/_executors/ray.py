"""The Ray executor: Ray actors on a local instance or a cluster."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from traceback import format_exception
from typing import Any

from quiver._errors import QuiverError
from quiver._trace import Redactor, output_redactor
from quiver.replay._llm import RateLimits, origin_of

from ._ray_cluster import ClusterLost, HeadWatch, connect, shipped_context, shipped_folder
from .base import DoneFn, Executor, ReplayContext, ReplayJob, StopFn, executor, run_jobs
from .pacing import Coordination, coordinate, start_coordinator, use_coordinator

__all__ = ["RayExecutor", "ClusterLost"]

log = logging.getLogger("quiver.executor")

_TRIES = 3
"""Times a job is handed out again after the actor holding it died (a job that takes
down every actor it reaches is then reported failed: its replay is the cause)."""

_GONE_S = 60.0
"""How long jobs wait for an actor to come back once every actor is down."""


class _ReplayActor:
    """A Ray actor: one process of replays, ``threads`` calls at once (the actor's
    ``max_concurrency``), each call a batch of jobs replayed in turn. It imports what
    replays need when it starts, before the campaign hands it any job.

    Nothing leaves its process unredacted (:mod:`._redirect`): from its start, what it
    prints and logs (and what native code writes to its standard output and error) goes
    through the redactor it was made with, the one the driver had then (the built-in
    rules and the run's secrets); a call adds its context's redactor before its first
    job; the errors a call returns or raises are redacted by that redactor.

    Args:
        redaction: The driver's redactor (:meth:`~quiver.Redactor.to_json`).
    """

    def __init__(self, redaction: dict[str, Any] | None = None) -> None:
        from ._redirect import redact_worker_output

        redact_worker_output(redaction)
        import quiver.perturbations
        import quiver.replay._replayer  # noqa: F401  (the replayer, the LLM client and the SDK)

        self._redactors: dict[str, Redactor] = {}

    def warm(self, fn: Any) -> None:
        """Call ``fn`` (load what replays will need) before any job comes."""
        try:
            fn()
        except Exception:  # what cannot load says so when a replay needs it
            log.debug("warming a Ray actor failed", exc_info=True)

    def node(self) -> str:
        """The Ray node this actor runs on (answering also says the actor is up)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def reach(self, base_url: str) -> tuple[str, str | None]:
        """This node and, when the LLM endpoint cannot be reached from here, why."""
        import httpx

        try:
            httpx.get(base_url.rstrip("/") + "/models", timeout=5.0)
        except httpx.HTTPError as exc:  # any HTTP answer counts: only a failed connection does not
            return self.node(), f"{type(exc).__name__}: {exc}"
        return self.node(), None

    def replay(self, context: ReplayContext, jobs: list[ReplayJob], pace: Coordination | None = None) -> dict[str, Any]:
        """Replay ``jobs`` in turn, their LLM requests paced at the run's coordinator
        (``pace``, when the run paces); report which node ran them and how long it took."""
        if pace is not None:
            use_coordinator(pace)
        redactor = self._redactor(context)
        start = time.perf_counter()
        try:
            results = run_jobs(context, jobs)
        except Exception as exc:  # what reaches the driver (and Ray's logs) holds no secret
            raise QuiverError(
                redactor.text(f"replays failed in a Ray worker: {''.join(format_exception(exc))}")
            ) from None
        return {
            "node": self.node(),
            "results": [(job_id, redactor.data(r) if "error" in r else r) for job_id, r in results],
            "seconds": time.perf_counter() - start,
        }

    def _redactor(self, context: ReplayContext) -> Redactor:
        """The context's redactor, its secrets added to what this process's output is
        redacted with (once per redaction)."""
        from ._redirect import redact_worker_output

        key = json.dumps(context.redaction, sort_keys=True)
        found = self._redactors.get(key)
        if found is None:
            found = self._redactors[key] = redact_worker_output(context.redaction)
        return found


@executor("ray")
class RayExecutor(Executor):
    """Ray actors on a local instance or a cluster, each running ``threads`` replays at once.

    How many replays run at once: an actor reserves ``task_cpus`` of a node's CPUs for
    its life, so the cluster holds ``CPUs / task_cpus`` actors, spread over the nodes,
    each replaying ``threads`` batches at once: with the defaults, one actor per CPU and
    16 replays per CPU. The driver keeps every actor fed with twice ``threads`` batches
    (at most ``max_in_flight`` in all): when one of its replays ends, an actor starts the
    next batch already waiting in its queue, so no slot idles until the jobs run out,
    and jobs finish about in job order.

    How large a batch is (``batch_size``, default sized from the replays' own time): one
    job at first; from then on what one thread replays in about ``task_seconds``, at the
    mean replay time measured so far, so the driver's cost per call stays small next to
    the work it carries; near the end of the jobs, batches shrink so that what is left
    spreads over every slot.

    **Faults.** An actor whose process or node dies takes no more batches; those it held
    go to the other actors (a job is handed out at most :data:`_TRIES` more times: one
    that takes down every actor it reaches is then reported failed, its replay being the
    cause). Ray restarts a dead actor where there is room (``max_retries`` times); it
    takes batches again once it answers. Nothing is counted failed because a node died.
    When no actor is left for :data:`_GONE_S`, or the cluster's head stops answering
    (:class:`~._ray_cluster.HeadWatch`), the run stops with
    :class:`~._ray_cluster.ClusterLost`; the campaign keeps what was committed and says
    how to resume.

    **A cluster.** With ``address``, the driver connects to a running cluster; the
    workers get the pipeline's folder through Ray's runtime environment
    (``runtime_env``: ``working_dir``, ``py_modules``; a campaign ships its spec's
    folder by default), and read every path of the replay context relative to it. Under
    ``ray job submit --working-dir DIR`` the job's own environment is used. Before the
    first replay, every actor checks that it reaches the LLM endpoint. The actors write
    nothing to the driver's output folder: the response cache of a ``cached`` run is on
    each node's own disk.

    The actors live from :meth:`start` (or the first :meth:`run`) to :meth:`close`, so
    the rounds of an adaptive ladder, one :meth:`run` each, share them; a :meth:`run`
    that fails stops them. Their LLM requests are paced to the endpoint's rate limits
    from one schedule, held by a coordinator actor started with them (:mod:`.pacing`).

    Args:
        address: A cluster to connect to (``ray://...`` or ``host:port``); None joins the
            Ray job's cluster when this process is one's driver, else starts a local
            instance.
        num_cpus: CPUs of a local instance (default: the machine's).
        batch_size: Jobs per call; None sizes batches from the measured replay time.
        max_in_flight: Batches submitted and not yet returned, in all (default: twice
            the replays that can run at once).
        max_retries: Restarts of an actor whose process died.
        task_cpus: CPUs an actor reserves.
        threads: Replays run at once by one actor.
        task_seconds: The time a sized batch aims at.
        runtime_env: Ray's runtime environment for the workers (with ``address``).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        batch_size: int | None = None,
        max_in_flight: int | None = None,
        max_retries: int = 3,
        task_cpus: float = 1.0,
        threads: int = 16,
        task_seconds: float = 2.0,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("max_in_flight", max_in_flight, 1),
            ("threads", threads, 1),
            ("max_retries", max_retries, 0),
        ):
            if value is not None and value < low:
                raise QuiverError(f"executor {name} must be at least {low}; got {value}")
        if task_cpus <= 0 or task_seconds <= 0:
            raise QuiverError(f"executor task_cpus and task_seconds must be positive; got {task_cpus}, {task_seconds}")
        self.address = address
        self.num_cpus = num_cpus
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.task_cpus = task_cpus
        self.threads = threads
        self.task_seconds = task_seconds
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.nodes: set[str] = set()
        self.batches: list[int] = []
        """The size of every batch submitted in the last run, in order."""
        self.actors = 0
        """Actors of the last run."""
        self.warmup_s = 0.0
        """Seconds from the start of the last run until every actor had returned a batch."""
        self.lost: Counter[str] = Counter()
        """Actors found down in the last run, by why (one count per actor and time)."""
        self._handles: list[Any] = []
        self._coordinator: Any = None
        self._ray: Any = None
        self._watch: HeadWatch | None = None
        self.warm: Any = None
        """Called in each actor once it has started (see :attr:`LocalExecutor.warm`)."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RayExecutor:
        """``address``, ``batch_size``, ``max_in_flight``, ``max_retries``, ``threads``,
        ``task_cpus``, ``task_seconds`` and ``runtime_env`` of the spec's ``executor:``
        block (defaults as for the constructor)."""
        names = ("batch_size", "max_in_flight", "max_retries", "threads", "task_cpus", "task_seconds",
                 "runtime_env")
        kwargs = {k: settings[k] for k in names if settings.get(k) is not None}
        return cls(address=settings.get("address"), **kwargs)

    def nodes_used(self) -> int:
        """The Ray nodes that ran replays in the last run."""
        return len(self.nodes)

    def concurrency(self) -> int:
        """Replays at once in the last run: actors x ``threads``."""
        return self.actors * self.threads

    def start(self) -> None:
        """Connect and start the actors, which import what replays need meanwhile."""
        if self._handles:
            return
        ray = self._ray = connect(self.address, self.num_cpus, self.runtime_env)
        self._watch = HeadWatch(ray, self.address)
        cpus = float(ray.cluster_resources().get("CPU", 1))
        n = max(1, int(cpus / self.task_cpus + 1e-9))
        if self.max_in_flight is not None:
            n = min(n, max(1, math.ceil(self.max_in_flight / (2 * self.threads))))
        cls = ray.remote(_ReplayActor).options(
            num_cpus=self.task_cpus,
            max_concurrency=self.threads,
            max_restarts=self.max_retries,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        )
        redaction = output_redactor().to_json()  # the built-in rules and the secrets the run's redactors hold
        self._handles = [cls.remote(redaction) for _ in range(n)]
        if self.warm is not None:
            for actor in self._handles:
                actor.warm.remote(self.warm)
        self._coordinator = start_coordinator(ray)

    def close(self) -> None:
        """Stop the actors (nothing to stop once the head is gone)."""
        handles, self._handles = self._handles, []
        if self._coordinator is not None:
            handles.append(self._coordinator)
            self._coordinator = None
        if handles and not (self._watch is not None and self._watch.lost):
            import ray

            for actor in handles:
                try:
                    ray.kill(actor)
                except Exception:  # already gone with its node
                    log.debug("a Ray actor could not be stopped", exc_info=True)

    def worker_context(self, context: ReplayContext) -> ReplayContext:
        """``context`` as the actors read it (:func:`~._ray_cluster.shipped_context`)."""
        ray = self._ray
        remote = bool(self.address or _job_driver())
        return shipped_context(context, shipped_folder(ray, self.runtime_env) if remote else None, remote)

    def run(self, context: ReplayContext, jobs: Sequence[ReplayJob], on_done: DoneFn, should_stop: StopFn) -> None:
        self.start()
        ray = self._ray
        self.actors, self.batches, self.lost = len(self._handles), [], Counter()
        context = self.worker_context(context)
        try:
            self._check_endpoint(ray, context)
            _Run(self, ray, context, jobs, on_done, should_stop).go()
        except BaseException:
            self.close()  # batches may be in flight: stop them
            raise

    def _check_endpoint(self, ray: Any, context: ReplayContext) -> None:
        """Every actor reaches the LLM endpoint, or the run stops before any replay,
        naming the node that does not."""
        base_url = context.llm.get("base_url")
        if not base_url or not (self.address or _job_driver()):
            return
        refs = [actor.reach.remote(str(base_url)) for actor in self._handles]
        for ref in refs:
            try:
                node, error = ray.get(ref, timeout=120)
            except Exception:  # an actor not up: the run deals with it
                continue
            if error is not None:
                raise QuiverError(f"the LLM endpoint {base_url} cannot be reached from Ray node {node} ({error}): "
                                  "serve it at an address every node of the cluster reaches")

    def _coordinate(self, ray: Any, context: ReplayContext) -> Coordination | None:
        """The run's pacing at the coordinator (:mod:`.pacing`), unless the run does not pace."""
        limits = RateLimits.model_validate(context.llm.get("limits") or {})
        base_url = context.llm.get("base_url")
        if not limits.pace or not base_url:
            return None
        if self._coordinator is None:
            self._coordinator = start_coordinator(ray)
        return coordinate(self._coordinator, origin_of(str(base_url)), limits)


def _job_driver() -> bool:
    """Whether this process is the driver of a Ray job (``ray job submit``)."""
    import os

    return bool(os.environ.get("RAY_ADDRESS"))


@dataclass
class _Batch:
    actor: int
    jobs: list[ReplayJob]


class _Run:
    """One :meth:`RayExecutor.run`: batches handed to the live actors, results handed on,
    the batches of an actor that died handed to the others."""

    def __init__(self, owner: RayExecutor, ray: Any, context: ReplayContext, jobs: Sequence[ReplayJob],
                 on_done: DoneFn, should_stop: StopFn) -> None:
        self.owner, self.ray, self.on_done, self.should_stop = owner, ray, on_done, should_stop
        self.actors = owner._handles
        n = len(self.actors)
        self.queue_per_actor = 2 * owner.threads
        self.limit = owner.max_in_flight or n * self.queue_per_actor
        self.context_ref = ray.put(context)
        self.pace = owner._coordinate(ray, context)
        self.sizer = _BatchSizer(owner.batch_size, owner.task_seconds, n * owner.threads)
        self.todo = deque(jobs)
        self.outstanding = [0] * n
        self.live = set(range(n))
        self.pending: dict[Any, _Batch] = {}
        self.probes: dict[Any, int] = {}
        """Asked whether a down actor is back: its ``node()`` call -> the actor."""
        self.ask_again: dict[int, float] = {}
        self.tries: Counter[str] = Counter()
        self.started = time.perf_counter()
        self.warm: set[int] = set()
        self.gone_since: float | None = None

    def go(self) -> None:
        self.fill()
        while self.pending or (self.todo and not self.should_stop()):
            refs = [*self.pending, *self.probes]
            if not refs and not self.ask_again:
                raise ClusterLost("every Ray actor of the run is gone (their nodes died or were removed)")
            ready: list[Any] = []
            if refs:
                ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0.02)
                if not ready:
                    ready, _ = self.ray.wait(refs, num_returns=1, timeout=0.5)
            else:
                time.sleep(0.2)  # only actors to ask again, in a moment
            if self.owner._watch is not None:
                self.owner._watch.check()
            for ref in ready:
                if ref in self.probes:
                    self.probed(ref)
                else:
                    self.returned(ref, self.pending.pop(ref))
            self.reprobe()
            self.fill()
            self.check_gone()

    def fill(self) -> None:
        """Round after round over the live actors, each topped up to its queue."""
        while self.todo and self.live and len(self.pending) < self.limit and not self.should_stop():
            i = min(self.live, key=lambda k: self.outstanding[k])
            if self.outstanding[i] >= self.queue_per_actor:
                return
            size = min(self.sizer.next(len(self.todo)), len(self.todo))
            batch = [self.todo.popleft() for _ in range(size)]
            self.owner.batches.append(len(batch))
            self.submit(i, batch)

    def submit(self, i: int, jobs: list[ReplayJob]) -> None:
        ref = self.actors[i].replay.remote(self.context_ref, jobs, self.pace)
        self.pending[ref] = _Batch(i, jobs)
        self.outstanding[i] += 1

    def returned(self, ref: Any, batch: _Batch) -> None:
        i = batch.actor
        self.outstanding[i] -= 1
        try:
            out = self.ray.get(ref)
        except Exception as exc:
            self.failed(batch, exc)
            return
        self.owner.nodes.add(out["node"])
        if len(self.warm) < len(self.actors):
            self.warm.add(i)
            self.owner.warmup_s = time.perf_counter() - self.started
        self.sizer.measured(len(batch.jobs), float(out.get("seconds") or 0.0))
        for job_id, result in out["results"]:
            self.on_done(job_id, result)

    def failed(self, batch: _Batch, exc: Exception) -> None:
        """A batch that did not come back: its actor died (the jobs go to the others), or
        its replays raised in the actor (run once more, then reported failed)."""
        from ray.exceptions import RayActorError, RayTaskError

        died = isinstance(exc, RayActorError) or not isinstance(exc, RayTaskError)
        if died:
            self.down(batch.actor, exc)
        again = []
        for job in batch.jobs:
            self.tries[job.job_id] += 1
            if self.tries[job.job_id] > (_TRIES if died else 1):
                why = "the Ray actors running it died" if died else "its replay raised in a Ray worker"
                self.on_done(job.job_id, {"error": f"worker failed: {why} {self.tries[job.job_id]} times: "
                                                   f"{type(exc).__name__}: {_first_line(exc)}"})
            else:
                again.append(job)
        self.todo.extendleft(reversed(again))  # first in line: the earliest jobs stay the earliest done

    def down(self, i: int, exc: Exception) -> None:
        """Actor ``i`` takes no more batches until it answers again."""
        if i in self.live:
            self.live.discard(i)
            self.owner.lost[type(exc).__name__] += 1
            watch = self.owner._watch
            if watch is not None and not watch.head_up():  # the head's loss is what will be said, once
                log.debug("Ray actor %d stopped with the head unreachable: %s", i, exc)
                return
            log.warning("Ray actor %d stopped (%s: %s); its batches go to the %d other actor(s)", i,
                        type(exc).__name__, _first_line(exc), len(self.live))
        if i not in self.probes.values():
            self.probes[self.actors[i].node.remote()] = i

    def probed(self, ref: Any) -> None:
        """An actor that was down answered: it takes batches again (or it is gone for good,
        or not back yet: asked again in a second)."""
        from ray.exceptions import ActorDiedError

        i = self.probes.pop(ref)
        try:
            self.ray.get(ref)
        except ActorDiedError:  # Ray will not start it again
            return
        except Exception:
            self.ask_again[i] = time.monotonic() + 1.0
            return
        self.live.add(i)
        log.info("Ray actor %d is back", i)

    def reprobe(self) -> None:
        now = time.monotonic()
        for i, when in list(self.ask_again.items()):
            if when <= now:
                del self.ask_again[i]
                self.probes[self.actors[i].node.remote()] = i

    def check_gone(self) -> None:
        if self.live or not self.todo or self.should_stop():
            self.gone_since = None
            return
        now = time.monotonic()
        self.gone_since = self.gone_since or now
        if now - self.gone_since > _GONE_S:
            raise ClusterLost(f"every Ray actor of the run has been down for {_GONE_S:.0f} s "
                              f"({', '.join(f'{n} {why}' for why, n in self.owner.lost.items())})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


class _BatchSizer:
    """Batch sizes from the measured replay time (see :class:`RayExecutor`)."""

    MAX = 256

    def __init__(self, fixed: int | None, seconds: float, slots: int) -> None:
        self.fixed, self.seconds, self.slots = fixed, seconds, slots
        self.busy = 0.0
        self.replays = 0

    def measured(self, jobs: int, seconds: float) -> None:
        """A batch of ``jobs`` replays, run one after the other, took ``seconds``."""
        self.busy += seconds
        self.replays += jobs

    def next(self, left: int) -> int:
        """The size of the next batch, ``left`` jobs not yet submitted."""
        if self.fixed is not None:
            return self.fixed
        if not self.replays:
            return 1
        per_replay = max(self.busy / self.replays, 1e-6)
        size = math.ceil(self.seconds / per_replay)
        spread = math.ceil(left / self.slots)  # near the end: what is left over every slot
        return max(1, min(size, spread, self.MAX))

