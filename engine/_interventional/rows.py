"""One pair row of a campaign, as a typed object: :class:`PairRow`.

A campaign writes one row per replay to ``pairs.jsonl``: the pair result
(``PairResult.to_json(traces=False)``, QUIVER.md §6, §13) and the keys the campaign adds
(``job_id``, ``perturbation_id``, ``replay_id``, ``step``, ``retries``). A replay that
failed before it could be paired gives a row without the pair's metrics: its job
(``trace_id``, ``input_id``, ``repeat``), its target and operator (``node``, ``op``,
``params``) and the ``error``.

Choices made here:

* ``from_json`` accepts a row with keys left out (each takes the value a pair without
  that information has: no magnitude, no stratum, no divergence, no distances) but
  refuses a key whose value has the wrong type, naming the key.
* ``to_json`` writes the metrics only for a row that has them (``measured``), and each
  key a campaign adds, and ``error``, only when it is not None; so that
  ``PairRow.from_json(row).to_json() == row`` for every row of a ``pairs.jsonl`` and
  every ``PairResult.to_json(traces=False)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from .reader import CampaignFormatError, Reader

__all__ = ["PairRow", "PairStatus", "STATUSES"]

T = TypeVar("T")

PairStatus = Literal["ok", "diverged", "failed"]
"""``ok``; ``diverged``: the replay left the recording before the target; ``failed``."""
STATUSES: tuple[PairStatus, ...] = get_args(PairStatus)
"""Pair row statuses; only ``ok`` rows enter estimates."""

_METRICS = ("occurrence", "magnitude", "stratum", "noop_by_value", "D_iter", "D_shape", "D_output", "D_struct", "d",
            "fields", "counts", "decisions", "first_divergent_call", "replay_divergences", "llm_calls")
"""The keys of a pair's metrics, which a replay that failed before pairing has none of."""


