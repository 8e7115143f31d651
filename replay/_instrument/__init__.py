"""The instrumentation API a pipeline uses, and the recording state behind it.

* ``api``: ``node``, ``decide``, ``loop``, parallel branches, retrieval and tool steps;
* ``context``: the trace being built, carried in context variables;
* ``threads``: a thread pool whose threads are reused across pools;
* ``templates``: prompt templates registered by id.
"""

from __future__ import annotations

from .threads import ReusingThreadPool
from .context import Scope, CallRecord, Directive, TraceBuilder, current_builder, current_scope, current_call, current_loop, active_recordings
from .templates import Template, template, get_template, registered_templates, load_template_file, template_overrides
from .api import node, NodeSpec, CallHandle, decide, loop, iteration, bind, gather, ThreadPoolExecutor, retrieved, tool_step, child_call, declared_graph, OpenCall

__all__ = [
    "ReusingThreadPool",
    "Scope",
    "CallRecord",
    "Directive",
    "TraceBuilder",
    "current_builder",
    "current_scope",
    "current_call",
    "current_loop",
    "active_recordings",
    "Template",
    "template",
    "get_template",
    "registered_templates",
    "load_template_file",
    "template_overrides",
    "node",
    "NodeSpec",
    "CallHandle",
    "decide",
    "loop",
    "iteration",
    "bind",
    "gather",
    "ThreadPoolExecutor",
    "retrieved",
    "tool_step",
    "child_call",
    "declared_graph",
    "OpenCall",
]
