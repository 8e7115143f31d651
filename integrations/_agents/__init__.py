"""What every agent integration shares: agents as nodes, turns as their calls.

The integrations of agent frameworks (``quiver.integrations.openai_agents``,
``quiver.integrations.pydantic_ai``, LangGraph's prebuilt ReAct agent in
``quiver.integrations.langgraph``) record the same model, with this one piece of code:

* :class:`Turn` (``turns``): a model turn of an agent as a call of the node named by the
  agent, opened, served (frozen or perturbed) and closed the same way; its output
  (:func:`turn_output`) and decisions (``handoff``, ``tools``) read from what the answer
  says (:class:`Said`); a perturbed output served as the recorded answer edited
  (:func:`answer_edit`), so the framework acts on it.
* :class:`ToolRun` (``tools``): a function tool's invocation as a call of the ``tool``
  node named by the tool.
* :class:`Conversation` (``conversation``): parents by the ids of the function calls.
* :func:`declare` (``declarations``): the agents' and tools' nodes, fields and edges.

A framework's integration only reads its own objects into these (what an answer says,
the call ids its input carries, the tool call's id) and hooks its own extension points.
"""

from __future__ import annotations

from .answers import Edit, FunctionCall, Names, Said, answer_edit, arguments_value, said, turn_output
from .conversation import Conversation, conversation
from .declarations import AgentShape, declare
from .tools import ToolRun, json_value
from .turns import HANDOFF_GATE, TOOLS_GATE, Read, Turn

__all__ = [
    "AgentShape", "Conversation", "Edit", "FunctionCall", "HANDOFF_GATE", "Names", "Read", "Said", "TOOLS_GATE",
    "ToolRun", "Turn", "answer_edit", "arguments_value", "conversation", "declare", "json_value", "said", "turn_output",
]
