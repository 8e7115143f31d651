"""The instrumentation API a pipeline uses, and the recording state behind it.

* ``api``: ``node``, ``decide``, ``loop``, parallel branches, retrieval and tool steps;
* ``context``: the trace being built, carried in context variables;
* ``threads``: a thread pool whose threads are reused across pools;
* ``templates``: prompt templates registered by id;
* ``wire``: what a trace sent over the wire.
"""

from __future__ import annotations

from .api import (
    CallHandle,
    NodeSpec,
    OpenCall,
    ThreadPoolExecutor,
    bind,
    child_call,
    decide,
    declared_graph,
    gather,
    iteration,
    loop,
    node,
    retrieved,
    tool_step,
)
from .context import (
    CallRecord,
    Directive,
    Scope,
    TraceBuilder,
    active_recordings,
    capture_enabled,
    current_builder,
    current_call,
    current_loop,
    current_scope,
    on_recording,
)
from .templates import Template, get_template, load_template_file, registered_templates, template, template_overrides
from .threads import ReusingThreadPool
from .wire import Wire

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
    "capture_enabled",
    "on_recording",
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
    "Wire",
]
