"""quiver.experiments: YAML specs, campaigns and their ledger, the gate, the command line,
and the bundled example pipelines and specs.

Families: ``_config`` (the specs), ``_campaign`` (``quiver run``), ``_gate`` (``quiver
gate``), ``_cli`` (the ``quiver`` command, one module per command). The demos
(``support_bot``, ``multihop_qa``, ``quickstart``) are pipelines like a user's: they use
only the public API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_FAMILIES: dict[str, tuple[str, ...]] = {
    "._config": ("RecordSpec", "CampaignSpec", "PerturbationSpec", "LLMSpec", "SimulatorSpec"),
    "._campaign": ("CampaignRun", "CampaignResult", "run_campaign", "check_spec", "expand_jobs"),
    "._gate": ("GateResult", "run_gate", "parse_candidates"),
    "._cli": ("main", "build_parser", "run_record", "RecordOverrides"),
}
_EXPORTS = {name: module for module, names in _FAMILIES.items() for name in names}

if TYPE_CHECKING:  # what type checkers and editors see (re-exported); nothing here runs
    from quiver.experiments._campaign import (
        CampaignResult as CampaignResult,
        CampaignRun as CampaignRun,
        check_spec as check_spec,
        expand_jobs as expand_jobs,
        run_campaign as run_campaign,
    )
    from quiver.experiments._cli import (
        RecordOverrides as RecordOverrides,
        build_parser as build_parser,
        main as main,
        run_record as run_record,
    )
    from quiver.experiments._config import (
        CampaignSpec as CampaignSpec,
        LLMSpec as LLMSpec,
        PerturbationSpec as PerturbationSpec,
        RecordSpec as RecordSpec,
        SimulatorSpec as SimulatorSpec,
    )
    from quiver.experiments._gate import (
        GateResult as GateResult,
        parse_candidates as parse_candidates,
        run_gate as run_gate,
    )
def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'quiver.experiments' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = sorted(_EXPORTS)
