"""Observational against interventional sigma at a campaign's targetable edges, as typed
rows of ``campaign.json`` (its ``validation`` and ``validation_skipped`` lists; QUIVER.md
§11, §13), read and written as the rest of :mod:`quiver._interventional.results`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from quiver._stats import Estimate, rounded

from .reader import Reader, estimate_json

__all__ = ["ValidationRow", "SkippedValidationRow"]


@dataclass(frozen=True)
class ValidationRow:
    """Observational against interventional sigma at one targetable edge (§11, §13).

    The unmatched comparison (``sigma_int``, ``agree``) pools every effective pair,
    whatever its d_i. A gap there has two readings (the paper, §3 and B.1): confounding
    of the observational estimate, or a regime natural runs never reach (a dormant risk
    beyond the natural operating envelope). The envelope fields tell them apart: the
    interventional pairs whose d_i lies inside the observational range of d_i are
    compared on their own (``sigma_matched``), and ``verdict`` says which reading holds.
    The choices (the range's definition, the minimum of matched pairs) are those of
    :mod:`quiver._interventional` (``estimates``, "Validation").

    Attributes:
        source: v_i, the perturbed node.
        target: v_j.
        perturbations: The perturbations at ``source`` whose effective pairs sigma_int pools.
        sigma_obs: The profile's sigma, interval and n (written ``sigma_obs``,
            ``sigma_obs_ci``, ``n_obs``).
        sigma_int: E[d_j / d_i] over those pairs with d_i > eps (written ``sigma_int``,
            ``sigma_int_ci``, ``n_int``).
        agree: Whether the two 95% intervals overlap (None: an interval is missing).
        envelope: The natural operating envelope of d_i, ``(eps, max d_i)`` over the
            observational pairs sigma_obs rests on (d_i > eps, d_j defined); None when the
            observational table has none (written ``envelope: [lo, hi]``).
        n_envelope: How many observational pairs the envelope rests on.
        sigma_matched: E[d_j / d_i] over the interventional pairs whose d_i lies inside
            the envelope, with its group-bootstrap interval (written ``sigma_matched``,
            ``sigma_matched_ci``, ``n_matched``).
        groups_matched: How many input groups those pairs come from.
        share_beyond: The share of sigma_int's pairs whose d_i exceeds the envelope
            (written ``share_beyond``, ``share_beyond_ci``, ``share_beyond_n``; n = n_int).
        verdict: ``"agree"`` or ``"disagree inside the envelope"`` (the matched pairs'
            interval against sigma_obs's), ``"beyond the operating envelope"`` (too few
            pairs inside it, the others beyond it), ``"too few interventional pairs"``
            (too few pairs at all, none beyond), None when it cannot be decided (no
            envelope, or an interval is missing).

    A row of a ``campaign.json`` written before the envelope fields existed reads with
    them all None, and :meth:`to_json` leaves them out when ``envelope`` is None, so the
    file writes back as it was read.
    """

    source: str
    target: str
    perturbations: tuple[str, ...]
    sigma_obs: Estimate
    sigma_int: Estimate
    agree: bool | None
    envelope: tuple[float, float] | None = None
    n_envelope: int | None = None
    sigma_matched: Estimate | None = None
    groups_matched: int | None = None
    share_beyond: Estimate | None = None
    verdict: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Flat JSON: each sigma as value, ``_ci`` and its n; then the envelope fields."""
        out = {"source": self.source, "target": self.target, "perturbations": list(self.perturbations),
               **estimate_json(self.sigma_obs, "sigma_obs", "n_obs"),
               **estimate_json(self.sigma_int, "sigma_int", "n_int"), "agree": self.agree}
        if self.envelope is None:
            return out
        return {**out, "envelope": [rounded(self.envelope[0]), rounded(self.envelope[1])],
                "n_envelope": self.n_envelope,
                **estimate_json(self.sigma_matched or Estimate.empty(), "sigma_matched", "n_matched"),
                "groups_matched": self.groups_matched,
                **estimate_json(self.share_beyond or Estimate.empty(), "share_beyond"),
                "verdict": self.verdict}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "validation") -> ValidationRow:
        """The row as :meth:`to_json` writes it (its estimates without draws); without
        ``envelope`` (a file written before it existed) the envelope fields are None."""
        r = Reader(data, where)
        row = cls(source=r.string("source"), target=r.string("target"), perturbations=r.strings("perturbations"),
                  sigma_obs=r.estimate("sigma_obs", "n_obs"), sigma_int=r.estimate("sigma_int", "n_int"),
                  agree=r.opt_boolean("agree"))
        if not r.has("envelope") or r.raw("envelope") is None:
            return row
        return replace(row, envelope=r.pair("envelope"), n_envelope=r.integer("n_envelope"),
                       sigma_matched=r.estimate("sigma_matched", "n_matched"),
                       groups_matched=r.integer("groups_matched"), share_beyond=r.estimate("share_beyond"),
                       verdict=r.opt_string("verdict"))


@dataclass(frozen=True)
class SkippedValidationRow:
    """A targetable edge whose sigmas could not be compared, and why.

    Attributes:
        source: v_i, the perturbed node.
        target: v_j.
        perturbations: The perturbations at ``source``.
        reason: Why the edge was skipped.
    """

    source: str
    target: str
    perturbations: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        """``{"source", "target", "perturbations", "reason"}``."""
        return {"source": self.source, "target": self.target, "perturbations": list(self.perturbations),
                "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "validation_skipped") -> SkippedValidationRow:
        """The row as :meth:`to_json` writes it."""
        r = Reader(data, where)
        return cls(source=r.string("source"), target=r.string("target"), perturbations=r.strings("perturbations"),
                   reason=r.string("reason"))
