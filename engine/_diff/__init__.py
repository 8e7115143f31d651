"""Why did two runs of the same input diverge? The first divergent call and its cause.

Two traces are aligned by call identity, ``(node, occurrence)``, and walked in program
order. A call *diverges* when its outcome differs: its output, its branch decisions, its
error, the tool calls its model answered with (a handoff of an agent SDK is one: the
names and arguments, whatever wire format carried them, :func:`tool_calls`), or it ran
in one trace only. The first divergent call is where an investigation starts (a call
nested under it that diverges too, by ``call_path``, is preferred: an enclosing span's
output differs because of what ran inside it; unless the enclosing call's own model
answered with other tool calls from the same recorded inputs, which came first).

It is explained from what the traces recorded, dimension by dimension, never from a
guess (DESIGN.md, "Attribution and deployments"):

1. **inherited**: its recorded inputs differ (input hash, filled-in prompt variables,
   assembled messages, the tools offered and other request fields, tool arguments) and
   an ancestor through the recorded parents has an own-context difference: the cause is
   that ancestor's, the earliest one in program order, and the chain from it is named;
2. its **own context** differs, checked in the order *perturbation* (a replay's
   perturbed target, :data:`~quiver._trace.PERTURBED_TAG`: the operator and its
   parameters), *prompt* (template id or hash,
   or a filled-in fragment that differs while every recorded input is equal), *model*
   (name, served version, a sampling parameter: a request field that is not one, such
   as the tools offered or a pointer to an earlier response, is an input), *retrieval* (a document changed
   under the same id = index drift; the same query ranked or scored differently =
   ranking change; another document set for the same query), *tool* (the same
   arguments and another response = live data);
3. *input*: the pipeline's own inputs differ and nothing above explains it;
4. **sampling**: an LLM call whose every recorded input is identical and whose output
   or tool calls differ (model variability: another handoff, another tool, other
   arguments);
5. *unexplained*: anything else (a non-LLM call with the same recorded inputs and
   another output, inputs that differ with no recorded reason): no cause is named
   without a recorded difference to show for it.

Beside the first divergence, a :class:`PairDiff` lists every own-context difference
anywhere in the pair (what changed), apart from those at calls an earlier divergence
reached (their recorded inputs differ: after another handoff, the call at the same place
is another agent's, on its own model), which it lists as consequences; the nodes whose
outputs differ, the decisions that changed, and D_iter, D_shape and D_struct of the pair
(QUIVER.md §6).
"""

from .calls import REQUEST_FIELDS, Evidence, answer_view, tool_calls
from .pair import CAUSES, Cause, FirstDivergence, PairDiff, diff_traces

__all__ = ["CAUSES", "REQUEST_FIELDS", "Cause", "Evidence", "FirstDivergence", "PairDiff", "answer_view",
           "diff_traces", "tool_calls"]
