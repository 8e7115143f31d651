"""quiver.experiments: YAML specs, campaigns and their ledger, the gate, the command line,
and the bundled example pipelines and specs.

Families: ``_config`` (the specs), ``_campaign`` (``quiver run``), ``_gate`` (``quiver
gate``), ``_cli`` (the ``quiver`` command, one module per command). The demos
(``support_bot``, ``multihop_qa``, ``quickstart``) are pipelines like a user's: they use
only the public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quiver._lazy import lazy_exports

_FAMILIES: dict[str, tuple[str, ...]] = {
    "._config": ("RecordSpec", "CampaignSpec", "PerturbationSpec", "LLMSpec", "SimulatorSpec"),
    "._campaign": ("CampaignRun", "CampaignResult", "run_campaign", "check_spec", "expand_jobs"),
    "._gate": ("GateResult", "run_gate", "parse_candidates"),
    "._attribute": ("Attribution", "attribute", "write_attribution"),
    "._cli": ("main", "build_parser", "run_record", "RecordOverrides"),
}

if TYPE_CHECKING:  # what type checkers and editors see (re-exported); nothing here runs
    from quiver.experiments._attribute import (
        Attribution as Attribution,
        attribute as attribute,
        write_attribution as write_attribution,
    )
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


__getattr__, __dir__, __all__ = lazy_exports(__name__, _FAMILIES)
