"""The public surface is what we meant: nothing missing, nothing private leaking."""

from __future__ import annotations

import quiver
import quiver.replay


def test_top_level_exports_resolve() -> None:
    for name in quiver.__all__:
        assert getattr(quiver, name) is not None, name
    assert not [n for n in quiver.__all__ if n.startswith("_")]


def test_instrumentation_api_is_reexported_from_replay() -> None:
    for name in ("node", "decide", "loop", "iteration", "bind", "gather", "ThreadPoolExecutor",
                 "retrieved", "tool_step", "template", "llm", "configure_llm", "LLMClient"):
        assert getattr(quiver, name) is getattr(quiver.replay, name)


def test_replay_exports_resolve() -> None:
    for name in quiver.replay.__all__:
        assert getattr(quiver.replay, name) is not None, name


def test_core_does_not_import_the_network_stack() -> None:
    import subprocess
    import sys

    code = "import sys, quiver; print(any(m in sys.modules for m in ('openai', 'ray', 'httpx')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_errors_form_one_tree() -> None:
    for name in ("TraceFormatError", "SpecError", "InstrumentationError", "LLMError",
                 "LLMRequestError", "LLMUnavailable", "SimulatorError", "PipelineError"):
        assert issubclass(getattr(quiver, name), quiver.QuiverError)
