"""A replay finished where it ran: redacted, stored as a difference from its baseline,
compressed and paired, so that the driver only checks and commits it.

An executor's worker calls the campaign's :class:`Finisher` (the replay context's
``finish``) on every replay it ran; what it hands back is a :class:`dict` with
:data:`PACKAGE` set:

* ``row``: the ledger row's JSON text (the replay's result without its trace, redacted:
  the target report, LLM calls, retries, the baseline's digest and the trace's status;
  compressed where that pays, :func:`~.stored.pack_text`) and its CRC-32;
* ``line``: the replay's line of ``replays.jsonl`` (its difference from its baseline,
  :func:`~.stored.delta_line`), None for a failed replay;
* ``pair``: its row of ``pairs.jsonl`` (JSON, keys sorted);
* ``facts``: what the driver counts (status, LLM calls and tokens, retries, why it
  failed or did not land, requests the contract did not account for) and, rarely,
  ``ran``/``edges``: nodes the campaign's graph does not have yet.

The pair is formed from the replay alone against the campaign's graph as it was when
the replays started (the baseline's, and the declared nodes), with the text vectors of
:class:`~quiver._distance.OneTextEmbedder` (each text encoded alone, on one thread): a
pure function of the replay, so the numbers do not depend on where, in which order or
beside which other replays it ran. Each worker process keeps its own model, vectors
and baselines (:func:`_state`); the vectors are cached on its machine's disk.

A replay cut short by an unreachable endpoint is handed back as it is (the driver holds
it back and stops).
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quiver._distance import EmbeddingStore, OneTextEmbedder, default_cache_dir, make_embedder
from quiver._errors import QuiverError
from quiver._graph import PipelineGraph
from quiver._interventional import CampaignGraph, PairRow, pair_results
from quiver._trace import Redactor, Trace
from quiver.replay import ReplayJob, ReplayResult
from quiver.replay._capture import merge_unaccounted

from .ledger import replay_failed
from .stored import Baselines, delta_line, pack_text, packed

__all__ = ["Finisher", "PACKAGE", "is_package", "warm_embedder"]

PACKAGE = "finished"
"""The key that marks a finished replay (its value: the package's version)."""

_ENDPOINT_DOWN = "endpoint_down"  # as the executors mark a replay the endpoint cut short


def warm_embedder(name: str | None) -> None:
    """Load the text embedding model a campaign's workers pair with (in a worker
    process, while the driver analyses the baseline)."""
    OneTextEmbedder(make_embedder(name)).encode(["warm"])


def is_package(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is a finished replay (else a replay's raw result)."""
    return data.get(PACKAGE) == 1


@dataclass(frozen=True)
class Finisher:
    """What a worker needs to finish a campaign's replays (plain data: it pickles).

    Attributes:
        redaction: The run's redactor (:meth:`~quiver.Redactor.to_json`).
        graph: The campaign's graph when its replays started, as JSON.
        declared: The declared graph, uncut, as JSON.
        epsilon: The distance below which a node counts as unchanged.
        embedder: The text embedder's name (None: the default model).
        cache_dir: The embedding cache folder (None: the default, on each machine).
        baseline_file: The baseline file, relative to the output folder.
        baseline_path: The baseline file in full.
    """

    redaction: dict[str, Any] | None
    graph: dict[str, Any]
    declared: dict[str, Any]
    epsilon: float
    embedder: str | None
    cache_dir: str | None
    baseline_file: str
    baseline_path: str

    def __call__(self, job: ReplayJob, data: dict[str, Any]) -> dict[str, Any]:
        """The package of ``job``'s replay result ``data`` (see the module docstring)."""
        if _ENDPOINT_DOWN in data or is_package(data):
            return data
        return _state(self).finish(job, data)

    def key(self) -> str:
        return json.dumps([self.redaction, self.graph, self.declared, self.epsilon, self.embedder, self.cache_dir,
                           self.baseline_file, self.baseline_path], sort_keys=True, default=str)


_states: dict[str, _State] = {}
_states_lock = threading.Lock()


def _state(finisher: Finisher) -> _State:
    """The process's state for ``finisher`` (made once; a process finishes one campaign
    at a time, so only the last is kept)."""
    key = finisher.key()
    with _states_lock:
        found = _states.get(key)
        if found is None:
            for old in _states.values():
                old.close()
            _states.clear()
            found = _states[key] = _State(finisher)
    return found


class _State:
    """A finisher's redactor, graph, baselines and embedding store, in one process."""

    def __init__(self, finisher: Finisher) -> None:
        self.finisher = finisher
        self.redactor = Redactor.from_json(finisher.redaction) if finisher.redaction is not None else Redactor()
        self.graph = PipelineGraph.model_validate(finisher.graph)
        self.declared = PipelineGraph.model_validate(finisher.declared)
        self.baselines = Baselines()
        self._traces: dict[str, Trace] = {}
        self._lock = threading.Lock()
        self._store: EmbeddingStore | None = None
        self._store_lock = threading.Lock()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def store(self) -> EmbeddingStore:
        with self._store_lock:
            if self._store is None:
                embedder = OneTextEmbedder(make_embedder(self.finisher.embedder))
                folder = Path(self.finisher.cache_dir) if self.finisher.cache_dir else default_cache_dir()
                try:
                    self._store = EmbeddingStore(embedder, folder)
                except (OSError, QuiverError):  # a folder this machine cannot use: vectors in memory
                    self._store = EmbeddingStore(embedder, None)
            return self._store

    def baseline(self, job: ReplayJob) -> Trace:
        trace_id = str(job.trace["trace_id"])
        with self._lock:
            found = self._traces.get(trace_id)
            if found is None:
                if len(self._traces) >= 4096:
                    self._traces.clear()
                found = self._traces[trace_id] = Trace.model_validate(job.trace)
                self.baselines.add(trace_id, job.trace)
        return found

    def finish(self, job: ReplayJob, data: dict[str, Any]) -> dict[str, Any]:
        from .results import replay_failure

        redacted, _ = self.redactor.encode(data)
        base = self.baseline(job)
        failed = replay_failed(redacted)
        facts: dict[str, Any] = {"status": "failed" if "error" in redacted else
                                 "diverged" if redacted.get("divergences") else "ok"}
        failure = replay_failure(redacted)
        if failure is not None:
            facts["failure"] = failure
        if "error" in redacted:
            return _package(redacted, None, self._failed_pair(job, base, str(redacted["error"])), facts, failed)
        facts.update(calls=sum((redacted.get("llm_calls") or {}).values()), tokens=int(redacted.get("llm_tokens") or 0),
                     retries=redacted.get("retries") or {})
        stored = packed(redacted, job.trace, self.baselines)
        small = {k: v for k, v in stored.items() if k != "trace_delta"}
        line = delta_line(str(redacted["trace"]["trace_id"]), stored["trace_delta"], base, self.baselines,
                          Path(self.finisher.baseline_path), None, relative=self.finisher.baseline_file)
        replay = ReplayResult.from_json(redacted, base)
        pair = self._pair(job, replay, facts)
        return _package(small, line, pair, facts, failed)

    def _pair(self, job: ReplayJob, replay: ReplayResult, facts: dict[str, Any]) -> str:
        graph = CampaignGraph(self.graph, self.declared)
        full = graph.take_in([replay])
        if graph.reached:  # rare: nodes the campaign's graph takes in, in job order, on the driver
            ran, edges = CampaignGraph.parts([replay])
            facts.update(ran=ran, edges=edges)
        (pair,) = pair_results([replay], full, epsilon=self.finisher.epsilon, store=self.store())
        row = PairRow.from_json({**pair.to_json(traces=False), **_common(job), "retries": replay.retries})
        target = replay.target
        if target is not None and target.landed is False:
            facts["not_landed"] = target.not_landed or "no reason recorded"
        wire = merge_unaccounted([replay.wire])
        if wire:
            facts["unaccounted"] = [[node, endpoint, n] for (node, endpoint), n in sorted(wire.items())]
        return json.dumps(row.to_json(), sort_keys=True)

    @staticmethod
    def _failed_pair(job: ReplayJob, base: Trace, error: str) -> str:
        row = PairRow.from_json({**_common(job), "trace_id": base.trace_id, "input_id": base.input_id,
                                 "repeat": job.repeat, "status": "failed", "node": job.node, "op": job.op,
                                 "params": job.params, "error": error})
        return json.dumps(row.to_json(), sort_keys=True)


def _common(job: ReplayJob) -> dict[str, Any]:
    parts = job.job_id.split("/")
    return {"job_id": job.job_id, "perturbation_id": parts[0], "replay_id": job.perturbation_id,
            "step": int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0}


def _package(row: dict[str, Any], line: str | None, pair: str, facts: dict[str, Any], failed: bool) -> dict[str, Any]:
    stored = pack_text(json.dumps(row, sort_keys=True))
    raw = stored if isinstance(stored, bytes) else stored.encode("utf-8")
    return {PACKAGE: 1, "row": stored, "crc": zlib.crc32(raw), "failed": failed, "line": line, "pair": pair,
            "facts": facts}
