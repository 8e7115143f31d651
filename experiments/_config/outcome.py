"""A spec's outcome checks, ready to run (:class:`~quiver.replay._outcome.OutcomeRunner`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quiver._errors import SpecError
from quiver.replay._outcome import OutcomeRunner

from .record import RecordSpec, spec_line

__all__ = ["outcome_runner", "outcome_settings"]


def outcome_settings(spec: RecordSpec) -> dict[str, Any] | None:
    """What a replay worker needs to run the spec's outcome checks (plain data): the
    checks, the judges' default model, the analysis embedder and its cache."""
    check = spec.outcome_check()
    if check is None:
        return None
    analysis = getattr(spec, "analysis", None)
    return {"check": check.model_dump(mode="json", exclude_unset=True), "default_model": spec.llm.model,
            "embedder": getattr(analysis, "embedder", None), "cache_dir": getattr(analysis, "cache_dir", None)}


def outcome_runner(spec: RecordSpec, base_dir: Path, client: Any, *, spec_file: str | None = None
                   ) -> OutcomeRunner | None:
    """The spec's outcome checks with the spec's endpoint for judges; None without checks.

    Raises:
        SpecError: A ``python`` check that does not import (named with the spec's line).
    """
    check = spec.outcome_check()
    if check is None:
        return None
    analysis = getattr(spec, "analysis", None)
    try:
        return OutcomeRunner(check, base_dir=base_dir, client=client, default_model=spec.llm.model,
                             embedder=getattr(analysis, "embedder", None),
                             cache_dir=getattr(analysis, "cache_dir", None))
    except SpecError as exc:
        raise SpecError(spec_file, spec_line(spec_file, ("outcome",)), "outcome", exc.reason) from None
