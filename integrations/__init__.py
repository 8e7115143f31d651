"""quiver.integrations: agent frameworks recorded and replayed without glue.

One module or subpackage per framework, each importing its framework only when used:
``quiver.integrations.langgraph`` (its prebuilt ReAct agent included),
``quiver.integrations.dspy``, ``quiver.integrations.openai_agents`` and
``quiver.integrations.pydantic_ai``. Calls that any framework makes through the
``openai`` SDK or ``httpx`` are captured by the replay layer itself (``quiver.replay``);
these modules add what the frameworks know beyond their LLM calls: node names,
decisions, loops and parents. The agent frameworks share one model and one piece of
code for it (``_agents``: an agent's model turns as calls of its node, function tools as
``tool`` nodes, parents along the conversation); ``_body`` is the call protocol every
wrapper runs.
"""

from __future__ import annotations

__all__: list[str] = []
