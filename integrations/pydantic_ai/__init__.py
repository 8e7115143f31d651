"""pydantic-ai agents recorded and replayed with their turns and tools as nodes: ``instrument(agent)``.

::

    from quiver.integrations.pydantic_ai import instrument

    support = Agent(model, name="support", tools=[lookup_invoice, check_service, escalate])
    instrument(support)     # the agents its tools run (delegation) are found and instrumented too

Nothing else changes in the app: it runs ``agent.run`` / ``run_sync`` / ``run_stream``
as before, on whatever model it has (the transport capture records any wire format the
model speaks), and outside a recording or a replay the instrumentation does nothing.
What a recording then holds, read from pydantic-ai's own objects:

* **Agents are nodes.** Each model request of an agent is a call of the node named by
  the agent (``Agent(name=...)``; an agent without a name is node ``agent``, and two
  unnamed agents in one app are refused: name them). Its inputs are the request's
  messages and instructions; its output is what the turn decided: ``text`` (``None``
  when it only called tools), ``tool_calls`` (``{"name", "arguments"}`` of each function
  tool it called, in order), ``tool`` (the first one's name, ``None`` for none) and, for
  an agent that answers through an output tool (pydantic-ai's default for a structured
  ``output_type``), ``output``: the structured result the model gave.
* **Tool choices are decisions** of the turn: ``tools`` (the names of the tools it
  called, on every turn of an agent that has tools).
* **Function tools are ``tool`` nodes** named by the tool (every function tool of the
  agent's toolsets): each execution is a call whose inputs are its arguments and whose
  output is what it returned (a JSON text is recorded as its value).
* **Parents** follow the conversation by tool call ids: a tool call is the child of the
  turn that asked for it, a turn consumes the turn before it and the tool calls that
  answered it; a run's first turn consumes the call whose output is its prompt (found
  by content), else the call the run is made under.
* **Delegation.** An agent run inside a tool (``await other.run(..., usage=ctx.usage)``)
  gives that agent's turns as calls of its own node, under the tool's call.

Interventions then act as a user means them:

* ``categorical_flip`` / ``override`` of a turn's ``tool`` serves that turn's recorded
  answer with the tool call renamed (its arguments kept): pydantic-ai runs the other
  tool, and the next turn runs live on its result. Of ``tool_calls``: the calls are
  changed the same way; of ``output``: the output tool call's arguments (pydantic-ai
  validates them as the structured result); of ``text``: the answer's text.
* ``override`` of a tool node's output hands pydantic-ai that value as the tool's result;
  the next turn runs live on it.
* ``param_change`` and ``prompt_swap`` (``params.message``, e.g. ``{role: system}`` for
  the agent's instructions) with ``node:`` an agent's name act on that agent's requests.

The nodes' field types are declared for the analysis from the agents themselves:
``tool`` categorical over the function tools (a routing field), ``text`` a text field,
``tool_calls`` a list, ``output`` a mapping. Hooked through pydantic-ai's public
capability API (``wrap_model_request``, ``wrap_tool_execute``), added to each run of
the instrumented agents; supported: pydantic-ai 2.60 to 2.x.
"""

from __future__ import annotations

from .wiring import instrument, node_names

__all__ = ["instrument", "node_names"]
