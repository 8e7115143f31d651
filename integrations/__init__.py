"""quiver.integrations: agent frameworks recorded and replayed without glue.

One module per framework, each importing its framework only when used:
``quiver.integrations.langgraph`` and ``quiver.integrations.dspy``. Calls that any
framework makes through the ``openai`` SDK or ``httpx`` are captured by the replay layer
itself (``quiver.replay``); these modules add what the frameworks know beyond their LLM
calls: node names, decisions, loops and parents.
"""

from __future__ import annotations

__all__: list[str] = []
