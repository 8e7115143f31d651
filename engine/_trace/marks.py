"""Where redaction left its mark in data read back from a recording.

A value redaction replaced reads back as its replacement (``[REDACTED:email]``). A
replay reads inputs, tool responses and retrieved documents back from the recording, so
a pipeline that reads such a value sees the replacement, not the original, and may not
reproduce (``quiver record`` warns of it; the fidelity check names it as a cause).
"""

from __future__ import annotations

from typing import Any

from .model import Trace

__all__ = ["redaction_marks", "read_back_marks"]

DEFAULT_REPLACEMENT = "[REDACTED:{kind}]"


def redaction_marks(value: Any, path: str, replacement: str = DEFAULT_REPLACEMENT) -> list[tuple[str, str]]:
    """(path, kind) of each string in ``value`` that holds ``replacement``'s mark
    (``{kind}`` read from it; ``value`` when the replacement names no kind)."""
    head, _, tail = replacement.partition("{kind}")
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            start = item.find(head) if head else -1
            if start >= 0:
                end = item.find(tail, start + len(head)) if tail else -1
                found.append((where, item[start + len(head):end] if end >= 0 else "value"))
        elif isinstance(item, dict):
            stack += [(v, f"{where}.{k}") for k, v in item.items()]
        elif isinstance(item, list):
            stack += [(v, f"{where}[{i}]") for i, v in enumerate(item)]
    return sorted(found)


def read_back_marks(trace: Trace, replacement: str = DEFAULT_REPLACEMENT) -> list[tuple[str, str]]:
    """Redaction's marks in what a replay of ``trace`` reads back from it: the inputs,
    tool responses and retrieved documents (paths like ``inputs.customer``,
    ``crm.tool.response.owner``)."""
    found = redaction_marks(trace.inputs, "inputs", replacement)
    for call in trace.calls:
        if call.tool is not None:
            found += redaction_marks(call.tool.response, f"{call.node}.tool.response", replacement)
        for doc in call.retrieval or []:
            found += redaction_marks(doc.model_dump(mode="json"), f"{call.node}.retrieval", replacement)
    return found
