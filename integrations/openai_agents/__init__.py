"""openai-agents apps recorded and replayed with their agents as nodes: ``instrument(agent)``.

::

    from quiver.integrations.openai_agents import instrument

    triage = Agent(name="Triage agent", handoffs=[billing, technical], ...)
    instrument(triage)     # the agents it hands off to and the agents it uses as tools are found;
                           # only these agents are recorded as nodes

Nothing else changes in the app: it runs ``Runner.run`` / ``Runner.run_streamed`` as
before, on whatever model the SDK resolves (the Responses API, chat completions, a
LiteLLM model), and outside a recording or a replay every wrapper is a pass-through.
What a recording then holds, read from the SDK's own objects:

* **Agents are nodes.** Each model turn of an agent is a call of the node named by the
  agent (kind ``llm``), its LLM request recorded on it by the transport capture, in any
  wire format. Its output is what the turn decided, not the response's volatile ids:
  ``text`` (the answer's text, ``None`` when it only called tools), ``tool_calls``
  (``{"name", "arguments"}`` of each function tool it called, in order), ``tool`` (the
  name of the first, ``None`` for none) and ``handoff`` (the agent it handed off to,
  ``None`` for none).
* **Handoffs and tool choices are decisions** of the turn: ``handoff`` (the target
  agent's name, on every turn of an agent that can hand off) and ``tools`` (the names of
  the tools it called, on every turn of an agent that has tools). A turn that routes a
  message elsewhere changes the trajectory (D_shape), as a router's decision does.
* **Function tools are ``tool`` nodes** named by the tool: each invocation is a call
  whose inputs are its arguments and whose output is what it returned (a JSON text is
  recorded as its value), with the tool step of the replay contract.
* **Parents** follow the conversation: a turn's tool calls are children of the turn
  that asked for them, the next turn of the agent consumes the turn before it and its
  tool results, and the first turn of an agent handed off to consumes the turn that
  handed off. The first turn of a run consumes the call whose output is the run's input
  (found by content, as for any node).

Interventions then act as a user means them:

* ``categorical_flip`` / ``override`` of a turn's ``handoff`` serves that turn's recorded
  answer with the handoff call changed: the SDK runs the other agent, live, from there
  (its calls are new calls of its node). Of ``tool`` or ``tool_calls``: the function
  calls are changed the same way (the arguments kept for a renamed tool); of ``text``:
  the answer's text.
* ``override`` of a tool node's output hands the SDK that value as the tool's result;
  the next turn runs live on it.
* ``param_change`` and ``prompt_swap`` (``params.message``, e.g. ``{role: system}`` for
  the agent's instructions) with ``node:`` an agent's name act on that agent's turn.

The turn and tool protocols, the answer a perturbed turn is served with and the
conversation's links are the ones every agent integration shares
(``quiver.integrations._agents``); this package reads the SDK's objects into them.

The node's field types are declared for the analysis from the agents themselves:
``handoff`` categorical over the agents it can hand off to, ``tool`` categorical over its
function tools (both routing fields), ``text`` a text field, ``tool_calls`` a list.
"""

from __future__ import annotations

from .wiring import instrument, node_names

__all__ = ["instrument", "node_names"]