@dataclass(frozen=True)
class PairRow:
    """One row of ``pairs.jsonl``: a recorded baseline next to its perturbed replay.

    Attributes:
        perturbation_id: The perturbation (or control) the row belongs to.
        status: ``ok``, ``diverged`` or ``failed``; only ``ok`` rows enter estimates.
        trace_id: The baseline trace.
        input_id: The baseline's input: the group the bootstrap resamples.
        repeat: The replay's repeat index.
        node: The target node.
        occurrence: The target call's occurrence.
        op: The operator (None: a replay without one, e.g. a live control).
        params: The operator's parameters.
        magnitude: d_i, the target call's own distance (None: not reached).
        stratum: ``effective``, ``noop`` or None (no operator).
        noop_by_value: For binary operators, whether the baseline already had the value.
        d_iter: D_iter of the pair (QUIVER.md §6).
        d_shape: D_shape > 0.
        d_output: D_output > 0.
        d_struct: D_struct > 0.
        d: Node distance per node (None: the node ran in neither trace).
        fields: Field distances per node.
        counts: Calls per node, ``[baseline, perturbed]``.
        decisions: ``baseline`` / ``perturbed``: ``node#occurrence`` -> decisions.
        first_divergent_call: Where the two traces first differ (None: nowhere).
        replay_divergences: Where the replay left the recording (JSON of each divergence).
        llm_calls: LLM calls of the replay per node.
        measured: Whether the row has the pair's metrics (False: the replay failed
            before it could be paired; the metrics above keep their defaults and
            ``to_json`` leaves them out).
        error: Why the replay failed (``type: message``), None otherwise.
        job_id: The campaign job (None outside a campaign).
        replay_id: The replay's id within the campaign (the perturbation, or its ladder step).
        step: The ladder step (None outside a campaign; estimates read it as 0).
        retries: LLM retries of the replay by reason (None when not recorded).
        outcome: The two runs' outcomes (None: neither carries one).
    """

    perturbation_id: str
    status: PairStatus
    trace_id: str | None = None
    input_id: str | None = None
    repeat: int = 0
    node: str | None = None
    occurrence: int | None = None
    op: str | None = None
    params: Any = None
    magnitude: float | None = None
    stratum: str | None = None
    noop_by_value: bool | None = None
    d_iter: int = 0
    d_shape: bool = False
    d_output: bool = False
    d_struct: bool = False
    d: Mapping[str, float | None] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)
    counts: Mapping[str, Any] = field(default_factory=dict)
    decisions: Mapping[str, Any] = field(default_factory=dict)
    first_divergent_call: Mapping[str, Any] | None = None
    replay_divergences: tuple[Mapping[str, Any], ...] = ()
    llm_calls: Mapping[str, int] = field(default_factory=dict)
    measured: bool = True
    error: str | None = None
    job_id: str | None = None
    replay_id: str | None = None
    step: int | None = None
    retries: Mapping[str, int] | None = None
    outcome: Mapping[str, Any] | None = None
    """The two runs' outcomes: ``baseline`` and ``replay`` (pass, fail, error or None)
    and the replay's ``score`` (None: neither run carries an outcome)."""

    @property
    def replay_passed(self) -> bool | None:
        """Whether the replay's outcome passed (an error is not a pass); None without one."""
        status = (self.outcome or {}).get("replay")
        return None if status is None else status == "pass"

    def to_json(self) -> dict[str, Any]:
        """The row as written to ``pairs.jsonl`` (see the module docstring for which keys)."""
        data: dict[str, Any] = {"perturbation_id": self.perturbation_id, "trace_id": self.trace_id,
                                "input_id": self.input_id, "repeat": self.repeat, "status": self.status,
                                "node": self.node}
        if self.measured:
            data["occurrence"] = self.occurrence
        data.update(op=self.op, params=self.params)
        if self.measured:
            data.update(self._metrics_json())
        if self.outcome is not None:
            data["outcome"] = dict(self.outcome)
        if self.error is not None:
            data["error"] = self.error
        for key in ("job_id", "replay_id", "step", "retries"):
            value = getattr(self, key)
            if value is not None:
                data[key] = dict(value) if key == "retries" else value
        return data

    def _metrics_json(self) -> dict[str, Any]:
        return {
            "magnitude": self.magnitude, "stratum": self.stratum, "noop_by_value": self.noop_by_value,
            "D_iter": self.d_iter, "D_shape": self.d_shape, "D_output": self.d_output, "D_struct": self.d_struct,
            "d": dict(self.d), "fields": dict(self.fields), "counts": dict(self.counts),
            "decisions": dict(self.decisions),
            "first_divergent_call": None if self.first_divergent_call is None else dict(self.first_divergent_call),
            "replay_divergences": [dict(x) for x in self.replay_divergences], "llm_calls": dict(self.llm_calls),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "pair row") -> PairRow:
        """A row of ``pairs.jsonl`` (or a ``PairResult.to_json(traces=False)``).

        Args:
            data: The row.
            where: Its place, for errors (``pairs.jsonl:12``, ``pairs[3]``).

        Raises:
            CampaignFormatError: No ``perturbation_id``, an unknown status, or a key
                whose value has the wrong type.
        """
        r = Reader(data, where)
        status = r.raw("status") if r.has("status") else None
        if status not in STATUSES:
            raise CampaignFormatError(where, f"status {status!r}; a pair's status is one of {', '.join(STATUSES)}")
        return cls(
            perturbation_id=r.string("perturbation_id"), status=status,
            trace_id=_opt(r, "trace_id", r.opt_string, None), input_id=_opt(r, "input_id", r.opt_string, None),
            repeat=_opt(r, "repeat", r.integer, 0), node=_opt(r, "node", r.opt_string, None),
            occurrence=_opt(r, "occurrence", r.opt_integer, None), op=_opt(r, "op", r.opt_string, None),
            params=data.get("params"), magnitude=_opt(r, "magnitude", r.opt_number, None),
            stratum=_opt(r, "stratum", r.opt_string, None),
            noop_by_value=_opt(r, "noop_by_value", r.opt_boolean, None), d_iter=_opt(r, "D_iter", r.integer, 0),
            d_shape=_opt(r, "D_shape", r.boolean, False), d_output=_opt(r, "D_output", r.boolean, False),
            d_struct=_opt(r, "D_struct", r.boolean, False), d=_distances(r),
            fields=_mapping(r, "fields") or {}, counts=_mapping(r, "counts") or {},
            decisions=_mapping(r, "decisions") or {}, first_divergent_call=_mapping(r, "first_divergent_call"),
            replay_divergences=tuple(x.data for x in r.objs("replay_divergences"))
            if r.has("replay_divergences") else (),
            llm_calls=_mapping(r, "llm_calls") or {}, measured=any(r.has(k) for k in _METRICS),
            error=_opt(r, "error", r.opt_string, None), job_id=_opt(r, "job_id", r.opt_string, None),
            replay_id=_opt(r, "replay_id", r.opt_string, None), step=_opt(r, "step", r.opt_integer, None),
            retries=_mapping(r, "retries"), outcome=_mapping(r, "outcome"),
        )


def _opt(r: Reader, key: str, read: Callable[[str], T], default: T) -> T:
    """``read(key)`` when the row has ``key``, else ``default``."""
    return read(key) if r.has(key) else default


def _mapping(r: Reader, key: str) -> dict[str, Any] | None:
    """The object under ``key`` as a dict; None when the row leaves it out or it is null."""
    found = r.opt_obj(key) if r.has(key) else None
    return None if found is None else dict(found.data)


def _distances(r: Reader) -> dict[str, float | None]:
    """``d``: node -> distance or None."""
    if not r.has("d"):
        return {}
    d = r.obj("d")
    return {node: d.opt_number(node) for node in d.data}
