"""LLM requests the engine did not see: ``llm`` calls that recorded none.

A call of kind ``llm`` whose record holds no LLM call (no model, no response), with no
``llm`` call under it that holds one, made its requests through a client no hook
reaches (another HTTP library, a subprocess, a client built in a thread the trace does
not follow), or made none. Its perturbations would read as no-ops with 0 LLM calls
per pair; a campaign and ``quiver record`` name such nodes instead of staying silent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from quiver._errors import QuiverError
from quiver._trace import NodeCall, Trace
from quiver.replay._replayer import Target, recorded_regions

__all__ = ["unseen_llm_calls", "unseen_llm_nodes", "unseen_llm_warning"]

_AFFECTED = ("target", "inside", "downstream")
"""The regions a perturbation's replay runs live: where an unseen request matters."""


def unseen_llm_calls(trace: Trace) -> list[NodeCall]:
    """The ``llm`` calls of ``trace`` that recorded no LLM call, themselves or under them."""
    holding = [c.call_path for c in trace.calls if c.model is not None or c.response is not None]
    return [
        c
        for c in trace.calls
        if c.kind == "llm"
        and c.model is None
        and c.response is None
        and not any(p == c.call_path or p.startswith(c.call_path + "/") for p in holding)
    ]


def unseen_llm_nodes(traces: Iterable[Trace], target: Target | None = None) -> list[str]:
    """The nodes with an ``llm`` call that recorded no LLM call, sorted; with ``target``,
    only those a replay perturbing it runs live (the target, calls inside it, downstream)."""
    found: set[str] = set()
    for trace in traces:
        calls = unseen_llm_calls(trace)
        if not calls:
            continue
        if target is None:
            found.update(c.node for c in calls)
            continue
        try:
            regions = recorded_regions(trace, target)
        except QuiverError:  # the target did not run in this trace
            continue
        found.update(c.node for c in calls if regions.get(c.call_id) in _AFFECTED)
    return sorted(found)


def unseen_llm_warning(nodes: Sequence[str], where: str) -> str | None:
    """The one line that names them (None when there are none)."""
    if not nodes:
        return None
    return (
        f"{where}: {len(nodes)} llm node(s) recorded no LLM call ({', '.join(nodes)}): their requests went "
        "through a client the engine does not hook, or they made none; their LLM calls are not counted, "
        "served nor perturbed (use quiver.llm(), the openai SDK, httpx, httpx2, LangChain or DSPy, or give "
        "them another kind)"
    )
