"""A user's pipeline function: loading it, calling it, running it as one trace.

* ``load``: ``module:function`` or ``file.py:function``, sync or async;
* ``run``: one run as one trace, what recording and replay share.
"""

from __future__ import annotations

from .load import call_pipeline, check_pipeline_inputs, load_pipeline
from .run import run_traced

__all__ = [
    "load_pipeline",
    "call_pipeline",
    "check_pipeline_inputs",
    "run_traced",
]
